"""Exports a Llama or Gemma 3 GGUF file (llama.cpp's format, any quantization) to an HF-style ONNX graph with
fp32 weights, and writes its tokenizer beside it (tokenizer.json for Llama's byte-level BPE, tokenizer.bin,
llama2.c's layout, for Gemma 3's SentencePiece vocabulary) and its chat template as chat_template.jinja.

  python3 -m kvx_tools.export.export_gguf_llama MODEL.gguf -o OUT.onnx [--external-data]
                                                [--keep-quantized] [--requantize none|q8_0|q4_0]

--keep-quantized (Llama only) keeps Q8_0, Q4_0 and Q4_1 matrices quantized, as ONNX Runtime's com.microsoft
MatMulNBits (and GatherBlockQuantized for a Q8_0/Q4_0 embedding) with the file's integers and scales, and
stores the other matrices fp32; --requantize q8_0|q4_0 (implies --keep-quantized) re-quantizes those other
matrices to that type first, with llama.cpp's rounding (gguf_blocks.py). Norm weights stay fp32.

The context length, RoPE theta, RMSNorm eps and the BOS/EOS ids come from the GGUF metadata; the ids
are stored in the ONNX metadata_props, where kvx convert finds them.
"""

import argparse
import sys
from pathlib import Path

from .gemma3_graph import build_gemma3_graph
from .gguf_checkpoint import GgufError, gguf_architecture, open_gguf, read_gguf_gemma3, read_gguf_llama
from .gguf_tokenizer import (LLAMA2C_TOKENIZER_FILE, gguf_add_space_prefix, gguf_chat_template, gguf_llama2c_tokenizer,
                             gguf_tokenizer, gguf_whole_piece_ids)
from .llama_graph import build_llama_graph
from .onnx_save import export_onnx

TOKENIZER_FILE = "tokenizer.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"


def export_gguf(gguf_path, onnx_path, external_data, requantize=None):
    """Writes OUT.onnx (+ .data), tokenizer.json and, when the file has one, chat_template.jinja.
    requantize: None for fp32 weights; "none", "q8_0" or "q4_0" for quantized ones (the module's docstring).
    Returns the config read from the metadata. Raises GgufError for what it cannot export."""
    reader = open_gguf(gguf_path)
    if gguf_architecture(reader) == "gemma3":
        if requantize is not None:
            raise GgufError(f"{gguf_path}: quantized export is for Llama files only; Gemma 3 exports fp32")
        return _export_gemma3(reader, gguf_path, onnx_path, external_data)
    tokenizer = gguf_tokenizer(reader)
    template = gguf_chat_template(reader)
    config, weights = read_gguf_llama(reader, gguf_path, requantize)
    if requantize is not None:  # blocks kept: kvx rounds activations as llama.cpp does for them
        config["x_rounding"] = "ggml"
    if tokenizer.get_vocab_size() != config["vocab_size"]:
        raise GgufError(f"{gguf_path}: the tokenizer has {tokenizer.get_vocab_size()} tokens, the embedding "
                        f"{config['vocab_size']} rows")
    export_onnx(lambda data: build_llama_graph(config, weights, data), onnx_path, external_data)
    out_dir = Path(onnx_path).parent
    tokenizer.save(str(out_dir / TOKENIZER_FILE))
    _write_template(out_dir, template)
    return config


def tokenizer_file(config):
    """The tokenizer file export_gguf wrote for the model of config (its return value)."""
    return LLAMA2C_TOKENIZER_FILE if config.get("architecture") == "gemma3" else TOKENIZER_FILE


def _export_gemma3(reader, gguf_path, onnx_path, external_data):
    template = gguf_chat_template(reader)
    tokenizer = gguf_llama2c_tokenizer(reader)
    config, weights = read_gguf_gemma3(reader, gguf_path)
    config["add_dummy_prefix"] = gguf_add_space_prefix(reader)  # into the ONNX metadata, for config.json
    config["user_defined_token_ids"], config["control_token_ids"] = gguf_whole_piece_ids(reader)
    export_onnx(lambda data: build_gemma3_graph(config, weights, data), onnx_path, external_data)
    out_dir = Path(onnx_path).parent
    (out_dir / LLAMA2C_TOKENIZER_FILE).write_bytes(tokenizer)
    _write_template(out_dir, template)
    return {**config, "architecture": "gemma3"}


def _write_template(out_dir, template):
    template_path = out_dir / CHAT_TEMPLATE_FILE
    if template is not None:
        template_path.write_text(template)
    else:
        template_path.unlink(missing_ok=True)  # a stale one would belong to another model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf", help="Llama or Gemma 3 GGUF file")
    parser.add_argument("-o", "--output", required=True, help="ONNX file to write")
    parser.add_argument("--external-data", action="store_true", help="weights in OUT.onnx.data")
    parser.add_argument("--keep-quantized", action="store_true",
                        help="Q8_0, Q4_0 and Q4_1 matrices as MatMulNBits, the others fp32")
    parser.add_argument("--requantize", choices=["none", "q8_0", "q4_0"],
                        help="with --keep-quantized (implied), what matrices of other types become (none: fp32)")
    args = parser.parse_args(argv)
    requantize = args.requantize or ("none" if args.keep_quantized else None)
    try:
        export_gguf(args.gguf, args.output, args.external_data, requantize)
    except (OSError, GgufError) as e:
        print(f"kvx export: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
