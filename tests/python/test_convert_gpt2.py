#!/usr/bin/env python3
"""The converter on GPT-2 graphs: torch's standard-operator export (the fixture recipes) and ONNX Runtime
GenAI's fused operators (testdata/models/ortgenai-tiny-random-gpt2-fp32/past.onnx). Weights land where the
exporter put them, hyperparameters are read from the graph, and numpy's GPT-2 over the converted
directory computes ONNX Runtime's logits; graphs the mappers cannot follow are refused by name."""

import tempfile
import unittest
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from kvx_tools.export.export_random_gpt2 import random_gpt2_weights
from kvx_tools.fixtures.make_fixtures import RANDOM_GPT2_FIXTURES, export_argv
from kvx_tools.fixtures.ort_reference import reference_logits

from kvx_test_support import REPO, assert_one_line_failure, convert, run_ok
import numpy_gpt2

ORTGENAI_GPT2 = REPO / "testdata" / "models" / "ortgenai-tiny-random-gpt2-fp32" / "past.onnx"
RECIPE_TO_CONFIG = {"dim": "dim", "hidden": "hidden_dim", "layers": "n_layers", "heads": "n_heads",
                    "head_dim": "head_dim", "vocab": "vocab_size", "max_seq_len": "max_seq_len"}


def export_recipe(testcase, path, recipe):
    run_ok(testcase, "kvx_tools.export.export_random_gpt2", *export_argv(recipe, path))
    return path


class Gpt2Conversion(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def assert_computes_ort_logits(self, onnx_path, model_dir, n_tokens):
        config, tensors = numpy_gpt2.load_model_dir(model_dir)
        tokens = np.random.default_rng(3).integers(0, config["vocab_size"], n_tokens)
        np.testing.assert_allclose(numpy_gpt2.forward(config, tensors, tokens),
                                   reference_logits(onnx_path, tokens, n_prefill=n_tokens // 2), atol=5e-5, rtol=0)
        return config, tensors

    def test_split_order_is_read_by_meaning(self):
        """c_attn's parts swapped (the key's columns first): the converter follows which columns the scores
        multiply as the query and which as the key, so the model computes what the graph computes."""
        source = export_recipe(self, self.tmp / "gpt2.onnx", dict(dim=24, hidden=40, layers=2, heads=2, head_dim=12,
                                                                 vocab=50, max_seq_len=16, seed=1))
        model = onnx.load(str(source))
        split = node_named(model, "/transformer/h.0/attn/Split")
        split.output[0], split.output[1] = split.output[1], split.output[0]
        swapped = self.tmp / "kqv.onnx"
        onnx.save(model, str(swapped))
        run_ok(self, "kvx_tools.convert", swapped, "-o", self.tmp / "kqv")
        self.assert_computes_ort_logits(swapped, self.tmp / "kqv", 8)

    def test_fixture_recipes(self):
        for name, recipe in RANDOM_GPT2_FIXTURES.items():
            with self.subTest(name):
                onnx_path = export_recipe(self, self.tmp / name / "model.onnx", recipe)
                model_dir = self.tmp / name / "model"
                run_ok(self, "kvx_tools.convert", onnx_path, "-o", model_dir)
                config, tensors = self.assert_computes_ort_logits(onnx_path, model_dir, recipe["max_seq_len"])
                self.assertEqual(config["architecture"], "gpt2")
                for recipe_key, config_key in RECIPE_TO_CONFIG.items():
                    self.assertEqual(config[config_key], recipe[recipe_key], config_key)
                self.assertEqual(config["n_kv_heads"], recipe["heads"])
                self.assertEqual(config["norm_eps"], recipe.get("norm_eps", 1e-5))
                self.assertEqual(config["tied_embeddings"], not recipe.get("untied", False))
                self.assertIsNone(config["rope_style"])
                # Every tensor is the exporter's own, split out of c_attn and transposed back exactly.
                exported = random_gpt2_weights(config, tied=config["tied_embeddings"], seed=recipe["seed"])
                self.assertEqual(set(tensors), set(exported))
                for tensor_name, value in exported.items():
                    np.testing.assert_array_equal(tensors[tensor_name], value, tensor_name)

    def test_positions_from_input_or_range_give_the_same_model(self):
        recipe = dict(RANDOM_GPT2_FIXTURES["rand_gpt2_hd24_l3_v263_ctx65"])
        for kind, extra in (("input", {}), ("range", {"no_position_ids": True})):
            onnx_path = export_recipe(self, self.tmp / kind / "model.onnx", {**recipe, **extra})
            run_ok(self, "kvx_tools.convert", onnx_path, "-o", self.tmp / kind / "model")
        for file in ("model.safetensors", "config.json"):
            self.assertEqual((self.tmp / "input" / "model" / file).read_bytes(),
                             (self.tmp / "range" / "model" / file).read_bytes(), file)

    def test_ortgenai_fused_operators(self):
        model_dir = self.tmp / "ortgenai"
        run_ok(self, "kvx_tools.convert", ORTGENAI_GPT2, "-o", model_dir)
        config, tensors = self.assert_computes_ort_logits(ORTGENAI_GPT2, model_dir, 40)
        expected = dict(architecture="gpt2", dim=32, hidden_dim=128, n_layers=5, n_heads=4, n_kv_heads=4,
                        head_dim=8, vocab_size=1000, max_seq_len=512, norm_eps=1e-5, tied_embeddings=True)
        self.assertEqual({k: config[k] for k in expected}, expected)
        initializers = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(ORTGENAI_GPT2)).graph.initializer}
        c_attn = initializers["transformer.h.3.attn.c_attn.weight"]  # [dim, q | k | v]
        for k, name in enumerate(("wq", "wk", "wv")):
            np.testing.assert_array_equal(tensors[f"layers.3.{name}"], c_attn[:, 32 * k:32 * (k + 1)].T)

    def test_context_is_bounded_by_the_position_table(self):
        model_dir = self.tmp / "short"
        run_ok(self, "kvx_tools.convert", ORTGENAI_GPT2, "-o", model_dir, "--max-seq-len", 100)
        config, tensors = numpy_gpt2.load_model_dir(model_dir)
        self.assertEqual(config["max_seq_len"], 100)
        wpe = numpy_helper.to_array(next(t for t in onnx.load(str(ORTGENAI_GPT2)).graph.initializer
                                         if t.name == "transformer.wpe.weight"))
        np.testing.assert_array_equal(tensors["pos_embeddings"], wpe[:100])
        assert_one_line_failure(self, convert(ORTGENAI_GPT2, self.tmp / "long", "--max-seq-len", 513),
                                "--max-seq-len is 513, but the position embedding has only 512 rows")


def node_named(model, name):
    return next(n for n in model.graph.node if n.name == name)


class Gpt2Refusals(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)
        recipe = dict(dim=24, hidden=40, layers=2, heads=2, head_dim=12, vocab=50, max_seq_len=16, seed=1)
        cls.gpt2 = export_recipe(unittest.TestCase(), cls.tmp / "gpt2.onnx", recipe)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def _refused(self, source, name, edit, *fragments):
        """source with edit(model) applied, saved as NAME.onnx, must be refused with fragments."""
        model = onnx.load(str(source))
        edit(model)
        path = self.tmp / f"{name}.onnx"
        onnx.save(model, str(path))
        out_dir = self.tmp / f"out_{name}"
        assert_one_line_failure(self, convert(path, out_dir), *fragments)
        self.assertFalse(out_dir.exists(), "nothing may be written on failure")

    def test_neither_llama_nor_gpt2(self):
        def subtract_positions(model):
            node_named(model, "/transformer/Add").op_type = "Sub"
        self._refused(self.gpt2, "sub", subtract_positions,
                      "cannot map node '/transformer/wte/Gather' (op Gather)", "a norm, or the projections of a layer",
                      "position embedding added", "it feeds '/transformer/Add' (Sub)")

    def test_gelu_constants_are_checked(self):
        def other_cubic(model):
            mul = node_named(model, "/transformer/h.1/mlp/act/Mul_1")
            constant = node_named(model, mul.input[0].removesuffix("_output_0"))
            constant.attribute[0].t.CopyFrom(numpy_helper.from_array(np.asarray(0.05, dtype=np.float32)))
        self._refused(self.gpt2, "gelu", other_cubic, "cannot map node '/transformer/h.1/mlp/act/Pow' (op Pow)",
                      "0.044715 * x^3")

    def test_layer_norms_share_one_eps(self):
        def other_eps(model):
            norm = node_named(model, "/transformer/h.1/ln_2/LayerNormalization")
            next(a for a in norm.attribute if a.name == "epsilon").f = 1e-3
        self._refused(self.gpt2, "eps", other_eps, "LayerNorms use different eps values")

    def test_fused_attention_must_be_causal(self):
        def bidirectional(model):
            attention = node_named(model, "GptAttention_2")
            for a in attention.attribute:
                if a.name == "unidirectional":
                    a.i = 0
        self._refused(ORTGENAI_GPT2, "bidirectional", bidirectional,
                      "cannot map node 'GptAttention_2' (op Attention)", "causal attention (unidirectional = 1)")

    def test_fused_embedding_needs_position_ids(self):
        def no_positions(model):
            del node_named(model, "EmbedLayerNormalization_0").input[8]
        self._refused(ORTGENAI_GPT2, "no_positions", no_positions,
                      "cannot map node 'EmbedLayerNormalization_0' (op EmbedLayerNormalization)",
                      "positions from the position_ids input")

    def test_other_fused_operators_stay_refused(self):
        def bias_gelu(model):
            node_named(model, "FastGelu_AddBias_3").op_type = "BiasGelu"
        self._refused(ORTGENAI_GPT2, "bias_gelu", bias_gelu,
                      "unsupported operator 'BiasGelu' at node 'FastGelu_AddBias_3'", "domain com.microsoft")


if __name__ == "__main__":
    unittest.main()
