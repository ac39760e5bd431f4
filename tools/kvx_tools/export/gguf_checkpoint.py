"""Reads a Llama GGUF file (llama.cpp's format) into the config and fp32 weights of llama_graph, undoing
the row permutation llama.cpp's converter applies to Q and K.

Every tensor is dequantized to fp32 with the gguf package, whatever its storage type (F32, F16, Q8_0,
Q4_1, ...): the exported graph then computes in fp32 exactly what the quantized file encodes.

GGUF names and shapes: GGUF lists dims fastest-first, so a tensor of GGUF shape [in, out] reads as the
numpy array [out, in], PyTorch's Linear layout.
  token_embd.weight [vocab, dim]; output_norm.weight [dim]; output.weight [vocab, dim] (absent when tied)
  blk.{i}.attn_norm / ffn_norm [dim]; attn_q [n_heads*hd, dim]; attn_k, attn_v [n_kv_heads*hd, dim];
  attn_output [dim, n_heads*hd]; ffn_gate, ffn_up [hidden, dim]; ffn_down [dim, hidden]
"""

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

from ..convert.kvx_layout import expected_tensor_shapes  # the converter's table of kvx shapes
from .llama_graph import interleaved_to_rotate_half

LAYER_TENSORS = {  # GGUF name inside blk.{i} -> llama_graph name inside layers.{i}
    "attn_norm": "attn_norm", "attn_q": "wq", "attn_k": "wk", "attn_v": "wv", "attn_output": "wo",
    "ffn_norm": "ffn_norm", "ffn_gate": "w_gate", "ffn_up": "w_up", "ffn_down": "w_down",
}


class GgufError(Exception):
    pass


def open_gguf(path):
    try:
        return GGUFReader(str(path))
    except OSError as e:
        raise GgufError(f"{path}: cannot read ({e.strerror or e})") from None
    except Exception as e:  # the reader's ValueError/struct errors on a file that is not GGUF
        raise GgufError(f"{path}: not a GGUF file ({e})") from None


def metadata_value(reader, key, default=None):
    """The value of a GGUF metadata key (int, float, str, bool or list), default when absent."""
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise GgufError(f"GGUF metadata has no '{key}'")
        return default
    return field.contents()


def _config(reader):
    arch = metadata_value(reader, "general.architecture")
    if arch != "llama":
        raise GgufError(f"GGUF architecture is '{arch}'; this exporter reads 'llama' only")
    scaling = metadata_value(reader, "llama.rope.scaling.type", "none")
    if scaling != "none":
        raise GgufError(f"GGUF RoPE scaling '{scaling}' is not supported (kvx has plain RoPE only)")
    dim = int(metadata_value(reader, "llama.embedding_length"))
    n_heads = int(metadata_value(reader, "llama.attention.head_count"))
    head_dim = int(metadata_value(reader, "llama.attention.key_length", dim // n_heads))
    rope_dims = int(metadata_value(reader, "llama.rope.dimension_count", head_dim))
    if rope_dims != head_dim:
        raise GgufError(f"RoPE over {rope_dims} of {head_dim} head dims (partial rotary) is not supported")
    config = {
        "dim": dim,
        "hidden_dim": int(metadata_value(reader, "llama.feed_forward_length")),
        "n_layers": int(metadata_value(reader, "llama.block_count")),
        "n_heads": n_heads,
        "n_kv_heads": int(metadata_value(reader, "llama.attention.head_count_kv", n_heads)),
        "head_dim": head_dim,
        "max_seq_len": int(metadata_value(reader, "llama.context_length")),
        "norm_eps": float(metadata_value(reader, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(metadata_value(reader, "llama.rope.freq_base", 10000.0)),
        "bos_token_id": int(metadata_value(reader, "tokenizer.ggml.bos_token_id")),
        "eos_token_ids": [int(metadata_value(reader, "tokenizer.ggml.eos_token_id"))],
    }
    if head_dim % 2 or n_heads % config["n_kv_heads"]:
        raise GgufError(f"head_dim {head_dim} must be even and head_count {n_heads} a multiple of "
                        f"head_count_kv {config['n_kv_heads']}")
    return config


def _dequantized(tensor):
    """tensor's values as fp32, shaped [..., fastest GGUF dim] (numpy order)."""
    try:
        values = dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError:
        raise GgufError(f"tensor '{tensor.name}': cannot dequantize type {tensor.tensor_type.name}") from None
    shape = tuple(int(d) for d in reversed(tensor.shape))
    return np.ascontiguousarray(values.reshape(shape), dtype=np.float32)


def read_gguf_llama(reader, path):
    """reader: open_gguf(path). Returns (config, weights) for llama_graph.build_llama_graph; config also
    carries bos_token_id and eos_token_ids from the tokenizer metadata."""
    config = _config(reader)
    tensors = {t.name: t for t in reader.tensors}
    gguf_to_kvx = {"token_embd.weight": "tok_embeddings", "output_norm.weight": "final_norm"}
    if "output.weight" in tensors:
        gguf_to_kvx["output.weight"] = "classifier"
    for i in range(config["n_layers"]):
        for gguf_name, name in LAYER_TENSORS.items():
            gguf_to_kvx[f"blk.{i}.{gguf_name}.weight"] = f"layers.{i}.{name}"
    missing = sorted(set(gguf_to_kvx) - set(tensors))
    if missing:
        raise GgufError(f"{path}: tensors missing for a {config['n_layers']}-layer Llama: {', '.join(missing[:4])}")

    weights = {name: _dequantized(tensors[gguf_name]) for gguf_name, name in gguf_to_kvx.items()}
    config["vocab_size"] = weights["tok_embeddings"].shape[0]
    _check_shapes(path, config, weights)
    for i in range(config["n_layers"]):
        # llama.cpp permutes these rows into neighbour pairs for its own RoPE; HF's graph wants halves.
        weights[f"layers.{i}.wq"] = interleaved_to_rotate_half(weights[f"layers.{i}.wq"], config["n_heads"])
        weights[f"layers.{i}.wk"] = interleaved_to_rotate_half(weights[f"layers.{i}.wk"], config["n_kv_heads"])
    return config, weights


def _check_shapes(path, config, weights):
    """Every tensor against the shape the metadata implies (kvx's own table of them)."""
    layout = {"architecture": "llama", **config, "tied_embeddings": "classifier" not in weights}
    for name, shape in expected_tensor_shapes(layout).items():
        if name in weights and weights[name].shape != shape:
            raise GgufError(f"{path}: {name} has shape {list(weights[name].shape)}, the metadata implies "
                            f"{list(shape)}")
