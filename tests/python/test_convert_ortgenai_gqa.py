#!/usr/bin/env python3
"""What the GroupQueryAttention mapper (exporters/ortgenai/gqa.py) reads into config.json and what it refuses, on variants of the builder's
llama-tied graph (testdata/exporters/llama-tied/genai-fp32) with one attribute or input changed: each must
stop the converter with one line naming the node and what kvx lacks. The unchanged graph converting and
matching ONNX Runtime is test_convert_exporter_fixtures.py's part."""

import json
import shutil
import tempfile
import unittest
from pathlib import Path

import onnx
from onnx import helper

from kvx_test_support import REPO, assert_one_line_failure, convert

SOURCE = REPO / "testdata" / "exporters" / "llama-tied" / "genai-fp32"


class BuilderGqaRefusals(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)
        cls.model = onnx.load(SOURCE / "model.onnx")

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def converted(self, name, edit):
        """config.json of the variant, which must convert."""
        folder = self.variant(name, edit)
        result = convert(folder / "model.onnx", folder / "out")
        self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads((folder / "out" / "config.json").read_text())

    def refused(self, name, edit, *fragments):
        folder = self.variant(name, edit)
        result = convert(folder / "model.onnx", folder / "out")
        assert_one_line_failure(self, result, "GroupQueryAttention", *fragments)

    def variant(self, name, edit):
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        for node in model.graph.node:
            if node.op_type == "GroupQueryAttention":
                edit(node)
        folder = self.tmp / name
        folder.mkdir()
        onnx.save(model, folder / "model.onnx")
        shutil.copy(SOURCE / "genai_config.json", folder)
        return folder

    @staticmethod
    def set_attribute(name, value):
        def edit(node):
            for attribute in list(node.attribute):
                if attribute.name == name:
                    node.attribute.remove(attribute)
            node.attribute.append(helper.make_attribute(name, value))
        return edit

    def test_scale_other_than_inverse_sqrt_head_dim_is_attention_scale(self):
        config = self.converted("scale", self.set_attribute("scale", 0.125))
        self.assertEqual(config["attention_scale"], 0.125)

    def test_softcap_is_attn_logit_softcap(self):
        config = self.converted("softcap", self.set_attribute("softcap", 30.0))
        self.assertEqual(config["attn_logit_softcap"], 30.0)
        self.assertNotIn("attention_scale", config)  # 0.25 = 1/sqrt(16), kvx's default

    def test_interleaved_rotary(self):
        self.refused("interleaved", self.set_attribute("rotary_interleaved", 1), "rotary_interleaved=1")

    def test_no_rotary(self):
        self.refused("no_rotary", self.set_attribute("do_rotary", 0), "do_rotary=1")

    def test_quantized_cache(self):
        self.refused("kv_bits", self.set_attribute("kv_cache_bit_width", 8), "unquantized KV cache")

    def test_inputs_kvx_has_no_place_for(self):
        def head_sink(node):
            while len(node.input) < 12:
                node.input.append("")
            node.input[11] = "cos_cache"  # any tensor: the input's presence is what is refused
        self.refused("head_sink", head_sink, "input head_sink")

    def test_heads_that_do_not_divide_the_packed_width(self):
        self.refused("heads", self.set_attribute("kv_num_heads", 1), "packed projection", "found 128")


if __name__ == "__main__":
    unittest.main()
