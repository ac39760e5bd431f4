"""kvx and llama.cpp b11434 (llamacpp_peer.py) side by side on the same GGUF files: decode and prefill
tokens/s, or (--mem) the wall time and peak RSS of a one-token generation.

    python3 -m kvx_tools.bench.gguf_speed [--types Q4_K_M ... gemma3] [--file LABEL=PATH ...] [--threads 1 2]
        [--rounds 3] [--engines llama.cpp ik_llama.cpp kvx] [--json PATH] [--mem [--mem-context 4096] [--cold]]

Files: SmolLM2-135M-Instruct's Q4_1 GGUF (fetch_smollm2) requantized by llama-quantize to each SmolLM2 type of
--types (kept in --work), "gemma3", Gemma 3 270M's own Q4_K_M (fetch_gemma3), and any --file (for example
the random-weight models of real sizes that write_random_gguf writes and llama-quantize quantizes).
Workloads, as llama-bench measures them (llamacpp_peer.BENCH_KINDS):
  decode: 256 new tokens after a 128-token context; kvx: a 128-token prompt, then -n 256, its decode rate;
  prefill: a 512-token prompt; kvx: that prompt with -n 1, its prefill rate.
With --context N, at long context: decode 256 new tokens after N tokens (llama-bench -d N), prefill an
N-token prompt, kvx with an fp16 KV cache as llama.cpp's default (kvx's prompt ids repeated to N).
kvx's prompt ids: bench/prompts/smollm2.txt for SmolLM2 and --file (ids below 49152: any vocabulary that
large takes them); for Gemma 3, llama-tokenize's ids of
testdata/text/harbour_town.txt. For each file and thread count, every round runs each engine once, one after
the other, so that all see the same machine; the table gives the medians over the rounds and kvx / llama.cpp.
llama-bench runs its own warm-up before each measurement; kvx runs once unwarmed per round.

ik_llama.cpp (--engines ... ik_llama.cpp): PyPI's ik-llama-cpp-python wheel, in a virtual environment of its
own (--ik-python, its interpreter; scripts/setup_ik_llamacpp.sh makes it), runs kvx's two workloads through
run_ik_llamacpp.py (the prompt's ids in batches of 512, then one token per call; the fork's defaults, flash
attention and an fp16 KV cache). Not with --context or --mem.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..checkout import REPO, recorded_path
from ..export.fetch_gemma3 import fetch_gemma3
from ..export.fetch_smollm2 import FetchError, default_cache, fetch_smollm2
from . import llamacpp_peer
from .e2e_engines import IkLlamaCpp, Kvx
from .e2e_speed import machine_info
from .llamacpp_peer import DECODE_CONTEXT, DECODE_NEW, PREFILL_PROMPT

SMOLLM2_TYPES = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "Q4_0", "IQ4_XS", "F16", "F32"]
GEMMA3 = "gemma3"
ENGINES = ["llama.cpp", "ik_llama.cpp", "kvx"]  # the order of the table's columns
PEERS = [e for e in ENGINES if e != "kvx"]


def gguf_files(types, cache, work):
    """{label: GGUF path} for --types, fetching and requantizing what is missing."""
    files = {}
    for type_name in types:
        if type_name == GEMMA3:
            files["gemma3-270m Q4_K_M"] = fetch_gemma3(cache)
        else:
            source = fetch_smollm2(cache)
            files[f"smollm2-135m {type_name}"] = llamacpp_peer.quantize(
                source, work / f"SmolLM2-135M-Instruct.{type_name}.gguf", type_name)
    return files


def files_of(args, parser):
    """{label: GGUF path}: --types' files (gguf_files) and every --file LABEL=PATH."""
    files = gguf_files(args.types, args.cache, args.work)
    for spec in args.file:
        label, _, path = spec.partition("=")
        if not label or not Path(path).is_file():
            parser.error(f"--file {spec}: expected LABEL=PATH of an existing file")
        files[label] = Path(path)
    return files


def prompt_source(label, gguf):
    """kvx's prompt ids for this file, at least PREFILL_PROMPT of them."""
    if label.startswith("gemma3"):
        ids = llamacpp_peer.tokenize(gguf, REPO / "testdata" / "text" / "harbour_town.txt")
    else:
        ids = [int(t) for t in (REPO / "bench" / "prompts" / "smollm2.txt").read_text().split(",")]
    if len(ids) < PREFILL_PROMPT:
        sys.exit(f"gguf_speed: only {len(ids)} prompt ids for {label}, {PREFILL_PROMPT} needed")
    return ids


def measure_round(engine, gguf, threads, ids, args):
    """{'decode': tokens/s, 'prefill': tokens/s} of one engine, one round."""
    if engine == "llama.cpp":
        results = {kind: llamacpp_peer.bench(gguf, threads, kind, args.repetitions, args.context)
                   for kind in ("decode", "prefill")}
        args.peer_build = {"number": results["decode"].build_number, "commit": results["decode"].build_commit}
        return {kind: result.tokens_per_s for kind, result in results.items()}
    if engine == "ik_llama.cpp":
        peer = IkLlamaCpp("gguf", threads, str(gguf), args.ik_python)
        return {"decode": peer.run(ids[:DECODE_CONTEXT], DECODE_NEW).decode_tokens_per_s,
                "prefill": peer.run(ids[:PREFILL_PROMPT], 1).prefill_tokens_per_s}
    if args.context:
        ids = (ids * (args.context // len(ids) + 1))[:args.context]
        kvx = Kvx(args.kvx, "gguf", threads, str(gguf), ["--kv-dtype", "f16"])
        return {"decode": kvx.run(ids, DECODE_NEW).decode_tokens_per_s, "prefill": kvx.run(ids, 1).prefill_tokens_per_s}
    kvx = Kvx(args.kvx, "gguf", threads, str(gguf))
    return {"decode": kvx.run(ids[:DECODE_CONTEXT], DECODE_NEW).decode_tokens_per_s,
            "prefill": kvx.run(ids[:PREFILL_PROMPT], 1).prefill_tokens_per_s}


def speed_rows(files, args):
    rows = []
    for label, gguf in files.items():
        ids = prompt_source(label, gguf) if set(args.engines) - {"llama.cpp"} else []
        for threads in args.threads:
            runs = {engine: {"decode": [], "prefill": []} for engine in args.engines}
            for round_index in range(args.rounds):
                for engine in args.engines:
                    for kind, rate in measure_round(engine, gguf, threads, ids, args).items():
                        runs[engine][kind].append(rate)
                print(f"gguf_speed: {label}, {threads} threads, round {round_index + 1} of {args.rounds}",
                      file=sys.stderr, flush=True)
            rows.append({"file": label, "gguf": recorded_path(gguf), "threads": threads, "runs": runs,
                         "median": {e: {k: statistics.median(v) for k, v in r.items()} for e, r in runs.items()}})
    return rows


def ratio(row, kind, peer="llama.cpp"):
    medians = row["median"]
    if "kvx" not in medians or peer not in medians:
        return None
    return medians["kvx"][kind] / medians[peer][kind]


def speed_table(rows, engines):
    kinds = ("decode", "prefill")
    peers = [p for p in PEERS if p in engines] if "kvx" in engines else []
    head = ["file", "threads"] + [f"{e} {k} tok/s" for k in kinds for e in engines]
    head += [f"kvx/{p} {k}" for p in peers for k in kinds]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["file"], str(row["threads"])]
        cells += [f"{row['median'][e][k]:.1f}" for k in kinds for e in engines]
        cells += [f"{ratio(row, k, p):.2f}" for p in peers for k in kinds]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def timed_run(cmd):
    """(wall seconds, peak RSS in MiB) of cmd, a child of its own: os.wait4 gives that child's rusage alone."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=out, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            out.seek(0)
            sys.exit(f"gguf_speed: {Path(str(cmd[0])).name} failed ({proc.returncode}):\n"
                     f"{out.read().decode(errors='replace')[-1500:]}")
    return wall, usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


def drop_page_cache():
    """Writes back and drops the page cache, so that the next run reads its file from disk (a cold start); root
    only."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError as e:
        sys.exit(f"gguf_speed: --cold needs to drop the page cache (/proc/sys/vm/drop_caches, root): {e}")


def mem_rows(files, args):
    """Load cost: one-token generations, rounds interleaving the engines; medians of wall time and peak RSS."""
    rows = []
    for label, gguf in files.items():
        ids = prompt_source(label, gguf)[:8] if "kvx" in args.engines else []
        threads = args.threads[0]
        # Both engines sized for the same context.
        commands = {"llama.cpp": llamacpp_peer.one_token_command(gguf, threads, args.mem_context),
                    "kvx": Kvx(args.kvx, "gguf", threads, str(gguf)).command(ids, 1, context=args.mem_context)}
        runs = {engine: [] for engine in args.engines}
        for _ in range(args.rounds):
            for engine in args.engines:
                if args.cold:
                    drop_page_cache()
                runs[engine].append(timed_run(commands[engine]))
        rows.append({"file": label, "threads": threads, "command": {e: commands[e][0].rsplit("/", 1)[-1]
                                                                    for e in args.engines},
                     "median": {e: {"wall_s": statistics.median(w for w, _ in r),
                                    "peak_rss_mib": statistics.median(m for _, m in r)} for e, r in runs.items()}})
    return rows


def mem_table(rows, engines):
    head = ["file"] + [f"{e} {what}" for e in engines for what in ("wall s", "peak RSS MiB")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["file"]] + [f"{row['median'][e][k]:.{p}f}" for e in engines
                                 for k, p in (("wall_s", 2), ("peak_rss_mib", 0))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--types", nargs="*", default=SMOLLM2_TYPES + [GEMMA3], choices=SMOLLM2_TYPES + [GEMMA3])
    parser.add_argument("--file", action="append", default=[], metavar="LABEL=PATH",
                        help="another GGUF file to measure, under LABEL in the table (repeatable)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="--mem uses the first")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repetitions", type=int, default=2, help="llama-bench's -r within each round")
    parser.add_argument("--engines", nargs="+", default=["llama.cpp", "kvx"], choices=ENGINES)
    parser.add_argument("--ik-python", type=Path, default=REPO / ".cache" / "ik-venv" / "bin" / "python",
                        help="the python of the virtual environment that has ik-llama-cpp-python")
    parser.add_argument("--context", type=int, default=0,
                        help="measure at this long context instead (decode after it, prefill a prompt of it)")
    parser.add_argument("--mem", action="store_true", help="wall time and peak RSS of a one-token generation")
    parser.add_argument("--cold", action="store_true",
                        help="--mem: drop the page cache before each run (a cold start; root only)")
    parser.add_argument("--mem-context", type=int, default=4096,
                        help="--mem: the context both engines size their KV cache for (llama.cpp -c, kvx -c)")
    parser.add_argument("--kvx", type=Path, default=REPO / "build" / "bin" / "kvx")
    parser.add_argument("--cache", type=Path, default=default_cache(), help="model cache (fetch_smollm2's)")
    parser.add_argument("--work", type=Path, default=REPO / ".cache" / "gguf_speed",
                        help="where the requantized SmolLM2 files are kept")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.repetitions < 1 or min(args.threads) < 1:
        parser.error("--rounds, --repetitions and --threads must be at least 1")
    if args.context < 0 or (args.context and args.mem):
        parser.error("--context must be positive, and is not for --mem")
    if args.mem_context < 1:
        parser.error("--mem-context must be positive")
    if args.cold and not args.mem:
        parser.error("--cold is for --mem")
    args.engines = [e for e in ENGINES if e in args.engines]  # llama.cpp first, whatever the order given
    if "ik_llama.cpp" in args.engines:
        if args.context or args.mem:
            parser.error("ik_llama.cpp runs the default workloads only, not --context or --mem")
        if not args.ik_python.is_file():
            parser.error(f"no python at {args.ik_python} for ik_llama.cpp (scripts/setup_ik_llamacpp.sh makes it, "
                         "or pass --ik-python)")
    if "kvx" in args.engines and not args.kvx.is_file():
        parser.error(f"no kvx binary at {args.kvx} (build it, or pass --kvx)")
    try:
        files = files_of(args, parser)
        load_before = os.getloadavg()
        args.peer_build = None  # llama-bench's report of itself, set by measure_round
        rows = mem_rows(files, args) if args.mem else speed_rows(files, args)
    except (llamacpp_peer.PeerError, FetchError, OSError) as e:
        sys.exit(f"gguf_speed: {e}")
    print(mem_table(rows, args.engines) if args.mem else speed_table(rows, args.engines))
    if args.peer_build:
        print(f"llama.cpp: llama-bench build {args.peer_build['number']} ({args.peer_build['commit']})")
    if args.json:
        result = {"machine": machine_info(load_before), "engines": args.engines,
                  "llamacpp_build": args.peer_build,
                  "kind": "mem" if args.mem else "speed", "context": args.context, "cold": args.cold,
                  "mem_context": args.mem_context if args.mem else None, "rows": rows}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
