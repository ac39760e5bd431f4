#!/usr/bin/env python3
"""kvx serve with SmolLM2-135M-Instruct through the official openai client.

Independent references: jinja2 renders the model's own chat template (as HF transformers'
apply_chat_template does) and HF `tokenizers` encodes it, so /v1/chat/completions must answer exactly what
/v1/completions answers for those token ids; and 16 concurrent requests must each get what `kvx generate`
gives alone. Skipped (77) where the SmolLM2 fixture could not be fetched."""
import json
import os
import sys
import unittest
from concurrent.futures import ThreadPoolExecutor

import openai

from kvx_cli import render_chat_template, run
from kvx_server import KvxServer

SMOLLM2 = os.environ.get("KVX_SMOLLM2_DIR", "")
CONTEXT = "1024"
CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You answer in one short sentence."},
     {"role": "user", "content": "Why is the sky blue?"}],
    [{"role": "user", "content": "Name a fruit."}, {"role": "assistant", "content": "An apple."},
     {"role": "user", "content": "And a vegetable?"}],
]
PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "The three primary colors are",
           "In 1969,", "My favourite food is", "Water boils at", "The quick brown fox"]



class ServeSmolLM2(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from tokenizers import Tokenizer
        with open(os.path.join(SMOLLM2, "config.json")) as f:
            config = json.load(f)
        with open(os.path.join(SMOLLM2, config["chat"]["template_file"])) as f:
            cls.template = f.read()
        cls.hf = Tokenizer.from_file(os.path.join(SMOLLM2, config["tokenizer"]["file"]))
        cls.server = KvxServer("-m", SMOLLM2, "-c", CONTEXT, "--max-seqs", "16", "--check-cache")
        cls.client = openai.OpenAI(base_url=cls.server.base_url, api_key="none", max_retries=0, timeout=300)
        cls.model = cls.client.models.list().data[0].id

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        code = cls.server.stop()
        assert code == 0, "".join(cls.server.log)

    def test_chat_answers_the_hf_rendered_template(self):
        for messages in CONVERSATIONS:
            ids = self.hf.encode(render_chat_template(self.template, messages), add_special_tokens=False).ids
            chat = self.client.chat.completions.create(model=self.model, messages=messages, max_tokens=40,
                                                       temperature=0)
            plain = self.client.completions.create(model=self.model, prompt=ids, max_tokens=40, temperature=0,
                                                   stop=["<|im_end|>"])
            self.assertEqual(chat.usage.prompt_tokens, len(ids), messages)
            self.assertEqual(chat.choices[0].message.content, plain.choices[0].text, messages)
            self.assertEqual(chat.choices[0].message.role, "assistant")
        # A short answer ends at the template's end of turn, which is not shown.
        short = self.client.chat.completions.create(model=self.model, messages=CONVERSATIONS[0], max_tokens=100,
                                                    temperature=0)
        self.assertEqual(short.choices[0].finish_reason, "stop")
        self.assertIn("Paris", short.choices[0].message.content)
        self.assertNotIn("<|im_end|>", short.choices[0].message.content)

    def test_streamed_chat_with_logprobs(self):
        whole = self.client.chat.completions.create(model=self.model, messages=CONVERSATIONS[1], max_tokens=30,
                                                    temperature=0, logprobs=True, top_logprobs=3)
        stream = self.client.chat.completions.create(model=self.model, messages=CONVERSATIONS[1], max_tokens=30,
                                                     temperature=0, stream=True)
        chunks = list(stream)
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks if c.choices),
                         whole.choices[0].message.content)
        self.assertEqual(chunks[-1].usage.completion_tokens, whole.usage.completion_tokens)
        content = whole.choices[0].logprobs.content
        self.assertEqual(len(content), whole.usage.completion_tokens)
        self.assertEqual("".join(t.token for t in content), whole.choices[0].message.content)
        for t in content:  # greedy: the chosen token is the most likely one
            self.assertEqual(len(t.top_logprobs), 3)
            self.assertEqual(t.top_logprobs[0].logprob, t.logprob)
            self.assertEqual(bytes(t.bytes).decode("utf-8", "replace"), t.token)

    def test_sixteen_concurrent_requests_each_get_what_generate_gives_alone(self):
        requests = []
        for i in range(16):
            sampled = i % 2 == 1
            requests.append({"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 4 + 2 * i,
                             "temperature": 0.8 if sampled else 0.0, "seed": 300 + i, "top_k": 40 if sampled else 0,
                             "top_p": 0.95 if sampled else 1.0})

        def alone(r):
            code, out, err = run("generate", "-m", SMOLLM2, "-c", CONTEXT, "-p", r["prompt"], "-n", str(r["max_tokens"]),
                                 "--temp", str(r["temperature"]), "--seed", str(r["seed"]), "--top-k", str(r["top_k"]),
                                 "--top-p", str(r["top_p"]))
            self.assertEqual(code, 0, err)
            self.assertTrue(out.startswith(r["prompt"]), out)
            return out[len(r["prompt"]):-1]

        def served(r):
            return self.client.completions.create(model=self.model, prompt=r["prompt"], max_tokens=r["max_tokens"],
                                                  temperature=r["temperature"], seed=r["seed"], top_p=r["top_p"],
                                                  extra_body={"top_k": r["top_k"]}).choices[0].text

        before = self.server.metrics()
        with ThreadPoolExecutor(16) as pool:
            got = list(pool.map(served, requests))
        self.assertGreater(self.server.metrics()["kvx_batched_steps_total"], before["kvx_batched_steps_total"])
        for r, g in zip(requests, got):
            self.assertEqual(g, alone(r), r)
        m = self.server.wait_idle()
        self.assertEqual(m["kvx_cache_check_failures_total"], 0)


if __name__ == "__main__":
    if not (SMOLLM2 and os.path.exists(os.path.join(SMOLLM2, "config.json"))):
        print("SKIP: SmolLM2 is not available (its fixture step could not fetch it and was allowed not to; "
              "see docs/testing.md)")
        sys.exit(77)  # ctest: skipped
    sys.exit(0 if unittest.main(exit=False).result.wasSuccessful() else 1)
