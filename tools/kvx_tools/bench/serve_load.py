"""kvx serve against llama.cpp's llama-server under the same load: SmolLM2-135M with fp16 weights (kvx's
directory and llama.cpp's GGUF, both from the same Q4_1 file: e2e_speed.smollm2_paths), or with --gguf one
GGUF file that both servers load (a quantized one: gguf_speed's requantizations), fp16 KV caches, the
same threads, the same token-id prompts, 64 new tokens per request (ignore_eos, so every request does the same
work), streamed. Writes bench/results/serve.json and prints docs/benchmarks.md's table.

    python3 -m kvx_tools.bench.serve_load --llama-server PATH [--rounds 3] [--concurrency 1 4 16 64]

For each concurrency C, C client threads send requests one after another until 2C requests (at least 8) are
answered. A round runs every C on both servers, one after the other, so both see the same machine; the first
round is a warm-up. Figures are medians over the rounds after it:
  tokens/s      all requests' new tokens / the run's wall time
  TTFT          from sending a request to its first token (median and p99 over the run's requests)
  TPOT          a request's time per token after the first: (last - first) / (tokens - 1), median and p99
  KV blocks     kvx's peak blocks in use (polled from /metrics) against what a contiguous cache reserving the
                whole context per request would hold: C * ceil(context / block size)
Both servers are up for the whole run and idle while the other works. The clients run on the same 2 cores
(their share of the CPU is the same for both servers).
"""
import argparse
import http.client
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..checkout import REPO
from .e2e_prompts import prompt_ids

CONTEXT = 512       # per sequence: the longest prompt (144) and 64 new tokens fit
BLOCK_SIZE = 16
NEW_TOKENS = 64
N_PROMPTS = 8


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class Server:
    def __init__(self, name, cmd, env=None):
        self.name = name
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        self.log = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line.decode("utf-8", "replace"))

    def wait_ready(self, port, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} did not start: {''.join(self.log[-20:])}")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stream_request(port, prompt):
    """(TTFT, TPOT, tokens) of one streamed completion."""
    body = json.dumps({"prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0, "stream": True,
                       "ignore_eos": True, "model": "smollm2"})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError(f"status {res.status}: {res.read()[:300]}")
    times = []
    for raw in res:
        line = raw.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if any(c.get("finish_reason") is None or c.get("text") for c in chunk.get("choices", [])):
            times.append(time.perf_counter())
    conn.close()
    tokens = len(times)
    tpot = (times[-1] - times[0]) / (tokens - 1) if tokens > 1 else 0.0
    return times[0] - start, tpot, tokens


def kv_blocks_in_use(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return int(float(re.search(r'kvx_kv_blocks\{group="0",state="in_use"\} (\S+)', text).group(1)))


def run_load(port, prompts, concurrency, poll_kv):
    total = max(8, 2 * concurrency)
    lock = threading.Lock()
    next_request = [0]
    results, errors = [], []
    peak = [0]
    done = threading.Event()

    def client():
        while True:
            with lock:
                i = next_request[0]
                if i >= total:
                    return
                next_request[0] += 1
            try:
                r = stream_request(port, prompts[i % len(prompts)])
            except Exception as e:  # noqa: BLE001 - reported after the run
                errors.append(e)
                return
            with lock:
                results.append(r)

    def poller():
        while not done.is_set():
            peak[0] = max(peak[0], kv_blocks_in_use(port))
            time.sleep(0.02)

    watcher = threading.Thread(target=poller) if poll_kv else None
    if watcher:
        watcher.start()
    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    done.set()
    if watcher:
        watcher.join()
    if errors:
        raise errors[0]
    tokens = sum(r[2] for r in results)
    assert tokens == total * NEW_TOKENS, f"{tokens} tokens for {total} requests"
    ttft = [r[0] for r in results]
    tpot = [r[1] for r in results]
    return {"requests": total, "tokens": tokens, "seconds": wall, "tokens_per_s": tokens / wall,
            "ttft_median": statistics.median(ttft), "ttft_p99": percentile(ttft, 0.99),
            "tpot_median": statistics.median(tpot), "tpot_p99": percentile(tpot, 0.99),
            "kv_blocks_peak": peak[0] if poll_kv else None}


def markdown_table(result):
    s = result["summary"]
    single = s["kvx/1"]["tokens_per_s"]
    lines = ["| clients | kvx tokens/s | llama.cpp tokens/s | kvx / llama.cpp | kvx / kvx at 1 client | "
             "TTFT median (p99) ms, kvx | llama.cpp | TPOT median (p99) ms, kvx | llama.cpp | "
             "kvx KV blocks peak / contiguous |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in sorted({int(k.split("/")[1]) for k in s}):
        k, l = s[f"kvx/{c}"], s[f"llama.cpp/{c}"]
        ms = lambda r, f: f"{1e3 * r[f + '_median']:.0f} ({1e3 * r[f + '_p99']:.0f})"
        lines.append(f"| {c} | {k['tokens_per_s']:.1f} | {l['tokens_per_s']:.1f} | "
                     f"{k['tokens_per_s'] / l['tokens_per_s']:.2f}x | {k['tokens_per_s'] / single:.2f}x | "
                     f"{ms(k, 'ttft')} | {ms(l, 'ttft')} | {ms(k, 'tpot')} | {ms(l, 'tpot')} | "
                     f"{k['kv_blocks_peak']:.0f} / {k['contiguous_blocks']} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-server", required=True, help="llama.cpp's llama-server binary")
    ap.add_argument("--kvx", default=str(REPO / "build" / "bin" / "kvx"))
    ap.add_argument("--rounds", type=int, default=3, help="rounds after the warm-up one")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "serve.json"))
    ap.add_argument("--gguf", type=Path,
                    help="a SmolLM2-135M GGUF that both servers load instead of the fp16 pair (e.g. gguf_speed's "
                         "Q4_0 or Q4_K_M requantization); the prompts stay the same ids")
    args = ap.parse_args()

    if args.gguf:
        if not args.gguf.is_file():
            sys.exit(f"serve_load: no GGUF file at {args.gguf}")
        # One file for both servers: the SmolLM2 fixture (make_smollm2, for the fp16 pair) is not needed. The
        # prompts are bench/prompts/smollm2.txt's ids, made from the GGUF itself if that file is missing.
        kvx_model = gguf = args.gguf
    else:
        from .e2e_speed import smollm2_paths
        paths = smollm2_paths(argparse.Namespace(kvx=Path(args.kvx)))
        kvx_model, gguf = paths["f16"]["kvx"], paths["f16"]["gguf"]
    long_prompt = prompt_ids("smollm2", args.kvx, kvx_model, 512)
    prompts = [long_prompt[37 * i: 37 * i + 32 + 16 * i] for i in range(N_PROMPTS)]  # 32 .. 144 tokens

    slots = max(args.concurrency)
    kvx_port, llama_port = free_port(), free_port()
    kvx = Server("kvx serve", [args.kvx, "serve", "-m", str(kvx_model), "--port", str(kvx_port), "-c", str(CONTEXT),
                               "--max-seqs", str(slots), "--kv-dtype", "f16", "-t", str(args.threads),
                               "--block-size", str(BLOCK_SIZE), "--http-threads", str(slots + 8), "--alias", "smollm2"],
                 env=os.environ)
    llama = Server("llama-server", [args.llama_server, "-m", str(gguf), "--host", "127.0.0.1", "--port",
                                    str(llama_port), "-c", str(CONTEXT * slots), "-np", str(slots), "-t",
                                    str(args.threads), "-tb", str(args.threads), "--cont-batching",
                                    "--threads-http", str(slots + 8), "--alias", "smollm2"])
    try:
        kvx.wait_ready(kvx_port)
        llama.wait_ready(llama_port)
        rounds = []
        for r in range(args.rounds + 1):
            record = {}
            for c in args.concurrency:
                for name, port in (("kvx", kvx_port), ("llama.cpp", llama_port)):
                    record[f"{name}/{c}"] = run_load(port, prompts, c, poll_kv=name == "kvx")
                    print(f"round {r} {name} C={c}: {record[f'{name}/{c}']['tokens_per_s']:.1f} tokens/s",
                          flush=True)
            rounds.append(record)
    finally:
        kvx.stop()
        llama.stop()
    measured = rounds[1:]
    summary = {}
    for key in measured[0]:
        summary[key] = {field: statistics.median(r[key][field] for r in measured)
                        for field in measured[0][key] if measured[0][key][field] is not None}
        c = int(key.split("/")[1])
        summary[key]["contiguous_blocks"] = c * math.ceil(CONTEXT / BLOCK_SIZE)
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "model": str(args.gguf.name) if args.gguf else "SmolLM2-135M f16", "context": CONTEXT,
              "new_tokens": NEW_TOKENS, "threads": args.threads, "prompts_tokens": [len(p) for p in prompts],
              "rounds": args.rounds, "summary": summary, "raw": rounds,
              "llama_server": subprocess.run([args.llama_server, "--version"], capture_output=True,
                                             text=True).stderr.strip().splitlines()[:2]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(markdown_table(result))


if __name__ == "__main__":
    sys.exit(main())
