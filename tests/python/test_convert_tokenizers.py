#!/usr/bin/env python3
"""The converter's tokenizer and chat template bundling: an HF tokenizer.json, GPT-2's encoder.json with
--merges vocab.bpe, and --chat-template are checked and copied, with config.json entries and token ids to
match; everything it must refuse exits 1 with one line naming the problem and writes nothing."""

import json
import os
import shutil
import tempfile
import unittest
from pathlib import Path

from kvx_test_support import (GPT2_ENCODER, GPT2_MERGES, ORTGENAI_GPT2_TOKENIZER, STORIES_TOKENIZER,
                              assert_one_line_failure, convert, export_random, run_ok)

SMALL = dict(dim=16, hidden=32, layers=1, heads=2, kv_heads=1, head_dim=8)
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


class TokenizerBundling(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)
        # GPT-2's 50257 tokens; the ORT GenAI tokenizer.json adds 38 whitespace tokens (ids up to 50294);
        # 1000 is the vocabulary of the ORT GenAI tiny GPT-2 that ships with that tokenizer.json.
        cls.gpt2_model = export_random(cls.tmp / "v50257.onnx", vocab=50257, **SMALL)
        cls.hf_model = export_random(cls.tmp / "v50295.onnx", vocab=50295, **SMALL)
        cls.small_model = export_random(cls.tmp / "v1000.onnx", vocab=1000, **SMALL)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def _converted(self, name, onnx_path, *extra):
        out = self.tmp / name
        run_ok(self, "kvx_tools.convert", onnx_path, "-o", out, *extra)
        return out, json.loads((out / "config.json").read_text())

    def _refused(self, onnx_path, extra, *fragments):
        out = self.tmp / "refused"
        line = assert_one_line_failure(self, convert(onnx_path, out, *extra, timeout=120), *fragments)
        self.assertFalse(out.exists(), "nothing may be written on failure")
        return line

    def _edited_tokenizer_json(self, name, edit):
        j = json.loads(ORTGENAI_GPT2_TOKENIZER.read_text(encoding="utf-8"))
        edit(j)
        path = self.tmp / name
        path.write_text(json.dumps(j), encoding="utf-8")
        return path

    def test_gpt2_encoder_and_merges(self):
        out, config = self._converted("gpt2", self.gpt2_model, "--tokenizer", GPT2_ENCODER, "--merges", GPT2_MERGES)
        self.assertEqual(config["tokenizer"], {"type": "gpt2", "file": "encoder.json", "merges_file": "vocab.bpe"})
        self.assertEqual((config["bos_token_id"], config["eos_token_ids"]), (50256, [50256]))  # <|endoftext|>
        self.assertEqual((out / "encoder.json").read_bytes(), GPT2_ENCODER.read_bytes())
        self.assertEqual((out / "vocab.bpe").read_bytes(), GPT2_MERGES.read_bytes())
        self.assertNotIn("chat", config)

    def test_hf_tokenizer_json_and_chat_template(self):
        template = self.tmp / "template.jinja"
        template.write_text(CHAT_TEMPLATE, encoding="utf-8")
        out, config = self._converted("hf", self.hf_model, "--tokenizer", ORTGENAI_GPT2_TOKENIZER,
                                      "--chat-template", template)
        self.assertEqual(config["tokenizer"], {"type": "bpe", "file": "tokenizer.json"})
        self.assertEqual(config["chat"], {"template_file": "chat_template.jinja", "format": "chatml"})
        # From the tokenizer_config.json beside it: <|endoftext|> is bos and eos.
        self.assertEqual((config["bos_token_id"], config["eos_token_ids"]), (50256, [50256]))
        self.assertEqual((out / "tokenizer.json").read_bytes(), ORTGENAI_GPT2_TOKENIZER.read_bytes())
        self.assertEqual((out / "chat_template.jinja").read_text(encoding="utf-8"), CHAT_TEMPLATE)

    def test_reconverting_removes_what_the_new_config_does_not_name(self):
        out, _ = self._converted("again", self.gpt2_model, "--tokenizer", GPT2_ENCODER, "--merges", GPT2_MERGES)
        _, config = self._converted("again", self.gpt2_model)
        self.assertIsNone(config["tokenizer"])
        self.assertEqual(sorted(p.name for p in out.iterdir()), ["config.json", "model.safetensors"])

    def test_tokenizer_json_beyond_the_vocabulary(self):
        self._refused(self.small_model, ["--tokenizer", ORTGENAI_GPT2_TOKENIZER],
                      "has 50295 tokens (ids up to 50294) but the model's vocab_size is 1000")
        self._refused(self.small_model, ["--tokenizer", GPT2_ENCODER, "--merges", GPT2_MERGES],
                      "has 50257 tokens (ids up to 50256) but the model's vocab_size is 1000")

    def test_merges_flag_goes_with_encoder_json_only(self):
        self._refused(self.gpt2_model, ["--tokenizer", GPT2_ENCODER], "give its merges with --merges vocab.bpe")
        self._refused(self.gpt2_model, ["--merges", GPT2_MERGES], "--merges goes with --tokenizer encoder.json")
        self._refused(self.hf_model, ["--tokenizer", ORTGENAI_GPT2_TOKENIZER, "--merges", GPT2_MERGES],
                      "holds its merges")
        self._refused(self.small_model, ["--tokenizer", STORIES_TOKENIZER, "--merges", GPT2_MERGES],
                      "--merges goes with a GPT-2 encoder.json")

    def test_damaged_files(self):
        cut = self.tmp / "cut.json"
        cut.write_bytes(ORTGENAI_GPT2_TOKENIZER.read_bytes()[:100_000])
        self._refused(self.hf_model, ["--tokenizer", cut], "cut.json is not valid JSON")
        neither = self.tmp / "neither.json"
        neither.write_text('{"a": "b"}')
        self._refused(self.hf_model, ["--tokenizer", neither], "neither an HF tokenizer.json nor GPT-2's encoder.json")
        bad_merges = self.tmp / "bad.bpe"
        bad_merges.write_text("#version: 0.2\n\u0120 t\nh e x\n", encoding="utf-8")
        self._refused(self.gpt2_model, ["--tokenizer", GPT2_ENCODER, "--merges", bad_merges],
                      "merge 1 'h e x' is not two tokens")
        unknown = self.tmp / "unknown.bpe"
        unknown.write_text("#version: 0.2\nzq\u00ff xw\n", encoding="utf-8")
        self._refused(self.gpt2_model, ["--tokenizer", GPT2_ENCODER, "--merges", unknown],
                      "which is not in the vocabulary")
        self._refused(self.gpt2_model, ["--tokenizer", GPT2_ENCODER, "--merges", self.tmp / "none.bpe"],
                      "cannot read merges")

    def test_components_kvx_does_not_implement(self):
        def set_key(key, value):
            return lambda j: j.__setitem__(key, value)
        for name, edit, fragment in [
            ("nfkc", set_key("normalizer", {"type": "NFKC"}), "normalizer 'NFKC' is not supported"),
            ("metaspace", set_key("pre_tokenizer", {"type": "Metaspace", "replacement": "\u2581"}),
             "pre_tokenizer 'Metaspace' is not supported"),
            ("no_byte_level", set_key("pre_tokenizer", {"type": "Digits", "individual_digits": True}),
             "must end with its one ByteLevel"),
            ("wordpiece_decoder", set_key("decoder", {"type": "WordPiece"}), "decoder 'WordPiece' is not supported"),
            ("unigram", lambda j: j["model"].__setitem__("type", "Unigram"), "model type 'Unigram' is not supported"),
        ]:
            with self.subTest(name):
                self._refused(self.hf_model, ["--tokenizer", self._edited_tokenizer_json(f"{name}.json", edit)], fragment)

    def test_template_that_fails_in_python_is_kept_with_the_reason(self):
        """A template's own failure (here a TypeError) is no converter crash: bundled, marked unsupported."""
        template = self.tmp / "type_error.jinja"
        template.write_text("{{ messages + 1 }}", encoding="utf-8")
        out, config = self._converted("type_error", self.small_model, "--chat-template", template)
        self.assertIsNone(config["chat"]["format"])
        self.assertIn("jinja2 cannot render it: TypeError", config["chat"]["unsupported"])
        self.assertTrue((out / "chat_template.jinja").is_file())

    def test_inputs_that_are_not_regular_files_are_refused_unread(self):
        """Opening a FIFO blocks until something writes to it: the converter used to wait for ever."""
        fifo = self.tmp / "fifo"
        os.mkfifo(fifo)
        for flag, what in (("--tokenizer", "tokenizer"), ("--chat-template", "chat template")):
            with self.subTest(flag):
                self._refused(self.gpt2_model, [flag, fifo], f"{what} {fifo}: not a regular file")
        self._refused(self.gpt2_model, ["--tokenizer", GPT2_ENCODER, "--merges", fifo], "merges", "not a regular file")

    def test_json_nested_too_deep_is_refused(self):
        deep = self.tmp / "deep.json"
        deep.write_text('{"a": ' + "[" * 100000 + "]" * 100000 + "}", encoding="utf-8")
        self._refused(self.gpt2_model, ["--tokenizer", deep], "nests JSON deeper than")

    def test_tokenizer_config_must_be_an_object(self):
        folder = self.tmp / "config_list"
        folder.mkdir()
        shutil.copyfile(ORTGENAI_GPT2_TOKENIZER, folder / "tokenizer.json")
        (folder / "tokenizer_config.json").write_text("[]", encoding="utf-8")
        self._refused(self.hf_model, ["--tokenizer", folder / "tokenizer.json"], "tokenizer_config.json",
                      "not a JSON object")

    def test_chat_template_size_is_bounded(self):
        huge = self.tmp / "huge.jinja"
        huge.write_text("x" * (2 << 20), encoding="utf-8")
        self._refused(self.gpt2_model, ["--chat-template", huge], f"is {2 << 20} bytes", "at most 1048576")

    def test_chat_template_must_be_text(self):
        binary = self.tmp / "template.bin"
        binary.write_bytes(b"\xff\xfe{{ x }}")
        self._refused(self.gpt2_model, ["--chat-template", binary], "is not UTF-8 text")
        self._refused(self.gpt2_model, ["--chat-template", self.tmp / "missing.jinja"], "cannot read chat template")


if __name__ == "__main__":
    unittest.main()
