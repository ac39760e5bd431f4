#!/usr/bin/env python3
"""The GGUF exporter's quantized graphs (--keep-quantized, --requantize) on a small GGUF file written here
(test_export_gguf.write_gguf) with Q8_0, Q4_0, Q4_1 and F16 matrices.

References independent of the exporter: the GGUF file's own bytes (the integers MatMulNBits must hold, read
from the blocks by their definition in ggml's block layout), gguf's dequantization and quantization, and
ONNX Runtime on the fp32 graph that the exporter writes without the flags (its values: gguf's
dequantization, checked by test_export_gguf)."""

import tempfile
import unittest
from pathlib import Path

import gguf
import numpy as np
import onnx
from gguf import GGMLQuantizationType as T
from onnx import numpy_helper

from kvx_tools.export.export_random_llama import random_llama_weights
from kvx_tools.fixtures.ort_reference import reference_logits

from kvx_test_support import run_tool
from test_export_gguf import CONFIG, tokens_and_types, write_gguf

TYPES = {"tok_embeddings": T.Q8_0, "layers.0.wq": T.Q4_0, "layers.0.wk": T.Q4_1, "layers.0.w_gate": T.Q4_0,
         "layers.0.w_down": T.Q8_0, "layers.1.w_up": T.F16, "layers.1.wo": T.Q4_1}


def _export(gguf_path, out_dir, *flags):
    onnx_path = out_dir / "model.onnx"
    result = run_tool("kvx_tools.export.export_gguf_llama", gguf_path, "-o", onnx_path, *flags)
    assert result.returncode == 0, result.stderr
    return onnx_path


def _gguf_blocks(reader, name, block_bytes):
    tensor = next(t for t in reader.tensors if t.name == name)
    return np.asarray(tensor.data, dtype=np.uint8).reshape(int(tensor.shape[1]), -1, block_bytes)


class QuantizedGgufExport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        tmp = Path(cls._tmp.name)
        cls.config = dict(CONFIG, vocab_size=len(tokens_and_types()[0]))
        cls.gguf_path = tmp / "tiny.gguf"
        write_gguf(cls.gguf_path, random_llama_weights(cls.config, tied=True, seed=5), cls.config, TYPES)
        cls.fp32 = _export(cls.gguf_path, tmp / "fp32")
        cls.kept = _export(cls.gguf_path, tmp / "kept", "--keep-quantized")
        cls.requantized = _export(cls.gguf_path, tmp / "q4", "--requantize", "q4_0")
        cls.reader = gguf.GGUFReader(str(cls.gguf_path))

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def initializers(self, path):
        model = onnx.load(str(path))
        return model, {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def test_operators(self):
        model, _ = self.initializers(self.kept)
        ops = [n.op_type for n in model.graph.node]
        self.assertEqual(ops.count("GatherBlockQuantized"), 1)
        # The 5 Q8_0/Q4_0/Q4_1 matrices of the layers and the tied classifier; the F32/F16 ones stay MatMul.
        nbits = {n.name: {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
                 for n in model.graph.node if n.op_type == "MatMulNBits"}
        self.assertEqual(len(nbits), 6, list(nbits))
        self.assertEqual(nbits["/lm_head/MatMulNBits"]["bits"], 8)
        self.assertEqual(nbits["/model/layers.0/self_attn/q_proj/MatMulNBits"]["bits"], 4)
        self.assertTrue(all(a["block_size"] == 32 and a["accuracy_level"] == 0 for a in nbits.values()))
        self.assertIn("com.microsoft", {o.domain for o in model.opset_import})
        model, _ = self.initializers(self.fp32)
        self.assertNotIn("com.microsoft", {o.domain for o in model.opset_import})

    def test_kept_blocks_are_marked_for_llama_cpp_s_activation_rounding(self):
        """kvx rounds activations to int8 as llama.cpp does for blocks kept from a GGUF file (x_rounding ggml,
        which kvx convert carries into config.json), so that its greedy tokens follow llama.cpp's near ties."""
        props = lambda path: {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
        self.assertEqual(props(self.kept).get("x_rounding"), "ggml")
        self.assertEqual(props(self.requantized).get("x_rounding"), "ggml")
        self.assertNotIn("x_rounding", props(self.fp32))

    def test_q8_0_integers_are_the_file_s_plus_128(self):
        _, init = self.initializers(self.kept)
        blocks = _gguf_blocks(self.reader, "blk.0.ffn_down.weight", 34)
        np.testing.assert_array_equal(init["model.layers.0.mlp.down_proj.weight_Q8"].astype(np.int16) - 128,
                                      blocks[..., 2:].view(np.int8))
        np.testing.assert_array_equal(init["model.layers.0.mlp.down_proj.weight_scales"],
                                      blocks[..., :2].copy().view(np.float16)[..., 0].astype(np.float32))

    def test_q4_0_nibbles_are_the_file_s_reordered(self):
        _, init = self.initializers(self.kept)
        blocks = _gguf_blocks(self.reader, "blk.0.ffn_gate.weight", 18)
        gguf_q = np.concatenate([blocks[..., 2:] & 15, blocks[..., 2:] >> 4], axis=-1)  # element t, t + 16
        ort = init["model.layers.0.mlp.gate_proj.weight_Q4"]
        ort_q = np.stack([ort & 15, ort >> 4], axis=-1).reshape(gguf_q.shape)  # element 2t, 2t + 1
        np.testing.assert_array_equal(ort_q, gguf_q)
        self.assertNotIn("model.layers.0.mlp.gate_proj.weight_zero_points", init)  # ORT's default 8, Q4_0's

    def test_q4_1_float_zero_points_give_the_file_s_minimums(self):
        _, init = self.initializers(self.kept)
        blocks = _gguf_blocks(self.reader, "blk.1.attn_output.weight", 20)
        d, m = (blocks[..., o:o + 2].copy().view(np.float16)[..., 0].astype(np.float32) for o in (0, 2))
        z = init["model.layers.1.self_attn.o_proj.weight_zero_points"]
        np.testing.assert_array_equal(init["model.layers.1.self_attn.o_proj.weight_scales"], d)
        np.testing.assert_allclose(-d * z, m, rtol=0, atol=np.abs(m).max() * 2 ** -23)  # within an ulp

    def test_kept_graph_computes_what_the_fp32_graph_does(self):
        tokens = np.random.default_rng(2).integers(0, self.config["vocab_size"], 20)
        want = reference_logits(self.fp32, tokens, 10)
        got = reference_logits(self.kept, tokens, 10)
        self.assertLessEqual(np.abs(got - want).max(), 1e-5 * np.abs(want).max())

    def test_requantized_f16_matrix_is_gguf_s_q4_0_of_it(self):
        _, init = self.initializers(self.requantized)
        tensor = next(t for t in self.reader.tensors if t.name == "blk.1.ffn_up.weight")
        values = np.asarray(tensor.data, dtype=np.float32)
        want = gguf.quants.dequantize(gguf.quants.quantize(values, T.Q4_0), T.Q4_0)
        q, s = init["model.layers.1.mlp.up_proj.weight_Q4"], init["model.layers.1.mlp.up_proj.weight_scales"]
        got = s[..., None] * (np.stack([q & 15, q >> 4], axis=-1).reshape(*s.shape, 32).astype(np.float32) - 8)
        np.testing.assert_array_equal(got.reshape(want.shape), want)
        # The Q4_1 matrices are kept as they are, not re-quantized.
        self.assertIn("model.layers.1.self_attn.o_proj.weight_zero_points", init)


if __name__ == "__main__":
    unittest.main()
