"""How the end-to-end benchmark runs each engine once: the command line, and what it reads back.

Every engine runs as its own process per measurement (model loading is outside every timed span), greedy,
from the same prompt ids, and reports the same three things: prefill tokens/s (prompt tokens / time of the
forward pass over the prompt), decode tokens/s (decode steps / their time; a step = one single-token
forward pass + the greedy pick), and the greedy ids (prompt + generated) to check that the engines agree.
"""
import json
import os
from abc import ABC, abstractmethod
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

KVX_PREFILL = re.compile(r"prompt (\d+) tokens, prefill [0-9.]+ ms \(([0-9.]+) tokens/s\)")
KVX_DECODE = re.compile(r"generated (\d+) tokens, (\d+) decode steps in [0-9.]+ ms \(([0-9.]+) tokens/s\)")
RUNC_RATE = re.compile(r"achieved tok/s: ([0-9.]+)")


@dataclass
class Measurement:
    prefill_tokens_per_s: float | None
    decode_tokens_per_s: float | None
    ids: list = field(default_factory=list)  # prompt + generated, where the engine gives ids
    text: str = ""  # what the engine printed, where it gives text instead (run.c)


@dataclass
class Engine(ABC):
    """One engine in one configuration (weights file, threads): its command line and how to read its output."""
    name: str
    precision: str
    threads: int
    model: str  # what it loads: kvx model dir, GGUF, ONNX, llama2.c checkpoint

    @abstractmethod
    def command(self, prompt, n_new):
        """The command line of one greedy run: prompt ids (empty: from BOS), then n_new tokens."""

    @abstractmethod
    def parse(self, stdout, stderr, n_new):
        """The Measurement in the output of command()."""

    def environment(self):
        return {**os.environ, "OMP_NUM_THREADS": str(self.threads)}

    def run(self, prompt, n_new):
        cmd = self.command(prompt, n_new)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=self.environment())
        if proc.returncode != 0:
            sys.exit(f"e2e_speed: {' '.join(cmd[:3])} ... failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        return self.parse(proc.stdout, proc.stderr, n_new)


def id_list(ids):
    return ",".join(map(str, ids))


class Kvx(Engine):
    def __init__(self, binary, precision, threads, model, options=()):
        super().__init__("kvx", precision, threads, model)
        self.binary = binary
        self.options = list(options)  # more options of kvx generate, e.g. ["--kv-dtype", "f16"]

    def command(self, prompt, n_new, context=None):
        """context: the KV cache's size in tokens (-c); by default the prompt and what it generates."""
        if not prompt:  # from BOS, printing text: what run.c does
            return [str(self.binary), "generate", "-m", self.model, "-p", "", "-n", str(n_new), "--temp", "0",
                    "-t", str(self.threads)]
        return [str(self.binary), "generate", "-m", self.model, "--tokens", id_list(prompt), "--print-ids",
                "--ignore-eos", "-n", str(n_new), "--temp", "0", "-t", str(self.threads),
                "-c", str(context or len(prompt) + n_new), *self.options]

    def parse(self, stdout, stderr, n_new):
        prefill, decode = KVX_PREFILL.search(stderr), KVX_DECODE.search(stderr)
        if not prefill or not decode:
            sys.exit(f"e2e_speed: no prefill/decode stats from kvx:\n{stderr[-2000:]}")
        text = stdout.strip()
        ids = [int(t) for t in text.split(",")] if re.fullmatch(r"[0-9,]+", text) else []
        return Measurement(float(prefill.group(2)), float(decode.group(3)) if int(decode.group(2)) else None,
                           ids, "" if ids else stdout)


class PythonPeer(Engine):
    """A peer driven by one of the run_* modules beside this one, which print one JSON line."""
    module = ""
    python = sys.executable  # the interpreter whose packages hold the peer

    def command(self, prompt, n_new):
        return [str(self.python), "-m", self.module, self.model, "--tokens", id_list(prompt),
                "-n", str(n_new), "-t", str(self.threads)]

    def environment(self):
        # The runner is imported from this checkout's tools/, whichever interpreter runs it.
        tools = str(Path(__file__).resolve().parents[2])
        path = os.environ.get("PYTHONPATH")
        return {**super().environment(), "PYTHONPATH": tools + (os.pathsep + path if path else "")}

    def parse(self, stdout, stderr, n_new):
        result = json.loads(stdout.strip().splitlines()[-1])
        decode = result["decode_tokens_per_s"] if result["decode_steps"] else None
        return Measurement(result["prefill_tokens_per_s"], decode, result["ids"])


class LlamaCpp(PythonPeer):
    module = "kvx_tools.bench.run_llamacpp"

    def __init__(self, precision, threads, gguf):
        super().__init__("llama.cpp", precision, threads, gguf)


class IkLlamaCpp(PythonPeer):
    """ik_llama.cpp through PyPI's ik-llama-cpp-python, installed in a virtual environment of its own (its
    package would shadow llama-cpp-python's shared libraries in one environment): python is that venv's."""
    module = "kvx_tools.bench.run_ik_llamacpp"

    def __init__(self, precision, threads, gguf, python):
        super().__init__("ik_llama.cpp", precision, threads, gguf)
        self.python = python


class OrtGenai(PythonPeer):
    module = "kvx_tools.bench.run_ortgenai"

    def __init__(self, precision, threads, onnx_model):
        super().__init__("onnxruntime-genai", precision, threads, onnx_model)

    def command(self, prompt, n_new):
        return super().command(prompt, n_new) + ["--ignore-eos"]


class RunC(Engine):
    """llama2.c's run.c, built by the user (never part of kvx): greedy from BOS, its own tok/s line."""

    def __init__(self, binary, threads, checkpoint, tokenizer):
        super().__init__("llama2.c run.c", "f32", threads, checkpoint)
        self.binary, self.tokenizer = binary, tokenizer

    def command(self, prompt, n_new):
        if prompt:
            raise ValueError("run.c is only run from BOS here")
        # run.c's -n counts forward passes, each printing the token it picks: the same count as kvx's -n
        return [str(self.binary), self.model, "-z", self.tokenizer, "-t", "0", "-n", str(n_new)]

    def parse(self, stdout, stderr, n_new):
        rate = RUNC_RATE.search(stderr)
        if not rate:
            sys.exit(f"e2e_speed: no 'achieved tok/s' line from run.c:\n{stderr[-2000:]}")
        return Measurement(None, float(rate.group(1)), [], stdout)
