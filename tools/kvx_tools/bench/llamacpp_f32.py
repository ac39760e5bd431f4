"""llama.cpp's own fp32 copy of a GGUF file: every tensor dequantized by its quantize tool (llama_model_quantize,
LLAMA_FTYPE_ALL_F32). The same weight values kvx's GGUF exporter dequantizes, computed by llama.cpp without the
8-bit activation rounding of its K-quant dot products: the peer to compare kvx's fp32 logits and speed with."""
import ctypes
import os
from pathlib import Path


def llamacpp_f32_gguf(gguf_path):
    """The fp32 copy of gguf_path beside it (NAME.llama-cpp-f32.gguf), written once; needs llama-cpp-python."""
    import llama_cpp
    gguf_path = Path(gguf_path)
    out = gguf_path.with_name(gguf_path.stem + ".llama-cpp-f32.gguf")
    if not out.is_file():
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = 0  # LLAMA_FTYPE_ALL_F32
        params.allow_requantize = True
        partial = out.with_suffix(".partial")
        if llama_cpp.llama_model_quantize(str(gguf_path).encode(), str(partial).encode(), ctypes.byref(params)) != 0:
            raise RuntimeError(f"llama.cpp could not write an fp32 copy of {gguf_path}")
        os.replace(partial, out)
    return out
