#!/usr/bin/env python3
"""The converter on a Llama graph from ONNX Runtime GenAI's model builder (fused com.microsoft operators,
fp16 weights, RoPE from precomputed tables), against the graph's own initializers and ONNX Runtime."""

import json
import tempfile
import unittest
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper
from safetensors.numpy import load_file

from kvx_tools.fixtures.ort_reference import reference_logits

from kvx_test_support import ORTGENAI_LLAMA, assert_one_line_failure, convert, run_ok
import numpy_llama

# ONNX Runtime computes this graph in fp16, kvx (and numpy_llama) in fp32/fp64 from the same fp16 weights.
TOLERANCE = 2e-3  # of max|logit| per position; tools/kvx_tools/fixtures/make_fixtures.py says why
BUILDER_NAMES = {"wq": "attn.q_proj", "wk": "attn.k_proj", "wv": "attn.v_proj", "wo": "attn.o_proj",
                 "w_gate": "mlp.gate_proj", "w_up": "mlp.up_proj", "w_down": "mlp.down_proj"}


def worst_relative_error(logits, reference):
    """max over positions of max|logits - reference| / max|reference|."""
    return float((np.abs(logits - reference).max(axis=1) / np.abs(reference).max(axis=1)).max())


class OrtGenAiLlama(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)
        cls.model_dir = cls.tmp / "model"
        run_ok(unittest.TestCase(), "kvx_tools.convert", ORTGENAI_LLAMA, "-o", cls.model_dir)
        cls.config = json.loads((cls.model_dir / "config.json").read_text())
        cls.tensors = load_file(str(cls.model_dir / "model.safetensors"))
        cls.onnx_model = onnx.load(str(ORTGENAI_LLAMA))
        cls.initializers = {t.name: numpy_helper.to_array(t) for t in cls.onnx_model.graph.initializer}
        cls.tokens = np.random.default_rng(5).integers(0, 32000, 48)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def variant(self, name, edit):
        """The graph with edit(model) applied, saved (weights inline) as NAME.onnx."""
        model = onnx.ModelProto()
        model.CopyFrom(self.onnx_model)
        edit(model)
        path = self.tmp / f"{name}.onnx"
        onnx.save(model, str(path))
        return path

    def test_config(self):
        c = self.config
        self.assertEqual((c["architecture"], c["dim"], c["hidden_dim"], c["n_layers"]), ("llama", 16, 64, 2))
        self.assertEqual((c["n_heads"], c["n_kv_heads"], c["head_dim"], c["vocab_size"]), (1, 1, 16, 32000))
        self.assertEqual(c["max_seq_len"], 2048)  # the rows of cos_cache: no metadata in this graph
        self.assertEqual((c["norm_eps"], c["rope_style"], c["tied_embeddings"]), (1e-6, "half", False))
        self.assertEqual(c["weights"]["dtype"], "f16")  # the graph's matrices are fp16

    def test_weights_are_the_builders(self):
        """Each tensor is the initializer the builder named for that role (names are trusted by this test
        only, as the independent account of which weight is which)."""
        t, init = self.tensors, self.initializers
        np.testing.assert_array_equal(t["tok_embeddings"], init["model.embed_tokens.weight"])
        np.testing.assert_array_equal(t["classifier"], init["lm_head.MatMul.weight"].T)
        np.testing.assert_array_equal(t["final_norm"], init["model.layers.2.final_norm_layernorm.weight"])
        for i in range(2):
            for kvx_name, builder in BUILDER_NAMES.items():
                name = f"layers.{i}.{kvx_name}"
                self.assertEqual(t[name].dtype, np.float16, name)
                np.testing.assert_array_equal(t[name], init[f"model.layers.{i}.{builder}.MatMul.weight"].T, name)
            for kvx_name, builder in (("attn_norm", "input_layernorm"), ("ffn_norm", "post_attention_layernorm")):
                self.assertEqual(t[f"layers.{i}.{kvx_name}"].dtype, np.float32)
                np.testing.assert_array_equal(t[f"layers.{i}.{kvx_name}"], init[f"model.layers.{i}.{builder}.weight"])

    def test_inv_freq_reproduces_the_rope_tables(self):
        inv_freq = self.tensors["rope_inv_freq"]
        self.assertEqual(inv_freq.dtype, np.float32)
        # The builder's formula, 1 / 10000^(2j / head_dim) in fp32: the fit finds it.
        expected = (1.0 / 10000.0 ** (np.arange(0, 16, 2, dtype=np.float32) / 16)).astype(np.float32)
        np.testing.assert_allclose(inv_freq, expected, rtol=1e-6)
        np.testing.assert_array_equal(inv_freq[:6], expected[:6])  # exactly, where the tables can tell
        angles = np.arange(2048, dtype=np.float32)[:, None] * inv_freq[None, :]
        for table, fn in (("cos_cache", np.cos), ("sin_cache", np.sin)):
            error = np.abs(fn(angles.astype(np.float64)) - self.initializers[table].astype(np.float64)).max()
            self.assertLessEqual(error, 2.0 ** -11, table)

    def test_logits_match_onnxruntime(self):
        ort_logits = reference_logits(ORTGENAI_LLAMA, self.tokens, n_prefill=24)
        kvx_logits = numpy_llama.forward(self.config, numpy_llama.load_model_dir(self.model_dir)[1], self.tokens)
        self.assertLessEqual(worst_relative_error(kvx_logits, ort_logits), TOLERANCE)

    def test_dtype_f32_widens_exactly(self):
        out_dir = self.tmp / "as_f32"
        run_ok(self, "kvx_tools.convert", ORTGENAI_LLAMA, "-o", out_dir, "--dtype", "f32")
        self.assertEqual(json.loads((out_dir / "config.json").read_text())["weights"]["dtype"], "f32")
        widened = load_file(str(out_dir / "model.safetensors"))
        for name, array in self.tensors.items():
            self.assertEqual(widened[name].dtype, np.float32, name)
            np.testing.assert_array_equal(widened[name], array.astype(np.float32), name)

    def test_interleaved_rope_reorders_q_and_k(self):
        def interleave(model):
            for node in model.graph.node:
                if node.op_type == "RotaryEmbedding":
                    next(a for a in node.attribute if a.name == "interleaved").i = 1
        path = self.variant("interleaved", interleave)
        out_dir = self.tmp / "interleaved_model"
        run_ok(self, "kvx_tools.convert", path, "-o", out_dir)
        config, tensors = numpy_llama.load_model_dir(out_dir)
        self.assertFalse(np.array_equal(tensors["layers.0.wq"], self.tensors["layers.0.wq"]))
        np.testing.assert_array_equal(tensors["layers.0.wv"], self.tensors["layers.0.wv"])
        ort_logits = reference_logits(path, self.tokens, n_prefill=24)
        self.assertLessEqual(worst_relative_error(numpy_llama.forward(config, tensors, self.tokens), ort_logits),
                             TOLERANCE)

    def refused(self, name, edit, *fragments):
        out_dir = self.tmp / f"out_{name}"
        line = assert_one_line_failure(self, convert(self.variant(name, edit), out_dir), *fragments)
        self.assertFalse(out_dir.exists(), "nothing may be written on failure")
        return line

    def test_tensor_storage_must_fit_its_shape(self):
        """onnx.checker cannot check a graph of ONNX Runtime's fused operators, so the converter checks every
        tensor's storage against its shape itself: here a typed Constant one value short."""
        def short_constant(model):
            value = next(n for n in model.graph.node if n.op_type == "Constant").attribute[0].t
            value.ClearField("raw_data")
            value.int64_data.append(2)
            value.dims[:] = [3]
        self.refused("short_constant", short_constant, "holds 1 values, its shape [3] needs 3")

    def test_scaled_rope_tables_are_refused(self):
        def scale_caches(model):  # an attention factor on cos and sin, as scaled RoPE variants have
            for tensor in model.graph.initializer:
                if tensor.name in ("cos_cache", "sin_cache"):
                    scaled = (numpy_helper.to_array(tensor).astype(np.float32) * 1.1).astype(np.float16)
                    tensor.CopyFrom(numpy_helper.from_array(scaled, tensor.name))
        self.refused("scaled_rope", scale_caches, "/model/layers.0/attn/", "RotaryEmbedding",
                     "not cos/sin(position * inv_freq)")

    def test_partial_rotary_is_refused(self):
        def partial(model):
            for node in model.graph.node:
                if node.op_type == "RotaryEmbedding":
                    next(a for a in node.attribute if a.name == "rotary_embedding_dim").i = 8
        self.refused("partial_rope", partial, "RotaryEmbedding", "rotary_embedding_dim 0 or 16")

    def test_attention_scale_is_read(self):
        """Another scale on MultiHeadAttention (the builder writes Granite's attention_multiplier there) is
        config.json's attention_scale, and the model computes what ONNX Runtime does with it (at 4.0, 16 times
        the default: without it the logits are 3e-2 of max|logit| off)."""
        def larger_scale(model):
            for node in model.graph.node:
                if node.op_type == "MultiHeadAttention":
                    next(a for a in node.attribute if a.name == "scale").f = 4.0
        path = self.variant("scale", larger_scale)
        out_dir = self.tmp / "scale_model"
        run_ok(self, "kvx_tools.convert", path, "-o", out_dir)
        config, tensors = numpy_llama.load_model_dir(out_dir)
        self.assertEqual(config["attention_scale"], 4.0)
        ort_logits = reference_logits(path, self.tokens, n_prefill=24)
        self.assertLessEqual(worst_relative_error(numpy_llama.forward(config, tensors, self.tokens), ort_logits),
                             TOLERANCE)

    def test_other_fused_operators_are_still_refused(self):
        def to_gqa(model):
            for node in model.graph.node:
                if node.op_type == "MultiHeadAttention":
                    node.op_type = "SparseAttention"
        self.refused("gqa", to_gqa, "unsupported operator 'SparseAttention'", "com.microsoft",
                     "/model/layers.0/attn/MultiHeadAttention")

    def test_skip_norm_with_bias_is_refused(self):
        def add_bias(model):  # a bias on the fused residual add, which kvx's RMSNorm lacks
            bias = numpy_helper.from_array(np.zeros(16, dtype=np.float16), "skip_bias")
            model.graph.initializer.append(bias)
            node = next(n for n in model.graph.node if n.op_type == "SkipSimplifiedLayerNormalization")
            node.input.append("skip_bias")
        self.refused("skip_bias", add_bias, "SkipSimplifiedLayerNormalization without bias")

    def test_unsorted_graph_with_a_cycle_is_refused(self):
        def cycle(model):  # the first Gather of the mask reads a tensor computed from its own output
            gather = next(n for n in model.graph.node if n.op_type == "Gather")
            add = next(n for n in model.graph.node if n.op_type == "Add" and gather.output[0] in n.input)
            gather.input[1] = add.output[0]
        self.refused("cycle", cycle, "invalid ONNX model", "cycle")


if __name__ == "__main__":
    unittest.main()
