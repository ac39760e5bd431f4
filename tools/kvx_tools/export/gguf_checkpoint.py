"""Reads a Llama GGUF file (llama.cpp's format) into the config and fp32 weights of llama_graph, undoing
the row permutation llama.cpp's converter applies to Q and K.

By default every tensor is dequantized to fp32 with the gguf package, whatever its storage type (F32, F16,
Q8_0, Q4_1, ...): the exported graph then computes in fp32 exactly what the quantized file encodes. With
requantize ("none", "q8_0" or "q4_0") the matrices stay quantized instead (gguf_blocks.py): Q8_0, Q4_0 and Q4_1
blocks as they are, other types dequantized and then re-quantized to requantize's type ("none": kept fp32).

Each weight is read from the file when the graph builder asks for it (weights_on_demand.py), with np.fromfile
rather than through the reader's memory map, whose pages would stay in the process once touched: an export
holds one weight at a time.

GGUF names and shapes: GGUF lists dims fastest-first, so a tensor of GGUF shape [in, out] reads as the
numpy array [out, in], PyTorch's Linear layout.
  token_embd.weight [vocab, dim]; output_norm.weight [dim]; output.weight [vocab, dim] (absent when tied)
  blk.{i}.attn_norm / ffn_norm [dim]; attn_q [n_heads*hd, dim]; attn_k, attn_v [n_kv_heads*hd, dim];
  attn_output [dim, n_heads*hd]; ffn_gate, ffn_up [hidden, dim]; ffn_down [dim, hidden]
"""

import numpy as np
from gguf.quants import dequantize

from ..convert.families.tensor_layout import expected_tensor_shapes  # the converter's table of kvx shapes
from ..input_file import unreadable_reason
from .gguf_layout import check_gguf_layout
from .gguf_blocks import QuantizedMatrix, gguf_quantized_matrix
from .gguf_metadata import GgufError, metadata_float, metadata_int, metadata_str
from .gguf_reader import FastGGUFReader
from .llama_graph import interleaved_to_rotate_half
from .weights_on_demand import WeightsOnDemand

LAYER_TENSORS = {  # GGUF name inside blk.{i} -> llama_graph name inside layers.{i}
    "attn_norm": "attn_norm", "attn_q": "wq", "attn_k": "wk", "attn_v": "wv", "attn_output": "wo",
    "ffn_norm": "ffn_norm", "ffn_gate": "w_gate", "ffn_up": "w_up", "ffn_down": "w_down",
}


def open_gguf(path):
    """gguf's reader (FastGGUFReader) over path, once gguf_layout.py has checked the counts and sizes it would trust."""
    reason = unreadable_reason(path)
    if reason is not None:
        raise GgufError(f"{path}: {reason}")
    try:
        check_gguf_layout(path)
        return FastGGUFReader(str(path))
    except GgufError:
        raise
    except OSError as e:
        raise GgufError(f"{path}: cannot read ({e.strerror or e})") from None
    except Exception as e:  # the reader's ValueError/struct errors on a file that is not GGUF
        raise GgufError(f"{path}: not a GGUF file ({e})") from None


def _config(reader):
    arch = metadata_str(reader, "general.architecture")
    if arch != "llama":
        raise GgufError(f"GGUF architecture is '{arch}'; this exporter reads 'llama' only")
    scaling = metadata_str(reader, "llama.rope.scaling.type", "none")
    if scaling != "none":
        raise GgufError(f"GGUF RoPE scaling '{scaling}' is not supported (kvx has plain RoPE only)")
    dim = metadata_int(reader, "llama.embedding_length")
    n_heads = metadata_int(reader, "llama.attention.head_count")
    n_kv_heads = metadata_int(reader, "llama.attention.head_count_kv", n_heads)
    head_dim = metadata_int(reader, "llama.attention.key_length", max(dim // n_heads, 1))
    rope_dims = metadata_int(reader, "llama.rope.dimension_count", head_dim)
    if rope_dims != head_dim:
        raise GgufError(f"RoPE over {rope_dims} of {head_dim} head dims (partial rotary) is not supported")
    if head_dim % 2 or n_heads % n_kv_heads:
        raise GgufError(f"head_dim {head_dim} must be even and head_count {n_heads} a multiple of "
                        f"head_count_kv {n_kv_heads}")
    n_layers = metadata_int(reader, "llama.block_count")
    if n_layers * len(LAYER_TENSORS) > len(reader.tensors):  # before anything is made per layer
        raise GgufError(f"GGUF block_count {n_layers} needs {n_layers * len(LAYER_TENSORS)} layer tensors, the "
                        f"file has {len(reader.tensors)} tensors in all")
    return {
        "dim": dim,
        "hidden_dim": metadata_int(reader, "llama.feed_forward_length"),
        "n_layers": n_layers,
        "n_heads": n_heads,
        "n_kv_heads": n_kv_heads,
        "head_dim": head_dim,
        "max_seq_len": metadata_int(reader, "llama.context_length"),
        "norm_eps": metadata_float(reader, "llama.attention.layer_norm_rms_epsilon"),
        "rope_theta": metadata_float(reader, "llama.rope.freq_base", 10000.0),
        "bos_token_id": metadata_int(reader, "tokenizer.ggml.bos_token_id", minimum=0),
        "eos_token_ids": [metadata_int(reader, "tokenizer.ggml.eos_token_id", minimum=0)],
    }


def _tensor_data(path, tensor):
    """What the reader's tensor.data holds (same dtype and shape), read from the file into memory of our own."""
    data = np.fromfile(path, np.uint8, tensor.n_bytes, offset=tensor.data_offset)
    if data.size != tensor.n_bytes:
        raise GgufError(f"{path}: truncated: tensor '{tensor.name}' reaches past the end of the file")
    return data.view(tensor.data.dtype).reshape(tensor.data.shape)


def _dequantized(path, tensor):
    """tensor's values as fp32, shaped [..., fastest GGUF dim] (numpy order)."""
    try:
        values = dequantize(_tensor_data(path, tensor), tensor.tensor_type)
    except NotImplementedError:
        raise GgufError(f"tensor '{tensor.name}': cannot dequantize type {tensor.tensor_type.name}") from None
    except ValueError as e:  # data that does not fit the type's blocks
        raise GgufError(f"tensor '{tensor.name}': cannot dequantize ({e})") from None
    return np.ascontiguousarray(values.reshape(_numpy_shape(tensor)), dtype=np.float32)


def _named_tensors(reader, path, config, layer_tensors, family):
    """(tensors by GGUF name, {GGUF name: kvx name}, {kvx name: numpy shape}) of a decoder whose layers hold
    layer_tensors; sets config["vocab_size"] from the embedding's rows (0 when it is not a matrix).
    GgufError naming the first missing tensors."""
    tensors = {t.name: t for t in reader.tensors}
    gguf_to_kvx = {"token_embd.weight": "tok_embeddings", "output_norm.weight": "final_norm"}
    if "output.weight" in tensors:
        gguf_to_kvx["output.weight"] = "classifier"
    for i in range(config["n_layers"]):
        for gguf_name, name in layer_tensors.items():
            gguf_to_kvx[f"blk.{i}.{gguf_name}.weight"] = f"layers.{i}.{name}"
    missing = sorted(set(gguf_to_kvx) - set(tensors))
    if missing:
        raise GgufError(f"{path}: tensors missing for a {config['n_layers']}-layer {family}: {', '.join(missing[:4])}")
    shapes = {name: _numpy_shape(tensors[gguf_name]) for gguf_name, name in gguf_to_kvx.items()}
    config["vocab_size"] = shapes["tok_embeddings"][0] if len(shapes["tok_embeddings"]) == 2 else 0
    return tensors, gguf_to_kvx, shapes


def read_gguf_llama(reader, path, requantize=None):
    """reader: open_gguf(path). Returns (config, weights) for llama_graph.build_llama_graph; config also
    carries bos_token_id and eos_token_ids from the tokenizer metadata. requantize: None for fp32 weights, else
    "none", "q8_0" or "q4_0": matrices as gguf_blocks.QuantizedMatrix (see the module's docstring)."""
    config = _config(reader)
    tensors, gguf_to_kvx, shapes = _named_tensors(reader, path, config, LAYER_TENSORS, "Llama")
    _check_shapes(path, config, shapes)  # before dequantizing: fp32 copies of wrong shapes could be huge
    # llama.cpp permutes the rows of Q and K into neighbour pairs for its own RoPE; HF's graph wants halves.
    permuted = {f"layers.{i}.{w}": config[heads] for i in range(config["n_layers"])
                for w, heads in (("wq", "n_heads"), ("wk", "n_kv_heads"))}

    def maker(gguf_name, name):
        return lambda: _weight(path, tensors[gguf_name], requantize, permuted.get(name))
    return config, WeightsOnDemand({name: maker(gguf_name, name) for gguf_name, name in gguf_to_kvx.items()})


def _weight(path, tensor, requantize, permuted_heads=None):
    """tensor as fp32, or as a QuantizedMatrix where requantize asks for one and the tensor is a matrix; its rows
    from llama.cpp's RoPE order to HF's where permuted_heads gives the heads of a Q or K."""
    weight = None
    if requantize is not None and len(tensor.shape) == 2:
        weight = gguf_quantized_matrix(tensor, _tensor_data(path, tensor), requantize)
    if weight is None:
        weight = _dequantized(path, tensor)
    return weight if permuted_heads is None else _permuted_rows(weight, permuted_heads)


def _permuted_rows(weight, n_heads):
    if isinstance(weight, QuantizedMatrix):
        return weight.map_rows(lambda rows: interleaved_to_rotate_half(rows, n_heads))
    return interleaved_to_rotate_half(weight, n_heads)


def _numpy_shape(tensor):
    """tensor's shape in numpy order (GGUF lists dims fastest first)."""
    return tuple(int(d) for d in reversed(tensor.shape))


def _check_shapes(path, config, shapes):
    """Every tensor's shape against the one the metadata implies (kvx's own table of them)."""
    if config["vocab_size"] < 1:
        raise GgufError(f"{path}: token_embd.weight has shape {list(shapes['tok_embeddings'])}, not [vocab, dim]")
    layout = {"architecture": "llama", **config, "tied_embeddings": "classifier" not in shapes}
    for name, shape in expected_tensor_shapes(layout).items():
        if name in shapes and shapes[name] != shape:
            raise GgufError(f"{path}: {name} has shape {list(shapes[name])}, the metadata implies {list(shape)}")


GEMMA3_LAYER_TENSORS = {  # GGUF name inside blk.{i} -> gemma3_graph name inside layers.{i}
    "attn_norm": "attn_norm", "attn_q": "wq", "attn_k": "wk", "attn_v": "wv", "attn_output": "wo",
    "attn_q_norm": "q_norm", "attn_k_norm": "k_norm", "post_attention_norm": "post_attn_norm",
    "ffn_norm": "ffn_norm", "ffn_gate": "w_gate", "ffn_up": "w_up", "ffn_down": "w_down", "post_ffw_norm": "post_ffn_norm",
}
GEMMA3_SWA_PATTERN = 6  # llama.cpp's for gemma3: every 6th layer global, the others sliding
GEMMA3_ROPE_BASE_LOCAL = 10000.0  # llama.cpp's default for gemma3 when the file has no freq_base_swa


def _gemma3_config(reader):
    a = "gemma3"
    scaling = metadata_str(reader, f"{a}.rope.scaling.type", "none")
    if scaling not in ("none", "linear") or (scaling == "linear" and
                                             metadata_float(reader, f"{a}.rope.scaling.factor", 1.0) != 1.0):
        raise GgufError(f"GGUF RoPE scaling '{scaling}' is not supported (kvx has plain RoPE only)")
    dim = metadata_int(reader, f"{a}.embedding_length")
    n_heads = metadata_int(reader, f"{a}.attention.head_count")
    n_kv_heads = metadata_int(reader, f"{a}.attention.head_count_kv", n_heads)
    head_dim = metadata_int(reader, f"{a}.attention.key_length", max(dim // n_heads, 1))
    if metadata_int(reader, f"{a}.attention.value_length", head_dim) != head_dim or head_dim % 2 \
            or n_heads % n_kv_heads:
        raise GgufError(f"head_dim {head_dim} must be even and equal for keys and values, head_count {n_heads} a "
                        f"multiple of head_count_kv {n_kv_heads}")
    n_layers = metadata_int(reader, f"{a}.block_count")
    if n_layers * len(GEMMA3_LAYER_TENSORS) > len(reader.tensors):
        raise GgufError(f"GGUF block_count {n_layers} needs {n_layers * len(GEMMA3_LAYER_TENSORS)} layer tensors, "
                        f"the file has {len(reader.tensors)} tensors in all")
    # llama.cpp: 1/sqrt(head_dim) for every size but 27B, which scales by 1/sqrt(dim / n_heads)
    return {
        "dim": dim,
        "hidden_dim": metadata_int(reader, f"{a}.feed_forward_length"),
        "n_layers": n_layers,
        "n_heads": n_heads,
        "n_kv_heads": n_kv_heads,
        "head_dim": head_dim,
        "max_seq_len": metadata_int(reader, f"{a}.context_length"),
        "norm_eps": metadata_float(reader, f"{a}.attention.layer_norm_rms_epsilon"),
        "rope_theta": metadata_float(reader, f"{a}.rope.freq_base", 1000000.0),
        "rope_theta_local": metadata_float(reader, f"{a}.rope.freq_base_swa", GEMMA3_ROPE_BASE_LOCAL),
        "sliding_window": metadata_int(reader, f"{a}.attention.sliding_window"),
        "window_layers": [i for i in range(n_layers) if i % GEMMA3_SWA_PATTERN < GEMMA3_SWA_PATTERN - 1],
        "embedding_scale": float(np.float32(np.sqrt(dim))),  # llama.cpp scales by sqrtf(n_embd)
        "attention_scale": float(np.float32(1.0 / np.sqrt(head_dim))),
        "bos_token_id": metadata_int(reader, "tokenizer.ggml.bos_token_id", minimum=0),
        "eos_token_ids": [metadata_int(reader, "tokenizer.ggml.eos_token_id", minimum=0)],
    }


def gguf_architecture(reader):
    return metadata_str(reader, "general.architecture")


def read_gguf_gemma3(reader, path):
    """reader: open_gguf(path) of a GGUF file of architecture gemma3 (text only). Returns (config, weights) for
    gemma3_graph.build_gemma3_graph. Weights are used as stored: llama.cpp neither permutes Gemma's Q/K rows
    (its Gemma RoPE is NeoX's, HF's rotate-half) nor leaves the norms as w (it stores 1 + w)."""
    config = _gemma3_config(reader)
    tensors, gguf_to_kvx, shapes = _named_tensors(reader, path, config, GEMMA3_LAYER_TENSORS, "Gemma 3")
    if config["vocab_size"] < 1:
        raise GgufError(f"{path}: token_embd.weight has shape {list(shapes['tok_embeddings'])}, not [vocab, dim]")
    layout = {"architecture": "gemma", **config, "tied_embeddings": "classifier" not in shapes, "qk_norm": True,
              "norm_placement": "sandwich"}
    for name, shape in expected_tensor_shapes(layout).items():
        if name in shapes and shapes[name] != shape:
            raise GgufError(f"{path}: {name} has shape {list(shapes[name])}, the metadata implies {list(shape)}")
    return config, WeightsOnDemand({name: lambda t=tensors[gguf_name]: _dequantized(path, t)
                                    for gguf_name, name in gguf_to_kvx.items()})
