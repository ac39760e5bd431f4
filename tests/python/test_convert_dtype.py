#!/usr/bin/env python3
"""kvx convert --dtype: fp32 graphs stored as f16 (matrices rounded to nearest even, vectors kept fp32),
and the converted f16 model computing what ONNX Runtime computes with the same rounded weights."""

import json
import tempfile
import unittest
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from safetensors.numpy import load_file

from kvx_tools.fixtures.ort_reference import reference_logits

from kvx_test_support import assert_one_line_failure, convert, export_random, run_ok
import numpy_llama

SHAPE = dict(dim=44, hidden=100, layers=2, heads=4, kv_heads=2, head_dim=12, vocab=301, seed=11)


def round_matrices_to_fp16(model):
    """Every 2-D fp32 initializer (the weight matrices) replaced by its fp16 rounding, still stored fp32:
    the graph then computes in fp32 with exactly the weights an f16 model directory holds."""
    for k, tensor in enumerate(model.graph.initializer):
        array = numpy_helper.to_array(tensor)
        if array.dtype == np.float32 and array.ndim == 2:
            rounded = array.astype(np.float16).astype(np.float32)
            model.graph.initializer[k].CopyFrom(numpy_helper.from_array(rounded, tensor.name))


class DtypeConversion(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)
        cls.onnx_path = export_random(cls.tmp / "random.onnx", **SHAPE, extra=["--untied"])
        case = unittest.TestCase()
        run_ok(case, "kvx_tools.convert", cls.onnx_path, "-o", cls.tmp / "f32")
        run_ok(case, "kvx_tools.convert", cls.onnx_path, "-o", cls.tmp / "f16", "--dtype", "f16")
        run_ok(case, "kvx_tools.convert", cls.onnx_path, "-o", cls.tmp / "f32_asked", "--dtype", "f32")

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def load(self, name):
        return (json.loads((self.tmp / name / "config.json").read_text()),
                load_file(str(self.tmp / name / "model.safetensors")))

    def test_fp32_graph_stays_f32_by_default(self):
        config, tensors = self.load("f32")
        self.assertEqual(config["weights"], {"file": "model.safetensors", "dtype": "f32"})
        self.assertEqual({t.dtype for t in tensors.values()}, {np.dtype(np.float32)})
        self.assertEqual((self.tmp / "f32_asked" / "model.safetensors").read_bytes(),
                         (self.tmp / "f32" / "model.safetensors").read_bytes())

    def test_f16_rounds_matrices_and_keeps_vectors_fp32(self):
        config32, t32 = self.load("f32")
        config16, t16 = self.load("f16")
        self.assertEqual(config16["weights"]["dtype"], "f16")
        self.assertEqual({**config16, "weights": None}, {**config32, "weights": None})
        self.assertEqual(set(t16), set(t32))
        self.assertIn("classifier", t16)  # untied: the classifier is a matrix too
        for name, array in t32.items():
            with self.subTest(name):
                if array.ndim == 2:
                    self.assertEqual(t16[name].dtype, np.float16)
                    # Round to nearest even, bit for bit (numpy's astype is the reference).
                    np.testing.assert_array_equal(t16[name].view(np.uint16), array.astype(np.float16).view(np.uint16))
                else:
                    self.assertEqual(t16[name].dtype, np.float32)
                    np.testing.assert_array_equal(t16[name], array)

    def test_f16_model_computes_onnxruntime_logits_of_the_rounded_weights(self):
        model = onnx.load(str(self.onnx_path))
        round_matrices_to_fp16(model)
        rounded_path = self.tmp / "rounded.onnx"
        onnx.save(model, str(rounded_path))
        tokens = np.random.default_rng(3).integers(0, SHAPE["vocab"], 40)
        ort_logits = reference_logits(rounded_path, tokens, n_prefill=20)
        kvx_logits = numpy_llama.forward(*numpy_llama.load_model_dir(self.tmp / "f16"), tokens)
        np.testing.assert_allclose(kvx_logits, ort_logits, atol=2e-4 * np.abs(ort_logits).max(), rtol=0)
        # And the rounding is visible: the fp32 graph's logits differ by more than that.
        self.assertGreater(np.abs(kvx_logits - reference_logits(self.onnx_path, tokens, 20)).max(),
                           2e-4 * np.abs(ort_logits).max())

    def test_weights_beyond_fp16_range_are_refused(self):
        model = onnx.load(str(self.onnx_path))
        matrices = [t for t in model.graph.initializer if len(t.dims) == 2]
        array = numpy_helper.to_array(matrices[0]).copy()
        array[0, 0] = 1e5
        matrices[0].CopyFrom(numpy_helper.from_array(array, matrices[0].name))
        path = self.tmp / "huge.onnx"
        onnx.save(model, str(path))
        out_dir = self.tmp / "huge"
        line = assert_one_line_failure(self, convert(path, out_dir, "--dtype", "f16"), "100000",
                                       "beyond fp16's range", "--dtype f32")
        self.assertRegex(line, r"(tok_embeddings|classifier|layers\.\d+\.w\w+) holds")
        self.assertFalse(out_dir.exists(), "nothing may be written on failure")
        run_ok(self, "kvx_tools.convert", path, "-o", self.tmp / "huge_f32")  # fp32 holds it

    def test_unknown_dtype_is_refused(self):
        result = convert(self.onnx_path, self.tmp / "bad", "--dtype", "bf16")
        self.assertEqual(result.returncode, 2)  # argparse's usage error
        self.assertIn("--dtype", result.stderr)


if __name__ == "__main__":
    unittest.main()
