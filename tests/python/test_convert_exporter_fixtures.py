#!/usr/bin/env python3
"""The converter on every graph of testdata/exporters/ (tiny random HF decoders of 22 families as
torch.onnx.export writes them, TorchScript and dynamo, eager and HF's default sdpa attention, with and without
a cache, dynamo's optimizer off and opset 23; optimum; ONNX Runtime GenAI's builder fp32 / fp16 / int4), against
ONNX Runtime on the same file.

For each fixture: convert (in this process: the command line's one-line errors are tested elsewhere, and ~300
interpreter starts would double the run), then `kvx logits` of the prompt with all but the last token as one prefill and the last
as a cached decode step (--n-prefill), compared with ORT's logits of the whole prompt from an empty cache (the
prefill rows) and, where the graph has a cache, ORT's prefill of all but the last token plus one cached step (the
last row). A pair whose export disagrees with HF (known_disagreements.json) is compared all the same, against ORT,
and said so: kvx converts what the graph computes, except where the converter knowingly departs from the graph
(AGAINST_HF), which is then compared with HF's logits. A pair kvx cannot convert must stop with one line naming
what is missing (REFUSED). Every pair's outcome is printed, one line each: the matrix of
docs/model-format.md.

KVX_FIXTURE_FAMILIES (comma-separated) limits the run to those families (ctest runs one family per test, so that
its workers share them out). Needs the kvx binary: KVX_BIN (set by tests/python/CMakeLists.txt); skipped (77)
without it.
"""

import contextlib
import fnmatch
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

import numpy as np
import onnx

from kvx_test_support import REPO
import exporter_feeds
from kvx_tools.convert.errors import ConvertError
from kvx_tools.convert.pipeline import convert

FIXTURES = REPO / "testdata" / "exporters"
KVX = os.environ.get("KVX_BIN")
# Relative to max|ORT logit|. fp32: summation order only. fp16: ORT computes in fp16 (11 significant bits,
# step 9.8e-4) where kvx computes in fp32 from the same fp16 weights; ORT's fp16 graphs measure 1.4e-3 to
# 1.9e-3 against HF, so 2e-3 of kvx against ORT itself. int4 (check_int4): the same integers and scales on both
# sides, so kvx's reference kernels (dequantized fp32 weights) against ORT told accuracy_level 0 (the same
# arithmetic) to the fp32 tolerance; kvx's default kernels, which round the activations to int8 per 32 as ORT's
# accuracy_level 4 does (the builder's setting), may be off the exact result by at most INT8_ACTIVATIONS times
# ORT's own error doing so (|acc4 - acc0|), plus that tolerance: their roundings of ties and sums differ, and a
# rounding that lands one apart is carried through the layers and the cache (measured 0.6x to 1.3x).
RELATIVE_TOLERANCE = {"fp32": 1e-4, "fp16": 2e-3}
INT8_ACTIVATIONS = 1.5
# Against HF (AGAINST_HF): HF computes from fp32 weights, kvx from the graph's; for fp16 graphs that is the
# weights' rounding, 5e-3 as test_exporter_fixtures.py allows ORT's fp16 graphs against HF (measured 1.7e-3).
HF_RELATIVE_TOLERANCE = {"fp32": 1e-4, "fp16": 5e-3}
# Pairs kvx does not convert, as fnmatch patterns of "family/exporter", with a fragment of the one line the
# converter must stop with. Each is an export kvx cannot read yet or should not (a miswired graph).
REFUSED = {
    # The builder (onnxruntime-genai 0.18.0) wires Phi-3's lm_head to layer 0's MLP-norm output
    # (testdata/exporters/README.md); LongRoPE's builder graphs choose their tables with an If.
    "phi3/genai-*": "miswired lm_head",
    "phi3-longrope/genai-*": "'If'",
    # The builder's mixed-precision fp16 Gemma 2 (also without soft-cap and window: known_disagreements.json).
    "gemma2/genai-fp16": "cast to another precision",
    # The builder's Phi-2 (fp16; its fp32 and int4 graphs fail in ORT itself: not_made.json): LayerNorm, parallel
    # blocks and partial rotary in com.microsoft operators, which its walk (exporters/ortgenai/) does not read.
    "phi/genai-*": "the builder's LayerNorm decoder",
}
# The builder writes Mistral's window into genai_config.json but not into the graph; kvx takes the window
# (sliding_window.py, with a warning), so it computes what HF does, not what ORT does on that graph.
AGAINST_HF = {"mistral/genai-fp32": "genai_config.json gives a sliding window of 4",
              "mistral/genai-fp16": "genai_config.json gives a sliding window of 4"}
# The same for the int4 graph, whose HF reference (fp32 weights) is too far for its integers: ORT runs a copy of
# the graph given that window (GroupQueryAttention's local_window_size) instead.
WINDOW_ADDED = {"mistral/genai-int4": 4}


def fixture_folders():
    """(family/exporter, folder) of every fixture, sorted, limited to KVX_FIXTURE_FAMILIES when it is set."""
    wanted = [f for f in os.environ.get("KVX_FIXTURE_FAMILIES", "").split(",") if f]
    for path in sorted(FIXTURES.glob("*/*/fixture.json")):
        folder = path.parent
        if not wanted or folder.parent.name in wanted:
            yield f"{folder.parent.name}/{folder.name}", folder


def refusal_of(key):
    return next((fragment for pattern, fragment in REFUSED.items() if fnmatch.fnmatchcase(key, pattern)), None)


def context_length(folder):
    """HF's max_position_embeddings, which the torch exporters do not write into the graph; the prompt's length
    for dynamo-first-try, an export fixed to it (README's command), whose learned position table was folded to
    the rows of those positions (the converter refuses a longer context there)."""
    if folder.name == "dynamo-first-try":
        return len(json.loads((folder / "prompt.json").read_text()))
    config = json.loads((folder / "fixture.json").read_text())["hf_config"]
    return config.get("max_position_embeddings") or config.get("n_positions")


@unittest.skipIf(not KVX, "KVX_BIN not set")
class ConvertExporterFixtures(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)
        cls.known = json.loads((FIXTURES / "known_disagreements.json").read_text())

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_every_fixture(self):
        """Each fixture converts and matches ORT, or is refused with its one line (REFUSED)."""
        for key, folder in fixture_folders():
            with self.subTest(key):
                expected_refusal = refusal_of(key)
                if expected_refusal is not None:
                    self.check_refused(key, folder, expected_refusal)
                else:
                    self.check(key, folder)

    def test_gqa_window_edge_matches_ort(self):
        """GroupQueryAttention's local_window_size counts keys as kvx's sliding_window does (W keys, the
        query's own included; ORT changed its convention once): mistral's builder graph given the window its
        genai_config.json names, kvx against ORT on the 12-token prompt, longer than the window."""
        source = FIXTURES / "mistral" / "genai-fp32"
        if not (source / "fixture.json").exists() or "mistral" not in {k.split("/")[0] for k, _ in fixture_folders()}:
            self.skipTest("mistral's fixtures not in this run")
        folder = self.tmp / "mistral-windowed-genai-fp32"
        folder.mkdir()
        model = onnx.load(source / "model.onnx")
        windows = [a for n in model.graph.node if n.op_type == "GroupQueryAttention" for a in n.attribute
                   if a.name == "local_window_size"]
        self.assertEqual(len(windows), 2)
        for attribute in windows:
            attribute.i = 4
        onnx.save(model, folder / "model.onnx")
        for name in ("genai_config.json", "prompt.json", "fixture.json"):
            shutil.copy(source / name, folder / name)
        self.check("mistral/genai-fp32 with local_window_size 4", folder)

    def check_refused(self, key, folder, fragment):
        out = self.tmp / key.replace("/", "-")
        with self.assertRaises(ConvertError) as refusal:
            convert(folder / "model.onnx", out, max_seq_len=context_length(folder))
        self.assertIn(fragment, str(refusal.exception))
        self.assertEqual(len(str(refusal.exception).splitlines()), 1)
        self.assertFalse(out.exists(), "nothing may be written on failure")
        print(f"{key}: refused: {refusal.exception}", file=sys.stderr)

    def converted(self, key, folder):
        out = self.tmp / key.replace("/", "-").replace(" ", "-")
        warnings = io.StringIO()
        try:
            with contextlib.redirect_stderr(warnings):
                convert(folder / "model.onnx", out, max_seq_len=context_length(folder))
        except ConvertError as error:
            print(f"{key}: NOT CONVERTED: {error}", file=sys.stderr)
            self.fail(f"{key}: {error}")
        if key in AGAINST_HF or key in WINDOW_ADDED:
            self.assertIn("genai_config.json gives a sliding window", warnings.getvalue())
        return out

    def kvx_logits(self, out, prompt, *extra):
        """[prompt_len, vocab]: rows 0 .. n-2 from one prefill, the last from a cached decode step."""
        npy = out / "logits.npy"
        run = subprocess.run([KVX, "logits", "-m", str(out), "-t", "1", "--tokens", ",".join(map(str, prompt)),
                              "--n-prefill", str(len(prompt) - 1), "-o", str(npy), *extra],
                             capture_output=True, text=True, check=False)
        self.assertEqual(run.returncode, 0, run.stderr)
        return np.load(npy)

    def graph_copy(self, folder, name, accuracy_level=None, window=None):
        """A copy of folder's graph (and genai_config.json) with MatMulNBits' accuracy_level and
        GroupQueryAttention's local_window_size set where given."""
        copy = self.tmp / name
        copy.mkdir()
        model = onnx.load(folder / "model.onnx")  # with its external data
        for node in model.graph.node:
            for attribute in node.attribute:
                if node.op_type == "MatMulNBits" and attribute.name == "accuracy_level" and accuracy_level is not None:
                    attribute.i = accuracy_level
                if node.op_type == "GroupQueryAttention" and attribute.name == "local_window_size" and window:
                    attribute.i = window
        onnx.save(model, copy / "model.onnx")
        shutil.copy(folder / "genai_config.json", copy / "genai_config.json")
        return copy

    def check_int4(self, key, folder, prompt):
        started = time.monotonic()
        out = self.converted(key, folder)
        base = key.replace("/", "-")
        window = WINDOW_ADDED.get(key)
        exact = self.graph_copy(folder, base + "-acc0", accuracy_level=0, window=window)
        written = self.graph_copy(folder, base + "-windowed", window=window) if window else folder
        acc0 = exporter_feeds.prompt_and_decode(exact, prompt)[0].astype(np.float32)
        acc4 = exporter_feeds.prompt_and_decode(written, prompt)[0].astype(np.float32)
        scale = float(np.abs(acc0).max())
        reference = float(np.abs(self.kvx_logits(out, prompt, "--simd", "reference") - acc0).max()) / scale
        fast = float(np.abs(self.kvx_logits(out, prompt) - acc0).max()) / scale
        ort_own = float(np.abs(acc4 - acc0).max()) / scale
        print(f"{key}: --simd reference {reference:.1e} of max|ORT| vs ORT accuracy_level 0; default kernels "
              f"{fast:.1e} vs the same (ORT's accuracy_level 4: {ort_own:.1e}) [{time.monotonic() - started:.1f}s]",
              file=sys.stderr)
        self.assertLessEqual(reference, RELATIVE_TOLERANCE["fp32"], f"{key}: --simd reference")
        self.assertLessEqual(fast, INT8_ACTIVATIONS * ort_own + RELATIVE_TOLERANCE["fp32"], f"{key}: default kernels")

    def check(self, key, folder):
        started = time.monotonic()
        meta = json.loads((folder / "fixture.json").read_text())
        prompt = json.loads((folder / "prompt.json").read_text())
        if meta["precision"] == "int4":
            return self.check_int4(key, folder, prompt)
        out = self.converted(key, folder)
        kvx = self.kvx_logits(out, prompt)
        ort, decode_last = exporter_feeds.prompt_and_decode(folder, prompt)
        ort = ort.astype(np.float32)
        tolerance = RELATIVE_TOLERANCE[meta["precision"]] * float(np.abs(ort).max())
        prefill_err = float(np.abs(kvx[:-1] - ort[:-1]).max())
        last = ort[-1]
        decode_note = "ORT prompt row"
        known = self.known.get(key, {})
        if decode_last is not None and "decode_fails" not in known:
            last, decode_note = decode_last().astype(np.float32), "ORT cached step"
        decode_err = float(np.abs(kvx[-1] - last).max())
        note = " (export disagrees with HF: known_disagreements.json; compared with ORT)" \
            if "prompt_err" in known or "decode_err" in known else ""
        if "decode_fails" in known:  # the builder's fp16 graphs: prefill only; kvx's cached step vs ORT's prompt
            note += " (ORT fails the cached step of this graph: known_disagreements.json)"
        if key in AGAINST_HF:
            hf = np.load(folder / "hf_logits.npy")
            note = (f" (kvx takes the window the graph dropped; against HF instead: prefill "
                    f"{np.abs(kvx[:-1] - hf[:-1]).max() / np.abs(hf).max():.1e}, decode "
                    f"{np.abs(kvx[-1] - hf[-1]).max() / np.abs(hf).max():.1e} of max|HF|)")
            tolerance = HF_RELATIVE_TOLERANCE[meta["precision"]] * float(np.abs(hf).max())
            prefill_err, decode_err = float(np.abs(kvx[:-1] - hf[:-1]).max()), float(np.abs(kvx[-1] - hf[-1]).max())
            print(f"{key}: vs ORT prefill {np.abs(kvx[:-1] - ort[:-1]).max() / np.abs(ort).max():.1e}, decode "
                  f"{np.abs(kvx[-1] - last).max() / np.abs(ort).max():.1e}{note} [{time.monotonic() - started:.1f}s]",
                  file=sys.stderr)
        else:
            print(f"{key}: prefill {prefill_err / np.abs(ort).max():.1e}, decode {decode_err / np.abs(ort).max():.1e} "
                  f"of max|ORT| vs {decode_note}{note} [{time.monotonic() - started:.1f}s]", file=sys.stderr)
        self.assertLessEqual(prefill_err, tolerance, f"{key}: prefill")
        self.assertLessEqual(decode_err, tolerance, f"{key}: decode step")


if __name__ == "__main__":
    if not KVX:
        print("KVX_BIN not set: skipped", file=sys.stderr)
        sys.exit(77)
    unittest.main()
