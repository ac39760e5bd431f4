#!/usr/bin/env python3
"""ONNX external data: the same weights whether stored inline or in MODEL.onnx.data, and clear
failures when the data file is missing or cut short, or an entry that says where the data lies is malformed."""

import shutil
import tempfile
import unittest
from pathlib import Path

import onnx
from onnx import TensorProto

from kvx_test_support import STORIES_TOKENIZER, assert_one_line_failure, convert, export_stories, run_ok

EMBEDDING = "model.embed_tokens.weight"  # an initializer of the stories export, stored in the .data file


def set_entry(tensor, key, value):
    """Sets (or adds) the external-data entry key of tensor to value."""
    for entry in tensor.external_data:
        if entry.key == key:
            entry.value = value
            return
    tensor.external_data.add(key=key, value=value)


class ExternalData(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)
        # Same file name in both folders, so config.json's source entry matches too.
        cls.inline = export_stories(cls.tmp / "inline" / "stories260K.onnx")
        cls.external = export_stories(cls.tmp / "external" / "stories260K.onnx", "--external-data")

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def _broken_copy(self, name, mutate_data):
        """A copy of the external-data export whose .data file mutate_data(path) has damaged."""
        folder = self.tmp / name
        shutil.copytree(self.external.parent, folder)
        mutate_data(folder / "stories260K.onnx.data")
        return folder / "stories260K.onnx"

    def test_outputs_are_byte_identical(self):
        for kind, onnx_path in (("inline", self.inline), ("external", self.external)):
            run_ok(self, "kvx_tools.convert", onnx_path, "-o", self.tmp / f"{kind}_model",
                   "--tokenizer", STORIES_TOKENIZER)
        for file in ("model.safetensors", "config.json", "tokenizer.bin"):
            self.assertEqual((self.tmp / "inline_model" / file).read_bytes(),
                             (self.tmp / "external_model" / file).read_bytes(), file)

    def test_missing_data_file(self):
        onnx_path = self._broken_copy("missing", lambda data: data.unlink())
        result = convert(onnx_path, self.tmp / "out_missing")
        assert_one_line_failure(self, result, "stories260K.onnx.data", "not found")

    def test_truncated_data_file(self):
        def truncate(data):
            with open(data, "r+b") as f:
                f.truncate(data.stat().st_size - 100)
        onnx_path = self._broken_copy("truncated", truncate)
        result = convert(onnx_path, self.tmp / "out_truncated")
        assert_one_line_failure(self, result, "stories260K.onnx.data", "truncated")
        self.assertFalse((self.tmp / "out_truncated").exists())

    def _edited_copy(self, name, edit):
        """A copy of the external-data export whose model file edit(embedding tensor proto) has changed;
        the proto is edited without loading the weights, as a hostile file would hold it."""
        folder = self.tmp / name
        shutil.copytree(self.external.parent, folder)
        path = folder / "stories260K.onnx"
        model = onnx.load(str(path), load_external_data=False)
        edit(next(t for t in model.graph.initializer if t.name == EMBEDDING))
        onnx.save(model, str(path))
        return path

    def test_malformed_entries_are_one_line_errors_naming_the_tensor(self):
        data_size = (self.external.parent / "stories260K.onnx.data").stat().st_size
        cases = {
            "nul": (lambda t: set_entry(t, "location", "stories260K.onnx.data\0.txt"), "NUL"),
            "absolute": (lambda t: set_entry(t, "location", "/etc/passwd"), "outside the model's folder"),
            "parent": (lambda t: set_entry(t, "location", "../external/stories260K.onnx.data"),
                       "outside the model's folder"),
            "empty": (lambda t: set_entry(t, "location", ""), "no location"),
            "no_location": (lambda t: [t.external_data.remove(e) for e in list(t.external_data)
                                       if e.key == "location"], "no location"),
            "negative_offset": (lambda t: set_entry(t, "offset", "-4096"), "offset '-4096'"),
            "text_offset": (lambda t: set_entry(t, "offset", "four"), "offset 'four'"),
            "offset_past_end": (lambda t: set_entry(t, "offset", str(data_size)), "truncated"),
            "huge_offset": (lambda t: set_entry(t, "offset", str(2 ** 70)), "truncated"),
            "negative_length": (lambda t: set_entry(t, "length", "-1"), "length '-1'"),
            "huge_length": (lambda t: set_entry(t, "length", str(2 ** 64 + 1)), "bytes of external data"),
            "twice": (lambda t: t.external_data.add(key="offset", value="0"), "'offset' twice"),
            "negative_dim": (lambda t: t.dims.__setitem__(0, -512), "negative dimension"),
            "huge_dims": (lambda t: t.dims.extend([2 ** 62, 2 ** 62]), f"its shape needs {512 * 64 * 2 ** 124 * 4}"),
            "unknown_type": (lambda t: setattr(t, "data_type", 99), "unknown data type 99"),
            "undefined_type": (lambda t: setattr(t, "data_type", TensorProto.UNDEFINED), "unknown data type 0"),
        }
        for name, (edit, fragment) in cases.items():
            with self.subTest(name):
                out = self.tmp / f"out_{name}"
                result = convert(self._edited_copy(name, edit), out)
                assert_one_line_failure(self, result, f"'{EMBEDDING}'", fragment)
                self.assertFalse(out.exists())

    def test_unknown_keys_are_ignored_quietly(self):
        """As onnx does (the format defines no others), but without its warning on stderr."""
        out = self.tmp / "out_unknown_key"
        result = convert(self._edited_copy("unknown_key", lambda t: set_entry(t, "sha", "x")), out)
        self.assertEqual((result.returncode, result.stderr), (0, ""))


if __name__ == "__main__":
    unittest.main()
