"""Decode speed of `kvx generate` with and without --speculative K, on prompts that repeat a passage.

    python3 -m kvx_tools.bench.speculative_speed [--kvx build/bin/kvx] [--runs 5] [--k 4 8] [--smollm2 DIR] \\
        [-t THREADS]

For each model (stories260K, built in; SmolLM2-135M-Instruct where its converted directory exists) the script
runs plain greedy decoding and greedy decoding with each K, alternately in the same loop so that every mode
sees the same machine, after one warm-up run of each. It checks that every mode printed the same text (greedy
speculative decoding must not change it), then prints per mode the median decode speed (tokens sampled from
the decode passes per second of decoding, kvx's stats line), the speed-up over plain decoding, the acceptance
rate and the tokens per forward pass.
"""
import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys

from ..checkout import REPO

# The SmolLM2 fixture's kvx model, where the tests' fixture step makes it ($KVX_MODEL_CACHE or .cache/models).
DEFAULT_SMOLLM2 = os.path.join(os.environ.get("KVX_MODEL_CACHE") or os.path.join(REPO, ".cache", "models"),
                               "smollm2-135m-instruct", "fixture", "model")
DECODE = re.compile(r"generated (\d+) tokens, (\d+) decode steps in ([0-9.]+) ms \(([0-9.]+) tokens/s\)")
SPECULATIVE = re.compile(r"drafted (\d+) tokens, accepted (\d+) \(([0-9.]+)%\), (\d+) forward passes, "
                         r"([0-9.]+) tokens per pass")

# A passage repeated, then its first words again: a model that copies its context (as one asked to quote,
# summarise or edit a text does) continues with the passage. stories260K's passage is the start of its own
# greedy story (llama2.c's golden text), which it copies more readily than a foreign one.
GOLDEN = os.path.join(REPO, "testdata", "models", "stories260K", "golden_greedy_n256_runc.txt")
PASSAGE = ("The old lighthouse stood at the edge of the cliff, its white paint peeling in the salt wind. Every "
           "night the keeper climbed the narrow stairs, lit the great lamp and watched the ships pass safely "
           "through the dark water below. ")


def run_once(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"speculative_speed: {shlex.join(cmd)} failed:\n{proc.stderr}")
    decode = DECODE.search(proc.stderr)
    if not decode:
        sys.exit(f"speculative_speed: no decode stats in the output of {shlex.join(cmd)}")
    spec = SPECULATIVE.search(proc.stderr)
    return proc.stdout, float(decode.group(4)), spec


def bench_model(name, base_cmd, ks, runs):
    modes = [("plain", [])] + [(f"K={k}", ["--speculative", str(k)]) for k in ks]
    rates = {mode: [] for mode, _ in modes}
    texts, specs = {}, {}
    for mode, extra in modes:  # warm-up: page cache, CPU frequency
        texts[mode], _, specs[mode] = run_once(base_cmd + extra)
    for _ in range(runs):
        for mode, extra in modes:
            text, rate, _ = run_once(base_cmd + extra)
            if text != texts["plain"]:
                sys.exit(f"speculative_speed: {name} {mode} printed a different text than plain decoding")
            rates[mode].append(rate)
    print(f"{name}: {shlex.join(base_cmd)}")
    plain = statistics.median(rates["plain"])
    for mode, _ in modes:
        median = statistics.median(rates[mode])
        line = (f"  {mode:6s} median {median:8.1f} tokens/s (min {min(rates[mode]):.1f}, max {max(rates[mode]):.1f}, "
                f"{runs} runs), speed-up {median / plain:.2f}x")
        spec = specs[mode]
        if spec:
            line += (f", accepted {spec.group(2)} of {spec.group(1)} drafts ({spec.group(3)}%), "
                     f"{spec.group(5)} tokens per pass")
        print(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kvx", default=os.path.join(REPO, "build", "bin", "kvx"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--k", type=int, nargs="+", default=[4, 8])
    parser.add_argument("-n", type=int, default=200, help="new tokens per run")
    parser.add_argument("-t", "--threads", type=int, default=0, help="kvx -t; 0 = kvx's default (every core)")
    parser.add_argument("--smollm2", default=DEFAULT_SMOLLM2, help="SmolLM2's converted model directory, if present")
    args = parser.parse_args()

    common = ["-n", str(args.n), "--temp", "0"] + (["-t", str(args.threads)] if args.threads else [])
    with open(GOLDEN, encoding="utf-8") as f:
        story = f.read()[:300]
    bench_model("stories260K", [args.kvx, "generate", "-p", f"{story} {story} Once upon"] + common, args.k, args.runs)
    if os.path.isfile(os.path.join(args.smollm2, "config.json")):
        prompt = PASSAGE * 3 + "The old lighthouse"
        bench_model("SmolLM2-135M-Instruct", [args.kvx, "generate", "-m", args.smollm2, "-p", prompt] + common,
                    args.k, args.runs)
    else:
        print(f"SmolLM2: no converted model at {args.smollm2}, skipped")


if __name__ == "__main__":
    main()
