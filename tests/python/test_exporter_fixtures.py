#!/usr/bin/env python3
"""ONNX Runtime reproduces HF's logits on every graph of testdata/exporters/ (tiny random-weight decoders
as torch.onnx.export, optimum and ONNX Runtime GenAI's builder write them; regenerate.py there made them).
Per fixture: the prompt's logits against hf_logits.npy, and where the graph has a KV cache, a prefill of
all but the last token plus one cached decode step against HF's last row. Pairs listed in
known_disagreements.json must still disagree, so that a fixed exporter is noticed and the list updated."""

import json
import re
import tempfile
import unittest
from pathlib import Path

import numpy as np

from kvx_test_support import REPO
import exporter_feeds
import int4_reference

FIXTURES = REPO / "testdata" / "exporters"
# Tolerances relative to max |HF logit|. fp32: summation order only (measured <= 1e-6 of it here). fp16:
# every weight and activation rounded to 11 significant bits (relative step 9.8e-4) through two layers
# and the LM head; the builder's fp16 graphs measure about 1.9e-3, so 5e-3 leaves room without hiding a
# wrong operator (those are off by 0.3 to 1.5 of max |logit|).
RELATIVE_TOLERANCE = {"fp32": 1e-4, "fp16": 5e-3}
# int4 graphs are not compared with HF, whose fp32 weights they round by up to half a step of 4 bits (0.2 to 0.4 of
# max|HF| on these tiny random models): the graph told accuracy_level 0 must compute what the builder's fp32 graph
# of the same model (checked against HF above) computes with the int4 graph's dequantized weights
# (int4_reference.py), to the fp32 tolerance.


def fixture_folders():
    """Every testdata/exporters/<family>/<exporter>/ holding a fixture.json, sorted."""
    return sorted(path.parent for path in FIXTURES.glob("*/*/fixture.json"))


class ExporterFixtures(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.known = json.loads((FIXTURES / "known_disagreements.json").read_text())
        cls.summary = json.loads((FIXTURES / "summary.json").read_text())

    def test_every_made_pair_is_committed(self):
        made = {key for key, entry in self.summary.items() if entry["made"]}
        present = {f"{f.parent.name}/{f.name}" for f in fixture_folders()}
        self.assertEqual(present, made)
        self.assertTrue(set(self.known) <= made, set(self.known) - made)

    def test_ort_reproduces_hf(self):
        for folder in fixture_folders():
            key = f"{folder.parent.name}/{folder.name}"
            with self.subTest(key):
                self.check(key, folder, self.known.get(key, {}))

    def check(self, key, folder, known):
        """known: this pair's known_disagreements.json entry ({} when it should agree): prompt_err /
        decode_err (measured errors, each present only where that run disagrees) and decode_fails (the
        text of ORT's failure on the cached step)."""
        meta = json.loads((folder / "fixture.json").read_text())
        prompt = json.loads((folder / "prompt.json").read_text())
        if meta["precision"] == "int4":
            return self.check_int4(key, folder, prompt)
        hf = np.load(folder / "hf_logits.npy")  # [prompt_len, vocab] fp32
        tolerance = RELATIVE_TOLERANCE[meta["precision"]] * float(np.abs(hf).max())
        logits, decode_last = exporter_feeds.prompt_and_decode(folder, prompt)  # logits [prompt_len, vocab]
        self.assert_error(key, "prompt", float(np.abs(logits - hf).max()), tolerance, "prompt_err" in known)
        if decode_last is None:
            return
        if "decode_fails" in known:
            with self.assertRaisesRegex(Exception, re.escape(known["decode_fails"][:80])):
                decode_last()
            return
        self.assert_error(key, "decode", float(np.abs(decode_last() - hf[-1]).max()), tolerance, "decode_err" in known)

    def check_int4(self, key, folder, prompt):
        fp32 = folder.parent / "genai-fp32"
        self.assertTrue((fp32 / "fixture.json").exists(), f"{key}: no genai-fp32 graph of the same model to compare with")
        with tempfile.TemporaryDirectory() as tmp:
            reference_folder = Path(tmp)
            int4_reference.write_reference(folder, fp32, reference_folder)
            reference, reference_decode = exporter_feeds.prompt_and_decode(reference_folder, prompt)
            exact, exact_decode = exporter_feeds.prompt_and_decode(reference_folder / "exact", prompt)
            tolerance = RELATIVE_TOLERANCE["fp32"] * float(np.abs(reference).max())
            self.assertLessEqual(float(np.abs(exact - reference).max()), tolerance, f"{key} prompt vs its fp32 graph")
            self.assertLessEqual(float(np.abs(exact_decode() - reference_decode()).max()), tolerance,
                                 f"{key} decode vs its fp32 graph")

    def assert_error(self, key, run, error, tolerance, disagrees):
        if disagrees:
            self.assertGreater(error, tolerance, f"{key} {run}: {error:.3g} now within {tolerance:.3g}; "
                               "drop it from known_disagreements.json and README.md")
        else:
            self.assertLessEqual(error, tolerance, f"{key} {run}: max |ORT - HF| {error:.3g}")


if __name__ == "__main__":
    unittest.main()
