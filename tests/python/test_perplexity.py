#!/usr/bin/env python3
"""kvx perplexity on the built-in stories260K model (no download) over the shipped text
(testdata/text/harbour_town.txt): its figure against the same method written again in Python
(kvx_tools.bench.llamacpp_perplexity.chunk_perplexity, the one the llama.cpp side uses) over kvx's own logits
(kvx logits, chunk by chunk), which checks the C++ chunking, BOS handling (this tokenizer adds BOS) and NLL;
and its one-line errors. The comparison with llama.cpp is in test_quantized_gguf.py."""

import os
import re
import subprocess
import tempfile
import unittest
from pathlib import Path

import numpy as np

from kvx_tools.bench.llamacpp_perplexity import chunk_perplexity

from kvx_test_support import REPO

KVX = os.environ.get("KVX_BIN", "kvx")
TEXT = REPO / "testdata" / "text" / "harbour_town.txt"
CONTEXT = 64
RESULT = re.compile(r"^perplexity (\S+) over (\d+) scored tokens \((\d+) chunks of (\d+); the text has (\d+) tokens\)$")


def _kvx(*args):
    return subprocess.run([KVX, *map(str, args)], capture_output=True, text=True, check=False)


class Perplexity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)
        cls.text = cls.tmp / "text.txt"
        cls.text.write_text(TEXT.read_text()[:1500])  # a few hundred tokens: 5 or more chunks of 64

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_figure_against_the_method_over_kvx_logits(self):
        result = _kvx("perplexity", "-f", self.text, "-c", CONTEXT, "-t", 1)
        self.assertEqual(result.returncode, 0, result.stderr)
        ppl, scored, chunks, context, n_tokens = RESULT.match(result.stdout.strip()).groups()
        tokens = [int(t) for t in _kvx("tokenize", "-f", self.text).stdout.strip().split(",")]
        self.assertEqual(int(n_tokens), len(tokens))
        self.assertEqual((int(chunks), int(context)), (len(tokens) // CONTEXT, CONTEXT))
        self.assertGreaterEqual(int(chunks), 2)

        def kvx_chunk_logits(chunk):
            out = self.tmp / "chunk.npy"
            run = _kvx("logits", "--tokens", ",".join(map(str, chunk)), "-o", out, "-t", 1)
            self.assertEqual(run.returncode, 0, run.stderr)
            return np.load(out)

        want, want_scored, want_chunks = chunk_perplexity(kvx_chunk_logits, tokens, CONTEXT, bos=tokens[0])
        self.assertEqual((int(scored), int(chunks)), (want_scored, want_chunks))
        self.assertAlmostEqual(float(ppl) / want, 1.0, places=6)

    def test_errors_are_one_line(self):
        short = self.tmp / "short.txt"
        short.write_text("Once upon a time.")
        for args, fragment in (((self.tmp / "missing.txt",), "cannot read"),
                               ((short,), "needs at least"),
                               ((self.text, "-c", 2), "at least 4 tokens")):
            with self.subTest(fragment):
                result = _kvx("perplexity", "-f", *args)
                self.assertNotEqual(result.returncode, 0)
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
                self.assertIn(fragment, result.stderr)
                self.assertEqual(result.stdout, "")


if __name__ == "__main__":
    unittest.main()
