#!/usr/bin/env python3
"""kvx's tokenizer read straight from a GGUF file's metadata (engine/tokenizer/gguf_tokenizer.h, through
`kvx tokenize -m FILE.gguf`) against independent tokenizers of the same vocabulary:

  - SmolLM2-135M-Instruct (byte-level BPE, pre-tokenizer "smollm"): HF tokenizers on the tokenizer.json
    kvx_tools.export.gguf_tokenizer rebuilds from the same file;
  - the same vocabulary relabelled "llama-bpe" and "qwen2": HF tokenizers with Llama 3's and Qwen2's Split
    patterns (as their tokenizer.json files write them) before ByteLevel;
  - Gemma 3 270M (SentencePiece, 262,144 pieces): HF tokenizers' BPE with byte fallback on merges derived from
    the scores (what transformers' SentencePiece converter does), user-defined pieces as added tokens and
    control pieces as special ones; and llama.cpp itself where llama-cpp-python is installed (test_gemma3.py's
    reference);
  - hostile metadata in tiny GGUF files written by the gguf package: a one-line error naming the key.

The models are fetched into $KVX_MODEL_CACHE (else <repo>/.cache/models); without network the test exits 77
(ctest: skipped) after the hostile-metadata cases, unless KVX_REQUIRE_GGUF_MODELS=1 makes that a failure."""

import math
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np
from gguf import GGUFValueType, GGUFWriter
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from kvx_tools.export.fetch_gemma3 import fetch_gemma3
from kvx_tools.export.fetch_smollm2 import FetchError, default_cache, fetch_smollm2
from kvx_tools.export.gguf_reader import FastGGUFReader
from kvx_tools.export.gguf_tokenizer import gguf_tokenizer

SKIP_EXIT_CODE = 77
REPO = Path(__file__).resolve().parents[2]
KVX = os.environ.get("KVX_BIN", "kvx")
HARBOUR = (REPO / "testdata" / "text" / "harbour_town.txt").read_text()
TEXTS = [
    "", "Hello world", "The capital of France is Paris.", "  indented\tcode();\n", "naïve café, 3.14159 €",
    "日本語のテキスト", "emoji 🙂 twice 🙂🙂 and a family 🧑‍🤝‍🧑", "numbers 1234567890 and 2024-11-24",
    "a\n\nb\n\n\nc", "  a", "a    b", "\t\tb", " \t ", "trailing   ", "\r\nwindows\r\nlines\r\n",
    "I'm sure they're here; WE'LL see, he'd've", "Ελληνικά, Русский, עברית, العربية", "x=1e-7; y=0x1F",
    "<b>bold</b> and <table><tr><td>x</td></tr></table>", "                                         forty-one spaces",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", "a<|im_end|>b<|endoftext|>c",
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n", "<bos><eos><unused7>",
    "<|im_start", "<start_of_turn", HARBOUR,
] + [p for p in HARBOUR.split("\n\n") if p.strip()][:12]

# Llama 3's and Qwen2's pre-tokenizer patterns, from their tokenizer.json files.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def kvx_ids(model, text, bos=False):
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode())
    try:
        out = subprocess.run([KVX, "tokenize", "-m", str(model), "-f", f.name] + ([] if bos else ["--no-bos"]),
                             capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if out.returncode != 0:
        raise AssertionError(f"kvx tokenize failed: {out.stderr.strip()}")
    line = out.stdout.strip()
    return [int(t) for t in line.split(",")] if line else []


def kvx_error(model):
    """kvx tokenize's stderr on `model`, which must make it fail cleanly (exit 1, one line)."""
    out = subprocess.run([KVX, "tokenize", "-m", str(model), "-p", "hi"], capture_output=True, text=True)
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    return out.stderr.strip()


def field(reader, key):
    return reader.fields[key].contents()


def write_gguf(path, metadata):
    """A GGUF file with no tensors and `metadata`: {key: (value, GGUFValueType, item type or None)}."""
    writer = GGUFWriter(str(path), arch="llama")
    for key, (value, kind, sub) in metadata.items():
        writer.add_key_value(key, value, kind, sub_type=sub)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def bpe_metadata(reader, pre):
    """SmolLM2's byte-level BPE vocabulary from `reader`, labelled with pre-tokenizer `pre`."""
    strings = lambda key: (field(reader, key), GGUFValueType.ARRAY, GGUFValueType.STRING)
    return {"tokenizer.ggml.model": ("gpt2", GGUFValueType.STRING, None),
            "tokenizer.ggml.pre": (pre, GGUFValueType.STRING, None),
            "tokenizer.ggml.tokens": strings("tokenizer.ggml.tokens"),
            "tokenizer.ggml.merges": strings("tokenizer.ggml.merges"),
            "tokenizer.ggml.token_type": (field(reader, "tokenizer.ggml.token_type"), GGUFValueType.ARRAY,
                                          GGUFValueType.INT32),
            "tokenizer.ggml.bos_token_id": (1, GGUFValueType.UINT32, None)}


def sentencepiece_reference(reader):
    """HF tokenizers' BPE equal to SentencePiece's merge-by-score on the GGUF's pieces: a merge for every piece
    that two pieces make, ranked by the merged piece's score (higher first)."""
    tokens = field(reader, "tokenizer.ggml.tokens")
    scores = field(reader, "tokenizer.ggml.scores")
    types = field(reader, "tokenizer.ggml.token_type")
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for merged, i in vocab.items():
        for cut in range(1, len(merged)):
            left, right = merged[:cut], merged[cut:]
            if left in vocab and right in vocab:
                merges.append((-scores[i], i, left, right))
    merges.sort()
    bpe = models.BPE(vocab=vocab, merges=[(a, b) for _, _, a, b in merges], byte_fallback=True, unk_token="<unk>",
                     fuse_unk=False)
    tok = Tokenizer(bpe)
    norm = [normalizers.Replace(" ", "\u2581")]
    if reader.fields.get("tokenizer.ggml.add_space_prefix") is None or field(reader, "tokenizer.ggml.add_space_prefix"):
        norm.insert(0, normalizers.Prepend("\u2581"))
    tok.normalizer = normalizers.Sequence(norm)
    tok.decoder = decoders.ByteFallback()
    tok.add_tokens([AddedToken(t.replace("\u2581", " "), normalized=False)
                    for t, k in zip(tokens, types) if k == 4])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, k in zip(tokens, types) if k in (2, 3)])
    return tok


class SmolLM2Vocabulary(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gguf = fetch_smollm2(default_cache())
        cls.reader = FastGGUFReader(str(cls.gguf))

    def test_against_hf_tokenizers(self):
        reference = gguf_tokenizer(self.reader)
        for text in TEXTS:
            with self.subTest(text=text[:40]):
                self.assertEqual(kvx_ids(self.gguf, text), reference.encode(text).ids)

    def test_bos_follows_add_bos_token(self):
        self.assertFalse(field(self.reader, "tokenizer.ggml.add_bos_token"))
        self.assertEqual(kvx_ids(self.gguf, "Hello", bos=True), kvx_ids(self.gguf, "Hello"))

    def test_llama3_and_qwen2_labels(self):
        cases = {"llama-bpe": (LLAMA3_PATTERN, True, True), "qwen2": (QWEN2_PATTERN, False, False)}
        with tempfile.TemporaryDirectory() as scratch:
            for label, (pattern, ignore_merges, add_bos) in cases.items():
                path = write_gguf(Path(scratch) / f"{label}.gguf", bpe_metadata(self.reader, label))
                reference = gguf_tokenizer(self.reader)
                reference.model = models.BPE(vocab=reference.get_vocab(with_added_tokens=False),
                                             merges=[tuple(m.split(" ")) for m in field(self.reader, "tokenizer.ggml.merges")],
                                             ignore_merges=ignore_merges)
                reference.pre_tokenizer = pre_tokenizers.Sequence([
                    pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
                for text in TEXTS:
                    with self.subTest(label=label, text=text[:40]):
                        self.assertEqual(kvx_ids(path, text), reference.encode(text).ids)
                # llama.cpp's default for the label, the file saying nothing: BOS (token 1) for Llama 3's only.
                self.assertEqual(kvx_ids(path, "Hi", bos=True)[:1] == [1], add_bos, label)


class Gemma3Vocabulary(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gguf = fetch_gemma3(default_cache())
        cls.reader = FastGGUFReader(str(cls.gguf))

    def test_against_hf_tokenizers(self):
        reference = sentencepiece_reference(self.reader)
        for text in TEXTS:
            with self.subTest(text=text[:40]):
                self.assertEqual(kvx_ids(self.gguf, text), reference.encode(text).ids)

    def test_bos(self):
        self.assertEqual(field(self.reader, "tokenizer.ggml.bos_token_id"), 2)
        self.assertEqual(kvx_ids(self.gguf, "Hello", bos=True), [2] + kvx_ids(self.gguf, "Hello"))

    def test_against_llama_cpp(self):
        try:
            from llama_cpp import Llama
        except ImportError:
            self.skipTest("llama-cpp-python is not installed (tools/bench/requirements.txt)")
        llama = Llama(model_path=str(self.gguf), n_ctx=64, vocab_only=True, verbose=False)
        for text in TEXTS:
            with self.subTest(text=text[:40]):
                self.assertEqual(kvx_ids(self.gguf, text, bos=True),
                                 llama.tokenize(text.encode(), add_bos=True, special=True))


def tiny_spm(**changes):
    """A 5-piece SentencePiece vocabulary, with `changes` to its metadata (None removes a key)."""
    meta = {"tokenizer.ggml.model": ("llama", GGUFValueType.STRING, None),
            "tokenizer.ggml.tokens": (["<unk>", "<s>", "</s>", "\u2581", "a", "b", "\u2581a"], GGUFValueType.ARRAY,
                                      GGUFValueType.STRING),
            "tokenizer.ggml.scores": ([0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -0.5], GGUFValueType.ARRAY, GGUFValueType.FLOAT32),
            "tokenizer.ggml.token_type": ([2, 3, 3, 1, 1, 1, 1], GGUFValueType.ARRAY, GGUFValueType.INT32)}
    meta.update(changes)
    return {k: v for k, v in meta.items() if v is not None}


def tiny_bpe(**changes):
    meta = {"tokenizer.ggml.model": ("gpt2", GGUFValueType.STRING, None),
            "tokenizer.ggml.pre": ("smollm", GGUFValueType.STRING, None),
            "tokenizer.ggml.tokens": (["a", "b", "ab", "<|end|>"], GGUFValueType.ARRAY, GGUFValueType.STRING),
            "tokenizer.ggml.merges": (["a b"], GGUFValueType.ARRAY, GGUFValueType.STRING),
            "tokenizer.ggml.token_type": ([1, 1, 1, 3], GGUFValueType.ARRAY, GGUFValueType.INT32)}
    meta.update(changes)
    return {k: v for k, v in meta.items() if v is not None}


class HostileMetadata(unittest.TestCase):
    def check(self, metadata, *needles):
        with tempfile.TemporaryDirectory() as scratch:
            message = kvx_error(write_gguf(Path(scratch) / "t.gguf", metadata))
        for needle in needles:
            self.assertIn(needle, message)

    def test_the_tiny_vocabularies_work(self):
        with tempfile.TemporaryDirectory() as scratch:
            spm = write_gguf(Path(scratch) / "spm.gguf", tiny_spm())
            bpe = write_gguf(Path(scratch) / "bpe.gguf", tiny_bpe())
            # The space before the text (add_space_prefix's default) merges with "a"; llama.cpp's BOS default: 1.
            self.assertEqual(kvx_ids(spm, "ab", bos=True), [1, 6, 5])
            self.assertEqual(kvx_ids(bpe, "ab<|end|>a", bos=True), [2, 3, 0])

    def test_refused(self):
        u32 = lambda v: (v, GGUFValueType.UINT32, None)
        string = lambda v: (v, GGUFValueType.STRING, None)
        strings = lambda v: (v, GGUFValueType.ARRAY, GGUFValueType.STRING)
        floats = lambda v: (v, GGUFValueType.ARRAY, GGUFValueType.FLOAT32)
        ints = lambda v: (v, GGUFValueType.ARRAY, GGUFValueType.INT32)
        cases = {
            "bert": (tiny_spm(**{"tokenizer.ggml.model": string("bert")}), "'tokenizer.ggml.model' is 'bert'"),
            "no model": (tiny_spm(**{"tokenizer.ggml.model": None}), "'tokenizer.ggml.model' is missing"),
            "no tokens": (tiny_spm(**{"tokenizer.ggml.tokens": None}), "'tokenizer.ggml.tokens' is missing"),
            "tokens mistyped": (tiny_spm(**{"tokenizer.ggml.tokens": ints([1, 2, 3, 4, 5, 6, 7])}), "tokenizer.ggml.tokens"),
            "no scores": (tiny_spm(**{"tokenizer.ggml.scores": None}), "'tokenizer.ggml.scores' is missing"),
            "short scores": (tiny_spm(**{"tokenizer.ggml.scores": floats([0.0])}), "'tokenizer.ggml.scores' has 1 items"),
            "nan score": (tiny_spm(**{"tokenizer.ggml.scores": floats([0.0, 0.0, 0.0, math.nan, 1.0, 0.0, 0.0])}),
                          "'tokenizer.ggml.scores' gives token 3", "not finite"),
            "inf score": (tiny_spm(**{"tokenizer.ggml.scores": floats([0.0, math.inf, 0.0, 0.0, 1.0, 0.0, 0.0])}), "not finite"),
            "short types": (tiny_spm(**{"tokenizer.ggml.token_type": ints([1, 1])}), "'tokenizer.ggml.token_type' has 2"),
            "type 9": (tiny_spm(**{"tokenizer.ggml.token_type": ints([1, 1, 9, 1, 1, 1, 1])}), "'tokenizer.ggml.token_type'",
                       "type 9"),
            "bos out of range": (tiny_spm(**{"tokenizer.ggml.bos_token_id": u32(7)}), "'tokenizer.ggml.bos_token_id' is 7"),
            "eot out of range": (tiny_bpe(**{"tokenizer.ggml.eot_token_id": u32(4000000)}), "tokenizer.ggml.eot_token_id"),
            "unknown pre": (tiny_bpe(**{"tokenizer.ggml.pre": string("falcon")}), "'tokenizer.ggml.pre' is 'falcon'",
                            "smollm", "qwen2"),
            "default pre": (tiny_bpe(**{"tokenizer.ggml.pre": string("default")}), "'tokenizer.ggml.pre' is 'default'"),
            "no pre": (tiny_bpe(**{"tokenizer.ggml.pre": None}), "'tokenizer.ggml.pre' is missing"),
            "no merges": (tiny_bpe(**{"tokenizer.ggml.merges": None}), "'tokenizer.ggml.merges' is missing"),
            "three-part merge": (tiny_bpe(**{"tokenizer.ggml.merges": strings(["a b ab"])}), "tokenizer.ggml.merges",
                                 "merge 0"),
            "merge of unknown tokens": (tiny_bpe(**{"tokenizer.ggml.merges": strings(["q z"])}), "q"),
            "duplicate token": (tiny_bpe(**{"tokenizer.ggml.tokens": strings(["a", "b", "ab", "a"])}),
                                "holds 'a' twice"),
            "byte type in bpe": (tiny_bpe(**{"tokenizer.ggml.token_type": ints([1, 1, 1, 6])}), "type 6"),
        }
        for name, (metadata, *needles) in cases.items():
            with self.subTest(case=name):
                self.check(metadata, *needles)


def main():
    try:
        fetch_smollm2(default_cache())
        fetch_gemma3(default_cache())
    except (OSError, FetchError) as e:
        if os.environ.get("KVX_REQUIRE_GGUF_MODELS") == "1":
            sys.exit(f"test_gguf_tokenizer: cannot fetch the models: {e}")
        result = unittest.TextTestRunner().run(unittest.defaultTestLoader.loadTestsFromTestCase(HostileMetadata))
        print(f"SKIP: SmolLM2 and Gemma 3 could not be fetched ({e}); set KVX_REQUIRE_GGUF_MODELS=1 to make this a failure")
        sys.exit(1 if not result.wasSuccessful() else SKIP_EXIT_CODE)
    unittest.main()


if __name__ == "__main__":
    main()
