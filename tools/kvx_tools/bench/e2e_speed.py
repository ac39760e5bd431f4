"""End-to-end speed of kvx next to llama.cpp, ONNX Runtime GenAI and llama2.c's run.c, each figure also as a
fraction of the decode speed of light (speed_of_light.py); writes bench/results/e2e.json.

    python3 -m kvx_tools.bench.e2e_speed [--runs 5] [--threads 1 2] [--runc /tmp/run] [--quick]

Workloads, all greedy from the same prompt ids (bench/prompts/):
  SmolLM2-135M, f32 and f16 weights: a 128-token prompt then 256 new tokens (prefill and decode speed),
      and a 512-token prompt then 1 token (prefill speed); kvx, llama.cpp (F32 / F16 GGUF written by
      write_gguf.py from the same Q4_1 file) and ONNX Runtime GenAI (the fp32 ONNX; it has no f16 here);
  SmolLM2-135M, q8_0 and q4_0 weights (--models smollm2-quantized, on by default): the same two workloads;
      llama.cpp on its own Q8_0 / Q4_0 re-quantization of the Q4_1 file, kvx on the model directory converted
      from that GGUF with its blocks kept (e2e_quantized_models.py); and "int4-ort": ONNX Runtime's
      MatMulNBitsQuantizer int4 graph of the fp32 ONNX (block 32, accuracy_level 4), run by ONNX Runtime GenAI
      and by kvx from the directory converted from it;
  Gemma 3 270M (--models gemma3; the model of tests/python/test_gemma3.py, which makes its fixture): a 128-token
      prompt then 256 new tokens; kvx's fp32 model exported from the Q4_K_M GGUF, llama.cpp on that GGUF and on
      its own fp32 dequantization of it (llamacpp_f32.py: the same weights as kvx's);
  stories260K: 256 tokens from BOS (kvx and run.c, the golden text of testdata/models/stories260K), and kvx's
      prefill of a 128-token prompt;
  a context sweep: kvx's decode speed (64 new tokens) after prompts of 16 .. 2048 tokens, f32 and f16.
Each round runs every case once, engines of the same case one after another, so that all see the same
machine; the first round is a warm-up (page cache, CPU clocks) and is only used for the greedy ids.
The peers come from tools/bench/requirements.txt (not tools/requirements.txt: CI does not build llama.cpp).
"""
import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..checkout import REPO, recorded_path
from .e2e_engines import Kvx, LlamaCpp, OrtGenai, RunC
from .e2e_prompts import prompt_ids
from .e2e_quantized_models import ort_int4_model, smollm2_quantized_models
from .speed_of_light import (bytes_per_decoded_token, ceiling_tokens_per_s, gguf_weight_bytes_per_token,
                            measure_read_ceiling, weight_bytes_per_token)

PEER_PACKAGES = ["llama-cpp-python", "onnxruntime-genai", "onnxruntime", "onnx-ir", "gguf", "numpy"]


@dataclass
class Case:
    model: str
    engine: object
    prompt: list
    prompt_file: str  # where the prompt's ids come from (bench/prompts/NAME.txt, its first len(prompt))
    n_new: int
    ceiling_model_dir: str  # the kvx model directory whose bytes per token give this case's ceiling
    ceiling_gguf: str = None  # a peer's quantized GGUF whose tensor bytes replace the model directory's weights
    runs: list = field(default_factory=list)  # Measurement per measured round
    warmup: object = None  # the warm-up's Measurement: the greedy ids compared between engines


def smollm2_paths(args):
    cache = Path(os.environ.get("KVX_MODEL_CACHE", REPO / ".cache" / "models")) / "smollm2-135m-instruct"
    fixture = cache / "fixture"
    if not (fixture / "model" / "config.json").exists():
        sys.exit(f"e2e_speed: no SmolLM2 fixture in {fixture}: "
                 "run python -m kvx_tools.fixtures.make_smollm2 (docs/smollm2.md)")
    derived = cache / "bench"
    derived.mkdir(exist_ok=True)
    paths = {"f32": {"kvx": fixture / "model", "gguf": derived / "smollm2-f32.gguf"},
             "f16": {"kvx": derived / "kvx-f16", "gguf": derived / "smollm2-f16.gguf"},
             "onnx": fixture / "model.onnx"}
    for precision in ("f32", "f16"):
        gguf = paths[precision]["gguf"]
        if not gguf.exists():
            source = cache / "SmolLM2-135M-Instruct.Q4_1.gguf"
            subprocess.run([sys.executable, "-m", "kvx_tools.bench.write_gguf", str(source),
                            "--dtype", precision, "-o", str(gguf)], check=True)
    if not (paths["f16"]["kvx"] / "config.json").exists():
        # kvx convert runs $KVX_PYTHON: this Python, which has the converter's packages.
        subprocess.run([str(args.kvx), "convert", str(paths["onnx"]), "-o", str(paths["f16"]["kvx"]), "--dtype",
                        "f16", "--tokenizer", str(fixture / "tokenizer.json"), "--chat-template",
                        str(fixture / "chat_template.jinja")], check=True, capture_output=True,
                       env={**os.environ, "KVX_PYTHON": sys.executable})
    return paths


def gemma3_cases(args, n_new):
    from .llamacpp_f32 import llamacpp_f32_gguf
    folder = Path(os.environ.get("KVX_MODEL_CACHE", REPO / ".cache" / "models")) / "gemma3-270m"
    gguf, kvx_dir = folder / "gemma-3-270m-q4_k_m.gguf", folder / "fixture" / "model"
    if not (kvx_dir / "config.json").exists():
        sys.exit(f"e2e_speed: no Gemma 3 model in {kvx_dir}: run tests/python/test_gemma3.py once (ctest -R py_gemma3)")
    prompt = prompt_ids("gemma3", args.kvx, kvx_dir, 128)
    cases = []
    for threads in args.threads:
        cases.append(Case("Gemma3-270M", Kvx(args.kvx, "f32", threads, str(kvx_dir)), prompt, "gemma3", n_new,
                          str(kvx_dir)))
        if "llama.cpp" in args.engines:
            cases.append(Case("Gemma3-270M", LlamaCpp("f32", threads, str(llamacpp_f32_gguf(gguf))), prompt, "gemma3",
                              n_new, str(kvx_dir)))
            cases.append(Case("Gemma3-270M", LlamaCpp("q4_k_m", threads, str(gguf)), prompt, "gemma3", n_new,
                              str(kvx_dir), ceiling_gguf=str(gguf)))
    return cases


def smollm2_quantized_cases(args, n_new):
    """kvx and llama.cpp on the same Q8_0 / Q4_0 weights, and kvx and ONNX Runtime GenAI on the same int4
    MatMulNBits graph (precision "int4-ort"; e2e_quantized_models): decode after 128 tokens and the prefill of
    512; each engine's ceiling counts its own stored bytes (kvx's directory, llama.cpp's GGUF)."""
    cache = Path(os.environ.get("KVX_MODEL_CACHE", REPO / ".cache" / "models")) / "smollm2-135m-instruct"
    models = smollm2_quantized_models(args.kvx, cache)
    prompt = prompt_ids("smollm2", args.kvx, models["q8_0"]["kvx"], 512)
    cases = []
    for ftype, model in models.items():
        kvx_dir, gguf = str(model["kvx"]), str(model["gguf"])
        for threads in args.threads:
            for prompt_len, new in ((128, n_new), (512, 1)):
                cases.append(Case("SmolLM2-135M", Kvx(args.kvx, ftype, threads, kvx_dir), prompt[:prompt_len],
                                  "smollm2", new, kvx_dir))
                if "llama.cpp" in args.engines:
                    cases.append(Case("SmolLM2-135M", LlamaCpp(ftype, threads, gguf), prompt[:prompt_len], "smollm2",
                                      new, kvx_dir, ceiling_gguf=gguf))
    if "onnxruntime-genai" in args.engines:  # ONNX Runtime's int4 graph, run by GenAI and by kvx from it
        int4 = ort_int4_model(args.kvx, cache)
        kvx_dir = str(int4["kvx"])
        for threads in args.threads:
            for prompt_len, new in ((128, n_new), (512, 1)):
                for engine in (Kvx(args.kvx, "int4-ort", threads, kvx_dir),
                               OrtGenai("int4-ort", threads, str(int4["onnx"]))):
                    cases.append(Case("SmolLM2-135M", engine, prompt[:prompt_len], "smollm2", new, kvx_dir))
    return cases


def make_cases(args, n_new, sweep_prompts):
    cases = gemma3_cases(args, n_new) if "gemma3" in args.models else []
    if "smollm2-quantized" in args.models:
        cases += smollm2_quantized_cases(args, n_new)
    if "smollm2" not in args.models:
        return cases, []
    paths = smollm2_paths(args)
    smol_prompt = prompt_ids("smollm2", args.kvx, paths["f32"]["kvx"], max(sweep_prompts + [512]))
    stories_dir = str(args.stories)
    stories_prompt = prompt_ids("stories260K", args.kvx, stories_dir, 128)
    for precision in ("f32", "f16"):
        kvx_dir = str(paths[precision]["kvx"])
        for threads in args.threads:
            engines = [Kvx(args.kvx, precision, threads, kvx_dir)]
            if "llama.cpp" in args.engines:
                engines.append(LlamaCpp(precision, threads, str(paths[precision]["gguf"])))
            if "onnxruntime-genai" in args.engines and precision == "f32":
                engines.append(OrtGenai(precision, threads, str(paths["onnx"])))
            for prompt_len, new in ((128, n_new), (512, 1)):
                cases += [Case("SmolLM2-135M", e, smol_prompt[:prompt_len], "smollm2", new, kvx_dir)
                          for e in engines]
    for threads in args.threads:
        engines = [Kvx(args.kvx, "f32", threads, stories_dir)]
        if args.runc:
            engines.append(RunC(args.runc, threads, str(REPO / "testdata" / "models" / "stories260K" / "stories260K.bin"),
                                str(REPO / "testdata" / "models" / "stories260K" / "tok512.bin")))
        cases += [Case("stories260K", e, [], "", 256, stories_dir) for e in engines]
        cases.append(Case("stories260K", engines[0], stories_prompt, "stories260K", 1, stories_dir))
    sweep = []
    for precision in ("f32", "f16"):
        kvx_dir = str(paths[precision]["kvx"])
        for prompt_len in sweep_prompts:
            sweep.append(Case("SmolLM2-135M", Kvx(args.kvx, precision, max(args.threads), kvx_dir),
                              smol_prompt[:prompt_len], "smollm2", 64 if not args.quick else 16, kvx_dir))
    return cases, sweep


def run_rounds(cases, runs, after_round):
    """Runs every case once per round; after_round(rounds measured so far) follows each measured round, so
    that a run stopped early still leaves what it measured."""
    for round_index in range(runs + 1):
        started = time.time()
        for case in cases:
            measurement = case.engine.run(case.prompt, case.n_new)
            if round_index == 0:
                case.warmup = measurement
            else:
                case.runs.append(measurement)
        label = "warm-up" if round_index == 0 else f"round {round_index} of {runs}"
        print(f"e2e_speed: {label} done in {time.time() - started:.0f} s", file=sys.stderr, flush=True)
        if round_index:
            after_round(round_index)


def stats(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def first_divergence(ids, reference, prompt_len):
    """Index (0 = first generated token) of the first generated token that differs, None if none does."""
    generated, expected = ids[prompt_len:], reference[prompt_len:]
    for i, (a, b) in enumerate(zip(generated, expected)):
        if a != b:
            return i
    return None if len(generated) == len(expected) else min(len(generated), len(expected))


def greedy_agreement(case, cases):
    """How this case's greedy output compares with kvx's for the same model, precision, threads and prompt."""
    if case.engine.name == "kvx":
        return None
    # kvx at the peer's precision, else kvx's fp32 (a peer's quantized file: Gemma 3's Q4_K_M)
    same = [c for c in cases if c.engine.name == "kvx" and c.model == case.model and c.prompt == case.prompt
            and c.n_new == case.n_new and c.engine.threads == case.engine.threads]
    # the fallback is looked for only when needed: a run of quantized rows alone has no kvx f32 case
    ref = (next((c for c in same if c.engine.precision == case.engine.precision), None)
           or next(c for c in same if c.engine.precision == "f32"))
    if case.warmup.ids:
        index = first_divergence(case.warmup.ids, ref.warmup.ids, len(case.prompt))
        return {"compared": "ids", "generated": len(case.warmup.ids) - len(case.prompt), "first_divergence": index}
    same = case.warmup.text.strip() == ref.warmup.text.strip()
    return {"compared": "text", "identical": same}


def case_record(case, cases, bandwidth):
    engine = case.engine
    prompt_len = len(case.prompt)
    bytes_per_token = bytes_per_decoded_token(case.ceiling_model_dir, prompt_len, case.n_new,
                                              weights_gguf=case.ceiling_gguf)
    ceiling = ceiling_tokens_per_s(bandwidth[engine.threads], bytes_per_token)
    decode = stats(m.decode_tokens_per_s for m in case.runs)
    ids = ",".join(map(str, case.prompt))  # named, not listed, in the recorded command
    command = [f"<first {prompt_len} ids of bench/prompts/{case.prompt_file}.txt>" if a == ids and ids
               else recorded_path(a) for a in engine.command(case.prompt, case.n_new)]
    return {
        "model": case.model, "engine": engine.name, "precision": engine.precision, "threads": engine.threads,
        "prompt_tokens": prompt_len, "new_tokens": case.n_new, "command": command,
        "prefill_tokens_per_s": stats(m.prefill_tokens_per_s for m in case.runs) if prompt_len > 1 else None,
        "decode_tokens_per_s": decode,
        "bytes_per_decoded_token": bytes_per_token,
        "weight_bytes_per_token": (gguf_weight_bytes_per_token(case.ceiling_gguf) if case.ceiling_gguf
                                   else weight_bytes_per_token(case.ceiling_model_dir)),
        "ceiling_tokens_per_s": ceiling,
        "decode_fraction_of_ceiling": decode["median"] / ceiling if decode else None,
        "greedy_vs_kvx": greedy_agreement(case, cases),
    }


def first_line(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        return None


def machine_info(load_before):
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
    isa = [f for f in ("avx512f", "avx512_vnni", "avx_vnni", "avx2", "fma") if f in flags]
    return {"cpu": cpu, "cores": os.cpu_count(), "isa": isa,
            "kernel": platform.release(), "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load_average_before": load_before, "load_average_after": os.getloadavg()}


def versions():
    found = {"python": platform.python_version(), "gcc": first_line(["gcc", "--version"]),
             "kvx_commit": first_line(["git", "-C", str(REPO), "describe", "--always", "--dirty"])}
    for package in PEER_PACKAGES:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kvx", type=Path, default=REPO / "build" / "bin" / "kvx")
    parser.add_argument("--read-bandwidth", type=Path, default=REPO / "build" / "bin" / "kvx_read_bandwidth")
    parser.add_argument("--stories", type=Path, default=REPO / "build" / "share" / "kvx" / "models" / "stories260K",
                        help="kvx model directory of stories260K (the build writes it)")
    parser.add_argument("--runc", type=Path, help="llama2.c run.c binary (gcc -O3 -march=native -fopenmp)")
    parser.add_argument("--runs", type=int, default=5, help="measured rounds after the warm-up")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--engines", nargs="+", default=["llama.cpp", "onnxruntime-genai"],
                        choices=["llama.cpp", "onnxruntime-genai"], help="peers to run next to kvx")
    parser.add_argument("--models", nargs="+", default=["smollm2", "smollm2-quantized"],
                        choices=["smollm2", "smollm2-quantized", "gemma3"],
                        help="SmolLM2 f32/f16 (with stories260K and the context sweep), SmolLM2 Q8_0/Q4_0 "
                             "(kvx and llama.cpp on llama.cpp's own re-quantizations), Gemma 3 270M; any of them")
    parser.add_argument("--quick", action="store_true",
                        help="a check that everything runs: 1 measured round, 32 new tokens, a short sweep")
    parser.add_argument("-o", "--output", type=Path, default=REPO / "bench" / "results" / "e2e.json")
    args = parser.parse_args()
    if args.runs < 1 or min(args.threads) < 1:
        parser.error("--runs and --threads must be at least 1")
    for binary in (args.kvx, args.read_bandwidth):
        if not binary.exists():
            sys.exit(f"e2e_speed: {binary} not found: build kvx first (scripts/build.sh build)")
    runs = 1 if args.quick else args.runs
    n_new = 32 if args.quick else 256
    sweep_prompts = [16, 512] if args.quick else [16, 128, 512, 1024, 2048]

    load_before = os.getloadavg()
    read_before = measure_read_ceiling(args.read_bandwidth)
    bandwidth = read_before["gb_s"]
    cases, sweep = make_cases(args, n_new, sweep_prompts)

    def write_results(rounds, read_after=None):
        # The ceiling is the better of the two measurements (a read loop run while something else held the
        # machine reads less). The team's rule: a ceiling is never below what an engine achieves, so a decode
        # above 100% means the ceiling is wrong, and the run says so where it cannot be missed.
        bandwidth_after = (read_after or {}).get("gb_s")
        best = {t: max(gbs, (bandwidth_after or {}).get(t, 0.0)) for t, gbs in bandwidth.items()}
        records = [case_record(c, cases, best) for c in cases]
        sweep_records = [case_record(c, sweep, best) for c in sweep]
        above = [r for r in records + sweep_records if (r["decode_fraction_of_ceiling"] or 0) > 1]
        for r in above:
            print(f"e2e_speed: WARNING: CEILING WRONG: {r['model']} {r['engine']} {r['precision']} {r['threads']}t "
                  f"decodes at {r['decode_fraction_of_ceiling']:.0%} of its ceiling ({best[r['threads']]:.1f} GB/s): "
                  "the read bandwidth measured too low; do not publish these fractions",
                  file=sys.stderr)
        result = {
            "machine": machine_info(load_before), "versions": versions(), "runs": rounds, "quick": args.quick,
            "read_bandwidth_gb_s": {"before": bandwidth, "after": bandwidth_after},  # after: None until the end
            # each read loop's best GB/s per thread count, so a wrong ceiling can be traced to its loop
            "read_bandwidth_loops_gb_s": {"before": read_before["loops"], "after": (read_after or {}).get("loops")},
            "ceiling_below_achieved": [f"{r['model']} {r['engine']} {r['precision']} {r['threads']}t" for r in above],
            "cases": records,
            "context_sweep": sweep_records,
        }
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result, indent=1) + "\n")
        print(f"e2e_speed: wrote {args.output} ({rounds} rounds)", file=sys.stderr, flush=True)

    run_rounds(cases + sweep, runs, write_results)
    write_results(runs, measure_read_ceiling(args.read_bandwidth))


if __name__ == "__main__":
    main()
