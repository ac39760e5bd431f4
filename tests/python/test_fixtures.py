#!/usr/bin/env python3
"""The fixture generator and the ONNX Runtime reference script, as other tests use them."""

import json
import tempfile
import unittest
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from kvx_tools.fixtures.make_fixtures import (F16_FIXTURES, F16_TOLERANCE, FIXTURE_NAMES, FP32_TOLERANCE, N_DECODE,
                                              N_PREFILL, ONNX_FIXTURES, RANDOM_FIXTURES, RANDOM_GPT2_FIXTURES,
                                              SHARED_FIXTURES, SHARED_TOLERANCE)
from kvx_tools.fixtures.ort_reference import reference_logits

from kvx_test_support import run_ok


class Fixtures(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.out = Path(cls._tmp.name)
        cls.names = ["stories260K", "rand_hd80_gqa1_l1_v257_ext", *F16_FIXTURES, *SHARED_FIXTURES]
        run_ok(unittest.TestCase(), "kvx_tools.fixtures.make_fixtures", "--out", cls.out, "--only", *cls.names)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_layout(self):
        for name in self.names:
            with self.subTest(name):
                d = self.out / name
                meta = json.loads((d / "meta.json").read_text())
                self.assertEqual((meta["n_prefill"], meta["n_decode"]), (N_PREFILL, N_DECODE))
                self.assertEqual(meta["config"], json.loads((d / "model" / "config.json").read_text()))
                tokens, logits = np.load(d / "tokens.npy"), np.load(d / "ref_logits.npy")
                vocab = meta["config"]["vocab_size"]
                self.assertEqual((tokens.dtype, tokens.shape), (np.int64, (N_PREFILL + N_DECODE,)))
                self.assertEqual((logits.dtype, logits.shape), (np.float32, (N_PREFILL + N_DECODE, vocab)))
                self.assertTrue(((tokens >= 0) & (tokens < vocab)).all())
                self.assertTrue(np.isfinite(logits).all())
                self.assertTrue((d / "model" / "model.safetensors").is_file())
        self.assertEqual(np.load(self.out / "stories260K" / "tokens.npy")[0], 1)  # BOS
        self.assertTrue((self.out / "stories260K" / "model" / "tokenizer.bin").is_file())
        self.assertTrue((self.out / "rand_hd80_gqa1_l1_v257_ext" / "model.onnx.data").is_file())

    def test_tolerances_and_weight_dtypes(self):
        """fp32 fixtures are held to 1e-4; where fp16 enters (weights rounded by --dtype f16, or a graph ONNX
        Runtime computes in fp16) the fixture says how far, and its model directory holds f16 matrices."""
        expected = {"stories260K": (FP32_TOLERANCE, "f32"), "rand_hd80_gqa1_l1_v257_ext": (FP32_TOLERANCE, "f32"),
                    **{name: (F16_TOLERANCE, "f16") for name in F16_FIXTURES},
                    **{name: (SHARED_TOLERANCE, "f16") for name in SHARED_FIXTURES}}
        for name, (tolerance, dtype) in expected.items():
            with self.subTest(name):
                meta = json.loads((self.out / name / "meta.json").read_text())
                self.assertEqual((meta["tolerance"], meta["config"]["weights"]["dtype"]), (tolerance, dtype))
        self.assertEqual((FP32_TOLERANCE, F16_TOLERANCE, SHARED_TOLERANCE), (1e-4, 3e-3, 2e-3))

    def test_f16_fixture_is_its_source_converted(self):
        for name, source in F16_FIXTURES.items():
            with self.subTest(name):
                meta = json.loads((self.out / name / "meta.json").read_text())
                self.assertEqual(meta["recipe"], {**RANDOM_FIXTURES[source], "converted_as": "f16"})
                # ONNX Runtime's logits come from the fp32 graph: only the model directory is f16.
                graph = onnx.load(str(self.out / name / "model.onnx")).graph
                self.assertEqual({numpy_helper.to_array(t).dtype for t in graph.initializer
                                  if numpy_helper.to_array(t).ndim == 2}, {np.dtype(np.float32)})

    def test_reference_cli_reproduces_ref_logits(self):
        d = self.out / "stories260K"
        tokens = np.load(d / "tokens.npy")[:40]
        out = self.out / "cli_logits.npy"
        run_ok(self, "kvx_tools.fixtures.ort_reference", d / "model.onnx", "--tokens", ",".join(map(str, tokens)),
               "--n-prefill", N_PREFILL, "-o", out)
        np.testing.assert_array_equal(np.load(out), np.load(d / "ref_logits.npy")[:40])

    def test_prefill_split_does_not_change_logits(self):
        d = self.out / "rand_hd80_gqa1_l1_v257_ext"
        tokens = np.load(d / "tokens.npy")
        np.testing.assert_allclose(reference_logits(d / "model.onnx", tokens, len(tokens)),
                                   np.load(d / "ref_logits.npy"), atol=1e-5, rtol=0)

    def test_the_set_covers_the_awkward_cases(self):
        stories = dict(head_dim=8, heads=8, kv_heads=4, vocab=512, layers=5)
        recipes = [stories, *RANDOM_FIXTURES.values()]
        self.assertEqual(FIXTURE_NAMES, ["stories260K", *RANDOM_FIXTURES, *RANDOM_GPT2_FIXTURES, *ONNX_FIXTURES,
                                         *F16_FIXTURES, *SHARED_FIXTURES])
        self.assertLessEqual({8, 24, 80}, {r["head_dim"] for r in recipes})
        self.assertLessEqual({1, 2, 4, 8}, {r["heads"] // r["kv_heads"] for r in recipes})
        self.assertGreaterEqual(sum(r["vocab"] % 8 != 0 for r in recipes), 3)
        self.assertLessEqual({1, 12}, {r["layers"] for r in recipes})
        self.assertTrue(any(r.get("untied") for r in recipes))
        self.assertTrue(any(r.get("external_data") for r in recipes))

    def test_the_gpt2_set_covers_the_awkward_cases(self):
        recipes = RANDOM_GPT2_FIXTURES.values()
        self.assertLessEqual({8, 24}, {r["head_dim"] for r in recipes})
        self.assertTrue(any(r["dim"] != r["heads"] * r["head_dim"] for r in recipes))
        self.assertTrue(all(r["vocab"] % 8 for r in recipes))
        # A position table exactly as long as the tokens (its last row used) and one row longer.
        self.assertEqual({r["max_seq_len"] - N_PREFILL - N_DECODE for r in recipes}, {0, 1})
        for flag in ("untied", "external_data", "no_position_ids"):
            self.assertTrue(any(r.get(flag) for r in recipes), flag)
        self.assertTrue(all(path.is_file() for path in ONNX_FIXTURES.values()))


if __name__ == "__main__":
    unittest.main()
