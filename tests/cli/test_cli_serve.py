#!/usr/bin/env python3
"""kvx serve with the built-in stories260K, through the official openai client (and raw HTTP where the client
hides what is tested): answers against `kvx generate` run alone and against llama2.c's run.c golden text,
batch independence under concurrency, preemption in a small pool, stop strings, logprobs against ONNX
Runtime's logits, errors, auth, disconnects and 1,000 requests without a leaked block. Runs in the sanitizer
pass too (the server is the instrumented binary)."""
import json
import os
import signal
import socket
import sys
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import openai

from kvx_cli import FIXTURES, SHARED_DIR, run
from kvx_server import KvxServer

GOLDEN = os.path.join(SHARED_DIR, "models", "stories260K", "golden_greedy_n256_runc.txt")
SANITIZED = bool(os.environ.get("ASAN_OPTIONS"))
PROMPTS = ["Once upon a time", "Lily went", "The cat", "Tom had a big", "One day, a little bird", "She said",
           "The sun was", "Ben and Mia"]


def client(server, key="none"):
    return openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0, timeout=120)


def generate_alone(prompt, n, temp=0.0, seed=0, top_k=0, top_p=1.0):
    """The text `kvx generate` continues the prompt with, run alone."""
    code, out, err = run("generate", "-p", prompt, "-n", str(n), "--temp", str(temp), "--seed", str(seed),
                         "--top-k", str(top_k), "--top-p", str(top_p))
    assert code == 0, err
    assert out.startswith(prompt) and out.endswith("\n"), out
    return out[len(prompt):-1]


def mixed_requests(count):
    """Greedy and seeded requests of different prompts and lengths."""
    requests = []
    for i in range(count):
        sampled = i % 2 == 1
        requests.append({"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 12 + 7 * i,
                         "temperature": 0.9 if sampled else 0.0, "seed": 100 + i,
                         "top_k": 40 if sampled else 0, "top_p": 0.9 if sampled else 1.0})
    return requests


def expected_for(r):
    return generate_alone(r["prompt"], r["max_tokens"], r["temperature"], r["seed"], r["top_k"], r["top_p"])


def complete(c, r):
    extra = {"top_k": r["top_k"]}
    answer = c.completions.create(model="stories260K", prompt=r["prompt"], max_tokens=r["max_tokens"],
                                  temperature=r["temperature"], seed=r["seed"], top_p=r["top_p"], extra_body=extra)
    return answer.choices[0].text


class ServeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = KvxServer("--check-cache", "--max-seqs", "16")
        cls.client = client(cls.server)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()  # else its idle keep-alive connection holds a server thread for 5 s at shutdown
        code = cls.server.stop()
        assert code == 0, "".join(cls.server.log)

    def tearDown(self):
        m = self.server.wait_idle()
        self.assertEqual(m["kvx_cache_check_failures_total"], 0, "".join(self.server.log))

    def test_models_and_health(self):
        self.assertEqual([m.id for m in self.client.models.list().data], ["stories260K"])
        status, _, body = self.server.request("GET", "/health")
        self.assertEqual((status, json.loads(body)), (200, {"status": "ok"}))

    def test_greedy_from_bos_is_run_c_golden_text(self):
        with open(GOLDEN, encoding="utf-8") as f:
            golden = f.read()
        answer = self.client.completions.create(model="stories260K", prompt="", max_tokens=256, temperature=0)
        self.assertEqual(answer.choices[0].text + "\n", golden)
        self.assertEqual(answer.usage.prompt_tokens, 1)  # BOS
        self.assertEqual(answer.usage.completion_tokens, 256)
        self.assertEqual(answer.usage.total_tokens, 257)
        self.assertEqual(answer.choices[0].finish_reason, "length")

    def test_streaming_gives_the_whole_answer_in_pieces_and_usage_last(self):
        r = mixed_requests(4)[3]
        whole = complete(self.client, r)
        stream = self.client.completions.create(model="stories260K", prompt=r["prompt"], max_tokens=r["max_tokens"],
                                                temperature=r["temperature"], seed=r["seed"], top_p=r["top_p"],
                                                extra_body={"top_k": r["top_k"]}, stream=True)
        pieces, finish, usage = [], None, None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for choice in chunk.choices:
                pieces.append(choice.text)
                finish = choice.finish_reason or finish
        self.assertGreater(len(pieces), 3)
        self.assertEqual("".join(pieces), whole)
        self.assertEqual(finish, "length")
        self.assertEqual(usage.completion_tokens, r["max_tokens"])

    def test_sixteen_concurrent_requests_each_get_what_generate_gives_alone(self):
        requests = mixed_requests(16)
        expected = [expected_for(r) for r in requests]
        before = self.server.metrics()
        with ThreadPoolExecutor(16) as pool:
            got = list(pool.map(lambda r: complete(self.client, r), requests))
        after = self.server.metrics()
        for r, e, g in zip(requests, expected, got):
            self.assertEqual(g, e, r)
        # They ran batched: some passes held rows of several requests.
        self.assertGreater(after["kvx_batched_steps_total"], before["kvx_batched_steps_total"])

    def test_n_choices_share_the_prompt_and_draw_from_seed_plus_index(self):
        answer = self.client.completions.create(model="stories260K", prompt="Lily went", max_tokens=30,
                                                temperature=1.0, seed=7, n=3)
        texts = [c.text for c in sorted(answer.choices, key=lambda c: c.index)]
        self.assertEqual(texts, [generate_alone("Lily went", 30, 1.0, 7 + i) for i in range(3)])
        self.assertEqual(answer.usage.completion_tokens, 90)
        self.assertEqual(answer.usage.prompt_tokens, len(run("tokenize", "-p", "Lily went")[1].split(",")))

    def test_stop_strings_cut_the_text_streamed_or_not(self):
        full = generate_alone("Once upon a time", 60)
        stop = full[20:26]  # starts inside the answer, spans tokens
        self.assertIn(stop, full)
        want = full[:full.index(stop)]
        answer = self.client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=60,
                                                temperature=0, stop=["never appears", stop])
        self.assertEqual(answer.choices[0].text, want)
        self.assertEqual(answer.choices[0].finish_reason, "stop")
        stream = self.client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=60,
                                                temperature=0, stop=stop, stream=True)
        self.assertEqual("".join(c.text for chunk in stream for c in chunk.choices), want)

    def test_logprobs_are_onnxruntime_log_softmax(self):
        tokens = np.load(os.path.join(FIXTURES, "stories260K", "tokens.npy")).tolist()
        logits = np.load(os.path.join(FIXTURES, "stories260K", "ref_logits.npy")).astype(np.float64)
        for n in (8, 31):
            answer = self.client.completions.create(model="stories260K", prompt=tokens[:n], max_tokens=1,
                                                    temperature=0, logprobs=5)
            lp = answer.choices[0].logprobs
            row = logits[n - 1]
            ref = row - row.max() - np.log(np.exp(row - row.max()).sum())
            best = int(np.argmax(row))
            self.assertAlmostEqual(lp.token_logprobs[0], ref[best], delta=1e-4)
            top = sorted(lp.top_logprobs[0].values(), reverse=True)
            self.assertEqual(len(top), 5)
            np.testing.assert_allclose(top, np.sort(ref)[::-1][:5], atol=1e-4)
            self.assertEqual(lp.tokens[0], answer.choices[0].text)
            self.assertEqual(lp.text_offset, [0])

    def test_bad_requests_get_the_openai_error_object(self):
        bad = [({"max_tokens": "ten"}, "max_tokens"), ({"temperature": "hot"}, "temperature"),
               ({"temperature": 3}, "temperature"), ({"top_p": 0}, "top_p"), ({"n": 0}, "n"), ({"n": 17}, "n"),
               ({"logprobs": 21}, "logprobs"), ({"stop": 5}, "stop"), ({"seed": 1.5}, "seed"),
               ({"prompt": 5}, "prompt"), ({"prompt": [1, 9999]}, "prompt"), ({"stream": "yes"}, "stream")]
        for fields, param in bad:
            body = {"model": "stories260K", "prompt": "Once", "max_tokens": 4, **fields}
            status, _, answer = self.server.request("POST", "/v1/completions", body)
            error = json.loads(answer)["error"]
            self.assertEqual((status, error["param"], error["type"]), (400, param, "invalid_request_error"), fields)
            self.assertIn(param if param != "prompt" else "", error["message"])
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model="stories260K", prompt="Once", max_tokens=4, temperature=-1)

    def test_malformed_json_unknown_fields_and_unknown_endpoints(self):
        status, _, body = self.server.request("POST", "/v1/completions", b'{"prompt": "Once", ')
        self.assertEqual(status, 400)
        self.assertIn("not valid JSON", json.loads(body)["error"]["message"])
        status, _, body = self.server.request("POST", "/v1/completions", {"prompt": "Once", "max_tokens": 2,
                                                                           "temperature": 0, "frobnicate": [1]})
        self.assertEqual(status, 200, body)
        status, _, body = self.server.request("GET", "/v1/nothing")
        self.assertEqual((status, json.loads(body)["error"]["type"]), (404, "not_found_error"))

    def test_prompt_beyond_the_context_and_unknown_model(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="stories260K", prompt=[1] + [300] * 600, max_tokens=1)
        self.assertEqual(e.exception.code, "context_length_exceeded")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="stories260K", prompt="Once", max_tokens=600)
        self.assertEqual(e.exception.code, "context_length_exceeded")
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.completions.create(model="gpt-4", prompt="Once", max_tokens=1)
        self.assertEqual(e.exception.code, "model_not_found")

    def test_chat_without_a_template_says_why(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(model="stories260K", messages=[{"role": "user", "content": "Hi"}])
        self.assertIn("chat template", str(e.exception))

    def test_clients_that_leave_mid_stream_free_their_sequences(self):
        before = self.server.metrics()
        for i in range(20):
            sock = socket.create_connection(("127.0.0.1", self.server.port), timeout=30)
            body = json.dumps({"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 400, "temperature": 0.8,
                               "seed": i, "stream": True}).encode()
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            received = b""
            while b"data: " not in received:  # the first chunk came: it is generating
                more = sock.recv(4096)
                self.assertTrue(more, received)
                received += more
            sock.close()
        after = self.server.wait_idle()
        self.assertGreaterEqual(after['kvx_requests_total{status="aborted"}'] -
                                before['kvx_requests_total{status="aborted"}'], 1)
        self.assertLess(after["kvx_decode_tokens_total"] - before["kvx_decode_tokens_total"], 20 * 399)

    def test_a_thousand_short_requests_leak_no_block_and_no_memory(self):
        body = {"prompt": "The cat", "max_tokens": 2, "temperature": 0.5}

        def one(i):
            status, _, answer = self.server.request("POST", "/v1/completions", {**body, "seed": i})
            self.assertEqual(status, 200, answer)

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(one, range(200)))
            rss = self.server.rss_kib()
            list(pool.map(one, range(200, 1000)))
        m = self.server.wait_idle()
        self.assertEqual(m["kvx_cache_check_failures_total"], 0)
        if not SANITIZED:  # AddressSanitizer's quarantine holds freed memory on purpose
            self.assertLess(self.server.rss_kib() - rss, 16 * 1024)


class SmallPoolTest(unittest.TestCase):
    """Eight requests that need 56 blocks together, in a pool of 12: the newest are preempted and recomputed."""

    def test_preempted_requests_still_get_exact_complete_answers(self):
        server = KvxServer("--check-cache", "--kv-blocks", "12", "--max-seqs", "8")
        try:
            c = client(server)
            self.addCleanup(c.close)
            requests = [{"prompt": PROMPTS[i], "max_tokens": 90, "temperature": 0.0 if i % 2 == 0 else 0.8,
                         "seed": 40 + i, "top_k": 0, "top_p": 1.0} for i in range(8)]
            expected = [expected_for(r) for r in requests]
            with ThreadPoolExecutor(8) as pool:
                got = list(pool.map(lambda r: complete(c, r), requests))
            self.assertEqual(got, expected)
            m = server.wait_idle()
            self.assertGreater(m["kvx_preemptions_total"], 0)
            self.assertEqual(m["kvx_cache_check_failures_total"], 0)
        finally:
            self.assertEqual(server.stop(), 0, "".join(server.log))

    def test_a_request_larger_than_the_pool_is_refused(self):
        server = KvxServer("--kv-blocks", "4")
        try:
            with self.assertRaises(openai.BadRequestError) as e, client(server) as c:
                c.completions.create(model="stories260K", prompt="Once", max_tokens=100)
            self.assertIn("KV blocks", str(e.exception))
        finally:
            self.assertEqual(server.stop(), 0, "".join(server.log))


class QueueAuthAndShutdownTest(unittest.TestCase):
    def test_a_full_queue_answers_503_with_retry_after(self):
        server = KvxServer("--max-seqs", "1", "--max-queue", "1", "--step-tokens", "1")
        try:
            body = {"prompt": [1] + [300] * 400, "max_tokens": 100, "temperature": 0}
            with ThreadPoolExecutor(6) as pool:
                answers = list(pool.map(lambda _: server.request("POST", "/v1/completions", body), range(6)))
            statuses = sorted(a[0] for a in answers)
            self.assertIn(200, statuses)
            self.assertIn(503, statuses)
            for status, headers, _ in answers:
                if status == 503:
                    self.assertEqual(headers.get("Retry-After"), "1")
        finally:
            self.assertEqual(server.stop(), 0, "".join(server.log))

    def test_api_key(self):
        server = KvxServer("--api-key", "sesame")
        try:
            with self.assertRaises(openai.AuthenticationError), client(server, "wrong") as c:
                c.completions.create(model="stories260K", prompt="Once", max_tokens=2)
            status, _, _ = server.request("GET", "/v1/models")
            self.assertEqual(status, 401)
            status, _, _ = server.request("GET", "/health")
            self.assertEqual(status, 200)
            with client(server, "sesame") as c:
                answer = c.completions.create(model="stories260K", prompt="Once", max_tokens=2)
            self.assertEqual(answer.usage.completion_tokens, 2)
        finally:
            self.assertEqual(server.stop(), 0, "".join(server.log))

    def test_sigterm_ends_running_streams_cleanly_and_exits_0(self):
        server = KvxServer("--shutdown-grace", "0", "--step-tokens", "1")
        c = client(server)
        self.addCleanup(c.close)
        stream = iter(c.completions.create(model="stories260K", prompt="Once", max_tokens=500, temperature=0.8,
                                           seed=1, stream=True, extra_body={"ignore_eos": True}))
        next(stream)  # it is generating
        server.proc.send_signal(signal.SIGTERM)
        finishes = [c.finish_reason for chunk in stream for c in chunk.choices if c.finish_reason]
        c.close()
        code = server.stop()
        self.assertEqual(code, 0, "".join(server.log))
        self.assertEqual(finishes, ["abort"])
        self.assertIn("stopped", "".join(server.log))


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False).result.wasSuccessful() else 1)
