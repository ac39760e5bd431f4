#!/usr/bin/env python3
"""Quantized weights on the CUDA backend: `kvx logits --device cuda` on three converted graphs of
testdata/quantized/ against ONNX Runtime's logits (accuracy_level 0, fp32 activations), the oracle
test_convert_quantized.py holds the CPU backend to.

  - builder-int4-llama-tied: q4, block 32, no zero points, the classifier tied to a q4 embedding (the
    embedding lookup dequantizes rows on the device; the classifier runs the quantized GEMV);
  - nbits-8-b16-asym: q8, block 16, int8 zero points, the padding block of B = 16;
  - nbits-4-b128-asym: q4, block 128, uint8 zero points, a partial block per row.
(Minimums and fp16 scales, which these graphs lack, are covered by cuda/kernels/gemv_quant_test.cpp.)
And two `kvx convert --quantize` outputs of testdata/exporters graphs, for the embedding forms the ORT graphs
lack, against the CPU backend's reference kernels (`--simd reference`, itself held to ORT by
test_convert_quantized.py) on the same directory:
  - gpt2 --quantize int8: a q8 token table tied to the classifier beside an fp32 learned-position table;
  - gemma --quantize int4: a quantized embedding times Gemma's embedding scale.

Each prompt runs twice on the device. With a prefill of 1 every later row is a decode step through the quantized GEMV,
whose weights are the reference's in fp32: 1e-4 x max|ORT|, as `kvx logits --simd reference` is held to.
With a prefill of 11 the first 11 rows go through dequantize_f16 and cublasGemmEx, which round weights and
activations to fp16: FP16_PREFILL_TOLERANCE, the fp16-weight bound (tests/fixtures.cpp: 5e-3 x max|ORT|).

On the CUDA emulation this is the whole backend on the CPU (a few seconds); elsewhere it needs a GPU and
exits 77 (ctest: skipped) with kvx's reason where there is none.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np

from kvx_test_support import REPO
from kvx_tools.convert.pipeline import convert as convert_in_process

FIXTURES = REPO / "testdata" / "quantized"
KVX = os.environ.get("KVX_BIN") or str(REPO / "build" / "bin" / "kvx")
SKIP_EXIT = 77
# kvx's reasons for not running --device cuda here (as test_engine_families.py lists them).
NO_DEVICE = ("no usable CUDA device", "no CUDA device is present", "older than sm_70", "cannot query CUDA device",
             "not built in")
GEMV_TOLERANCE = 1e-4
FP16_PREFILL_TOLERANCE = 3e-3
NAMES = ("builder-int4-llama-tied", "nbits-8-b16-asym", "nbits-4-b128-asym")
EXPORTERS = REPO / "testdata" / "exporters"
QUANTIZED_EXPORTS = (("gpt2", "int8"), ("gemma", "int4"))


def relative(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def kvx_logits(model_dir, prompt, n_prefill, out, *device):
    """(logits, None), or (None, kvx's reason) where it finds no device."""
    run = subprocess.run([KVX, "logits", "-m", str(model_dir), *device, "-t", "1", "--tokens",
                          ",".join(map(str, prompt)), "--n-prefill", str(n_prefill), "-o", str(out)],
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0 and any(reason in run.stderr for reason in NO_DEVICE):
        return None, run.stderr.strip()
    if run.returncode != 0:
        raise AssertionError(f"kvx logits {' '.join(device)} failed ({run.returncode}): {run.stderr.strip()}")
    return np.load(out), None


def cuda_logits(model_dir, prompt, n_prefill, out):
    return kvx_logits(model_dir, prompt, n_prefill, out, "--device", "cuda")


class QuantizedCuda(unittest.TestCase):
    def check_cuda(self, name, model, prompt, expected, tmp):
        """--device cuda with every row a decode step, then with a prefill of all rows but the last."""
        for n_prefill, tolerance in ((1, GEMV_TOLERANCE), (len(prompt) - 1, FP16_PREFILL_TOLERANCE)):
            logits, no_device = cuda_logits(model, prompt, n_prefill, Path(tmp) / f"{name}.npy")
            self.assertIsNone(no_device, "the device went away after device_unavailable() found it")
            error = relative(logits, expected)
            print(f"{name}, prefill {n_prefill}: cuda {error:.1e} of max|expected| (tolerance {tolerance:g})",
                  file=sys.stderr)
            self.assertLessEqual(error, tolerance, f"{name}, prefill {n_prefill}")

    def test_cuda_logits_match_ort(self):
        with tempfile.TemporaryDirectory() as tmp:
            for name in NAMES:
                with self.subTest(name):
                    folder = FIXTURES / name
                    meta = json.loads((folder / "fixture.json").read_text())
                    prompt = json.loads((folder / "prompt.json").read_text())
                    model = Path(tmp) / name
                    convert_in_process(folder / "model.onnx", model, max_seq_len=meta["context_length"])
                    self.check_cuda(name, model, prompt, np.load(folder / "ort_acc0.npy"), tmp)

    def test_quantized_embeddings_match_cpu_reference(self):
        with tempfile.TemporaryDirectory() as tmp:
            for family, bits in QUANTIZED_EXPORTS:
                with self.subTest(family):
                    folder = EXPORTERS / family / "torchscript-past"
                    prompt = json.loads((folder / "prompt.json").read_text())
                    model = Path(tmp) / family
                    convert_in_process(folder / "model.onnx", model, max_seq_len=64, quantize=bits)
                    cpu, _ = kvx_logits(model, prompt, len(prompt) - 1, Path(tmp) / f"{family}-cpu.npy", "--simd",
                                        "reference")
                    self.check_cuda(f"{family} --quantize {bits}", model, prompt, cpu, tmp)


def device_unavailable():
    """kvx's reason for refusing --device cuda here, or None where it runs a quantized model there (one token of
    the first graph)."""
    folder = FIXTURES / NAMES[0]
    meta = json.loads((folder / "fixture.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        convert_in_process(folder / "model.onnx", Path(tmp) / "model", max_seq_len=meta["context_length"])
        _, no_device = cuda_logits(Path(tmp) / "model", [1], 1, Path(tmp) / "probe.npy")
    return no_device


if __name__ == "__main__":
    why = device_unavailable()
    if why:
        print(f"SKIP: --device cuda: {why}")
        sys.exit(SKIP_EXIT)
    unittest.main()
