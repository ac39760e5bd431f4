"""kvx and llama.cpp b11434 across model sizes: gguf_speed's decode and prefill rows for each file, with the bytes
a decode step reads and the machine's read ceiling measured in the same run, so that each engine's decode is
also a fraction of what the bytes allow.

    python3 -m kvx_tools.bench.size_sweep [--types Q4_K_M Q8_0 gemma3] [--file LABEL=PATH ...]
        [--threads 1 2] [--rounds 3] [--json bench/results/size_sweep.json]

Files as gguf_speed takes them (SmolLM2 requantized to --types, Gemma 3's own Q4_K_M, and --file: the
random-weight Llama-3.2-1B, Qwen2.5-3B and Llama-3.1-8B shapes of write_random_gguf, quantized by
llama-quantize). Per file:
  parameters      every tensor's elements (a tied embedding once)
  bytes per step  every stored tensor's bytes but an untied token embedding's (one row of it is read), plus
                  the KV cache at the decode's mean context (128 + 256 / 2 positions; kvx's default fp32 KV,
                  llama-bench's default fp16), each engine its own
  ceiling         kvx_read_bandwidth's best read loop at each thread count, measured before and after the
                  speed rows, the better of the two (a ceiling below an engine's figure would be a wrong one)
The JSON keeps its earlier rows for other files and thread counts, so large files can be run apart with fewer
rounds (a round at 8B takes several minutes on 2 cores); plot_benchmarks draws size_sweep.png from it.
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from ..checkout import REPO
from ..export.fetch_smollm2 import FetchError, default_cache
from . import llamacpp_peer
from .gguf_speed import GEMMA3, SMOLLM2_TYPES, files_of, speed_rows
from .llamacpp_peer import DECODE_CONTEXT, DECODE_NEW
from .e2e_speed import machine_info, versions
from .speed_of_light import gguf_weight_bytes_per_token, measure_read_ceiling

KV_BYTES = {"kvx": 4, "llama.cpp": 2}  # per element: kvx's default fp32 KV cache, llama-bench's fp16 one


def gguf_shape(gguf_path):
    """{parameters, weight_bytes_per_step, kv_elements_per_position} of a GGUF file."""
    from ..export.gguf_reader import FastGGUFReader
    reader = FastGGUFReader(str(gguf_path))
    parameters = sum(int(t.n_elements) for t in reader.tensors)
    arch = reader.fields["general.architecture"].contents()

    def number(key):
        return int(reader.fields[f"{arch}.{key}"].contents())
    heads, kv_heads = number("attention.head_count"), number("attention.head_count_kv")
    head_dim = (number("attention.key_length") if f"{arch}.attention.key_length" in reader.fields
                else number("embedding_length") // heads)
    kv_elements = number("block_count") * 2 * kv_heads * head_dim
    return {"parameters": parameters, "weight_bytes_per_step": gguf_weight_bytes_per_token(gguf_path),
            "kv_elements_per_position": kv_elements}


def decode_fraction(row, shape, ceiling_gb_s):
    """{engine: fraction of the read ceiling} of a speed row's decode medians."""
    mean_context = DECODE_CONTEXT + DECODE_NEW / 2
    out = {}
    for engine, medians in row["median"].items():
        step = shape["weight_bytes_per_step"] + shape["kv_elements_per_position"] * KV_BYTES[engine] * mean_context
        out[engine] = medians["decode"] * step / (ceiling_gb_s * 1e9)
    return out


def merge(path, rows):
    """Earlier rows of path for other (file, threads), then these."""
    kept = []
    if path.exists():
        new = {(r["file"], r["threads"]) for r in rows}
        kept = [r for r in json.loads(path.read_text())["rows"] if (r["file"], r["threads"]) not in new]
    return kept + rows


def table(rows):
    head = ["file", "parameters", "MB per step", "threads", "llama.cpp decode", "kvx decode", "llama.cpp prefill",
            "kvx prefill", "decode ratio", "prefill ratio", "ceiling GB/s", "llama.cpp of ceiling", "kvx of ceiling"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(rows, key=lambda r: (r["parameters"], r["file"], r["threads"])):
        m = r["median"]
        cells = [r["file"], f"{r['parameters'] / 1e9:.2f} B", f"{r['weight_bytes_per_step'] / 1e6:.0f}", str(r["threads"]),
                 f"{m['llama.cpp']['decode']:.1f}", f"{m['kvx']['decode']:.1f}", f"{m['llama.cpp']['prefill']:.1f}",
                 f"{m['kvx']['prefill']:.1f}", f"{m['kvx']['decode'] / m['llama.cpp']['decode']:.2f}",
                 f"{m['kvx']['prefill'] / m['llama.cpp']['prefill']:.2f}", f"{r['ceiling_gb_s']:.1f}",
                 f"{r['decode_of_ceiling']['llama.cpp']:.0%}", f"{r['decode_of_ceiling']['kvx']:.0%}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--types", nargs="*", default=["Q4_K_M", "Q8_0", GEMMA3], choices=SMOLLM2_TYPES + [GEMMA3])
    parser.add_argument("--file", action="append", default=[], metavar="LABEL=PATH")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repetitions", type=int, default=2, help="llama-bench's -r within each round")
    parser.add_argument("--kvx", type=Path, default=REPO / "build" / "bin" / "kvx")
    parser.add_argument("--read-bandwidth", type=Path, default=REPO / "build" / "bin" / "kvx_read_bandwidth")
    parser.add_argument("--cache", type=Path, default=default_cache(), help="model cache (fetch_smollm2's)")
    parser.add_argument("--work", type=Path, default=REPO / ".cache" / "gguf_speed")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "size_sweep.json")
    args = parser.parse_args(argv)
    # gguf_speed's speed rows read these.
    args.engines, args.context = ["llama.cpp", "kvx"], 0
    if not args.kvx.is_file():
        parser.error(f"no kvx binary at {args.kvx} (build it, or pass --kvx)")
    args.work.mkdir(parents=True, exist_ok=True)
    try:
        files = files_of(args, parser)
        load_before = os.getloadavg()
        before = measure_read_ceiling(args.read_bandwidth)["gb_s"]
        rows = speed_rows(files, args)
        after = measure_read_ceiling(args.read_bandwidth)["gb_s"]
    except (llamacpp_peer.PeerError, FetchError, OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"size_sweep: {e}")
    run = {"machine": machine_info(load_before), "kvx_commit": versions()["kvx_commit"],
           "peer_build": getattr(args, "peer_build", None)}  # measure_round notes llama-bench's build
    for row in rows:
        shape = gguf_shape(files[row["file"]])
        ceiling = max(before[row["threads"]], after[row["threads"]])
        row.update(shape, run=run, ceiling_gb_s=ceiling, ceiling_runs_gb_s=[before[row["threads"]], after[row["threads"]]],
                   decode_of_ceiling=decode_fraction(row, shape, ceiling))
        best = max(row["decode_of_ceiling"].values())
        if best > 1:
            print(f"size_sweep: {row['file']} decodes at {best:.0%} of the read ceiling: the ceiling is wrong",
                  file=sys.stderr)
    all_rows = merge(args.json, rows)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": all_rows}, indent=1) + "\n")
    print(table(all_rows))


if __name__ == "__main__":
    main()
