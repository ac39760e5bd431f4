"""The decode speed-of-light model: a decode step must read every weight it multiplies and every cached key
and value it attends to, so tokens/s can be at most read bandwidth / bytes read per token.

Bytes read per decoded token, from a kvx model directory (config.json and the safetensors header):
  weights: every tensor once (all layer matrices and norms, the final norm, the classifier), except the
           token embedding, of which one row is read; a tied classifier is the embedding matrix, read whole.
           (rope_inv_freq is a few bytes of table, left out.) A quantized matrix (docs/model-format.md,
           "Quantized matrices") is its integers, scales and zero points or minimums: X.q8 / X.q4, X.scales, ...
  KV:      n_layers * 2 (K and V) * n_kv_heads * head_dim * bytes per element, per token of context; a
           decode of n tokens after a prompt of p reads on average p + n / 2 positions.
A peer's quantized GGUF (llama.cpp's Q4_K_M) reads its own tensor bytes instead (gguf_weight_bytes_per_token):
every tensor's stored size, a tied token embedding once, as the classifier, an untied one a row.
The read bandwidth is kvx_read_bandwidth's best streaming read of a buffer far larger than the caches (1 GiB
or 8x L3), the best pass of the best of several read loops (plain AVX2, AVX2 with prefetch, AVX-512): no one
loop is fastest on every CPU, and a ceiling below what an engine achieves is a wrong ceiling (issue 14).
"""
import functools
import json
import re
import struct
import subprocess
from pathlib import Path

SAFETENSORS_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "I8": 1, "U8": 1}
KV_BYTES = {"f32": 4, "f16": 2}
NOT_READ_PER_TOKEN = {"rope_inv_freq"}
BANDWIDTH_LINE = re.compile(r"read bandwidth, (\d+) threads?: best ([0-9.]+) GB/s")
LOOP_LINE = re.compile(r"read loop (\w+), (\d+) threads?: best ([0-9.]+) GB/s")


def safetensors_header(path):
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    header.pop("__metadata__", None)
    return header


def tensor_bytes(entry):
    count = 1
    for dim in entry["shape"]:
        count *= dim
    return count * SAFETENSORS_BYTES[entry["dtype"]]


def weight_bytes_per_token(model_dir):
    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    header = safetensors_header(model_dir / config["weights"]["file"])
    total = sum(tensor_bytes(e) for name, e in header.items() if name not in NOT_READ_PER_TOKEN)
    # the embedding is one tensor, or a quantized matrix's parts (tok_embeddings.q8, .scales, ...), each row-major
    embedding = [e for name, e in header.items() if name == "tok_embeddings" or name.startswith("tok_embeddings.")]
    whole = sum(tensor_bytes(e) for e in embedding)
    row = sum(tensor_bytes(e) // e["shape"][0] for e in embedding)
    # tied: the matrix is already counted once, as the classifier; untied: only the looked-up row is read
    return total + row if config.get("tied_embeddings", True) else total - whole + row


@functools.lru_cache(maxsize=None)  # read once per run: every round's records ask again, and the file is large
def gguf_weight_bytes_per_token(gguf_path):
    """Stored bytes of every tensor of a GGUF file (the gguf package): what llama.cpp reads per decoded token.
    A tied embedding (Gemma 3) is the classifier, read whole; an untied one (an output.weight of its own, as
    Llama 3.1 8B) is read one row per token."""
    from ..export.gguf_reader import FastGGUFReader
    tensors = {t.name: t for t in FastGGUFReader(str(gguf_path)).tensors}
    total = sum(int(t.n_bytes) for t in tensors.values())
    embedding = tensors.get("token_embd.weight")
    if embedding is not None and "output.weight" in tensors:
        rows = int(embedding.shape[-1])  # gguf lists the fastest dimension first
        total -= int(embedding.n_bytes) - int(embedding.n_bytes) // rows
    return total


def kv_bytes_per_position(model_dir, kv_dtype="f32"):
    config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    return config["n_layers"] * 2 * config["n_kv_heads"] * config["head_dim"] * KV_BYTES[kv_dtype]


def bytes_per_decoded_token(model_dir, prompt_tokens, new_tokens, kv_dtype="f32", weights_gguf=None):
    """Weights (the kvx model's, or weights_gguf's stored tensors) + the mean context's KV, per decoded token."""
    mean_context = prompt_tokens + new_tokens / 2
    weights = gguf_weight_bytes_per_token(weights_gguf) if weights_gguf else weight_bytes_per_token(model_dir)
    return weights + kv_bytes_per_position(model_dir, kv_dtype) * mean_context


def measure_read_ceiling(binary, megabytes=0, passes=11):
    """{"gb_s": {threads: best GB/s}, "loops": {threads: {loop: best GB/s}}} from `kvx_read_bandwidth MB PASSES`
    (it measures 1 .. its OpenMP thread count; megabytes 0 lets it pick a size no cache holds)."""
    out = subprocess.run([str(binary), str(megabytes), str(passes)], capture_output=True, text=True,
                         check=True).stdout
    best = {int(t): float(gbs) for t, gbs in BANDWIDTH_LINE.findall(out)}
    if not best:
        raise RuntimeError(f"no 'read bandwidth, N thread(s): best X GB/s' line in the output of {binary}")
    loops = {}
    for loop, t, gbs in LOOP_LINE.findall(out):
        loops.setdefault(int(t), {})[loop] = float(gbs)
    return {"gb_s": best, "loops": loops}


def measure_read_bandwidth(binary, megabytes=0, passes=11):
    """{threads: GB/s}: the best read loop's best pass at each thread count (measure_read_ceiling)."""
    return measure_read_ceiling(binary, megabytes, passes)["gb_s"]


def ceiling_tokens_per_s(bandwidth_gb_s, bytes_per_token):
    return bandwidth_gb_s * 1e9 / bytes_per_token
