"""Reads llama2.c checkpoints (the legacy "version 0" layout that run.c loads) into the weights dict
of llama_graph, converting llama2.c's RoPE pairing into HF's.

File layout: 7 little-endian int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
seq_len; vocab_size < 0 means the classifier is stored separately), then fp32 arrays in this order:
token_embedding [vocab, dim], rms_att [L, dim], wq [L, dim, dim], wk [L, kv_dim, dim],
wv [L, kv_dim, dim], wo [L, dim, dim], rms_ffn [L, dim], w1 [L, hidden, dim], w2 [L, dim, hidden],
w3 [L, hidden, dim], rms_final [dim], freq_cis_real [seq_len, head_size/2],
freq_cis_imag [seq_len, head_size/2], wcls [vocab, dim] (untied only). Linear weights are [out, in].
"""

import math
import struct

import numpy as np

from ..input_file import unreadable_reason
from .llama_graph import interleaved_to_rotate_half

HEADER_INTS = 7
HEADER_BYTES = 4 * HEADER_INTS
LLAMA2C_NORM_EPS = 1e-5  # hard-coded in run.c's rmsnorm
LLAMA2C_ROPE_THETA = 10000.0  # run.c: freq = 1 / 10000^(2i / head_size)


class CheckpointError(Exception):
    pass


def read_llama2c_checkpoint(path):
    """Returns (config, weights) for llama_graph.build_llama_graph. Nothing is allocated by the header's
    counts before they have been checked against each other and against the file's length, since a header
    is seven arbitrary numbers to a file that is not a checkpoint."""
    reason = unreadable_reason(path)
    if reason is not None:
        raise CheckpointError(f"{path}: {reason}")
    with open(path, "rb") as f:
        header = f.read(HEADER_BYTES)
        file_size = f.seek(0, 2)
    if len(header) < HEADER_BYTES:
        raise CheckpointError(f"{path}: too short for a llama2.c header")
    raw = struct.unpack(f"<{HEADER_INTS}i", header)
    dim, hidden, n_layers, n_heads, n_kv_heads, signed_vocab, seq_len = raw
    vocab, tied = abs(signed_vocab), signed_vocab > 0
    if min(dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len) <= 0 \
            or dim % n_heads or n_heads % n_kv_heads or (dim // n_heads) % 2:
        raise CheckpointError(f"{path}: not a llama2.c checkpoint header: {list(raw)}")
    head_dim = dim // n_heads
    kv_dim = n_kv_heads * head_dim
    L = n_layers

    shapes = [
        ("tok_embeddings", (vocab, dim)), ("attn_norm", (L, dim)), ("wq", (L, dim, dim)),
        ("wk", (L, kv_dim, dim)), ("wv", (L, kv_dim, dim)), ("wo", (L, dim, dim)),
        ("ffn_norm", (L, dim)), ("w_gate", (L, hidden, dim)), ("w_down", (L, dim, hidden)),
        ("w_up", (L, hidden, dim)), ("final_norm", (dim,)),
        ("freq_cis_real", (seq_len, head_dim // 2)), ("freq_cis_imag", (seq_len, head_dim // 2)),
    ]
    if not tied:
        shapes.append(("classifier", (vocab, dim)))
    expected = sum(math.prod(s) for _, s in shapes)  # exact: numpy's int64 product could wrap around
    if file_size - HEADER_BYTES != 4 * expected:
        raise CheckpointError(f"{path}: {file_size - HEADER_BYTES} bytes after the header, the header "
                              f"{list(raw)} implies {4 * expected}")
    floats = np.fromfile(path, dtype="<f4", count=expected, offset=HEADER_BYTES)
    if floats.size != expected:  # the file changed under us
        raise CheckpointError(f"{path}: {floats.size} floats after the header, the header implies {expected}")

    arrays, offset = {}, 0
    for name, shape in shapes:
        n = math.prod(shape)
        arrays[name] = floats[offset:offset + n].reshape(shape)
        offset += n

    weights = {"tok_embeddings": arrays["tok_embeddings"], "final_norm": arrays["final_norm"]}
    if not tied:
        weights["classifier"] = arrays["classifier"]
    for i in range(L):
        weights[f"layers.{i}.wq"] = interleaved_to_rotate_half(arrays["wq"][i], n_heads)
        weights[f"layers.{i}.wk"] = interleaved_to_rotate_half(arrays["wk"][i], n_kv_heads)
        for name in ("attn_norm", "wv", "wo", "ffn_norm", "w_gate", "w_up", "w_down"):
            weights[f"layers.{i}.{name}"] = arrays[name][i]

    config = {
        "dim": dim, "hidden_dim": hidden, "n_layers": n_layers, "n_heads": n_heads,
        "n_kv_heads": n_kv_heads, "head_dim": head_dim, "vocab_size": vocab, "max_seq_len": seq_len,
        "norm_eps": LLAMA2C_NORM_EPS, "rope_theta": LLAMA2C_ROPE_THETA,
    }
    return config, weights
