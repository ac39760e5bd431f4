#!/usr/bin/env python3
"""What the converter refuses: each case exits 1 with one line on stderr that says what is wrong,
names the node where there is one, and writes nothing."""

import json
import tempfile
import unittest
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from kvx_tools.convert.errors import ConvertError
from kvx_tools.convert.exporters.ortgenai.genai_config import GenaiConfig
from kvx_tools.convert.blocks.sliding_window import sliding_window_of

from kvx_test_support import (STORIES_CHECKPOINT, STORIES_TOKENIZER, assert_one_line_failure, convert,
                              export_stories, run_ok)


def node_named(model, name):
    return next(n for n in model.graph.node if n.name == name)


def replace_float_constant(model, scope, old, new):
    """Gives the one Constant node in scope whose value is the float old the value new."""
    nodes = [n for n in model.graph.node if n.op_type == "Constant" and n.name.startswith(scope)
             and np.isclose(numpy_helper.to_array(n.attribute[0].t), np.float32(old)).all()]
    assert len(nodes) == 1, [n.name for n in nodes]
    nodes[0].attribute[0].t.CopyFrom(numpy_helper.from_array(np.asarray(new, dtype=np.float32)))


class ConverterRefusals(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)
        cls.stories = export_stories(cls.tmp / "stories260K.onnx")

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def _variant(self, name, edit):
        """stories260K with edit(model) applied, saved as NAME.onnx."""
        model = onnx.load(str(self.stories))
        edit(model)
        path = self.tmp / f"{name}.onnx"
        onnx.save(model, str(path))
        return path

    def _refused(self, onnx_path, *fragments, extra=()):
        out_dir = self.tmp / f"out_{Path(onnx_path).stem}"
        line = assert_one_line_failure(self, convert(onnx_path, out_dir, *extra), *fragments)
        self.assertFalse(out_dir.exists(), "nothing may be written on failure")
        return line

    def test_unsupported_standard_op(self):
        def insert_softplus(model):  # Erf is read now (GPT-NeoX's GELU); Softplus is in no kvx family
            sigmoid = node_named(model, "/model/layers.1/mlp/act_fn/Sigmoid")
            softplus = helper.make_node("Softplus", [sigmoid.input[0]], ["softplus_out"],
                                        name="/model/layers.1/mlp/act_fn/Softplus")
            sigmoid.input[0] = "softplus_out"
            model.graph.node.insert(list(model.graph.node).index(sigmoid), softplus)
        self._refused(self._variant("softplus", insert_softplus),
                      "unsupported operator 'Softplus' at node '/model/layers.1/mlp/act_fn/Softplus' (op type Softplus)")

    def test_unsupported_contrib_op(self):
        def fuse_silu(model):
            sigmoid = node_named(model, "/model/layers.2/mlp/act_fn/Sigmoid")
            sigmoid.op_type, sigmoid.domain = "QuickGelu", "com.microsoft"
            sigmoid.name = "/model/layers.2/mlp/QuickGelu"
            model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
        self._refused(self._variant("contrib", fuse_silu), "unsupported operator 'QuickGelu'",
                      "'/model/layers.2/mlp/QuickGelu'", "op type QuickGelu", "com.microsoft")

    def test_broken_rope_is_refused(self):
        """x[..., :hd/2:2] where rotate_half takes x[..., :hd/2]: no rotation of pairs (and no valid graph)."""
        def slice_every_other(model):
            first_half = node_named(model, "/model/layers.0/self_attn/Slice")  # x[..., :hd/2] of Q
            steps = helper.make_tensor("interleave_step", onnx.TensorProto.INT64, [1], [2])
            model.graph.initializer.append(steps)
            first_half.input.append("interleave_step")
        # Its shapes no longer agree (the rotated half has hd/4 elements): refused where they stop agreeing.
        self._refused(self._variant("interleaved", slice_every_other),
                      "cannot map node '/model/layers.0/self_attn/Mul_1' (op Mul)", "whose shape kvx can compute")

    def test_attention_scale_is_one_per_model(self):
        """Another q.k scale is config.json's attention_scale (Gemma 2/3), but one for the whole model."""
        def unit_scale(model):
            replace_float_constant(model, "/model/layers.3/self_attn/", 1 / np.sqrt(8), 1.0)
        self._refused(self._variant("unit_scale", unit_scale), "layer 3's attention scale (1.0)",
                      "kvx has one per model")

    def test_missing_file(self):
        self._refused(self.tmp / "no_such.onnx", "no_such.onnx: no such file")

    def test_not_an_onnx_file(self):
        self._refused(STORIES_CHECKPOINT, "stories260K.bin: not an ONNX model")

    def test_truncated_onnx_file(self):
        truncated = self.tmp / "truncated.onnx"
        truncated.write_bytes(self.stories.read_bytes()[:600_000])
        self._refused(truncated, "truncated.onnx: not an ONNX model, or a truncated one")

    def test_non_finite_weights_are_refused(self):
        def poison_q_proj(model):
            tensor = next(t for t in model.graph.initializer
                          if t.name == "model.layers.0.self_attn.q_proj.weight_in_out")
            value = numpy_helper.to_array(tensor).copy()
            value[1, 2:5] = np.nan
            value[7, 7] = -np.inf
            tensor.CopyFrom(numpy_helper.from_array(value, tensor.name))
        path = self._variant("nan_q_proj", poison_q_proj)
        self._refused(path, "weight layers.0.wq (ONNX initializer 'model.layers.0.self_attn.q_proj.weight_in_out') "
                            "holds 4 non-finite values (NaN or infinity)", "--no-check-weights")
        out_dir = self.tmp / "nan_kept"
        run_ok(self, "kvx_tools.convert", path, "-o", out_dir, "--no-check-weights")
        self.assertTrue((out_dir / "model.safetensors").is_file())

    def test_non_finite_constants_the_model_does_not_store_are_allowed(self):
        """An attention mask's -inf is no weight: only what the model directory stores is checked."""
        def add_mask_constant(model):
            model.graph.initializer.append(numpy_helper.from_array(np.array([-np.inf], np.float32), "mask_min"))
        out_dir = self.tmp / "mask_constant"
        run_ok(self, "kvx_tools.convert", self._variant("mask_constant", add_mask_constant), "-o", out_dir,
               "--check-weights")
        self.assertTrue((out_dir / "config.json").is_file())

    def test_norm_eps_must_be_finite(self):
        def infinite_eps(model):
            for layer in range(5):
                replace_float_constant(model, f"/model/layers.{layer}/input_layernorm/", 1e-5, np.inf)
                replace_float_constant(model, f"/model/layers.{layer}/post_attention_layernorm/", 1e-5, np.inf)
            replace_float_constant(model, "/model/norm/", 1e-5, np.inf)
        self._refused(self._variant("infinite_eps", infinite_eps), "RMSNorm eps is inf")

    def test_tokenizer_size_must_match_vocab(self):
        data = STORIES_TOKENIZER.read_bytes()
        # Drop the last entry: walk the entries (score, length, bytes) to find where it starts.
        offset, starts = 4, []
        while offset < len(data):
            starts.append(offset)
            offset += 8 + int(np.frombuffer(data, "<i4", 1, offset + 4)[0])
        short = self.tmp / "tok511.bin"
        short.write_bytes(data[:starts[-1]])
        self._refused(self.stories, "has 511 tokens but the model's vocab_size is 512",
                      extra=["--tokenizer", short])

    def test_missing_tokenizer_file(self):
        self._refused(self.stories, "no_tok.bin", extra=["--tokenizer", self.tmp / "no_tok.bin"])

    def test_max_seq_len_is_required(self):
        no_metadata = self._variant("no_metadata", lambda model: model.ClearField("metadata_props"))
        self._refused(no_metadata, "max_position_embeddings", "--max-seq-len")
        out_dir = self.tmp / "given_length"
        run_ok(self, "kvx_tools.convert", no_metadata, "-o", out_dir, "--max-seq-len", 100)
        self.assertIn('"max_seq_len": 100', (out_dir / "config.json").read_text())

    def test_max_seq_len_from_hf_config_beside_the_graph(self):
        """torch's exporters write no max_position_embeddings; optimum's output folder (and a graph saved beside
        the HF model) has HF's config.json, which gives it. A kvx model directory's config.json is not HF's."""
        folder = self.tmp / "beside_hf_config"
        folder.mkdir()
        graph = folder / "model.onnx"
        graph.write_bytes(self._variant("no_metadata_hf", lambda model: model.ClearField("metadata_props")).read_bytes())
        for config, outcome in (({"max_position_embeddings": 48}, '"max_seq_len": 48'),
                                ({"n_positions": 40}, '"max_seq_len": 40'),
                                ({"format": "kvx-model", "max_position_embeddings": 48}, None),
                                ({"max_position_embeddings": "long"}, "is not an integer"),
                                ({"max_position_embeddings": 0}, "must be positive")):
            with self.subTest(config):
                (folder / "config.json").write_text(json.dumps(config))
                out_dir = self.tmp / "hf_length"
                if outcome and outcome.startswith('"'):
                    run_ok(self, "kvx_tools.convert", graph, "-o", out_dir)
                    self.assertIn(outcome, (out_dir / "config.json").read_text())
                else:
                    self._refused(graph, outcome or "--max-seq-len")
        (folder / "config.json").write_text("{not json")
        self._refused(graph, "config.json: not JSON")

    def test_token_id_metadata_must_be_ids_in_the_vocabulary(self):
        for key, value, fragment in (("bos_token_id", "one", "is not a token id"),
                                     ("bos_token_id", "[1, 2]", "must be one token id"),
                                     ("eos_token_id", "[2, 512]", "token id 512, outside the vocabulary of 512"),
                                     ("eos_token_id", "[]", "is not a token id"),
                                     ("eos_token_id", "true", "is not a token id")):
            with self.subTest(key=key, value=value):
                path = self._variant(f"{key}_{len(value)}", lambda model: helper.set_model_props(
                    model, {"max_position_embeddings": "512", key: value}))
                self._refused(path, f"metadata '{key}'", fragment)

    def test_x_rounding_metadata_must_be_a_rounding_kvx_knows(self):
        path = self._variant("x_rounding", lambda model: helper.set_model_props(
            model, {"max_position_embeddings": "512", "x_rounding": "mlas"}))
        self._refused(path, "metadata 'x_rounding'", "kvx knows onnxruntime, ggml")

    def test_sizes_must_be_in_the_range_kvx_reads(self):
        """A config.json value beyond 2^30 would give a directory that looks valid and fails to load."""
        for props, fragment in (({"max_position_embeddings": "20000000"}, "max_seq_len would be 20000000; "
                                                                         "kvx reads 1 to 16777216"),
                                ({"max_position_embeddings": "512", "sliding_window": str(2 ** 31)},
                                 f"sliding_window.window would be {2 ** 31}; kvx reads 1 to 1073741824")):
            with self.subTest(props=props):
                path = self._variant(f"range_{len(str(props))}", lambda model: helper.set_model_props(model, props))
                self._refused(path, fragment)

    def test_norm_eps_must_be_one_kvx_reads(self):
        def zero_eps(model):
            for layer in range(5):
                replace_float_constant(model, f"/model/layers.{layer}/input_layernorm/", 1e-5, 0.0)
                replace_float_constant(model, f"/model/layers.{layer}/post_attention_layernorm/", 1e-5, 0.0)
            replace_float_constant(model, "/model/norm/", 1e-5, 0.0)
        self._refused(self._variant("zero_eps", zero_eps), "norm eps would be 0.0", "above 0 and below 1")

    def test_sliding_window_metadata_must_be_carried_whole(self):
        full, sliding = '"full_attention"', '"sliding_attention"'
        for props, fragment in (({"sliding_window": "0"}, "must be a positive token count"),
                                ({"sliding_window": "seven"}, "is not JSON"),
                                ({"sliding_window": "7", "layer_types": f"[{sliding}]"}, "each of the 5 layers"),
                                ({"sliding_window": "7", "layer_types": f"[{full}, {full}, {full}, {full}, "
                                                                        '"local"]'}, "each of the 5 layers"),
                                ({"layer_types": f"[{sliding}, {full}, {full}, {full}, {full}]"}, "gives no window")):
            with self.subTest(props=props):
                path = self._variant(f"window_{len(str(props))}", lambda model: helper.set_model_props(
                    model, {"max_position_embeddings": "512", **props}))
                self._refused(path, fragment)

    def test_fused_attention_window_against_genai_config(self):
        """The windows fused attention ops declare per layer, reconciled with genai_config.json: agreeing or
        absent there, the graph's; absent from the graph, genai_config.json's with one warning; different,
        refused."""
        model = helper.make_model(helper.make_graph([], "g", [], []))
        warnings = []

        def window(graph_windows, genai_window=None, genai_layers=()):
            genai = GenaiConfig(None, None, None, genai_window, list(genai_layers)) if genai_window else None
            return sliding_window_of(model, 2, None, graph_windows, genai, warnings.append)

        self.assertIsNone(window([None, None]))
        self.assertEqual(window([16, None]), {"window": 16, "layers": [0]})
        self.assertEqual(window([16, None], 16, [0]), {"window": 16, "layers": [0]})
        self.assertEqual(warnings, [])
        self.assertEqual(window([None, None], 4), {"window": 4, "layers": [0, 1]})  # [] = every layer
        self.assertEqual(len(warnings), 1)
        self.assertIn("genai_config.json gives a sliding window of 4 tokens on layers [0, 1]", warnings[0])
        with self.assertRaisesRegex(ConvertError, "window of 16 on layers \\[0\\].*genai_config.json says 4"):
            window([16, None], 4, [0])
        with self.assertRaisesRegex(ConvertError, "several windows \\[8, 16\\]"):
            window([16, 8])
        with self.assertRaisesRegex(ConvertError, "does not fit a model of 2 layers"):
            window([None, None], 4, [2])


if __name__ == "__main__":
    unittest.main()
