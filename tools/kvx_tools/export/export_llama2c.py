"""Exports a llama2.c checkpoint (e.g. stories260K.bin) to an HF-style ONNX graph.

  python3 -m kvx_tools.export.export_llama2c CHECKPOINT.bin -o OUT.onnx [--external-data]
"""

import argparse
import sys

from .llama2c_checkpoint import CheckpointError, read_llama2c_checkpoint
from .llama_graph import build_llama_graph
from .onnx_save import export_onnx


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="llama2.c .bin checkpoint")
    parser.add_argument("-o", "--output", required=True, help="ONNX file to write")
    parser.add_argument("--external-data", action="store_true", help="weights in OUT.onnx.data")
    args = parser.parse_args(argv)
    try:
        config, weights = read_llama2c_checkpoint(args.checkpoint)
    except (OSError, CheckpointError) as e:
        print(f"kvx export: {e}", file=sys.stderr)
        return 1
    export_onnx(lambda data: build_llama_graph(config, weights, data), args.output, args.external_data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
