#!/usr/bin/env python3
"""The exporter and the converter hold one weight at a time (docs/model-format.md, "Large models: memory"):
exporting a random Llama of about 120 MB of fp16 external data and converting it, each in a process of its own,
peaks below the largest tensor plus a fixed margin, whatever the rest of the model holds.

The margin (MARGIN_BYTES) covers the interpreter with numpy, onnx and the parsed graph (about 70 MB) and the
blocks of rows the writer reads, casts and writes (64 MiB each at most). Measured on this model: the conversion
peaks at 170 MB for a largest tensor of 33 MB; the converter before streaming, which held several copies of
every weight, peaked at 1.4 GB.
"""

import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np
from safetensors import safe_open

SHAPE = dict(dim=1024, hidden=4096, layers=3, heads=16, kv_heads=4, head_dim=64, vocab=8000)
MARGIN_BYTES = 512 << 20
ITEM_BYTES = {"F32": 4, "F16": 2, "I8": 1, "U8": 1}


def peak_rss_bytes(module, *args):
    """Runs `python -m module args` and returns its peak resident set size (its own, from wait4), in bytes."""
    process = subprocess.Popen([sys.executable, "-m", module, *map(str, args)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise AssertionError(f"{module} failed:\n{stderr.decode()}")
    return usage.ru_maxrss * 1024  # Linux reports kilobytes


class BoundedMemory(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_export_and_conversion_stay_within_the_largest_tensor_plus_a_margin(self):
        onnx_path = self.tmp / "model" / "model.onnx"
        args = ["--dim", SHAPE["dim"], "--hidden", SHAPE["hidden"], "--layers", SHAPE["layers"], "--heads",
                SHAPE["heads"], "--kv-heads", SHAPE["kv_heads"], "--head-dim", SHAPE["head_dim"], "--vocab",
                SHAPE["vocab"], "--untied", "--seed", 5, "--dtype", "f16", "-o", onnx_path, "--external-data"]
        export_peak = peak_rss_bytes("kvx_tools.export.export_random_llama", *args)
        data_bytes = (onnx_path.parent / "model.onnx.data").stat().st_size
        out = self.tmp / "converted"
        convert_peak = peak_rss_bytes("kvx_tools.convert", onnx_path, "-o", out, "--max-seq-len", 64)
        with safe_open(str(out / "model.safetensors"), "numpy") as f:  # stored f32: the graph's Casts widen
            largest = max(int(np.prod(f.get_slice(name).get_shape())) * ITEM_BYTES[f.get_slice(name).get_dtype()]
                          for name in f.keys())
        self.assertGreater(data_bytes, 100 << 20)
        for what, peak in (("export", export_peak), ("conversion", convert_peak)):
            with self.subTest(what):
                self.assertLess(peak, largest + MARGIN_BYTES,
                                f"{what} peaked at {peak >> 20} MiB for a largest tensor of {largest >> 20} MiB "
                                f"({data_bytes >> 20} MiB of weights)")


if __name__ == "__main__":
    unittest.main()
