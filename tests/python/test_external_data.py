#!/usr/bin/env python3
"""ONNX external data: the same weights whether stored inline or in MODEL.onnx.data, and clear
failures when the data file is missing or cut short."""

import shutil
import tempfile
import unittest
from pathlib import Path

from kvx_test_support import STORIES_TOKENIZER, assert_one_line_failure, convert, export_stories, run_ok


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


if __name__ == "__main__":
    unittest.main()
