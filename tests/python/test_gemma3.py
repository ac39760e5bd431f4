#!/usr/bin/env python3
"""Gemma 3 270M (gemma-3-270m-q4_k_m.gguf from PyPI, kvx_tools.export.fetch_gemma3), a second real model:
exported (kvx_tools.export.export_gguf_llama), converted, then kvx's logits against ONNX Runtime's on the
exported graph (a 16-token prefill and 8 cached decode steps, within 1e-4 x max|ort|), and, where
llama-cpp-python is importable (tools/bench/requirements.txt; CI does not build it), kvx's tokenizer and
greedy text against llama.cpp's on the same GGUF file.

Greedy text is compared twice. llama.cpp multiplies K-quant weights by activations it has itself quantized
to 8 bits (Q8_K), so its logits on the Q4_K_M file differ from exact ones by up to 2 (of 30-45); kvx
computes with the weights dequantized to fp32, as the exported graph and ORT do. So:
  - against llama.cpp on the fp32 GGUF its own quantize tool writes from the same file (the same weight
    values, without the activation rounding): 32 greedy tokens equal on every prompt, logits within
    2e-3 x max|logit| (measured 3e-4 to 6e-4: ggml tabulates GELU in fp16);
  - against llama.cpp on the Q4_K_M file itself: at each of its 32 greedy tokens (fed to kvx as they are),
    kvx's logit of llama.cpp's token is within NEAR_TIE of kvx's best. Where the two differ, the choice is
    that close (measured: 0.006 and 0.22), under what llama.cpp's own batched and one-token passes
    differ by on the same tokens (0.35), and the free-running texts part there.

The model is fetched at test time into $KVX_MODEL_CACHE (else <repo>/.cache/models) and the converted model
kept there, remade when the exporter's or converter's sources change. Without network the test exits 77
(ctest: skipped) with the reason, unless KVX_REQUIRE_GEMMA3=1, where that is a failure."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import unittest
from pathlib import Path

import numpy as np

from kvx_tools.convert.pipeline import convert
from kvx_tools.bench.llamacpp_f32 import llamacpp_f32_gguf
from kvx_tools.export.export_gguf_llama import export_gguf, tokenizer_file
from kvx_tools.export.fetch_gemma3 import MODEL_FOLDER, FetchError, fetch_gemma3
from kvx_tools.export.fetch_smollm2 import default_cache
from kvx_tools.fixtures.ort_reference import open_session, reference_logits

SKIP_EXIT_CODE = 77
REPO = Path(__file__).resolve().parents[2]
KVX_TOOLS = REPO / "tools" / "kvx_tools"
# The GGUF has no chat template; the model is converted with one in Gemma's format.
CHAT_TEMPLATE = REPO / "testdata" / "chat_templates" / "gemma.jinja"
N_CHAT = 12
CHAT_QUESTIONS = ["What is the capital of France?", "  And of Italy?  "]
KVX = os.environ.get("KVX_BIN", "kvx")
N_PREFILL, N_DECODE = 16, 8
N_GREEDY = 32
NEAR_TIE = 0.5
PROMPT = "The capital of France is Paris. The capital of Italy is"
GREEDY_PROMPTS = [PROMPT, "Once upon a time, there was a little", "def fibonacci(n):\n", "The three primary colors are"]
# Gemma's user-defined pieces (runs of spaces, tabs and newlines, HTML tags) are cut out whole.
CORPUS = ["Hello world", "The capital of France is Paris.", "  indented\tcode();\n", "naïve café, 3.14159 €",
          "日本語のテキスト", "emoji 🙂 twice 🙂🙂", "numbers 1234567890 and 2024-11-24", "a\n\nb\n\n\nc",
          "  a", "a    b", "\t\tb", " \t ", "<b>bold</b> and <table><tr><td>x</td></tr></table>",
          "                                         forty-one spaces"]
# With special tokens read (llama.cpp's special=True, kvx's encode): control pieces are cut out too.
SPECIAL_CORPUS = ["<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n", "<bos><eos><unused7>"]


def _stamp():
    digest = hashlib.sha256()
    for folder in ("export", "convert"):
        for source in sorted((KVX_TOOLS / folder).glob("*.py")):
            digest.update(source.name.encode() + b"\0" + source.read_bytes())
    digest.update(CHAT_TEMPLATE.read_bytes())
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
    convert(partial / "model.onnx", partial / "model", tokenizer_path=partial / tokenizer_file(config),
            chat_template_path=CHAT_TEMPLATE)
    (partial / "stamp").write_text(_stamp())
    os.replace(partial, fixture)
    return fixture


def _kvx(*args):
    return subprocess.run([KVX, *args], capture_output=True, text=True, check=True).stdout


def _llama(gguf_path, logits_all=False):
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    # An fp32 KV cache (ggml type 0), as kvx's: llama.cpp's default fp16 one rounds every key and value.
    return Llama(model_path=str(gguf_path), n_ctx=512, n_threads=2, verbose=False, logits_all=logits_all,
                 type_k=0, type_v=0)


def _llama_greedy(llama, prompt):
    tokens = []
    for token in llama.generate(prompt, top_k=1, temp=0.0, repeat_penalty=1.0):
        tokens.append(token)
        if len(tokens) == N_GREEDY:
            break
    llama.reset()
    return tokens


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
        t = c["tokenizer"]
        self.assertEqual((t["type"], t["file"], t["add_dummy_prefix"]), ("llama2c", "tokenizer.bin", False))
        # From the GGUF's token types: 165 user-defined pieces ("  " is 138), 6,249 control ones
        # (<start_of_turn> is 105).
        self.assertEqual((len(t["user_defined_ids"]), len(t["control_ids"])), (165, 6249))
        self.assertIn(138, t["user_defined_ids"])
        self.assertIn(105, t["control_ids"])

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

    def test_the_gguf_file_directly(self):
        """kvx -m FILE.gguf, no export: its reference kernels give the exported model's logits bit for bit (kvx
        keeps every Q8_0, Q5_0, Q4_K and Q6_K value, which the export dequantized with gguf), and its SIMD
        kernels, which round the activations to int8 as llama.cpp does (Q8_0, Q8_K), stay within 8% of
        max|logit| of them (measured 5.9%: the K-quants take x rounded per 256, as llama.cpp's Q8_K). Their argmax
        may differ only at a near-tie: where it does, the exact logits of the two picks are within 2% of
        max|logit| of each other. (On AVX2, 2 of the 16 positions pick the exact logits' second token, 0.13 and
        0.07 below the first with max|logit| 25: the rounding, not a kernel error. An argmax rate of 90% failed
        there, 14 of 16.)"""
        tokens = ",".join(map(str, (self._kvx_tokens(PROMPT) * 4)[:N_PREFILL]))
        logits = {}
        for name, model, simd in (("direct", self.gguf, "reference"), ("exported", self.model, "reference"),
                                  ("simd", self.gguf, "auto")):
            out = self.fixture / f"gguf_{name}_logits.npy"
            _kvx("logits", "-m", str(model), "--tokens", tokens, "--simd", simd, "-c", "64", "-o", str(out))
            logits[name] = np.load(out)
        np.testing.assert_array_equal(logits["direct"], logits["exported"])
        ref = logits["exported"]
        err, scale = float(np.abs(logits["simd"] - ref).max()), float(np.abs(ref).max())
        picks = logits["simd"].argmax(-1)
        agree = float((picks == ref.argmax(-1)).mean())
        shortfall = float((ref.max(-1) - ref[np.arange(len(ref)), picks]).max())  # the exact logits' best - pick's
        print(f"gemma3 GGUF direct, SIMD kernels vs exact: max |diff| {err:.3g} of {scale:.3g}, argmax {agree:.0%}, "
              f"largest shortfall of a pick {shortfall:.3g}")
        self.assertLessEqual(err, 0.08 * scale)
        self.assertLessEqual(shortfall, 0.02 * scale)

    def test_chat_with_the_gguf_file(self):
        """The GGUF has no chat template: kvx chat refuses it in one line naming --chat-template, and with
        --chat-template gemma writes the turn tokens of the exported model, whose template jinja2 rendered."""
        def turn_tokens(model, *flags):
            proc = subprocess.run([KVX, "chat", "-m", str(model), "--temp", "0", "-n", "4", "--verbose", *flags],
                                  input=CHAT_QUESTIONS[0] + "\n", capture_output=True, text=True, timeout=600)
            return proc, re.findall(r"^kvx: turn 1 tokens:((?: -?\d+)*)$", proc.stderr, re.M)
        refused, _ = turn_tokens(self.gguf)
        self.assertEqual(refused.returncode, 1)
        self.assertIn("--chat-template", refused.stderr.strip())
        self.assertEqual(len(refused.stderr.strip().splitlines()), 1, refused.stderr)
        proc, direct = turn_tokens(self.gguf, "--chat-template", "gemma")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(direct, turn_tokens(self.model)[1])

    def _kvx_tokens(self, text):
        return [int(t) for t in _kvx("tokenize", "-m", str(self.model), "-p", text).strip().split(",")]

    def _kvx_greedy(self, prompt):
        out = _kvx("generate", "-m", str(self.model), "--tokens", ",".join(map(str, prompt)), "--print-ids",
                   "-n", str(N_GREEDY), "--temp", "0", "--ignore-eos")
        return [int(t) for t in out.replace(",", " ").split()][-N_GREEDY:]

    def _kvx_logits(self, tokens):
        out = self.fixture / "kvx_greedy_logits.npy"
        _kvx("logits", "-m", str(self.model), "--tokens", ",".join(map(str, tokens)), "-o", str(out))
        return np.load(out)

    def _greedy_cases(self, llama):
        """(prompt text, its tokens, llama.cpp's greedy continuation) for each prompt."""
        for text in GREEDY_PROMPTS:
            prompt = llama.tokenize(text.encode(), add_bos=True, special=False)
            yield text, prompt, _llama_greedy(llama, prompt)

    def test_tokenizer_against_llama_cpp(self):
        llama = _llama(self.gguf)
        if llama is None:
            self.skipTest("llama-cpp-python is not installed (tools/bench/requirements.txt)")
        for text in CORPUS:
            with self.subTest(text):
                self.assertEqual(self._kvx_tokens(text), llama.tokenize(text.encode(), add_bos=True, special=False))
        for text in SPECIAL_CORPUS:
            with self.subTest(text):
                self.assertEqual(self._kvx_tokens(text), llama.tokenize(text.encode(), add_bos=True, special=True))

    def test_chat(self):
        """kvx chat over two turns: each turn's tokens are the template's rendering (jinja2) as llama.cpp
        tokenizes it, special tokens read, where llama-cpp-python is installed; the shape of the turns always."""
        self.assertEqual(self.config["chat"], {"template_file": "chat_template.jinja", "format": "gemma", "add_bos": True})
        proc = subprocess.run([KVX, "chat", "-m", str(self.model), "--temp", "0", "-n", str(N_CHAT), "--verbose",
                               "--system", "Answer in one word."], input="\n".join(CHAT_QUESTIONS) + "\n",
                              capture_output=True, text=True, timeout=600)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        print(proc.stdout)
        self.assertRegex(proc.stderr, r"kvx: chat: 2 turns")
        turns = [[int(t) for t in m.split()] for m in re.findall(r"^kvx: turn \d+ tokens:((?: -?\d+)*)$", proc.stderr, re.M)]
        self.assertEqual(len(turns), 2, proc.stderr)
        self.assertEqual(turns[0][:2], [2, 105])  # <bos><start_of_turn>
        llama = _llama(self.gguf)
        if llama is None:
            return
        import jinja2
        template = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(CHAT_TEMPLATE.read_text())
        system = {"role": "system", "content": "Answer in one word."}
        first = template.render(messages=[system, {"role": "user", "content": CHAT_QUESTIONS[0]}],
                                add_generation_prompt=True, bos_token="<bos>")
        self.assertEqual(turns[0], llama.tokenize(first.encode(), add_bos=False, special=True))
        # Turn 2: what the two-turn rendering adds after the first answer (a placeholder here), which the answer's
        # <end_of_turn> (sampled, never fed) opens. An answer the -n limit cut short leaves its last token
        # (sampled, never fed) to lead turn 2, and the template's closing marker follows it.
        answered = int(re.search(r"^kvx: turn 1: answered (\d+) tokens", proc.stderr, re.M).group(1))
        if answered == N_CHAT:
            turns[1] = turns[1][1:]
        both = template.render(messages=[system, {"role": "user", "content": CHAT_QUESTIONS[0]},
                                         {"role": "assistant", "content": "\x00"},
                                         {"role": "user", "content": CHAT_QUESTIONS[1]}],
                               add_generation_prompt=True, bos_token="<bos>")
        self.assertEqual(turns[1], llama.tokenize(both[both.index("\x00") + 1:].encode(), add_bos=False, special=True))

    def test_greedy_text_against_llama_cpp_fp32(self):
        try:
            llama = _llama(llamacpp_f32_gguf(self.gguf), logits_all=True)
        except ImportError:
            llama = None
        if llama is None:
            self.skipTest("llama-cpp-python is not installed (tools/bench/requirements.txt)")
        for text, prompt, want in self._greedy_cases(llama):
            self.assertEqual(self._kvx_greedy(prompt), want, text)
            sequence = prompt + want
            llama.eval(sequence)
            theirs = np.array(llama.scores[len(prompt) - 1:len(sequence)])
            llama.reset()
            ours = self._kvx_logits(sequence)[len(prompt) - 1:]
            err, scale = float(np.abs(ours - theirs).max()), float(np.abs(theirs).max())
            print(f"gemma3 vs llama.cpp fp32 {text!r}: max |diff| {err:.3g}, relative {err / scale:.2g}")
            self.assertLessEqual(err, 2e-3 * scale, text)

    def test_greedy_text_against_llama_cpp_q4_k_m(self):
        llama = _llama(self.gguf)
        if llama is None:
            self.skipTest("llama-cpp-python is not installed (tools/bench/requirements.txt)")
        for text, prompt, want in self._greedy_cases(llama):
            got = self._kvx_greedy(prompt)
            agree = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), N_GREEDY)
            logits = self._kvx_logits(prompt + want)[len(prompt) - 1:-1]  # the rows that chose each token
            gaps = [float(row.max() - row[token]) for row, token in zip(logits, want)]
            print(f"gemma3 vs llama.cpp Q4_K_M {text!r}: {agree}/{N_GREEDY} tokens before the texts part; "
                  f"largest gap to llama.cpp's choice {max(gaps):.3g}")
            self.assertLessEqual(max(gaps), NEAR_TIE, text)


if __name__ == "__main__":
    try:
        fetch_gemma3(default_cache())
    except (OSError, FetchError) as e:
        if os.environ.get("KVX_REQUIRE_GEMMA3") == "1":
            sys.exit(f"test_gemma3: cannot fetch Gemma 3 270M: {e}")
        print(f"SKIP: Gemma 3 270M could not be fetched ({e}); set KVX_REQUIRE_GEMMA3=1 to make this a failure")
        sys.exit(SKIP_EXIT_CODE)
    unittest.main()
