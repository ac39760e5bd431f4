#!/usr/bin/env python3
"""Graphs exported with past_key_values inputs / present outputs (ONNX Runtime GenAI's default layout,
what ONNX Runtime decodes incrementally with) and without them: ONNX Runtime computes the same logits
from both, and the converter makes the same model directory of both."""

import json
import tempfile
import unittest
from pathlib import Path

import numpy as np
import onnx

# kvx_test_support first: it puts the tools' folders on sys.path.
from kvx_test_support import assert_one_line_failure, convert, export_random, run_ok
import numpy_llama
from ort_reference import open_session, reference_logits

SHAPES = {  # GQA with repeat_kv, and one KV head per query head (no repeat_kv at all)
    "gqa3": dict(dim=48, hidden=80, layers=2, heads=6, kv_heads=2, head_dim=12, vocab=97, seed=21),
    "mha": dict(dim=32, hidden=64, layers=3, heads=4, kv_heads=4, head_dim=8, vocab=61, seed=22),
}


def no_past_logits(onnx_path, tokens):
    """[T, vocab] from one run over all tokens: the only way a graph without a cache can be run."""
    session = open_session(onnx_path)
    t = len(tokens)
    feeds = {"input_ids": np.asarray(tokens, dtype=np.int64).reshape(1, t),
             "attention_mask": np.ones((1, t), dtype=np.int64),
             "position_ids": np.arange(t, dtype=np.int64).reshape(1, t)}
    return session.run(["logits"], feeds)[0][0]


class PastAndNoPast(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def test_both_graphs_convert_to_the_same_directory(self):
        for name, shape in SHAPES.items():
            with self.subTest(name):
                with_past = export_random(self.tmp / name / "past" / "m.onnx", **shape)
                without = export_random(self.tmp / name / "no_past" / "m.onnx", **shape, extra=["--no-past"])
                graph_inputs = {i.name for i in onnx.load(str(without)).graph.input}
                self.assertEqual(graph_inputs, {"input_ids", "attention_mask", "position_ids"})
                graph_inputs = {i.name for i in onnx.load(str(with_past)).graph.input}
                self.assertIn(f"past_key_values.{shape['layers'] - 1}.value", graph_inputs)

                tokens = np.random.default_rng(shape["seed"]).integers(0, shape["vocab"], 20)
                cached = reference_logits(with_past, tokens, 8)
                np.testing.assert_allclose(no_past_logits(without, tokens), cached, atol=2e-5, rtol=0)

                dirs = {}
                for kind, path in (("past", with_past), ("no_past", without)):
                    dirs[kind] = self.tmp / name / f"{kind}_model"
                    run_ok(self, "convert/kvx_convert.py", path, "-o", dirs[kind])
                self.assertEqual((dirs["past"] / "model.safetensors").read_bytes(),
                                 (dirs["no_past"] / "model.safetensors").read_bytes())
                self.assertEqual(json.loads((dirs["past"] / "config.json").read_text()),
                                 json.loads((dirs["no_past"] / "config.json").read_text()))
                config, tensors = numpy_llama.load_model_dir(dirs["no_past"])
                np.testing.assert_allclose(numpy_llama.forward(config, tensors, tokens), cached, atol=5e-5, rtol=0)

    def test_a_key_without_its_cache_is_refused(self):
        """A graph with the value cached but not the key is neither layout; the converter says so."""
        path = export_random(self.tmp / "m.onnx", **SHAPES["gqa3"])
        model = onnx.load(str(path))
        concat = next(n for n in model.graph.node if n.op_type == "Concat" and n.output[0] == "present.0.key")
        for node in model.graph.node:  # readers of the cached keys read the new keys instead
            for k, name in enumerate(node.input):
                if name == "present.0.key":
                    node.input[k] = concat.input[1]
        model.graph.node.remove(concat)
        model.graph.input.remove(next(i for i in model.graph.input if i.name == "past_key_values.0.key"))
        model.graph.output.remove(next(o for o in model.graph.output if o.name == "present.0.key"))
        broken = self.tmp / "broken" / "m.onnx"
        broken.parent.mkdir()
        onnx.save(model, str(broken))
        assert_one_line_failure(self, convert(broken, self.tmp / "out"), "layers.0/self_attn",
                                "one key projection with a cache Concat like the value's, found 0")


if __name__ == "__main__":
    unittest.main()
