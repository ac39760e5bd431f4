"""Exports a Llama GGUF file (llama.cpp's format, any quantization) to an HF-style ONNX graph with fp32
weights, and writes its tokenizer as tokenizer.json and its chat template as chat_template.jinja beside it.

  python3 -m kvx_tools.export.export_gguf_llama MODEL.gguf -o OUT.onnx [--external-data]

The context length, RoPE theta, RMSNorm eps and the BOS/EOS ids come from the GGUF metadata; the ids
are stored in the ONNX metadata_props, where kvx convert finds them.
"""

import argparse
import sys
from pathlib import Path

from .gguf_checkpoint import GgufError, open_gguf, read_gguf_llama
from .gguf_tokenizer import gguf_chat_template, gguf_tokenizer
from .llama_graph import build_llama_graph
from .onnx_save import save_onnx

TOKENIZER_FILE = "tokenizer.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"


def export_gguf(gguf_path, onnx_path, external_data):
    """Writes OUT.onnx (+ .data), tokenizer.json and, when the file has one, chat_template.jinja.
    Returns the config read from the metadata. Raises GgufError for what it cannot export."""
    reader = open_gguf(gguf_path)
    tokenizer = gguf_tokenizer(reader)
    template = gguf_chat_template(reader)
    config, weights = read_gguf_llama(reader, gguf_path)
    if tokenizer.get_vocab_size() != config["vocab_size"]:
        raise GgufError(f"{gguf_path}: the tokenizer has {tokenizer.get_vocab_size()} tokens, the embedding "
                        f"{config['vocab_size']} rows")
    save_onnx(build_llama_graph(config, weights), onnx_path, external_data)
    out_dir = Path(onnx_path).parent
    tokenizer.save(str(out_dir / TOKENIZER_FILE))
    template_path = out_dir / CHAT_TEMPLATE_FILE
    if template is not None:
        template_path.write_text(template)
    else:
        template_path.unlink(missing_ok=True)  # a stale one would belong to another model
    return config


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf", help="Llama GGUF file")
    parser.add_argument("-o", "--output", required=True, help="ONNX file to write")
    parser.add_argument("--external-data", action="store_true", help="weights in OUT.onnx.data")
    args = parser.parse_args(argv)
    try:
        export_gguf(args.gguf, args.output, args.external_data)
    except (OSError, GgufError) as e:
        print(f"kvx export: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
