"""Writes SmolLM2's Q4_1 GGUF again with every matrix stored as F32 or F16, for llama.cpp to run the same
weights as kvx's fp32 and fp16 models.

    python3 -m kvx_tools.bench.write_gguf SOURCE.gguf --dtype f16 -o smollm2-f16.gguf

kvx's fp32 model is the dequantization of the same file (docs/smollm2.md), so F32 here is bit-for-bit kvx's
weights, and F16 rounds them to half as `kvx convert --dtype f16` does. Each tensor is dequantized with
gguf.quants.dequantize; 1-D tensors (the RMSNorm weights) stay F32, as llama.cpp's own converter keeps them.
The metadata (tokenizer included) is copied unchanged except general.file_type, and the tensors keep
llama.cpp's Q/K row order: this is llama.cpp's file, read by llama.cpp's RoPE.
"""
import argparse
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType
from gguf.quants import dequantize

STORAGE = {"f32": (np.float32, LlamaFileType.ALL_F32), "f16": (np.float16, LlamaFileType.MOSTLY_F16)}
# Fields the reader reports about the file itself, or that the writer sets on its own.
NOT_COPIED = ("GGUF.", "general.architecture", "general.file_type")


def copy_metadata(reader, writer):
    for field in reader.fields.values():
        if field.name.startswith(NOT_COPIED):
            continue
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), value_type, sub_type)


def write_gguf(source, dtype, output):
    reader = GGUFReader(source)
    architecture = reader.fields["general.architecture"].contents()
    numpy_dtype, file_type = STORAGE[dtype]
    writer = GGUFWriter(output, architecture)
    copy_metadata(reader, writer)
    writer.add_file_type(file_type)
    for tensor in reader.tensors:
        # [*reversed(GGUF dims)]: numpy order, rows of the matrix first
        weights = dequantize(tensor.data, tensor.tensor_type).reshape([int(d) for d in reversed(tensor.shape)])
        writer.add_tensor(tensor.name, weights.astype(numpy_dtype if weights.ndim > 1 else np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="the GGUF file to rewrite (any storage types gguf can dequantize)")
    parser.add_argument("--dtype", choices=sorted(STORAGE), required=True, help="storage of the matrices")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    try:
        write_gguf(args.source, args.dtype, args.output)
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"write_gguf: {args.source}: {e}")


if __name__ == "__main__":
    main()
