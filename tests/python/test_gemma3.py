#!/usr/bin/env python3
"""Gemma 3 270M (gemma-3-270m-q4_k_m.gguf from PyPI, kvx_tools.export.fetch_gemma3), a second real model:
exported (kvx_tools.export.export_gguf_llama), converted, then kvx's logits against ONNX Runtime's on the
exported graph (a 16-token prefill and 8 cached decode steps, within 1e-4 x max|ort|), and, where
llama-cpp-python is importable (tools/bench/requirements.txt; CI does not build it), kvx's tokenizer and
greedy text against llama.cpp's on the same GGUF file.

The model is fetched at test time into $KVX_MODEL_CACHE (else <repo>/.cache/models) and the converted model
kept there, remade when the exporter's or converter's sources change. Without network the test exits 77
(ctest: skipped) with the reason, unless KVX_REQUIRE_GEMMA3=1, where that is a failure."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import unittest
from pathlib import Path

import numpy as np

from kvx_tools.convert.kvx_convert import convert
from kvx_tools.export.export_gguf_llama import export_gguf, tokenizer_file
from kvx_tools.export.fetch_gemma3 import MODEL_FOLDER, FetchError, fetch_gemma3
from kvx_tools.export.fetch_smollm2 import default_cache
from kvx_tools.fixtures.ort_reference import open_session, reference_logits

SKIP_EXIT_CODE = 77
KVX_TOOLS = Path(__file__).resolve().parents[2] / "tools" / "kvx_tools"
KVX = os.environ.get("KVX_BIN", "kvx")
N_PREFILL, N_DECODE = 16, 8
N_GREEDY = 32
PROMPT = "The capital of France is Paris. The capital of Italy is"
CORPUS = ["Hello world", "The capital of France is Paris.", "  indented\tcode();\n", "naïve café, 3.14159 €",
          "日本語のテキスト", "emoji 🙂 twice 🙂🙂", "numbers 1234567890 and 2024-11-24", "a\n\nb\n\n\nc"]


def _stamp():
    digest = hashlib.sha256()
    for folder in ("export", "convert"):
        for source in sorted((KVX_TOOLS / folder).glob("*.py")):
            digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:16]


def _fixture(gguf_path):
    """The exported graph and the converted model under gemma3-270m/fixture/, remade when stale."""
    fixture = gguf_path.parent / "fixture"
    stamp_file = fixture / "stamp"
    if stamp_file.is_file() and stamp_file.read_text() == _stamp():
        return fixture
    shutil.rmtree(fixture, ignore_errors=True)
    partial = gguf_path.parent / "fixture.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    config = export_gguf(gguf_path, partial / "model.onnx", external_data=True)
    convert(partial / "model.onnx", partial / "model", tokenizer_path=partial / tokenizer_file(config))
    (partial / "stamp").write_text(_stamp())
    os.replace(partial, fixture)
    return fixture


def _kvx(*args):
    return subprocess.run([KVX, *args], capture_output=True, text=True, check=True).stdout


def _llama(gguf_path):
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    return Llama(model_path=str(gguf_path), n_ctx=512, n_threads=2, verbose=False, logits_all=False)


class Gemma3(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gguf = fetch_gemma3(default_cache())
        cls.fixture = _fixture(cls.gguf)
        cls.model = cls.fixture / "model"
        cls.config = json.loads((cls.model / "config.json").read_text())

    def test_config(self):
        c = self.config
        self.assertEqual((c["architecture"], c["n_layers"], c["dim"], c["hidden_dim"], c["n_heads"], c["n_kv_heads"],
                          c["head_dim"], c["vocab_size"]), ("gemma", 18, 640, 2048, 4, 1, 256, 262144))
        windowed = [i for i in range(18) if i % 6 != 5]
        self.assertEqual(c["sliding_window"], {"window": 512, "layers": windowed})
        self.assertEqual(c["rope_local_layers"], windowed)
        self.assertTrue(c["qk_norm"])
        self.assertEqual(c["norm_placement"], "sandwich")
        self.assertAlmostEqual(c["embedding_scale"], 640 ** 0.5, places=5)
        self.assertEqual((c["bos_token_id"], c["eos_token_ids"]), (2, [1]))
        # tokenizer.ggml.add_space_prefix = false: no SentencePiece space before the text.
        self.assertEqual(c["tokenizer"], {"type": "llama2c", "file": "tokenizer.bin", "add_dummy_prefix": False})

    def test_logits_against_onnxruntime(self):
        onnx_path = self.fixture / "model.onnx"
        tokens = [int(t) for t in _kvx("tokenize", "-m", str(self.model), "-p", PROMPT).strip().split(",")]
        tokens = (tokens * 4)[:N_PREFILL]
        session = open_session(onnx_path)
        tokens += [0] * N_DECODE
        for i in range(N_DECODE):  # ORT's greedy continuation, so the decode steps see likely tokens
            tokens[N_PREFILL + i] = int(reference_logits(onnx_path, np.array(tokens[:N_PREFILL + i], dtype=np.int64),
                                                         N_PREFILL + i, session)[-1].argmax())
        ref = reference_logits(onnx_path, np.array(tokens, dtype=np.int64), N_PREFILL, session)
        out = self.fixture / "kvx_logits.npy"
        _kvx("logits", "-m", str(self.model), "--tokens", ",".join(map(str, tokens)), "--n-prefill", str(N_PREFILL),
             "-o", str(out))
        got = np.load(out)
        err, scale = float(np.abs(got - ref).max()), float(np.abs(ref).max())
        print(f"gemma3: kvx vs ORT max |diff| {err:.3g}, max |ort| {scale:.3g}, relative {err / scale:.3g}")
        self.assertLessEqual(err, 1e-4 * scale)
        np.testing.assert_array_equal(got.argmax(-1), ref.argmax(-1))

    def test_tokenizer_against_llama_cpp(self):
        llama = _llama(self.gguf)
        if llama is None:
            self.skipTest("llama-cpp-python is not installed (tools/bench/requirements.txt)")
        for text in CORPUS:
            with self.subTest(text):
                want = llama.tokenize(text.encode(), add_bos=True, special=False)
                got = [int(t) for t in _kvx("tokenize", "-m", str(self.model), "-p", text).strip().split(",")]
                self.assertEqual(got, want)

    def test_greedy_text_against_llama_cpp(self):
        llama = _llama(self.gguf)
        if llama is None:
            self.skipTest("llama-cpp-python is not installed (tools/bench/requirements.txt)")
        prompt = llama.tokenize(PROMPT.encode(), add_bos=True, special=False)
        want = []
        for token in llama.generate(prompt, top_k=1, temp=0.0, repeat_penalty=1.0):
            want.append(token)
            if len(want) == N_GREEDY:
                break
        out = _kvx("generate", "-m", str(self.model), "--tokens", ",".join(map(str, prompt)), "--print-ids",
                   "-n", str(N_GREEDY), "--temp", "0", "--ignore-eos")
        got = [int(t) for t in out.replace(",", " ").split()][-N_GREEDY:]
        self.assertEqual(got, want)

if __name__ == "__main__":
    try:
        fetch_gemma3(default_cache())
    except (OSError, FetchError) as e:
        if os.environ.get("KVX_REQUIRE_GEMMA3") == "1":
            sys.exit(f"test_gemma3: cannot fetch Gemma 3 270M: {e}")
        print(f"SKIP: Gemma 3 270M could not be fetched ({e}); set KVX_REQUIRE_GEMMA3=1 to make this a failure")
        sys.exit(SKIP_EXIT_CODE)
    unittest.main()
