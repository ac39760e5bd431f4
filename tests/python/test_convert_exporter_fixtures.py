#!/usr/bin/env python3
"""The converter on the graphs real exporters write (testdata/exporters/: torch.onnx.export TorchScript and
dynamo, optimum, ONNX Runtime GenAI's builder), against ONNX Runtime on the same file.

For each family kvx runs, and each exporter that made a fixture: convert, then `kvx logits` of the prompt
with all but the last token as one prefill and the last as a cached decode step (--n-prefill), compared
with ORT's logits of the whole prompt from an empty cache (prefill rows) and, where the graph has a cache,
ORT's prefill of all but the last token plus one cached step (last row). A pair whose export disagrees with
HF (known_disagreements.json) is compared all the same, against ORT, and said so: kvx converts what the
graph computes, except where the converter knowingly departs from the graph (AGAINST_HF), which is then
compared with HF's logits. For the families the engine does not run, the converter must stop with one line
naming what kvx lacks.

Needs the kvx binary: KVX_BIN (set by tests/python/CMakeLists.txt); skipped (77) without it.
"""

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

from kvx_test_support import REPO, assert_one_line_failure, convert
import exporter_feeds

FIXTURES = REPO / "testdata" / "exporters"
KVX = os.environ.get("KVX_BIN")
CONVERTED = ("llama3-untied", "llama-tied", "mistral", "qwen2", "qwen3", "gemma", "gemma3", "gpt2", "gpt-neox")
EXPORTERS = ("torchscript", "torchscript-past", "dynamo", "optimum", "genai-fp32", "genai-fp16")
# Relative to max|ORT logit|. fp32: summation order only. fp16: ORT computes in fp16 (11 significant bits,
# step 9.8e-4) where kvx computes in fp32 from the same fp16 weights; ORT's fp16 graphs measure 1.4e-3 to
# 1.9e-3 against HF, so 2e-3 of kvx against ORT itself.
RELATIVE_TOLERANCE = {"fp32": 1e-4, "fp16": 2e-3}
# Against HF (AGAINST_HF): HF computes from fp32 weights, kvx from the graph's; for fp16 graphs that is the
# weights' rounding, 5e-3 as test_exporter_fixtures.py allows ORT's fp16 graphs against HF (measured 1.7e-3).
HF_RELATIVE_TOLERANCE = {"fp32": 1e-4, "fp16": 5e-3}
# Families kvx does not run: the one line the converter must stop with (a fragment of it), per exporter
# family of graphs ("torch": torchscript, torchscript-past, dynamo, optimum; "genai": the builder's).
REFUSED = {
    # Phi-3's torch graphs convert (CONVERTED_PAIRS), the builder's are refused (REFUSED_GENAI), LongRoPE's
    # too (the torch graphs' cos/sin carry its attention factor, folded into the attention scale).
    "phi3": "miswired lm_head",
    "phi3-longrope": None,
    # Gemma 2 converts but for the builder's fp16 graph (CONVERTED_PAIRS, REFUSED_GENAI).
    "gemma2": None,
}
# The builder's graphs where the line differs from the torch exporters': Phi-3's lm_head reads layer 0's MLP
# norm (testdata/exporters/README.md), LongRoPE picks its tables with an If, Gemma's MLP is ONNX Gelu.
# Gemma 2's fp16 graph casts the scaled embedding to fp32 before MultiHeadAttention without soft-cap or window
# (known_disagreements.json): not mapped.
REFUSED_GENAI = {"phi3": "miswired lm_head", "phi3-longrope": "'If'", "gemma2": "cast to another precision"}
# The builder writes Mistral's window into genai_config.json but not into the graph; kvx takes the window
# (blocks/sliding_window.py, with a warning), so it computes what HF does, not what ORT does on that graph.
AGAINST_HF = {"mistral/genai-fp32": "genai_config.json gives a sliding window of 4",
              "mistral/genai-fp16": "genai_config.json gives a sliding window of 4"}


# Pairs of a family otherwise refused that convert: Phi-3 from the torch exporters (the builder's Phi-3 has a
# miswired lm_head, REFUSED_GENAI).
CONVERTED_PAIRS = ("phi3/torchscript", "phi3/torchscript-past", "phi3/dynamo", "phi3/optimum",
                   "phi3-longrope/torchscript", "phi3-longrope/torchscript-past", "phi3-longrope/optimum",
                   "gemma2/torchscript", "gemma2/torchscript-past", "gemma2/dynamo", "gemma2/optimum",
                   "gemma2/genai-fp32")


def folders(families):
    for family in families:
        for exporter in EXPORTERS:
            folder = FIXTURES / family / exporter
            if (folder / "fixture.json").exists():
                yield f"{family}/{exporter}", folder


def context_length(folder):
    """HF's max_position_embeddings, which the torch exporters do not write into the graph."""
    config = json.loads((folder / "fixture.json").read_text())["hf_config"]
    return config.get("max_position_embeddings") or config["n_positions"]


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

    def test_converted_families_match_ort(self):
        for key, folder in [*folders(CONVERTED), *((k, FIXTURES / k) for k in CONVERTED_PAIRS)]:
            with self.subTest(key):
                self.check(key, folder)

    def test_gqa_window_edge_matches_ort(self):
        """GroupQueryAttention's local_window_size counts keys as kvx's sliding_window does (W keys, the
        query's own included; ORT changed its convention once): mistral's builder graph given the window its
        genai_config.json names, kvx against ORT on the 12-token prompt, longer than the window."""
        source = FIXTURES / "mistral" / "genai-fp32"
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

    def check(self, key, folder):
        started = time.monotonic()
        meta = json.loads((folder / "fixture.json").read_text())
        prompt = json.loads((folder / "prompt.json").read_text())
        out = self.tmp / key.replace("/", "-").replace(" ", "-")
        result = convert(folder / "model.onnx", out, "--max-seq-len", context_length(folder))
        self.assertEqual(result.returncode, 0, result.stderr)
        if key in AGAINST_HF:
            self.assertIn(AGAINST_HF[key], result.stderr)
        npy = out / "logits.npy"
        run = subprocess.run([KVX, "logits", "-m", str(out), "-t", "1", "--tokens", ",".join(map(str, prompt)),
                              "--n-prefill", str(len(prompt) - 1), "-o", str(npy)],
                             capture_output=True, text=True, check=False)
        self.assertEqual(run.returncode, 0, run.stderr)
        kvx = np.load(npy)  # [prompt_len, vocab]: rows 0 .. n-2 from the prefill, the last from a decode step
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

    def test_other_families_are_refused(self):
        for key, folder in [(k, f) for k, f in folders(REFUSED) if k not in CONVERTED_PAIRS]:
            with self.subTest(key):
                family, exporter = key.split("/")
                if exporter.startswith("genai") and (family in REFUSED_GENAI or key in REFUSED_GENAI):
                    expected = REFUSED_GENAI.get(key) or REFUSED_GENAI[family]
                else:
                    expected = REFUSED[family]
                result = convert(folder / "model.onnx", self.tmp / key.replace("/", "-"), "--max-seq-len",
                                 context_length(folder))
                line = assert_one_line_failure(self, result, expected)
                print(f"{key}: {line}", file=sys.stderr)


if __name__ == "__main__":
    if not KVX:
        print("KVX_BIN not set: skipped", file=sys.stderr)
        sys.exit(77)
    unittest.main()
