#!/usr/bin/env python3
"""The exporters on files whose counts and sizes lie: a llama2.c header or GGUF metadata that would divide by
zero, loop for hours, allocate gigabytes or read a FIFO for ever. Each is one line on stderr and exit 1,
quickly, with nothing allocated by the lying numbers before they were checked against the file's length."""

import os
import resource
import struct
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import gguf
import numpy as np
from gguf import GGUFValueType

from kvx_test_support import STORIES_CHECKPOINT
from test_export_gguf import CONFIG, tokens_and_types, write_gguf

from kvx_tools.export.export_random_llama import random_llama_weights

TIMEOUT = 60  # seconds; the cases that used to hang ran for many minutes, or for ever
ADDRESS_SPACE = 1536 << 20  # for the exporter process: far above what it needs, far below a 3 GB file


def limit_address_space():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, resource.RLIM_INFINITY))


def export(module, source, out, preexec_fn=None):
    """Runs an exporter; one BLAS thread, so that its address space does not grow with the machine's cores."""
    return subprocess.run([sys.executable, "-m", f"kvx_tools.export.{module}", str(source), "-o", str(out)],
                          capture_output=True, text=True, timeout=TIMEOUT, preexec_fn=preexec_fn,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})


def rewritten_gguf(source, path, overrides=None, drop=()):
    """A copy of the GGUF file source with metadata overrides {key: (value, type, item type or None)} and the
    keys in drop left out."""
    overrides = overrides or {}
    reader = gguf.GGUFReader(str(source))
    writer = gguf.GGUFWriter(str(path), "llama")  # writes general.architecture itself
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in drop or key in overrides:
            continue
        item_type = field.types[-1] if field.types[0] == GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), field.types[0], item_type)
    for key, (value, value_type, item_type) in overrides.items():
        if key == "general.architecture":
            writer.kv_data[0][key] = gguf.GGUFValue(value=value, type=value_type, sub_type=item_type)
        else:
            writer.add_key_value(key, value, value_type, item_type)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, np.array(tensor.data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def raw_gguf(path, n_tensors, n_keys, body, size=None):
    """A GGUF v3 file written byte by byte; size: the file's length, the rest sparse zeros."""
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_keys) + body)
        if size is not None:
            f.truncate(size)
    return path


def gguf_string(text):
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


class HostileExporterInputs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)
        config = dict(CONFIG, vocab_size=len(tokens_and_types()[0]))
        cls.gguf = cls.tmp / "tiny.gguf"
        write_gguf(cls.gguf, random_llama_weights(config, tied=True, seed=5), config, quantized=set())

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def assert_one_line_error(self, result, *fragments):
        self.assertEqual(result.returncode, 1, result.stderr)
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertTrue(lines[0].startswith("kvx export: "), lines[0])
        for fragment in fragments:
            self.assertIn(fragment, lines[0])

    def test_the_tiny_gguf_exports(self):
        """The base of the GGUF cases is good: each failure below is the edit's."""
        result = export("export_gguf_llama", rewritten_gguf(self.gguf, self.tmp / "copy.gguf"),
                        self.tmp / "copy" / "model.onnx")
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_gguf_metadata_that_lies(self):
        u32, string = GGUFValueType.UINT32, GGUFValueType.STRING
        cases = {
            "zero_heads": ({"llama.attention.head_count": (0, u32, None)}, "head_count' is 0"),
            "zero_kv_heads": ({"llama.attention.head_count_kv": (0, u32, None)}, "head_count_kv' is 0"),
            "trillion_layers": ({"llama.block_count": (10 ** 12, GGUFValueType.UINT64, None)},
                                "block_count 1000000000000 needs"),
            "text_dim": ({"llama.embedding_length": ("sixty-four", string, None)}, "embedding_length' is"),
            "nan_eps": ({"llama.attention.layer_norm_rms_epsilon": (float("nan"), GGUFValueType.FLOAT32, None)},
                        "layer_norm_rms_epsilon' is nan"),
            "numbers_for_tokens": ({"tokenizer.ggml.tokens": (list(range(268)), GGUFValueType.ARRAY,
                                                              GGUFValueType.INT32)}, "not a list of str"),
            "merge_of_unknown_pieces": ({"tokenizer.ggml.merges": (["q z"], GGUFValueType.ARRAY, string)},
                                        "tokenizer cannot be built"),
            "wrong_hidden": ({"llama.feed_forward_length": (80, u32, None)}, "the metadata implies"),
        }
        for name, (overrides, fragment) in cases.items():
            with self.subTest(name):
                path = rewritten_gguf(self.gguf, self.tmp / f"{name}.gguf", overrides)
                self.assert_one_line_error(export("export_gguf_llama", path, self.tmp / name / "m.onnx"), fragment)

    def test_gguf_counts_that_lie(self):
        one_key = gguf_string("general.architecture") + struct.pack("<I", GGUFValueType.STRING) + gguf_string("llama")
        array_of_50m = gguf_string("x") + struct.pack("<IIQ", GGUFValueType.ARRAY, GGUFValueType.UINT8, 50_000_000)
        truncated = self.tmp / "truncated.gguf"
        truncated.write_bytes(self.gguf.read_bytes()[:-100])
        cases = {
            # 50 MB of one-byte values: the reader used to walk them one by one, for about ten minutes.
            "array_of_50m": (raw_gguf(self.tmp / "array.gguf", 0, 1, array_of_50m, size=50_000_100),
                             "more than 4000000 values"),
            "trillion_keys": (raw_gguf(self.tmp / "keys.gguf", 0, 10 ** 12, one_key), "claims 1000000000000 keys"),
            "keys_past_the_end": (raw_gguf(self.tmp / "few.gguf", 0, 1000, one_key), "more than its remaining"),
            "tensor_past_the_end": (truncated, "truncated: tensor 'blk.1.ffn_down.weight'"),
        }
        for name, (path, fragment) in cases.items():
            with self.subTest(name):
                self.assert_one_line_error(export("export_gguf_llama", path, self.tmp / name / "m.onnx"), fragment)

    def test_llama2c_header_that_lies_allocates_nothing(self):
        """stories260K's header on 3 GB of (sparse) zeros: refused by the size check, not read into memory
        first (the process may not have the address space to)."""
        path = self.tmp / "big.bin"
        with open(path, "wb") as f:
            f.write(STORIES_CHECKPOINT.read_bytes()[:28])
            f.truncate(3 << 30)
        result = export("export_llama2c", path, self.tmp / "big.onnx", preexec_fn=limit_address_space)
        self.assert_one_line_error(result, "bytes after the header, the header", "implies")

    def test_fifos_are_refused_not_read(self):
        fifo = self.tmp / "fifo"
        os.mkfifo(fifo)
        for module in ("export_llama2c", "export_gguf_llama"):
            with self.subTest(module):
                self.assert_one_line_error(export(module, fifo, self.tmp / "fifo.onnx"), "not a regular file")


if __name__ == "__main__":
    unittest.main()
