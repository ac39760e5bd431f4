"""Copies of a GGUF file written by llama.cpp's own quantize tool (llama_model_quantize): the fp32 copy
(LLAMA_FTYPE_ALL_F32, every tensor dequantized) and re-quantized copies (Q8_0, Q4_0) of a file that is already
quantized (allow_requantize: the source's values are dequantized, then quantized again, as
`llama-quantize --allow-requantize` does).

The fp32 copy holds the same weight values kvx's GGUF exporter dequantizes, computed by llama.cpp without the
8-bit activation rounding of its K-quant dot products: the peer to compare kvx's fp32 logits and speed with.
The Q8_0 and Q4_0 copies are the fixtures of kvx's quantized-weight tests: files in exactly the format
llama.cpp writes, whose blocks the exporter keeps bit for bit."""
import ctypes
import os
from pathlib import Path

# llama.h's llama_ftype values, by the name the copy's file carries.
LLAMA_FTYPES = {"f32": 0, "q4_0": 2, "q8_0": 7}


def llamacpp_copy_gguf(gguf_path, ftype_name):
    """gguf_path written again by llama.cpp's quantize tool as ftype_name (a key of LLAMA_FTYPES), beside it
    (NAME.llama-cpp-FTYPE.gguf), once; needs llama-cpp-python."""
    import llama_cpp
    gguf_path = Path(gguf_path)
    out = gguf_path.with_name(f"{gguf_path.stem}.llama-cpp-{ftype_name}.gguf")
    if not out.is_file():
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = LLAMA_FTYPES[ftype_name]
        params.allow_requantize = True
        partial = out.with_suffix(".partial")
        if llama_cpp.llama_model_quantize(str(gguf_path).encode(), str(partial).encode(), ctypes.byref(params)) != 0:
            raise RuntimeError(f"llama.cpp could not write a {ftype_name} copy of {gguf_path}")
        os.replace(partial, out)
    return out


def llamacpp_f32_gguf(gguf_path):
    """The fp32 copy of gguf_path beside it (NAME.llama-cpp-f32.gguf), written once; needs llama-cpp-python."""
    return llamacpp_copy_gguf(gguf_path, "f32")
