#!/usr/bin/env python3
"""The pieces that let the converter hold one weight at a time (docs/model-format.md, "Large models: memory"):

  - write/safetensors_file.py writes, block by block and in any order, the very bytes safetensors' save_file
    writes for the same tensors (kvx's loader reads either);
  - graph/lazy_tensor.py's LazyTensor gives what numpy gives for every view the converter takes of a weight
    (transposes, reshapes, slices, casts), whole and a block of rows at a time, and tells two spellings of one
    tensor apart from others without reading them.
"""

import tempfile
import unittest
from pathlib import Path

import numpy as np
from onnx import TensorProto
from safetensors.numpy import load_file, save_file

from kvx_tools.convert.graph.lazy_tensor import FileRange, LazyTensor, ProtoData, row_blocks, same_values
from kvx_tools.convert.write.safetensors_file import SafetensorsWriter
from onnx import numpy_helper


class SafetensorsFile(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def assert_same_bytes(self, tensors, rows_per_block=3, reverse=False):
        """SafetensorsWriter, fed blocks of rows_per_block rows (tensors and blocks in reverse with reverse), against
        save_file."""
        expected, mine = self.tmp / "expected.safetensors", self.tmp / "mine.safetensors"
        save_file(tensors, str(expected))
        out = SafetensorsWriter(mine, {name: (t.dtype, t.shape) for name, t in tensors.items()})
        names = sorted(tensors, reverse=reverse)
        for name in names:
            blocks = list(row_blocks(tensors[name], rows=rows_per_block))
            for start, block in (reversed(blocks) if reverse else blocks):
                out.write_rows(name, start, block)
        out.close()
        self.assertEqual(mine.read_bytes(), expected.read_bytes())
        for name, value in load_file(str(mine)).items():
            np.testing.assert_array_equal(value, tensors[name])

    def test_bytes_are_save_files(self):
        rng = np.random.default_rng(0)
        tensors = {
            "tok_embeddings": rng.standard_normal((37, 12)).astype(np.float16),
            "layers.0.wq": rng.standard_normal((12, 12)).astype(np.float32),
            "layers.0.wq.q4": rng.integers(0, 255, (12, 16), dtype=np.uint8),
            "layers.0.wq.q8": rng.integers(-128, 127, (5, 32), dtype=np.int8),
            "layers.0.wq.zero_points": rng.integers(0, 15, (12, 1), dtype=np.uint8),
            "rope_inv_freq": rng.standard_normal(6).astype(np.float32),
            "a_scalar": np.asarray(3.5, np.float32),
            "empty": np.zeros((0, 4), np.float32),
            "naïve\nname": np.arange(7, dtype=np.float32),
        }
        self.assert_same_bytes(tensors)
        self.assert_same_bytes(tensors, rows_per_block=100, reverse=True)
        for dtype in (np.float64, np.int64, np.int32, np.uint16, np.int16, np.bool_):
            with self.subTest(str(np.dtype(dtype))):
                self.assert_same_bytes({"x": np.ones((3, 2), dtype), "y": np.zeros(5, np.float16)})
        self.assert_same_bytes({})

    def test_a_tensor_not_written_whole_is_an_error(self):
        out = SafetensorsWriter(self.tmp / "short.safetensors", {"a": (np.float32, (4, 2))})
        out.write_rows("a", 0, np.zeros((3, 2), np.float32))
        with self.assertRaisesRegex(ValueError, "a not written whole"):
            out.close()


class LazyTensorViews(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.values = np.random.default_rng(1).standard_normal((37, 12, 5)).astype(np.float16)
        path = Path(cls._tmp.name) / "tensor.data"
        path.write_bytes(b"header" + cls.values.tobytes())
        cls.lazy = LazyTensor(FileRange(path, 6, cls.values.nbytes, TensorProto.FLOAT16, cls.values.shape, np.float16))

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def assert_like(self, lazy, expected):
        """lazy holds expected: its shape and dtype without reading, its values whole and block by block."""
        self.assertEqual((lazy.shape, lazy.dtype), (expected.shape, expected.dtype))
        np.testing.assert_array_equal(np.asarray(lazy), expected)
        if expected.ndim:
            for rows in (1, 4, 1000):
                blocks = [block for _, block in row_blocks(lazy, rows=rows)]
                np.testing.assert_array_equal(np.concatenate(blocks), expected)

    def test_views_read_as_numpys(self):
        t, a = self.lazy, self.values
        m, n = t.reshape(37, 60), a.reshape(37, 60)
        cases = {
            "whole": (t, a), "rows": (t[3:9], a[3:9]), "row and column": (t[3:9, 2], a[3:9, 2]),
            "steps": (t[:, 1:4, ::2], a[:, 1:4, ::2]), "negative index": (t[-5], a[-5]), "ellipsis": (t[..., 1], a[..., 1]),
            "transpose": (t.transpose(1, 0, 2)[2:4], a.transpose(1, 0, 2)[2:4]), "T": (m.T, n.T),
            "-1": (t.reshape(37, -1)[5:10].T.T, n[5:10]), "swapaxes": (t.swapaxes(0, 2), a.swapaxes(0, 2)),
            "cast": (m.T.astype(np.float32), n.T.astype(np.float32)),
            "scale": ((m.T * np.float16(2)).astype(np.float16), (n.T * np.float16(2)).astype(np.float16)),
            "rotate-half permutation": (m.astype(np.float32).reshape(37, 3, 10, 2).transpose(0, 1, 3, 2).reshape(37, 60),
                                        n.astype(np.float32).reshape(37, 3, 10, 2).transpose(0, 1, 3, 2).reshape(37, 60)),
        }
        for name, (lazy, expected) in cases.items():
            with self.subTest(name):
                self.assertIsInstance(lazy, LazyTensor)
                self.assert_like(lazy, expected)
        np.testing.assert_array_equal(m[np.array([1, 2])], n[[1, 2]])  # advanced indexing: numpy's, read
        with self.assertRaises(IndexError):
            t[37]
        with self.assertRaises(ValueError):
            t.reshape(7, -1)

    def test_one_tensor_spelled_twice_is_known_without_reading(self):
        m = self.lazy.reshape(37, 60)
        self.assertEqual(m.T.T.identity(), m.identity())  # a tied classifier: Transpose of the embedding, back
        self.assertEqual(m.T[:, 3:7].T.identity(), m[3:7].identity())  # columns of the transpose are rows
        self.assertEqual(m.astype(np.float32).astype(np.float16).identity(), m.identity())  # exact round trip
        self.assertNotEqual(m.astype(np.float32).identity(), m.identity())
        self.assertNotEqual(m[1:].identity(), m[:-1].identity())
        self.assertTrue(same_values(m.T.T, m))
        self.assertTrue(same_values(m, self.values.reshape(37, 60)))
        changed = self.values.reshape(37, 60).copy()
        changed[36, 59] += 1
        self.assertFalse(same_values(m, changed))

    def test_inline_tensor_reads_its_proto(self):
        proto = numpy_helper.from_array(self.values, "inline")
        lazy = LazyTensor(ProtoData(proto, self.values.shape, self.values.dtype))
        self.assert_like(lazy.reshape(37, 60)[4:9].T, self.values.reshape(37, 60)[4:9].T)


if __name__ == "__main__":
    unittest.main()
