"""The figures of docs/benchmarks.md, from the JSON in bench/results/:

    python3 -m kvx_tools.bench.plot_benchmarks [--results bench/results] [--out docs/img]

  e2e_decode_vs_context.png  kvx's SmolLM2 decode tokens/s against the prompt length, with the speed-of-light
                             ceiling at each (e2e.json, context_sweep)
  e2e_vs_peers.png           SmolLM2 decode and 512-token prefill tokens/s of kvx and its peers (e2e.json)
  kernel_bandwidth.png       GB/s of each kernel against its size (kernels.json, Google Benchmark's JSON);
                             skipped when the file is absent or has no GB/s counters
  size_sweep.png             kvx / llama.cpp decode and prefill against model size, and each engine's decode
                             as a fraction of the read ceiling (size_sweep.json, size_sweep.py)

    --figures NAME ...       only these (e2e, kernels, size_sweep); all by default
"""
import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from ..checkout import REPO  # noqa: E402
from .kernel_summary import load_runs, split_name  # noqa: E402  (Google Benchmark's JSON and names)

ENGINE_ORDER = ["kvx", "llama.cpp", "onnxruntime-genai"]


def plot_decode_vs_context(e2e, out):
    sweep = e2e["context_sweep"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for precision, colour in (("f32", "tab:blue"), ("f16", "tab:orange")):
        points = sorted((c["prompt_tokens"] + c["new_tokens"] / 2, c) for c in sweep if c["precision"] == precision)
        if not points:
            continue
        x = [p for p, _ in points]
        threads = points[0][1]["threads"]
        ax.plot(x, [c["decode_tokens_per_s"]["median"] for _, c in points], "o-", color=colour,
                label=f"kvx {precision} weights, {threads} threads")
        ax.plot(x, [c["ceiling_tokens_per_s"] for _, c in points], "--", color=colour,
                label=f"speed of light, {precision}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("mean context during decode (tokens)")
    ax.set_ylabel("decode tokens/s (median)")
    ax.set_ylim(bottom=0)
    ax.set_title("SmolLM2-135M decode speed against context length")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_vs_peers(e2e, out):
    smol = [c for c in e2e["cases"] if c["model"] == "SmolLM2-135M"]
    groups = sorted({(c["precision"], c["threads"]) for c in smol}, key=lambda g: (g[0] != "f32", g[1]))
    engines = [e for e in ENGINE_ORDER if any(c["engine"] == e for c in smol)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    panels = ((axes[0], "decode_tokens_per_s", lambda c: c["new_tokens"] > 1, "decode (128-token prompt)"),
              (axes[1], "prefill_tokens_per_s", lambda c: c["prompt_tokens"] == 512, "prefill of 512 tokens"))
    width = 0.8 / max(len(engines), 1)
    for ax, metric, chosen, title in panels:
        for k, engine in enumerate(engines):
            heights = []
            for precision, threads in groups:
                match = [c for c in smol if c["engine"] == engine and c["precision"] == precision
                         and c["threads"] == threads and chosen(c) and c[metric]]
                heights.append(match[0][metric]["median"] if match else 0)
            ax.bar([g + (k - (len(engines) - 1) / 2) * width for g in range(len(groups))], heights, width,
                   label=engine)
        if metric == "decode_tokens_per_s":
            for g, (precision, threads) in enumerate(groups):
                ceiling = next(c["ceiling_tokens_per_s"] for c in smol if c["precision"] == precision
                               and c["threads"] == threads and chosen(c))
                ax.hlines(ceiling, g - 0.45, g + 0.45, colors="k", linestyles="--",
                          label="speed of light" if g == 0 else None)
        ax.set_xticks(range(len(groups)), [f"{p}, {t} thr" for p, t in groups])
        ax.set_ylim(0, ax.get_ylim()[1] * 1.25)  # room for the legend above the bars and the ceilings
        ax.set_ylabel("tokens/s (median)")
        ax.set_title(f"SmolLM2-135M {title}")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def kernel_series(runs):
    """{family: {series label: [(size, GB/s)]}} from kernel_summary.load_runs's runs (median aggregates where
    the run has repetitions). A family is the first word of the benchmark names (one panel each); within a
    benchmark, the size is the integer argument with the most distinct values (other than threads, when
    there is another), and every combination of the other arguments is a series. Runs without a GB/s or
    bytes_per_second are skipped."""
    by_benchmark = defaultdict(list)
    for run in runs:
        # kvx-bench reports a "GB/s" rate counter; Google Benchmark's own SetBytesProcessed gives bytes_per_second.
        gbs = run["GB/s"] if "GB/s" in run else run.get("bytes_per_second", 0) / 1e9
        if gbs > 0:
            name, args = split_name(run.get("run_name", run["name"]))
            by_benchmark[name].append(({k: int(v) for k, v in args.items() if v.isdigit()}, gbs))
    families = defaultdict(lambda: defaultdict(list))
    for name, points in by_benchmark.items():
        keys = {k for params, _ in points for k in params}
        candidates = [k for k in keys if k != "threads"] or sorted(keys)
        if not candidates:
            continue
        size = max(sorted(candidates), key=lambda k: len({params.get(k) for params, _ in points}))
        for params, gbs in points:
            rest = ",".join(f"{k}={v}" for k, v in sorted(params.items()) if k != size)
            label = f"{name} {rest}".strip()
            families[name.split("/")[0]][label].append((params.get(size, 0), gbs, size))
    return {family: {label: sorted(points) for label, points in series.items()}
            for family, series in families.items()}


def plot_kernel_bandwidth(runs, out, read_bandwidth=None):
    families = kernel_series(runs)
    if not families:
        return False
    columns = min(len(families), 2)
    rows = (len(families) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(7 * columns, 4.2 * rows), squeeze=False)
    for ax, (family, series) in zip(axes.flat, sorted(families.items())):
        for label, points in sorted(series.items()):
            ax.plot([p[0] for p in points], [p[1] for p in points], "o-", markersize=3, label=label)
        for threads, gbs in (read_bandwidth or {}).items():
            ax.axhline(gbs, color="k", linestyle=":", linewidth=1)
            ax.annotate(f"streaming read, {threads} thr", (0.01, gbs), xycoords=("axes fraction", "data"),
                        fontsize=7)
        size_names = sorted({p[2] for points in series.values() for p in points})
        ax.set_xscale("log", base=2)
        ax.set_xlabel(", ".join(size_names))
        ax.set_ylabel("GB/s")
        ax.set_title(family)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=5, ncol=2)
    for ax in list(axes.flat)[len(families):]:
        ax.set_visible(False)
    fig.suptitle("CPU kernels: bytes moved per second against size")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def plot_size_sweep(sweep, out):
    rows = sweep["rows"]
    formats = sorted({r["file"].rsplit(" ", 1)[-1] for r in rows})
    markers = dict(zip(formats, "osD^vP*X"))
    colours = {1: "tab:blue", 2: "tab:orange"}
    fig, (ratio_ax, ceiling_ax) = plt.subplots(1, 2, figsize=(12, 4.6))
    for threads in sorted({r["threads"] for r in rows}):
        for fmt in formats:
            points = sorted((r["parameters"], r) for r in rows if r["threads"] == threads and r["file"].endswith(fmt))
            if not points:
                continue
            x = [p / 1e9 for p, _ in points]
            medians = [r["median"] for _, r in points]
            for kind, style in (("decode", "-"), ("prefill", "--")):
                ratio_ax.plot(x, [m["kvx"][kind] / m["llama.cpp"][kind] for m in medians], style, marker=markers[fmt],
                              color=colours.get(threads, "tab:green"), label=f"{kind}, {fmt}, {threads} threads")
            for engine, style in (("kvx", "-"), ("llama.cpp", ":")):
                ceiling_ax.plot(x, [r["decode_of_ceiling"][engine] for _, r in points], style, marker=markers[fmt],
                                color=colours.get(threads, "tab:green"), label=f"{engine}, {fmt}, {threads} threads")
    ratio_ax.axhline(1.0, color="grey", linewidth=0.8)
    ratio_ax.axhline(1.3, color="grey", linewidth=0.8, linestyle="--")
    ratio_ax.set(xscale="log", xlabel="parameters (billions)", ylabel="kvx / llama.cpp b11434 (tokens/s)",
                 title="decode (solid) and prefill 512 (dashed)")
    ceiling_ax.axhline(0.85, color="grey", linewidth=0.8, linestyle="--")
    ceiling_ax.set(xscale="log", ylim=(0, 1.05), xlabel="parameters (billions)",
                   ylabel="decode bytes per second / read ceiling", title="decode against the read ceiling")
    sizes = sorted({r["parameters"] / 1e9 for r in rows})
    for ax in (ratio_ax, ceiling_ax):
        ax.set_xticks(sizes, [f"{s:.2g}" for s in sizes], minor=False)
        ax.set_xticks([], minor=True)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    commits = sorted({r["run"]["kvx_commit"] for r in rows})
    fig.suptitle(f"{rows[0]['run']['machine']['cpu']}, kvx {', '.join(commits)}", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


FIGURES = ("e2e", "kernels", "size_sweep")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    parser.add_argument("--figures", nargs="+", choices=FIGURES, default=list(FIGURES))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    e2e_path, kernels_path = args.results / "e2e.json", args.results / "kernels.json"
    bandwidth = None
    if "e2e" in args.figures:
        if e2e_path.exists():
            e2e = json.loads(e2e_path.read_text())
            plot_decode_vs_context(e2e, args.out / "e2e_decode_vs_context.png")
            plot_vs_peers(e2e, args.out / "e2e_vs_peers.png")
            bandwidth = e2e["read_bandwidth_gb_s"]["before"]
            print(f"plot_benchmarks: e2e figures from {e2e_path}", file=sys.stderr)
        else:
            print(f"plot_benchmarks: no {e2e_path}, no end-to-end figures", file=sys.stderr)
    if "kernels" in args.figures:
        if kernels_path.exists() and plot_kernel_bandwidth(load_runs(kernels_path)[1], args.out / "kernel_bandwidth.png",
                                                           bandwidth):
            print(f"plot_benchmarks: kernel figure from {kernels_path}", file=sys.stderr)
        else:
            print(f"plot_benchmarks: no GB/s counters in {kernels_path} (absent?), no kernel figure", file=sys.stderr)
    sweep_path = args.results / "size_sweep.json"
    if "size_sweep" in args.figures and sweep_path.exists():
        plot_size_sweep(json.loads(sweep_path.read_text()), args.out / "size_sweep.png")
        print(f"plot_benchmarks: size sweep figure from {sweep_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
