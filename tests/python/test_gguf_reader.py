#!/usr/bin/env python3
"""kvx_tools.export.gguf_reader.FastGGUFReader against gguf's own GGUFReader on the same files: every field's
contents and every tensor's name, type, shape, offset and bytes (random-weight GGUFs of each kind of value,
and a big-endian one)."""

import tempfile
import unittest
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFEndian, GGUFReader, GGUFWriter

from kvx_tools.export.gguf_reader import FastGGUFReader


def write_sample(path, endianess):
    writer = GGUFWriter(str(path), "llama", endianess=endianess)
    writer.add_uint32("sample.count", 7)
    writer.add_int64("sample.offset", -3)
    writer.add_float32("sample.eps", 1e-5)
    writer.add_bool("sample.flag", True)
    writer.add_string("sample.name", "k\u00e9y")
    writer.add_array("sample.tokens", ["<s>", "", "h\u00e9llo", "\u65e5\u672c"] * 50)
    writer.add_array("sample.scores", [0.5, -1.25, 3.0])
    writer.add_array("sample.types", [1, 2, 3, 6])
    rng = np.random.default_rng(1)
    writer.add_tensor("a.weight", rng.standard_normal((3, 5)).astype(np.float32))
    writer.add_tensor("b.weight", rng.standard_normal((2, 64)).astype(np.float16))
    q = rng.integers(0, 255, size=(4, 34), dtype=np.uint8)  # 4 rows of one Q8_0 block
    writer.add_tensor("c.weight", q, raw_shape=(4, 34), raw_dtype=GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


class FastReaderMatchesGguf(unittest.TestCase):
    def test_same_fields_and_tensors(self):
        for endianess in (GGUFEndian.LITTLE, GGUFEndian.BIG):
            with self.subTest(endianess=endianess.name), tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "sample.gguf"
                write_sample(path, endianess)
                want, got = GGUFReader(str(path)), FastGGUFReader(str(path))
                self.assertEqual(list(got.fields), list(want.fields))
                for key, field in want.fields.items():
                    self.assertEqual(got.fields[key].types, field.types, key)
                    self.assertEqual(got.fields[key].contents(), field.contents(), key)
                self.assertEqual(len(got.tensors), 3)
                for t_got, t_want in zip(got.tensors, want.tensors):
                    self.assertEqual((t_got.name, t_got.tensor_type, list(t_got.shape), t_got.data_offset, t_got.n_bytes),
                                     (t_want.name, t_want.tensor_type, list(t_want.shape), t_want.data_offset, t_want.n_bytes))
                    self.assertEqual(t_got.data.dtype, t_want.data.dtype)
                    np.testing.assert_array_equal(t_got.data, t_want.data)


if __name__ == "__main__":
    unittest.main()
