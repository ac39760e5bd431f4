"""The benchmark's prompts: token ids, the same for every engine, kept in bench/prompts/ so that every run
of the benchmark (and every engine) reads exactly the same ones.

A prompt file holds one line of comma-separated ids. It is made once, when missing, by kvx sampling a
continuation of a seed text with a fixed seed (--ignore-eos, so it is as long as asked): varied text of the
model's own kind, long enough for the longest context measured. (A greedy continuation would do for speed,
but it soon repeats one sentence, and a loop makes the engines' greedy agreement after it an easy test.)
Shorter prompts are its prefixes.
"""
import subprocess

from ..checkout import REPO

PROMPTS_DIR = REPO / "bench" / "prompts"
SEED_TEXT = "Chapter 1\n\nThe old lighthouse keeper had lived alone on the island for thirty years."


def make_prompt(kvx, model_dir, length, threads):
    seed = subprocess.run([str(kvx), "tokenize", "-m", str(model_dir), "-p", SEED_TEXT], capture_output=True,
                          text=True, check=True).stdout.strip()
    n_new = length - len(seed.split(","))
    out = subprocess.run([str(kvx), "generate", "-m", str(model_dir), "--tokens", seed, "--print-ids",
                          "--ignore-eos", "-n", str(n_new), "--temp", "0.8", "--seed", "1", "-t", str(threads)],
                         capture_output=True, text=True, check=True).stdout.strip()
    return [int(t) for t in out.split(",")]


def prompt_ids(name, kvx, model_dir, length, threads=1):
    """The first `length` ids of prompt file `name`, made (and then kept) if missing or too short."""
    path = PROMPTS_DIR / f"{name}.txt"
    ids = [int(t) for t in path.read_text().split(",")] if path.exists() else []
    if len(ids) < length:
        ids = make_prompt(kvx, model_dir, length, threads)
        PROMPTS_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(",".join(map(str, ids)) + "\n")
    return ids[:length]
