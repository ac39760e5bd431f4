#!/usr/bin/env python3
"""The converter on the real model: stories260K exported from its llama2.c checkpoint."""

import json
import tempfile
import unittest
from pathlib import Path

import numpy as np
import onnx
from safetensors.numpy import load_file

from kvx_tools.convert.families.tensor_layout import expected_tensor_shapes
from kvx_tools.export.llama2c_checkpoint import read_llama2c_checkpoint
from kvx_tools.fixtures.ort_reference import reference_logits

from kvx_test_support import (STORIES_CHECKPOINT, STORIES_TOKENIZER, export_stories,
                              give_initializers_lying_names, run_ok)
import numpy_llama

EXPECTED_CONFIG = {
    "format": "kvx-model", "format_version": 1, "architecture": "llama", "dim": 64, "hidden_dim": 172,
    "n_layers": 5, "n_heads": 8, "n_kv_heads": 4, "head_dim": 8, "vocab_size": 512, "max_seq_len": 512,
    "norm_eps": 1e-05, "rope_style": "half", "tied_embeddings": True, "bos_token_id": 1,
    "eos_token_ids": [2, 1], "weights": {"file": "model.safetensors", "dtype": "f32"},
    "tokenizer": {"type": "llama2c", "file": "tokenizer.bin"},
    "source": {"onnx": "stories260K.onnx", "converter": "kvx-convert 1"},
}


class StoriesConversion(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)
        cls.onnx_path = export_stories(cls.tmp / "stories260K.onnx")
        cls.model_dir = cls.tmp / "model"
        run_ok(unittest.TestCase(), "kvx_tools.convert", cls.onnx_path, "-o", cls.model_dir,
               "--tokenizer", STORIES_TOKENIZER)
        cls.config = json.loads((cls.model_dir / "config.json").read_text())
        cls.tensors = load_file(str(cls.model_dir / "model.safetensors"))

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_config(self):
        self.assertEqual(self.config, EXPECTED_CONFIG)

    def test_tokenizer_copied_verbatim(self):
        self.assertEqual((self.model_dir / "tokenizer.bin").read_bytes(), STORIES_TOKENIZER.read_bytes())

    def test_tensor_names_shapes_dtypes(self):
        expected = expected_tensor_shapes(self.config)
        self.assertEqual(set(self.tensors), set(expected))
        self.assertNotIn("classifier", self.tensors)  # tied
        for name, shape in expected.items():
            self.assertEqual(self.tensors[name].shape, shape, name)
            self.assertEqual(self.tensors[name].dtype, np.float32, name)

    def test_weights_are_the_checkpoints(self):
        """Each kvx tensor is the checkpoint tensor of that role ([out, in]; Q/K rows in rotate-half
        order), so q/k/v and gate/up were told apart correctly."""
        _, source = read_llama2c_checkpoint(STORIES_CHECKPOINT)
        for name, array in source.items():
            np.testing.assert_array_equal(self.tensors[name], array, err_msg=name)
        inv_freq = 1.0 / 10000.0 ** (np.arange(0, 8, 2) / 8)
        np.testing.assert_allclose(self.tensors["rope_inv_freq"], inv_freq, rtol=1e-6)

    def test_lying_initializer_names_change_nothing(self):
        model = onnx.load(str(self.onnx_path))
        give_initializers_lying_names(model)
        names = {t.name: t for t in model.graph.initializer}
        named_q = onnx.numpy_helper.to_array(names["model.layers.0.self_attn.q_proj.weight_in_out"])
        self.assertFalse(named_q.shape == (64, 64) and np.array_equal(named_q.T, self.tensors["layers.0.wq"]))
        shuffled_path = self.tmp / "lying" / "stories260K.onnx"
        shuffled_path.parent.mkdir()
        onnx.save(model, str(shuffled_path))
        out_dir = self.tmp / "lying_model"
        run_ok(self, "kvx_tools.convert", shuffled_path, "-o", out_dir, "--tokenizer", STORIES_TOKENIZER)
        self.assertEqual((out_dir / "model.safetensors").read_bytes(),
                         (self.model_dir / "model.safetensors").read_bytes())

    def test_converted_model_computes_the_onnx_logits(self):
        tokens = np.random.default_rng(7).integers(0, 512, 48)
        tokens[0] = 1
        ort_logits = reference_logits(self.onnx_path, tokens, n_prefill=16)
        kvx_logits = numpy_llama.forward(*numpy_llama.load_model_dir(self.model_dir), tokens)
        np.testing.assert_allclose(kvx_logits, ort_logits, atol=2e-4, rtol=0)


if __name__ == "__main__":
    unittest.main()
