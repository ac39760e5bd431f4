"""Prints a summary of kvx-bench's JSON (tools/bench/kernel_bench.sh writes bench/results/kernels.json).

Two tables: every benchmark with its time, GB/s and GFLOP/s and their fractions of the machine's ceilings
(the read ceiling at T threads raised to the best GB/s a GEMV at T threads read from DRAM, and said so: this
machine's bandwidth moves during a sweep, and a fraction above 100% would only mean a low ceiling);
then decode attention, paged against contiguous at each size, with the paged/contiguous time ratio. Ends
with the goal the paged cache is held to: paged (fp32) attention within 10% of contiguous at every context
measured (docs/benchmarks.md).

With repetitions (--benchmark_repetitions), the median aggregate of each benchmark is used.

    python3 -m kvx_tools.bench.kernel_summary [bench/results/kernels.json]
"""
import argparse
import json
import sys
from collections import defaultdict

GOAL_RATIO = 1.10  # paged time / contiguous time
LAYOUTS = {0: "contiguous", 1: "paged_f32", 2: "paged_f16"}


def load_runs(path):
    """(context, [run]) with one run per benchmark: the median aggregate when repeated, else the run."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"kernel_summary: cannot read {path}: {e}")
    if "benchmarks" not in data:
        sys.exit(f"kernel_summary: {path} is not Google Benchmark JSON (no 'benchmarks')")
    runs = data["benchmarks"]
    medians = [r for r in runs if r.get("run_type") == "aggregate" and r.get("aggregate_name") == "median"]
    if medians:
        runs = medians
    return data.get("context", {}), [r for r in runs if "error_occurred" not in r]


def split_name(run_name):
    """'decode_attention/smollm2/threads:1/context:128/real_time' -> ('decode_attention/smollm2', {...}), the
    arguments' values as text ('min_time:0.010' is one too)."""
    family, args = [], {}
    for part in run_name.split("/"):
        if ":" in part:
            key, value = part.split(":", 1)
            args[key] = value
        elif part not in ("real_time", "manual_time"):
            family.append(part)
    return "/".join(family), args


def micros(run):
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[run["time_unit"]]
    return run["real_time"] * scale


def fmt(value, spec):
    return format(value, spec) if value is not None else "-"


def threads_of(run):
    return int(split_name(run["run_name"])[1].get("threads", 0))


def read_ceilings(context, runs):
    """{threads: GB/s}: the read loops' figure from the JSON context, raised to the best a GEMV at that thread
    count read (the GEMVs rotate their matrix through copies far larger than the L3, so they read DRAM; other
    benchmarks may work from the caches); prints each raise."""
    ceilings = {}
    for key, value in context.items():
        if key.startswith("kvx_read_GBps_threads_"):
            ceilings[int(key.rsplit("_", 1)[1])] = float(value)
    for threads, measured in sorted(ceilings.items()):
        at = [r for r in runs if threads_of(r) == threads and r.get("GB/s") and r["run_name"].startswith("gemv/")]
        best = max(at, key=lambda r: r["GB/s"], default=None)
        if best and best["GB/s"] > measured:
            ceilings[threads] = best["GB/s"]
            print(f"read ceiling at {threads} thread(s): the read loops measured {measured:.1f} GB/s at start-up, "
                  f"{best['run_name']} read {best['GB/s']:.1f}: fractions below are of the latter")
    return ceilings


def print_all(runs, ceilings):
    print(f"{'benchmark':<78} {'time us':>10} {'GB/s':>8} {'of bw':>6} {'GFLOP/s':>8} {'of peak':>7}")
    for run in runs:
        ceiling = ceilings.get(threads_of(run))
        of_bw = run["GB/s"] / ceiling if run.get("GB/s") and ceiling else None
        print(f"{run['run_name']:<78} {micros(run):>10.2f} {fmt(run.get('GB/s'), '8.2f'):>8} "
              f"{fmt(of_bw, '6.2f'):>6} {fmt(run.get('GFLOP/s'), '8.2f'):>8} "
              f"{fmt(run.get('frac_of_peak_fma', run.get('frac_of_peak_int8')), '7.3f'):>7}")


def attention_table(runs):
    """{(family, threads, context, batch, block): {layout name: microseconds}}"""
    table = defaultdict(dict)
    for run in runs:
        family, args = split_name(run["run_name"])
        if not family.startswith("decode_attention/"):
            continue
        key = tuple([family] + [int(args[name]) for name in ("threads", "context", "batch", "block")])
        table[key][LAYOUTS[int(args["layout"])]] = micros(run)
    return table


def print_attention(table):
    print()
    print(f"{'attention':<32} {'threads':>7} {'context':>7} {'batch':>5} {'block':>5} | {'contig us':>10} "
          f"{'paged us':>10} {'f16 us':>10} | {'paged/contig':>12} {'f16/contig':>10}")
    worst = {}  # context -> (ratio, key)
    for key in sorted(table):
        times = table[key]
        contiguous, paged, f16 = (times.get(n) for n in ("contiguous", "paged_f32", "paged_f16"))
        ratio = paged / contiguous if paged and contiguous else None
        ratio_f16 = f16 / contiguous if f16 and contiguous else None
        flag = "  > 10% slower" if ratio is not None and ratio > GOAL_RATIO else ""
        family, threads, context, batch, block = key
        print(f"{family:<32} {threads:>7} {context:>7} {batch:>5} {block:>5} | {fmt(contiguous, '10.1f'):>10} "
              f"{fmt(paged, '10.1f'):>10} {fmt(f16, '10.1f'):>10} | {fmt(ratio, '12.3f'):>12} "
              f"{fmt(ratio_f16, '10.3f'):>10}{flag}")
        if ratio is not None and (context not in worst or ratio > worst[context][0]):
            worst[context] = (ratio, key)
    if not worst:
        return True
    print()
    print("worst paged/contiguous time ratio per context (fp32):")
    for context in sorted(worst):
        ratio, key = worst[context]
        print(f"  context {context:>6}: {ratio:.3f}  ({key[0]}, threads {key[1]}, batch {key[3]}, block {key[4]})")
    met = all(ratio <= GOAL_RATIO for ratio, _ in worst.values())
    print(f"goal (paged within 10% of contiguous at every context): {'met' if met else 'NOT met'}")
    return met


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="?", default="bench/results/kernels.json")
    args = parser.parse_args()
    context, runs = load_runs(args.json)
    ceilings = {k: v for k, v in context.items() if k.startswith("kvx_")}
    print(f"{context.get('host_name', '?')}, {context.get('num_cpus', '?')} cpus, "
          + ", ".join(f"{k} {v}" for k, v in sorted(ceilings.items())))
    print_all(runs, read_ceilings(context, runs))
    print_attention(attention_table(runs))


if __name__ == "__main__":
    main()
