#!/usr/bin/env python3
"""The GPT-2 exporter: a standard-operator graph with the HF/optimum interface that ONNX Runtime runs with
and without a KV cache, computing what numpy computes from the same weights."""

import tempfile
import unittest
from pathlib import Path

import numpy as np
import onnx

from kvx_tools.export.export_random_gpt2 import random_gpt2_weights
from kvx_tools.fixtures.ort_reference import reference_logits

from kvx_test_support import assert_left_padding_is_masked, graph_io_dims, run_ok
import numpy_gpt2

GPT2_OPS = {
    "Gather", "Add", "LayerNormalization", "MatMul", "Split", "Reshape", "Transpose", "Concat", "Div",
    "Softmax", "Mul", "Pow", "Tanh", "Shape", "Unsqueeze", "Constant", "Sub", "Range", "LessOrEqual",
    "Cast", "And", "Where",
}
SHAPE = dict(dim=40, hidden=90, layers=2, heads=4, head_dim=12, vocab=151, max_seq_len=48, seed=7)


def export_gpt2(path, extra=(), **shape):
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in shape.items()]
    run_ok(unittest.TestCase(), "kvx_tools.export.export_random_gpt2", *argv, *extra, "-o", path)
    return path


class ExportedGpt2(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)
        cls.onnx = export_gpt2(cls.tmp / "gpt2.onnx", **SHAPE)
        cls.ranged = export_gpt2(cls.tmp / "ranged.onnx", ["--no-position-ids"], **SHAPE)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_standard_operators_and_interface(self):
        model = onnx.load(str(self.onnx))
        onnx.checker.check_model(model, full_check=True)
        self.assertEqual({n.domain for n in model.graph.node}, {""})
        self.assertEqual({n.op_type for n in model.graph.node}, GPT2_OPS)
        self.assertEqual({p.key: p.value for p in model.metadata_props}, {"max_position_embeddings": "48"})
        inputs, _ = graph_io_dims(model)
        self.assertEqual(inputs["position_ids"], ["batch_size", "sequence_length"])
        self.assertEqual(inputs["past_key_values.1.value"], ["batch_size", 4, "past_sequence_length", 12])
        self.assertEqual(len(inputs), 3 + 2 * 2)
        c_attn = [t for t in model.graph.initializer if t.name == "transformer.h.0.attn.c_attn.weight"]
        self.assertEqual(list(c_attn[0].dims), [40, 3 * 4 * 12])
        ranged = onnx.load(str(self.ranged))
        self.assertNotIn("position_ids", {i.name for i in ranged.graph.input})
        self.assertIn("Range", {n.op_type for n in ranged.graph.node if n.name.startswith("/transformer/")})

    def test_logits_are_gpt2s(self):
        """ONNX Runtime on the graph computes numpy's GPT-2 forward pass over the exporter's weights."""
        config = dict(dim=40, hidden_dim=90, n_layers=2, n_heads=4, n_kv_heads=4, head_dim=12, vocab_size=151,
                      max_seq_len=48, norm_eps=1e-5, tied_embeddings=True)
        weights = {k: v.astype(np.float64) for k, v in random_gpt2_weights(config, tied=True, seed=7).items()}
        tokens = np.random.default_rng(2).integers(0, 151, 48)  # every row of the position table
        np.testing.assert_allclose(reference_logits(self.onnx, tokens, n_prefill=48),
                                   numpy_gpt2.forward(config, weights, tokens), atol=2e-5, rtol=0)

    def test_decoding_with_past_and_positions_from_range(self):
        tokens = np.random.default_rng(1).integers(0, 151, 30)
        one_pass = reference_logits(self.onnx, tokens, n_prefill=30)
        np.testing.assert_allclose(reference_logits(self.onnx, tokens, n_prefill=7), one_pass, atol=1e-5, rtol=0)
        np.testing.assert_allclose(reference_logits(self.ranged, tokens, n_prefill=7), one_pass, atol=1e-5, rtol=0)

    def test_padding_is_masked(self):
        assert_left_padding_is_masked(self, self.onnx, n_kv_heads=4, head_dim=12)


if __name__ == "__main__":
    unittest.main()
