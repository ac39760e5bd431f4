#!/usr/bin/env python3
"""The converter's reduction of Jinja chat templates to a format kvx applies: ChatML templates in several
spellings are recognised (with their default system message), anything else is refused with a reason."""

import unittest

from kvx_tools.convert.chat_template import analyse_chat_template, chatml

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

# Llama-2 style [INST] blocks: not ChatML.
LLAMA2 = ("{% for message in messages %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
          "message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}")

# A template that refuses the conversation, as some do for roles they do not know.
RAISES = "{% for message in messages %}{{ raise_exception('roles must alternate') }}{% endfor %}"


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

    def test_other_formats_are_refused_with_a_reason(self):
        entry = analyse_chat_template(LLAMA2, bos_token="<s>", eos_token="</s>")
        self.assertIsNone(entry["format"])
        self.assertIn("not ChatML", entry["unsupported"])

    def test_template_errors_are_refused_with_a_reason(self):
        for source in (RAISES, "{% for x in %}"):
            entry = analyse_chat_template(source)
            self.assertIsNone(entry["format"])
            self.assertIn("jinja2 cannot render it", entry["unsupported"])


if __name__ == "__main__":
    unittest.main()
