#!/usr/bin/env python3
"""The converter's reduction of Jinja chat templates to a format kvx applies: ChatML templates in several
spellings are recognised (with their default system message), anything else is refused with a reason,
including templates that fail in Python, never end, or need unbounded memory or output."""

import errno
import json
import time
import unittest
from pathlib import Path
from unittest import mock

from kvx_tools.convert.tokenizer import bounded_child, chat_template
from kvx_tools.convert.errors import ConvertError
from kvx_tools.convert.tokenizer.chat_template import analyse_chat_template, chatml

# ChatML written as a loop that concatenates strings.
CHATML_PLAIN = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# ChatML that inserts a default system message, written with block tags and trim_blocks-sensitive newlines.
CHATML_DEFAULT_SYSTEM = """{% for message in messages %}
{% if loop.first and messages[0]['role'] != 'system' %}
<|im_start|>system
You are a helpful assistant.<|im_end|>
{% endif %}
<|im_start|>{{ message['role'] }}
{{ message['content'] }}<|im_end|>
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}"""

# Gemma's turns (testdata/chat_templates/gemma.jinja).
GEMMA = (Path(__file__).resolve().parents[2] / "testdata" / "chat_templates" / "gemma.jinja").read_text()

# Llama-2 style [INST] blocks: not ChatML.
LLAMA2 = ("{% for message in messages %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
          "message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}")

# A template that refuses the conversation, as some do for roles they do not know.
RAISES = "{% for message in messages %}{{ raise_exception('roles must alternate') }}{% endfor %}"

# Templates whose rendering fails in Python rather than in jinja2: a type error, endless macro recursion, and
# nesting deeper than jinja2's recursive parser.
PYTHON_FAILURES = {
    "{{ messages + 1 }}": "TypeError",
    "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}": "RecursionError",
    "{{ " + "(" * 2000 + "1" + ")" * 2000 + " }}": "RecursionError",
}
# 10^10 iterations (the sandbox caps each range at 100000 items, not their nesting).
ENDLESS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
# One 200 MB string; its rendering would be short.
MEMORY_HUNGRY = "{% set s = 'x' * 200000000 %}{{ s | length }}"
# 2 MB of output, produced 20 characters at a time.
LONG_OUTPUT = "{% for i in range(100000) %}{{ 'xxxxxxxxxxxxxxxxxxxx' }}{% endfor %}"


class ChatTemplates(unittest.TestCase):
    def test_plain_chatml(self):
        self.assertEqual(analyse_chat_template(CHATML_PLAIN), {"format": "chatml"})

    def test_chatml_with_default_system(self):
        self.assertEqual(analyse_chat_template(CHATML_DEFAULT_SYSTEM),
                         {"format": "chatml", "default_system": "You are a helpful assistant."})

    def test_chatml_rendering(self):
        messages = [{"role": "user", "content": "hi"}]
        self.assertEqual(chatml(messages, "S"), "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                                                "<|im_start|>assistant\n")

    def test_gemma_turns(self):
        self.assertEqual(analyse_chat_template(GEMMA), {"format": "gemma", "add_bos": True})
        untrimmed = analyse_chat_template(GEMMA.replace(" | trim", ""))
        self.assertIsNone(untrimmed["format"])
        self.assertIn("does not trim", untrimmed["unsupported"])
        no_bos = analyse_chat_template(GEMMA.replace("{{ bos_token }}", ""))
        self.assertEqual(no_bos, {"format": "gemma"})

    def test_other_formats_are_refused_with_a_reason(self):
        entry = analyse_chat_template(LLAMA2, eos_token="</s>")
        self.assertIsNone(entry["format"])
        self.assertIn("neither ChatML nor Gemma's turns", entry["unsupported"])

    def test_template_errors_are_refused_with_a_reason(self):
        for source in (RAISES, "{% for x in %}"):
            entry = analyse_chat_template(source)
            self.assertIsNone(entry["format"])
            self.assertIn("jinja2 cannot render it", entry["unsupported"])

    def test_python_failures_are_refused_with_a_reason(self):
        for source, error in PYTHON_FAILURES.items():
            with self.subTest(error=error):
                entry = analyse_chat_template(source)
                self.assertIsNone(entry["format"])
                self.assertIn(f"jinja2 cannot render it: {error}", entry["unsupported"])

    def test_endless_rendering_is_stopped(self):
        started = time.monotonic()
        with mock.patch.object(chat_template, "RENDER_SECONDS", 1):
            entry = analyse_chat_template(ENDLESS)
        self.assertLess(time.monotonic() - started, 5)
        self.assertEqual(entry, {"format": None, "unsupported": "rendering it took longer than 1 s"})

    def test_testdata_templates_as_recognised_json_records(self):
        """testdata/chat_templates/recognised.json, which the engine's marker reading (tests/chat_format_markers_test.cpp)
        is checked against, is what rendering makes of each template there (reasons aside)."""
        folder = Path(__file__).resolve().parents[2] / "testdata" / "chat_templates"
        expected = json.loads((folder / "recognised.json").read_text())
        self.assertEqual(sorted(expected), sorted(p.name for p in folder.glob("*.jinja")))
        for name, entry in expected.items():
            with self.subTest(template=name):
                got = analyse_chat_template((folder / name).read_text())
                got.pop("unsupported", None)
                self.assertEqual(got, entry)

    def test_memory_is_bounded(self):
        with mock.patch.object(chat_template, "RENDER_MEMORY_BYTES", 64 << 20):
            entry = analyse_chat_template(MEMORY_HUNGRY)
        self.assertEqual(entry, {"format": None, "unsupported": "rendering it needed more than 64 MiB of memory"})

    def test_output_length_is_bounded(self):
        entry = analyse_chat_template(LONG_OUTPUT)
        self.assertEqual(entry, {"format": None, "unsupported": "its rendering is longer than 1000000 characters"})

    def test_no_process_to_render_in_is_a_convert_error(self):
        with mock.patch.object(bounded_child.os, "fork", side_effect=OSError(errno.EAGAIN, "Resource busy")):
            with self.assertRaisesRegex(ConvertError, "cannot start a process to analyse the chat template"):
                analyse_chat_template(CHATML_PLAIN)

    def test_analysis_is_fast(self):
        """The bounds cost a fork per template, not seconds: conversions in the tests run by the dozen."""
        started = time.monotonic()
        for _ in range(10):
            analyse_chat_template(CHATML_DEFAULT_SYSTEM)
        self.assertLess(time.monotonic() - started, 2)


if __name__ == "__main__":
    unittest.main()
