"""Writes a random-weight Llama GGUF of any shape, Llama 3.2 1B's by default (hidden 2048, 16 layers, 32 query
and 8 KV heads of 64, MLP 8192, vocabulary 128256, tied embedding, RoPE theta 500000), its matrices in one GGML
type (Q4_0 by default: 699 MB) and its norms F32, with a byte-level BPE vocabulary of filler tokens: a model of
the size people run, for measuring the exporter and the converter on it (docs/model-format.md, "Large models:
memory"). Written a tensor at a time, each made and quantized a block of rows at a time.

    python3 -m kvx_tools.bench.write_random_gguf -o llama-1b-q4_0.gguf [--type q4_0|q8_0|f16|f32] \\
        [--dim 2048 --hidden 8192 --layers 16 --heads 32 --kv-heads 8 --head-dim 64 --vocab 128256] [--untied]

Values are N(0, 1/fan_in), the embedding's N(0, 1/dim) when tied, norm weights 1 + N(0, 0.01): logits of a few
units, neither uniform nor one-hot, as export_random_llama.py makes them.
"""

import argparse
import sys

import gguf
import numpy as np
from gguf import GGMLQuantizationType

TYPES = {"q4_0": GGMLQuantizationType.Q4_0, "q8_0": GGMLQuantizationType.Q8_0, "f16": GGMLQuantizationType.F16,
         "f32": GGMLQuantizationType.F32}
CONTROL = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
MERGES = ["Ġ t", "h e"]  # a BPE needs some; the rest of the vocabulary is filler
BLOCK_VALUES = 1 << 23  # made and quantized at a time
LAYER_MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def byte_level_alphabet():
    """GPT-2's 256 printable stand-ins for bytes: printable Latin-1 bytes stand for themselves, the
    others (control characters, space, ...) for chr(256 + n) in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b], extra = chr(256 + extra), extra + 1
    return [chars[b] for b in range(256)]


def tensor_shapes(a):
    """{GGUF name: (numpy shape [out, in] or [n], fan_in or None for a norm)} in the order they are written."""
    q_dim, kv_dim = a.heads * a.head_dim, a.kv_heads * a.head_dim
    shapes = {"token_embd.weight": ((a.vocab, a.dim), a.dim if not a.untied else 1)}
    for i in range(a.layers):
        p = f"blk.{i}."
        rows = {"attn_q": (q_dim, a.dim), "attn_k": (kv_dim, a.dim), "attn_v": (kv_dim, a.dim),
                "attn_output": (a.dim, q_dim), "ffn_gate": (a.hidden, a.dim), "ffn_up": (a.hidden, a.dim),
                "ffn_down": (a.dim, a.hidden)}
        shapes[p + "attn_norm.weight"] = ((a.dim,), None)
        shapes.update({p + name + ".weight": (rows[name], rows[name][1]) for name in LAYER_MATRICES})
        shapes[p + "ffn_norm.weight"] = ((a.dim,), None)
    shapes["output_norm.weight"] = ((a.dim,), None)
    if a.untied:
        shapes["output.weight"] = ((a.vocab, a.dim), a.dim)
    return shapes


def stored(shape, fan_in, kind, seed):
    """The tensor as the GGUF stores it (quantized bytes [rows, bytes per row], or floats), made a block at a time."""
    rng = np.random.default_rng(seed)
    if fan_in is None:
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    rows, cols = shape
    step = max(1, BLOCK_VALUES // cols)
    out = None
    for start in range(0, rows, step):
        block = rng.standard_normal((min(step, rows - start), cols), dtype=np.float32)
        block *= np.float32(1.0 / np.sqrt(fan_in))
        encoded = gguf.quants.quantize(block, kind) if kind not in (GGMLQuantizationType.F32,) else block
        if out is None:
            out = np.empty((rows, encoded.shape[1]), encoded.dtype)
        out[start:start + len(block)] = encoded
    return out


def write_random_gguf(a):
    kind = TYPES[a.type]
    writer = gguf.GGUFWriter(a.output, "llama")
    writer.add_block_count(a.layers)
    writer.add_context_length(a.context)
    writer.add_embedding_length(a.dim)
    writer.add_feed_forward_length(a.hidden)
    writer.add_head_count(a.heads)
    writer.add_head_count_kv(a.kv_heads)
    writer.add_key_length(a.head_dim)
    writer.add_value_length(a.head_dim)
    writer.add_rope_dimension_count(a.head_dim)
    writer.add_rope_freq_base(a.rope_theta)
    writer.add_layer_norm_rms_eps(1e-5)
    tokens = CONTROL + byte_level_alphabet() + [merge.replace(" ", "") for merge in MERGES]
    tokens += [f"<filler_{i}>" for i in range(a.vocab - len(tokens))]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL] * len(CONTROL) + [gguf.TokenType.NORMAL] * (a.vocab - len(CONTROL)))
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    shapes = tensor_shapes(a)
    for name, (shape, fan_in) in shapes.items():
        if fan_in is None or kind == GGMLQuantizationType.F32:
            writer.add_tensor_info(name, shape, np.dtype(np.float32), int(np.prod(shape)) * 4)
        elif kind == GGMLQuantizationType.F16:
            writer.add_tensor_info(name, shape, np.dtype(np.float16), int(np.prod(shape)) * 2)
        else:
            block, type_bytes = gguf.GGML_QUANT_SIZES[kind]
            byte_shape = (shape[0], shape[1] // block * type_bytes)
            writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for k, (name, (shape, fan_in)) in enumerate(shapes.items()):
        writer.write_tensor_data(stored(shape, fan_in, kind, [a.seed, k]))
    writer.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--type", choices=sorted(TYPES), default="q4_0", help="storage of the matrices")
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=8192)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--context", type=int, default=131072)
    parser.add_argument("--rope-theta", type=float, default=500000.0)
    parser.add_argument("--untied", action="store_true", help="an output.weight of its own")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    write_random_gguf(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
