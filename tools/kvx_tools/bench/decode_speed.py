"""Median decode speed of `kvx generate` over repeated runs, after a warm-up run.

    python3 -m kvx_tools.bench.decode_speed [--runs N] [--peer 'CMD ...'] \\
        -- build/bin/kvx generate -p "" -n 256 --temp 0 -t 1

kvx's speed is read from its stats line ("... decode steps in X ms (Y tokens/s)"). A peer command, run
alternately with kvx in the same script so both see the same machine, is read from a line
"achieved tok/s: Y" (llama2.c run.c's format).
"""
import argparse
import re
import shlex
import statistics
import subprocess
import sys

KVX_RATE = re.compile(r"decode steps in [0-9.]+ ms \(([0-9.]+) tokens/s\)")
PEER_RATE = re.compile(r"achieved tok/s: ([0-9.]+)")


def rate(cmd, pattern):
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    match = pattern.search(proc.stderr + proc.stdout)
    if not match:
        sys.exit(f"decode_speed: no speed in the output of {shlex.join(cmd)}")
    return float(match.group(1))


def summary(name, rates):
    return f"{name}: median {statistics.median(rates):.0f} tokens/s (min {min(rates):.0f}, max {max(rates):.0f}, {len(rates)} runs)"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--peer", help="a peer command that prints 'achieved tok/s: Y'")
    parser.add_argument("kvx", nargs=argparse.REMAINDER, help="-- then the kvx generate command")
    args = parser.parse_args()
    kvx_cmd = args.kvx[1:] if args.kvx[:1] == ["--"] else args.kvx
    if not kvx_cmd:
        parser.error("give the kvx command after --")
    peer_cmd = shlex.split(args.peer) if args.peer else None

    rate(kvx_cmd, KVX_RATE)  # warm-up: page cache, CPU frequency
    if peer_cmd:
        rate(peer_cmd, PEER_RATE)
    kvx_rates, peer_rates = [], []
    for _ in range(args.runs):
        kvx_rates.append(rate(kvx_cmd, KVX_RATE))
        if peer_cmd:
            peer_rates.append(rate(peer_cmd, PEER_RATE))
    print(summary("kvx ", kvx_rates))
    if peer_cmd:
        print(summary("peer", peer_rates))
        print(f"ratio kvx / peer (medians): {statistics.median(kvx_rates) / statistics.median(peer_rates):.2f}")


if __name__ == "__main__":
    main()
