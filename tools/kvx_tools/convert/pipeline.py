"""Converts an ONNX decoder into a kvx model directory (docs/model-format.md).

  python3 -m kvx_tools.convert MODEL.onnx -o MODEL_DIR [--tokenizer FILE [--merges vocab.bpe]]
                              [--chat-template FILE] [--max-seq-len N] [--dtype f16|f32]
                              [--check-weights | --no-check-weights]
                              [--quantize int8|int4 [--block-size B] [--symmetric] [--no-quantize-embeddings]]

The tokenizer is a llama2.c tokenizer.bin, an HF tokenizer.json (byte-level BPE), or GPT-2's encoder.json
with its vocab.bpe given by --merges.

Weights are found by following the graph from the embedding along the residual stream, not by initializer
names; the structure there tells Llama from GPT-2 (families/dispatch.py). Anything the converter cannot map
stops it with exit code 1 and one line on stderr.

Quantized graphs (MatMulNBits, GatherBlockQuantized, blockwise DequantizeLinear) keep their integers
(quantized/ops.py); --quantize quantizes a float graph's matrices as ONNX Runtime's RTN quantizer does
(quantized/rtn.py, quantized/choice.py). docs/model-format.md, "Quantized matrices", has the layout.
"""

import argparse
import sys
from pathlib import Path

from .errors import ConvertError
from .graph.index import GraphIndex
from .exporters.ortgenai.genai_config import read_genai_config
from .exporters.hf_config import hf_context_length
from .families.dispatch import map_graph
from .graph.normalise import normalise
from .write.model_dir import kvx_config, write_model_dir
from .graph.load import check_onnx_model, load_onnx_model
from .graph.op_support import check_supported_ops
from .quantized.ops import rewrite_quantized_ops
from .quantized.choice import QUANTIZE_BITS, quantize_floats
from .quantized.matrix import BLOCK_SIZES
from .blocks.sliding_window import sliding_window_of
from .tokenizer.special_tokens import dummy_prefix, special_token_ids, whole_piece_ids
from .tokenizer.bundle import bundle, carry_sentencepiece_options
from .write.stored_weights import stored_weights
from .write.weight_check import FiniteCheck
from .write.weight_dtype import NUMPY_DTYPES, source_dtype

MAX_SEQ_LEN_METADATA = "max_position_embeddings"


def max_seq_len_of(model, override, n_positions=None, table="the position embedding", genai_length=None,
                   hf_length=(None, None)):
    """--max-seq-len if given, else the model's max_position_embeddings metadata, else genai_config.json's
    context_length (genai_length, ONNX Runtime GenAI's builder), else the Hugging Face config.json beside the
    graph (hf_length: (value, origin), exporters/hf_config.py), else the rows of the table
    the graph looks positions up in (n_positions: a learned position embedding's, or the RoPE tables' of
    ONNX Runtime's RotaryEmbedding; None where the graph computes its RoPE angles). Such a table bounds the
    context. Computed RoPE carries no length limit of its own, so with neither there is no safe value."""
    props = {p.key: p.value for p in model.metadata_props}
    if override is not None:
        value, origin = override, "--max-seq-len"
    elif MAX_SEQ_LEN_METADATA in props:
        value, origin = props[MAX_SEQ_LEN_METADATA], f"metadata '{MAX_SEQ_LEN_METADATA}'"
    elif genai_length is not None:
        value, origin = genai_length, "genai_config.json's context_length"
    elif hf_length[0] is not None:
        value, origin = hf_length
    elif n_positions is not None:
        return n_positions
    else:
        raise ConvertError(f"the model has no '{MAX_SEQ_LEN_METADATA}' metadata; "
                           "give the context length with --max-seq-len N")
    try:
        value = int(value)
    except (TypeError, ValueError):
        raise ConvertError(f"{origin} is not an integer: {value!r}") from None
    if value <= 0:
        raise ConvertError(f"{origin} must be positive, got {value}")
    if n_positions is not None and value > n_positions:
        raise ConvertError(f"{origin} is {value}, but {table} has only {n_positions} rows")
    return value


X_ROUNDINGS = ("onnxruntime", "ggml")


def x_rounding_of(model):
    """The x_rounding metadata an exporter wrote ("ggml" for blocks kept from a GGUF file), else None: how kvx's
    int8 kernels round the activations for the quantized matrices (docs/model-format.md, weights.x_rounding)."""
    props = {p.key: p.value for p in model.metadata_props}
    value = props.get("x_rounding")
    if value is not None and value not in X_ROUNDINGS:
        raise ConvertError(f"metadata 'x_rounding' is {value!r}; kvx knows {', '.join(X_ROUNDINGS)}")
    return value


def convert(onnx_path, out_dir, tokenizer_path=None, max_seq_len=None, merges_path=None, chat_template_path=None,
            dtype=None, check_weights=True, quantize=None, block_size=32, symmetric=False, quantize_embeddings=True):
    """The whole conversion; raises ConvertError on anything it cannot do. Returns config.json's dict.
    dtype: "f16" or "f32" for the float weight matrices, or None to keep the graph's (write/weight_dtype.py).
    check_weights: refuse weights holding NaN or infinity (write/weight_check.py).
    quantize: "int8" or "int4" to quantize the float matrices quantized/choice.py picks (blocks of block_size,
    symmetric or with zero points, the embedding and classifier too with quantize_embeddings), or None."""
    model, weights = load_onnx_model(onnx_path)  # the large constants stay unread (graph/weights.py)
    genai = read_genai_config(onnx_path)
    genai_length = genai.context_length if genai else None
    check_supported_ops(model.graph)
    check_onnx_model(onnx_path, model)
    sources = rewrite_quantized_ops(model, weights)
    ix = GraphIndex(normalise(model, weights).graph, weights, model)
    mapped = map_graph(ix)
    positions = mapped.tensors.get("pos_embeddings")
    hf_length = hf_context_length(onnx_path)
    if positions is None:
        seq_len = max_seq_len_of(model, max_seq_len, mapped.max_positions, "the RoPE tables", genai_length, hf_length)
    else:
        seq_len = max_seq_len_of(model, max_seq_len, positions.shape[0], genai_length=genai_length,
                                 hf_length=hf_length)
        mapped.tensors["pos_embeddings"] = positions[:seq_len]  # the rows a context of seq_len reaches
    vocab_size = mapped.hyperparameters["vocab_size"]
    extras = bundle(tokenizer_path, merges_path, chat_template_path, vocab_size)
    # Ids the exporter wrote into the ONNX metadata (else genai_config.json) win over the tokenizer files'.
    bos, eos = special_token_ids(model, vocab_size, genai)
    if bos is not None:
        extras.bos_token_id = bos
    if eos is not None:
        extras.eos_token_ids = eos
    carry_sentencepiece_options(extras, dummy_prefix(model), whole_piece_ids(model, vocab_size))
    window = sliding_window_of(model, mapped.hyperparameters["n_layers"], ix, mapped.graph_windows, genai,
                               lambda line: print(f"kvx convert: warning: {line}", file=sys.stderr))
    dtype = dtype or source_dtype(mapped.tensors)
    floats, quantized = sources.split(mapped.tensors)
    if quantize is not None:
        quantized.update(quantize_floats(floats, quantize, block_size, symmetric,
                                         mapped.hyperparameters["tied_embeddings"], quantize_embeddings))
    # Quantized scales stay in the graph's precision, whatever --dtype says.
    stored = stored_weights(list(mapped.tensors), floats, quantized, dtype)
    x_rounding = x_rounding_of(model)  # checked whatever the weights; written for quantized ones only
    config = kvx_config(mapped.architecture, mapped.hyperparameters, seq_len, extras, Path(onnx_path).name, dtype,
                        window, x_rounding if quantized else None)
    # Checked as they are written, a block at a time: after the slice above, so rows beyond the context, which are
    # not stored, cannot harm.
    check = FiniteCheck(ix.constants_read) if check_weights else None
    try:
        write_model_dir(out_dir, config, stored, extras.files, check)
    except OSError as e:
        raise ConvertError(f"cannot write {out_dir}: {e.strerror or e}") from None
    return config


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("model", help="ONNX file (external data is read from its folder)")
    parser.add_argument("-o", "--output", required=True, help="model directory to write")
    parser.add_argument("--tokenizer", help="tokenizer to check and copy into the directory: llama2.c "
                                            "tokenizer.bin, HF tokenizer.json, or GPT-2 encoder.json")
    parser.add_argument("--merges", help="GPT-2's vocab.bpe, with --tokenizer encoder.json")
    parser.add_argument("--chat-template", help="Jinja chat template to copy into the directory")
    parser.add_argument("--max-seq-len", type=int, help="context length, when the model has no "
                                                        "max_position_embeddings metadata (overrides it; "
                                                        "at most the rows of a position table or of "
                                                        "precomputed RoPE tables)")
    parser.add_argument("--dtype", choices=sorted(NUMPY_DTYPES), help="storage of the weight matrices "
                        "(default: the graph's: f16 when all its matrices are fp16, else f32)")
    parser.add_argument("--check-weights", action=argparse.BooleanOptionalAction, default=True,
                        help="refuse weights that hold NaN or infinity (default: on)")
    parser.add_argument("--quantize", choices=sorted(QUANTIZE_BITS), help="quantize the float weight matrices "
                        "round-to-nearest, as ONNX Runtime's MatMulNBitsQuantizer does (default: keep them float; "
                        "a quantized graph's matrices stay as the graph has them)")
    parser.add_argument("--block-size", type=int, default=32, choices=BLOCK_SIZES,
                        help="with --quantize: inputs per block, one scale each (default: 32)")
    parser.add_argument("--symmetric", action="store_true", help="with --quantize: no zero points (ORT's "
                        "is_symmetric; default: asymmetric, a zero point per block, as ORT's default)")
    parser.add_argument("--quantize-embeddings", action=argparse.BooleanOptionalAction, default=True,
                        help="with --quantize: the token embedding and the classifier too, as llama.cpp does "
                             "(the classifier, or a tied embedding, as int8 under int4; default: on)")
    args = parser.parse_args(argv)
    try:
        convert(args.model, args.output, args.tokenizer, args.max_seq_len, args.merges, args.chat_template,
                args.dtype, args.check_weights, args.quantize, args.block_size, args.symmetric,
                args.quantize_embeddings)
    except ConvertError as e:
        print(f"kvx convert: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: the writer has already removed what it staged (write/staged_dir.py)
        print("kvx convert: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("kvx convert: out of memory", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
