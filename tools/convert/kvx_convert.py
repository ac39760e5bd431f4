#!/usr/bin/env python3
"""Converts an ONNX decoder into a kvx model directory (docs/model-format.md).

  python3 tools/convert/kvx_convert.py MODEL.onnx -o MODEL_DIR [--tokenizer tok.bin] [--max-seq-len N]

Weights are found by following the graph from the embedding Gather along the residual stream, not by
initializer names. Anything the converter cannot map stops it with exit code 1 and one line on stderr.
"""

import argparse
import sys
from pathlib import Path

from convert_errors import ConvertError
from graph_index import GraphIndex
from llama2c_tokenizer import check_llama2c_tokenizer
from llama_mapper import map_llama
from kvx_writer import kvx_config, write_model_dir
from onnx_loading import check_onnx_model, load_onnx_model
from op_support import check_supported_ops
from special_tokens import special_token_ids

MAX_SEQ_LEN_METADATA = "max_position_embeddings"


def max_seq_len_of(model, override):
    """--max-seq-len if given, else the model's max_position_embeddings metadata. RoPE graphs carry no
    length limit of their own, so with neither there is no safe value to pick."""
    if override is not None:
        value, origin = override, "--max-seq-len"
    else:
        props = {p.key: p.value for p in model.metadata_props}
        if MAX_SEQ_LEN_METADATA not in props:
            raise ConvertError(f"the model has no '{MAX_SEQ_LEN_METADATA}' metadata; "
                               "give the context length with --max-seq-len N")
        value, origin = props[MAX_SEQ_LEN_METADATA], f"metadata '{MAX_SEQ_LEN_METADATA}'"
    try:
        value = int(value)
    except ValueError:
        raise ConvertError(f"{origin} is not an integer: {value!r}") from None
    if value <= 0:
        raise ConvertError(f"{origin} must be positive, got {value}")
    return value


def convert(onnx_path, out_dir, tokenizer_path=None, max_seq_len=None):
    """The whole conversion; raises ConvertError on anything it cannot do. Returns config.json's dict."""
    model = load_onnx_model(onnx_path)
    check_supported_ops(model.graph)
    check_onnx_model(onnx_path)
    seq_len = max_seq_len_of(model, max_seq_len)
    mapped = map_llama(GraphIndex(model.graph))
    if tokenizer_path is not None:
        check_llama2c_tokenizer(tokenizer_path, mapped.hyperparameters["vocab_size"])
    token_ids = special_token_ids(model, mapped.hyperparameters["vocab_size"])
    config = kvx_config(mapped.architecture, mapped.hyperparameters, seq_len, token_ids, tokenizer_path is not None,
                        Path(onnx_path).name)
    try:
        write_model_dir(out_dir, config, mapped.tensors, tokenizer_path)
    except OSError as e:
        raise ConvertError(f"cannot write {out_dir}: {e.strerror or e}") from None
    return config


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="ONNX file (external data is read from its folder)")
    parser.add_argument("-o", "--output", required=True, help="model directory to write")
    parser.add_argument("--tokenizer", help="llama2.c tokenizer.bin to copy into the directory")
    parser.add_argument("--max-seq-len", type=int, help="context length, when the model has no "
                                                        "max_position_embeddings metadata (overrides it)")
    args = parser.parse_args(argv)
    try:
        convert(args.model, args.output, args.tokenizer, args.max_seq_len)
    except ConvertError as e:
        print(f"kvx convert: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
