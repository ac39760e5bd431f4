"""kvx's benchmark peer and test reference: llama.cpp build 11434's own binaries, built natively by
scripts/build_llamacpp_peer.sh (not llama-cpp-python, whose bundled llama.cpp is older and generic).

The binaries are found in $KVX_LLAMACPP_BIN, else in <repo>/.cache/llama.cpp-b11434/build/bin, the build
script's default folder.
"""
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..checkout import REPO

BUILD_SCRIPT = "scripts/build_llamacpp_peer.sh"
DEFAULT_BIN = REPO / ".cache" / "llama.cpp-b11434" / "build" / "bin"

# llama-bench's two measurements, as kvx's benchmarks define them: decode is DECODE_NEW single-token steps after
# a DECODE_CONTEXT-token context (kvx: a DECODE_CONTEXT-token prompt, then DECODE_NEW new tokens); prefill is
# one PREFILL_PROMPT-token prompt.
DECODE_CONTEXT, DECODE_NEW, PREFILL_PROMPT = 128, 256, 512


def bench_kinds(decode_context=DECODE_CONTEXT, prompt=PREFILL_PROMPT):
    """llama-bench's arguments for each kind: decode DECODE_NEW tokens after decode_context tokens, prefill a
    `prompt`-token prompt."""
    return {"decode": ["-p", "0", "-n", str(DECODE_NEW), "-d", str(decode_context)],
            "prefill": ["-p", str(prompt), "-n", "0"]}


BENCH_KINDS = bench_kinds()


class PeerError(Exception):
    pass


def bin_dir():
    folder = Path(os.environ.get("KVX_LLAMACPP_BIN") or DEFAULT_BIN)
    if not (folder / "llama-bench").is_file():
        raise PeerError(f"no llama.cpp peer in {folder}: build it with {BUILD_SCRIPT} "
                        "(or point $KVX_LLAMACPP_BIN at its bin folder)")
    return folder


def binary(name):
    path = bin_dir() / name
    if not path.is_file():
        raise PeerError(f"the llama.cpp peer has no {name} in {path.parent}: rerun {BUILD_SCRIPT}")
    return path


def run_tool(cmd):
    """stdout of cmd; a failure becomes one PeerError with the end of its stderr."""
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        raise PeerError(f"{Path(cmd[0]).name} failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}")
    return proc.stdout


def quantize(src_gguf, dst_gguf, type_name):
    """dst_gguf: src_gguf requantized to type_name (Q4_K_M, IQ4_XS, ...) by llama-quantize, made once. It is
    written under a temporary name and renamed, so an interrupted run never leaves a partial file behind."""
    dst_gguf = Path(dst_gguf)
    if dst_gguf.is_file():
        return dst_gguf
    dst_gguf.parent.mkdir(parents=True, exist_ok=True)
    partial = dst_gguf.with_name(dst_gguf.name + ".partial")
    try:
        run_tool([binary("llama-quantize"), "--allow-requantize", src_gguf, partial, type_name])
        os.replace(partial, dst_gguf)
    finally:
        partial.unlink(missing_ok=True)
    return dst_gguf


@dataclass
class BenchResult:
    tokens_per_s: float  # llama-bench's avg_ts over its repetitions
    samples: list  # tokens/s of each repetition
    build_number: int
    build_commit: str


def parse_bench_json(text):
    """The one test in llama-bench's `-o json` output (a JSON array of one object per test) as a BenchResult."""
    try:
        tests = json.loads(text)
    except json.JSONDecodeError as e:
        raise PeerError(f"llama-bench printed no JSON: {e}") from None
    if not isinstance(tests, list) or len(tests) != 1:
        raise PeerError(f"expected one llama-bench test, got {len(tests) if isinstance(tests, list) else 'no list'}")
    test = tests[0]
    try:
        return BenchResult(float(test["avg_ts"]), [float(s) for s in test.get("samples_ts", [])],
                           int(test["build_number"]), str(test["build_commit"]))
    except (KeyError, TypeError, ValueError) as e:
        raise PeerError(f"llama-bench's JSON lacks {e}") from None


def bench(gguf, threads, kind, repetitions=2, context=0):
    """tokens/s of llama-bench on gguf with `threads` threads; kind is 'decode' or 'prefill' (BENCH_KINDS, or
    at a long context other than 0: decode after `context` tokens, prefill a `context`-token prompt)."""
    kinds = bench_kinds(context, context) if context else BENCH_KINDS
    if kind not in kinds:
        raise ValueError(f"kind must be one of {sorted(kinds)}, not {kind!r}")
    return parse_bench_json(run_tool([binary("llama-bench"), "-m", gguf, "-t", threads, "-r", repetitions,
                                      *kinds[kind], "-o", "json"]))


def tokenize(gguf, text_file):
    """The ids llama.cpp's tokenizer gives the text of text_file (with the model's BOS, as a prompt gets it)."""
    out = run_tool([binary("llama-tokenize"), "-m", gguf, "-f", text_file, "--ids", "--log-disable"])
    ids = out.strip().splitlines()[-1].strip()  # a Python-style list: [1, 2, 3]
    try:
        return [int(t) for t in ids.strip("[]").split(",") if t.strip()]
    except ValueError:
        raise PeerError(f"llama-tokenize printed no id list: {ids[:200]}") from None


def one_token_command(gguf, threads, context):
    """A llama.cpp run that loads gguf and generates one token with a KV cache of `context` tokens: what the load
    measurement times. llama-completion is the one-shot generator that llama-cli was before it became chat-only
    (which -no-cnv no longer reaches)."""
    return [str(binary("llama-completion")), "-m", str(gguf), "-p", "hi", "-n", "1", "-no-cnv", "-t", str(threads),
            "-c", str(context), "--log-disable"]
