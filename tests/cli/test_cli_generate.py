"""kvx generate end to end: the reference C implementation's greedy text, streamed, with its stats; and an
fp16 model's greedy text against ONNX Runtime's."""
import os
import re
import struct
import tempfile
import unittest

import numpy as np
import onnx
from onnx import numpy_helper

from kvx_tools.fixtures.ort_reference import greedy_tokens

from kvx_cli import FIXTURES, SHARED_DIR, SOURCE_DIR, run

GOLDEN = os.path.join(SHARED_DIR, "models", "stories260K", "golden_greedy_n256_runc.txt")
TOKENIZER = os.path.join(SOURCE_DIR, "testdata", "models", "stories260K", "tok512.bin")
BOS, EOS = 1, 2


class GenerateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(GOLDEN, encoding="utf-8") as f:
            cls.golden = f.read()

    def generate(self, *extra):
        code, out, err = run("generate", "-p", "", "-n", "256", "--temp", "0", *extra)
        self.assertEqual(code, 0, err)
        return out, err

    def test_greedy_matches_run_c(self):
        out, _ = self.generate()
        self.assertEqual(out, self.golden)

    def test_greedy_is_the_same_for_every_kernel_set_thread_count_and_block_size(self):
        for extra in (["-t", "1"], ["-t", "2"], ["--simd", "reference"], ["--simd", "portable"],
                      ["--block-size", "1"], ["--block-size", "256"]):
            with self.subTest(extra=extra):
                self.assertEqual(self.generate(*extra)[0], self.golden)

    def test_longer_generation_continues_the_golden_text(self):
        code, out, err = run("generate", "-p", "", "-n", "400", "--temp", "0")
        self.assertEqual(code, 0, err)
        self.assertTrue(out.startswith(self.golden[:-1]), out[:300])
        self.assertGreater(len(out), len(self.golden))

    def test_stats_on_stderr(self):
        _, err = self.generate()
        self.assertRegex(err, r"prompt 1 tokens, prefill [0-9.]+ ms \([0-9.]+ tokens/s\)")
        self.assertRegex(err, r"generated 256 tokens, 255 decode steps in [0-9.]+ ms \([0-9.]+ tokens/s\)")
        # 256 positions in blocks of 16: 16 blocks of 32 for the 512-token context.
        self.assertRegex(err, r"KV cache 16 of 32 blocks of 16 tokens, [0-9]+ of [0-9]+ bytes")

    def test_verbose_logs_every_cache_operation(self):
        # 5 prompt tokens, 20 new: the prefill, 19 single-token appends (the last token needs no pass), a free.
        code, ids, _ = run("tokenize", "-p", "Once upon a time")
        n_prompt = len(ids.split(","))
        code, _, err = run("generate", "-p", "Once upon a time", "-n", "20", "--temp", "0", "--verbose",
                           "--block-size", "4", "-c", "64")
        self.assertEqual(code, 0, err)
        events = re.findall(r"kvx: cache: (\w+) seq 0 (.*); blocks (\d+) in use \((\d+) shared\), (\d+) cached, "
                            r"(\d+) free; (\d+) slots wasted", err)
        self.assertEqual([e[0] for e in events], ["append"] * 20 + ["free"])
        length = 0
        for kind, detail, in_use, shared, cached, free, wasted in events[:-1]:
            start, end = map(int, re.match(r"positions \[(\d+), (\d+)\), 0 copies", detail).groups())
            self.assertEqual(start, length)
            length = end
            blocks = -(-length // 4)  # the blocks a sequence of this length fills, by arithmetic
            self.assertEqual((int(in_use), int(shared), int(wasted)), (blocks, 0, blocks * 4 - length))
            self.assertEqual(int(in_use) + int(cached) + int(free), 16)
        self.assertEqual(length, n_prompt + 19)
        self.assertEqual(events[-1][1], f"({length} tokens)")
        self.assertEqual(int(events[-1][2]), 0)

    def test_prompt_is_echoed_and_continued(self):
        code, out, err = run("generate", "-p", "Once upon a time", "-n", "20", "--temp", "0")
        self.assertEqual(code, 0, err)
        self.assertTrue(out.startswith("Once upon a time"), out)
        code, ids, _ = run("tokenize", "-p", "Once upon a time")
        self.assertEqual(code, 0)
        self.assertIn(f"prompt {len(ids.split(','))} tokens", err)

    def test_prompt_from_file(self):
        path = os.path.join(os.getcwd(), "prompt.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("Lily went")
        code, out, err = run("generate", "-f", path, "-n", "10", "--temp", "0")
        self.assertEqual(code, 0, err)
        self.assertTrue(out.startswith("Lily went"), out)

    def test_sampling_is_reproducible_with_a_seed(self):
        args = ("generate", "-p", "Once", "-n", "60", "--temp", "0.9", "--top-k", "20", "--top-p", "0.9")
        a = run(*args, "--seed", "5")
        b = run(*args, "--seed", "5")
        c = run(*args, "--seed", "6")
        self.assertEqual(a[0], 0, a[2])
        self.assertEqual(a[1], b[1])
        self.assertNotEqual(a[1], c[1])
        self.assertIn("seed 5", a[2])


def llama2c_pieces(path):
    pieces = []
    with open(path, "rb") as f:
        f.read(4)  # max_token_length
        while header := f.read(8):
            _, length = struct.unpack("<fi", header)
            pieces.append(f.read(length))
    return pieces


def run_c_text(tokens, pieces):
    """The text llama2.c's run.c prints for tokens (BOS first): a piece loses its leading space after BOS,
    <0xNN> pieces are that byte, unprintable control bytes are dropped; then a newline."""
    out = b""
    for prev, token in zip(tokens, tokens[1:]):
        piece = pieces[token]
        if prev == BOS and piece.startswith(b" "):
            piece = piece[1:]
        if re.fullmatch(rb"<0x[0-9A-F]{2}>", piece):
            byte = int(piece[3:5], 16)
            piece = bytes([byte]) if byte >= 0x20 and byte != 0x7F or chr(byte) in "\t\n\r\v\f" else b""
        out += piece
    return out.decode("utf-8", "replace") + "\n"


class GenerateF16Test(unittest.TestCase):
    """stories260K converted by `kvx convert --dtype f16` generates greedily what ONNX Runtime generates
    from the same graph with every weight matrix rounded to fp16 (kept in fp32): the same weights, fp32
    arithmetic on both sides, so the greedy choices must agree token for token."""

    N_NEW = 200

    def test_greedy_f16_matches_onnxruntime_with_the_rounded_weights(self):
        source = os.path.join(FIXTURES, "stories260K", "model.onnx")
        with tempfile.TemporaryDirectory() as tmp:
            model_dir = os.path.join(tmp, "model")
            code, _, err = run("convert", source, "-o", model_dir, "--dtype", "f16", "--tokenizer", TOKENIZER)
            self.assertEqual(code, 0, err)
            code, out, err = run("generate", "-m", model_dir, "-p", "", "-n", str(self.N_NEW), "--temp", "0")
            self.assertEqual(code, 0, err)

            graph = onnx.load(source)
            for k, tensor in enumerate(graph.graph.initializer):
                array = numpy_helper.to_array(tensor)
                if array.dtype == np.float32 and array.ndim == 2:
                    rounded = array.astype(np.float16).astype(np.float32)
                    graph.graph.initializer[k].CopyFrom(numpy_helper.from_array(rounded, tensor.name))
            rounded_path = os.path.join(tmp, "rounded.onnx")
            onnx.save(graph, rounded_path)
            tokens = greedy_tokens(rounded_path, [BOS], 1 + self.N_NEW)
        stops = [i for i, t in enumerate(tokens) if i > 0 and t in (BOS, EOS)]
        tokens = tokens[:stops[0]] if stops else tokens  # kvx stops at either, unprinted, as run.c at BOS
        self.assertEqual(out, run_c_text(tokens, llama2c_pieces(TOKENIZER)))


class GenerateWindowTest(unittest.TestCase):
    """A sliding-window model (W = 7 on 2 of 3 layers) generates greedily what ONNX Runtime generates over
    11 windows, and the stats show the windowed layers' blocks staying at the window's."""

    def test_greedy_window_matches_onnxruntime_with_bounded_windowed_blocks(self):
        fixture = os.path.join(FIXTURES, "rand_window7_l3_hd12_v211")
        code, out, err = run("generate", "-m", os.path.join(fixture, "model"), "--tokens", "1,2,3", "-n", "77",
                             "--temp", "0", "--block-size", "4")
        self.assertEqual(code, 0, err)
        expected = greedy_tokens(os.path.join(fixture, "model.onnx"), [1, 2, 3], 3 + 77)
        self.assertEqual([int(t) for t in out.split(",")], expected)
        # 79 tokens appended (the last one needs no pass): 20 blocks of 4 in the full group, and in the
        # windowed one the 2 blocks holding positions 72..78, the last query's window.
        self.assertIn("full layers (1): 20 of", err)
        self.assertIn("windowed layers (2): 2 of", err)
        self.assertIn("(bounded by W = 7)", err)


if __name__ == "__main__":
    unittest.main()
