"""The precision of the weights in the model directory: config.json's weights.dtype (docs/model-format.md).

Matrices (every 2-D tensor: linear layers, embeddings, the classifier) are stored in the chosen dtype,
vectors (norm weights, biases, rope_inv_freq) always as F32. Without --dtype the source's precision is
kept: f16 when every matrix of the ONNX graph is fp16, else f32, so that nothing is rounded unasked.
--dtype f16 rounds fp32 matrices to nearest even (numpy's astype, as F16C does); --dtype f32 widens fp16
ones exactly.
"""

import numpy as np

from ..errors import ConvertError

NUMPY_DTYPES = {"f32": np.float32, "f16": np.float16}
FP16_MAX = float(np.finfo(np.float16).max)


def source_dtype(tensors):
    """"f16" when every matrix in tensors (kvx name -> array) is fp16, else "f32"."""
    matrices = [t for t in tensors.values() if t.ndim == 2]
    return "f16" if matrices and all(t.dtype == np.float16 for t in matrices) else "f32"


def cast_weights(tensors, dtype):
    """tensors in the model directory's dtypes: matrices as dtype, vectors as fp32. Raises when a finite
    fp32 weight lies beyond fp16's range (it would become infinite)."""
    out = {}
    for name, t in tensors.items():
        if t.dtype not in (np.float16, np.float32):
            raise ConvertError(f"{name} is {t.dtype}; kvx stores fp32 or fp16 weights")
        target = NUMPY_DTYPES[dtype] if t.ndim == 2 else np.float32
        with np.errstate(over="ignore"):  # overflow is reported below, as a ConvertError
            cast = np.ascontiguousarray(t.astype(target))
        if target == np.float16 and t.dtype != np.float16:
            overflow = np.isfinite(t) & ~np.isfinite(cast)
            if overflow.any():
                raise ConvertError(f"{name} holds {np.abs(t[overflow]).max():.6g}, beyond fp16's range "
                                   f"(+-{FP16_MAX:g}): convert with --dtype f32")
        out[name] = cast
    return out
