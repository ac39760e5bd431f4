#!/usr/bin/env python3
"""The converter on random models with awkward shapes (the fixture recipes): hyperparameters read
from the graph, and the converted weights computing ONNX Runtime's logits."""

import json
import tempfile
import unittest
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from kvx_tools.fixtures.make_fixtures import RANDOM_FIXTURES
from kvx_tools.fixtures.ort_reference import reference_logits

from kvx_test_support import convert, export_random, run_ok
import numpy_llama

RECIPE_TO_CONFIG = {"dim": "dim", "hidden": "hidden_dim", "layers": "n_layers", "heads": "n_heads",
                    "kv_heads": "n_kv_heads", "head_dim": "head_dim", "vocab": "vocab_size"}


def export_recipe(path, recipe):
    extra = []
    for key in ("max_seq_len", "norm_eps", "rope_theta", "sliding_window", "window_layers"):
        if key in recipe:
            extra += ["--" + key.replace("_", "-"), recipe[key]]
    for flag in ("untied", "external_data"):
        if recipe.get(flag):
            extra.append("--" + flag.replace("_", "-"))
    shape = {k: recipe[k] for k in RECIPE_TO_CONFIG}
    return export_random(path, seed=recipe["seed"], extra=extra, **shape)


def use_plain_reshape_targets(model):
    """Replaces each torch-style Reshape target Concat(batch, seq, heads, head_dim) by a plain
    initializer [0, 0, -1, head_dim] (0 copies a dim, -1 infers heads), and each Concat(batch, seq,
    width) by [0, 0, width]: the other common way exporters spell these shapes."""
    constants = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node
                 if n.op_type == "Constant"}
    producers = {o: n for n in model.graph.node for o in n.output}
    for k, reshape in enumerate(n for n in model.graph.node if n.op_type == "Reshape"):
        concat = producers.get(reshape.input[1])
        if concat is None or concat.op_type != "Concat":
            continue
        tail = constants[concat.input[-1]].tolist()
        target = [0, 0, -1, tail[1]] if len(tail) == 2 else [0, 0, tail[0]]
        name = f"plain_reshape_target_{k}"
        model.graph.initializer.append(numpy_helper.from_array(np.array(target, dtype=np.int64), name))
        reshape.input[1] = name


class AwkwardShapes(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def test_fixture_recipes(self):
        for name, recipe in RANDOM_FIXTURES.items():
            with self.subTest(name):
                onnx_path = export_recipe(self.tmp / name / "model.onnx", recipe)
                model_dir = self.tmp / name / "model"
                run_ok(self, "kvx_tools.convert", onnx_path, "-o", model_dir)
                config, tensors = numpy_llama.load_model_dir(model_dir)
                for recipe_key, config_key in RECIPE_TO_CONFIG.items():
                    self.assertEqual(config[config_key], recipe[recipe_key], config_key)
                self.assertEqual(config["tied_embeddings"], not recipe.get("untied", False))
                self.assertEqual(config["max_seq_len"], recipe.get("max_seq_len", 256))
                self.assertEqual(config["norm_eps"], recipe.get("norm_eps", 1e-5))
                if "sliding_window" in recipe:
                    self.assertEqual(config["sliding_window"], {
                        "window": recipe["sliding_window"],
                        "layers": [int(i) for i in recipe["window_layers"].split(",")]})
                else:
                    self.assertNotIn("sliding_window", config)
                self.assertIsNone(config["tokenizer"])
                self.assertFalse((model_dir / "tokenizer.bin").exists())
                theta, hd = recipe.get("rope_theta", 10000.0), recipe["head_dim"]
                np.testing.assert_allclose(tensors["rope_inv_freq"], 1 / theta ** (np.arange(0, hd, 2) / hd),
                                           rtol=1e-6)
                tokens = np.random.default_rng(3).integers(0, recipe["vocab"], 40)
                np.testing.assert_allclose(numpy_llama.forward(config, tensors, tokens),
                                           reference_logits(onnx_path, tokens, n_prefill=20),
                                           atol=5e-5, rtol=0)

    def test_plain_constant_reshape_targets(self):
        recipe = RANDOM_FIXTURES["rand_hd24_gqa4_l3_v301_untied"]
        onnx_path = export_recipe(self.tmp / "torch_style.onnx", recipe)
        model = onnx.load(str(onnx_path))
        use_plain_reshape_targets(model)
        plain_path = self.tmp / "plain" / "torch_style.onnx"
        plain_path.parent.mkdir()
        onnx.save(model, str(plain_path))
        tokens = np.arange(12) * 7
        np.testing.assert_allclose(reference_logits(plain_path, tokens, 6),
                                   reference_logits(onnx_path, tokens, 6), atol=1e-6, rtol=0)
        for path, out in ((onnx_path, "torch_style_model"), (plain_path, "plain_model")):
            run_ok(self, "kvx_tools.convert", path, "-o", self.tmp / out)
        for file in ("model.safetensors", "config.json"):
            self.assertEqual((self.tmp / "torch_style_model" / file).read_bytes(),
                             (self.tmp / "plain_model" / file).read_bytes(), file)

    def _with_lm_head_initializer(self, onnx_path, classifier_in_out):
        """The tied model with its lm_head Transpose node replaced by a stored [dim, vocab] copy, as
        torch.onnx.export writes tied weights."""
        model = onnx.load(str(onnx_path))
        transpose = next(n for n in model.graph.node if n.op_type == "Transpose" and n.input[0] in
                         {t.name for t in model.graph.initializer})
        model.graph.node.remove(transpose)
        model.graph.initializer.append(numpy_helper.from_array(classifier_in_out, transpose.output[0]))
        path = onnx_path.with_name("copied_head.onnx")
        onnx.save(model, str(path))
        return path

    def test_tying_is_decided_by_data(self):
        onnx_path = export_random(self.tmp / "tied.onnx", dim=16, hidden=24, layers=1, heads=2, kv_heads=1,
                                  head_dim=8, vocab=37, seed=9)
        embedding = numpy_helper.to_array(next(t for t in onnx.load(str(onnx_path)).graph.initializer
                                               if t.name == "model.embed_tokens.weight"))
        copied = self._with_lm_head_initializer(onnx_path, np.ascontiguousarray(embedding.T))
        run_ok(self, "kvx_tools.convert", copied, "-o", self.tmp / "copied")
        self.assertTrue(json.loads((self.tmp / "copied" / "config.json").read_text())["tied_embeddings"])

        nudged = embedding.T.copy()
        nudged[0, 0] += 1e-3
        different = self._with_lm_head_initializer(onnx_path, nudged)
        result = convert(different, self.tmp / "different")
        self.assertEqual(result.returncode, 0, result.stderr)
        config, tensors = numpy_llama.load_model_dir(self.tmp / "different")
        self.assertFalse(config["tied_embeddings"])
        np.testing.assert_array_equal(tensors["classifier"], nudged.T.astype(np.float64))


if __name__ == "__main__":
    unittest.main()
