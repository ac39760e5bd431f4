"""kvx tokenize and generate on models bundled with byte-level BPE tokenizers by kvx convert: ids from the
command line equal HF tokenizers' for the same files, --ids decodes them back, and a tokenizer that does
not fit the model's vocabulary is refused with one line. (The tokenizer itself is checked string by string
in tests/tokenizer_bpe_corpus_test.cpp; this is the path from model directory to command line.)"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from kvx_cli import SHARED_DIR, run

GPT2_DIR = os.path.join(SHARED_DIR, "models", "gpt2-tokenizer")
ORTGENAI_TOKENIZER = os.path.join(SHARED_DIR, "models", "ortgenai-tiny-random-gpt2-fp32", "tokenizer.json")
TEXTS = ["Hello world", "It's 2024: caf\u00e9 \u65e5\u672c\u8a9e \U0001f468\u200d\U0001f469\u200d\U0001f467!",
         "def f(x):\n    return x  \n\n", "a<|endoftext|>b", "   leading and trailing   ", "", "I'M y'all 12345678",
         "\u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627", "\t\ttabs\t"]


def export_and_convert(tmp, name, vocab, *tokenizer_args):
    onnx_path = os.path.join(tmp, f"{name}.onnx")
    subprocess.run([sys.executable, "-m", "kvx_tools.export.export_random_llama",
                    "--dim", "16", "--hidden", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1",
                    "--head-dim", "8", "--vocab", str(vocab), "--max-seq-len", "64", "--seed", "5",
                    "-o", onnx_path], check=True, capture_output=True)
    model_dir = os.path.join(tmp, name)
    code, _, err = run("convert", onnx_path, "-o", model_dir, *tokenizer_args)
    assert code == 0, err
    return model_dir


def gpt2_reference():
    vocab = json.load(open(os.path.join(GPT2_DIR, "encoder.json"), encoding="utf-8"))
    with open(os.path.join(GPT2_DIR, "vocab.bpe"), encoding="utf-8") as f:
        merges = [tuple(line.split(" ")) for line in f.read().splitlines() if line and not line.startswith("#")]
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    return tok


class BpeCommandLineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = cls._tmp.name
        cls.gpt2 = export_and_convert(cls.tmp, "gpt2", 50257, "--tokenizer", os.path.join(GPT2_DIR, "encoder.json"),
                                      "--merges", os.path.join(GPT2_DIR, "vocab.bpe"))
        cls.ortgenai = export_and_convert(cls.tmp, "ortgenai", 50295, "--tokenizer", ORTGENAI_TOKENIZER)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def check_against(self, model_dir, reference):
        for text in TEXTS:
            expected = reference.encode(text, add_special_tokens=True).ids
            code, out, err = run("tokenize", "-m", model_dir, "-p", text)
            self.assertEqual(code, 0, err)
            got = [int(t) for t in out.strip().split(",")] if out.strip() else []
            self.assertEqual(got, expected, repr(text))
            if expected:
                code, out, err = run("tokenize", "-m", model_dir, "--ids", ",".join(map(str, expected)))
                self.assertEqual(code, 0, err)
                self.assertEqual(out[:-1], reference.decode(expected, skip_special_tokens=False), repr(text))

    def test_gpt2_files(self):
        self.check_against(self.gpt2, gpt2_reference())

    def test_tokenizer_json(self):
        self.check_against(self.ortgenai, Tokenizer.from_file(ORTGENAI_TOKENIZER))

    def test_text_file_and_stats(self):
        path = os.path.join(self.tmp, "text.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(TEXTS) * 50)
        code, out, err = run("tokenize", "-m", self.gpt2, "-f", path, "--stats")
        self.assertEqual(code, 0, err)
        ids = [int(t) for t in out.strip().split(",")]
        self.assertEqual(ids, gpt2_reference().encode("\n".join(TEXTS) * 50).ids)
        self.assertIn(f"kvx: {len(ids)} tokens from {os.path.getsize(path)} bytes in", err)

    def test_generate_streams_bpe_text(self):
        code, out, err = run("generate", "-m", self.gpt2, "-p", "Hello \u65e5\u672c", "-n", "8", "--temp", "0")
        self.assertEqual(code, 0, err)
        self.assertTrue(out.startswith("Hello \u65e5\u672c"), out)
        # An empty prompt starts from the config's BOS, <|endoftext|>, which decodes to its text.
        code, out, err = run("generate", "-m", self.gpt2, "-p", "", "-n", "3", "--temp", "0")
        self.assertEqual(code, 0, err)
        self.assertTrue(out.startswith("<|endoftext|>"), out)

    def test_tokenizer_larger_than_the_vocabulary(self):
        # The ORT GenAI tiny GPT-2 has 1000 rows of embedding but ships GPT-2's full tokenizer.json: kvx
        # convert refuses it, so the directory is made by hand, as another tool might.
        model_dir = export_and_convert(self.tmp, "v1000", 1000)
        shutil.copyfile(ORTGENAI_TOKENIZER, os.path.join(model_dir, "tokenizer.json"))
        config_path = os.path.join(model_dir, "config.json")
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
        config["tokenizer"] = {"type": "bpe", "file": "tokenizer.json"}
        with open(config_path, "w", encoding="utf-8") as f:
            json.dump(config, f)
        code, _, err = run("tokenize", "-m", model_dir, "-p", "hi")
        self.assertEqual(code, 1, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("has 50295 tokens (ids up to 50294) but the model's vocabulary has 1000", err)

    def test_bad_ids(self):
        for ids, message in [("1,x", "'x' is not a token id"), ("50257", "outside the model's vocabulary of 50257"),
                             ("-1", "outside")]:
            code, _, err = run("tokenize", "-m", self.gpt2, "--ids", ids)
            self.assertEqual(code, 1, err)
            self.assertIn(message, err)


if __name__ == "__main__":
    unittest.main()
