"""The precision of the weights in the model directory: config.json's weights.dtype (docs/model-format.md).

Matrices (every 2-D tensor: linear layers, embeddings, the classifier) are stored in the chosen dtype,
vectors (norm weights, biases, rope_inv_freq) always as F32. Without --dtype the source's precision is
kept: f16 when every matrix of the ONNX graph is fp16, else f32, so that nothing is rounded unasked.
--dtype f16 rounds fp32 matrices to nearest even (numpy's astype, as F16C does); --dtype f32 widens fp16
ones exactly. The writer casts a block of rows at a time (write/stored_weights.py).
"""

import numpy as np

from ..errors import ConvertError
from ..graph.lazy_tensor import row_blocks

NUMPY_DTYPES = {"f32": np.float32, "f16": np.float16}
FP16_MAX = float(np.finfo(np.float16).max)


def source_dtype(tensors):
    """"f16" when every matrix in tensors (kvx name -> array or LazyTensor) is fp16, else "f32"."""
    matrices = [t for t in tensors.values() if t.ndim == 2]
    return "f16" if matrices and all(t.dtype == np.float16 for t in matrices) else "f32"


def stored_dtype(name, tensor, dtype):
    """The numpy dtype tensor is stored in under weights.dtype dtype: matrices as dtype, vectors as fp32."""
    if tensor.dtype not in (np.float16, np.float32):
        raise ConvertError(f"{name} is {tensor.dtype}; kvx stores fp32 or fp16 weights")
    return np.dtype(NUMPY_DTYPES[dtype] if tensor.ndim == 2 else np.float32)


def cast_block(name, block, target, tensor):
    """block (rows of tensor) as target. Raises when a finite fp32 weight lies beyond fp16's range (it would
    become infinite), naming the largest such value of the whole tensor."""
    with np.errstate(over="ignore"):  # overflow is reported below, as a ConvertError
        cast = block.astype(target, copy=False)
    if target == np.float16 and block.dtype != np.float16 and not np.isfinite(cast).all() \
            and (np.isfinite(block) & ~np.isfinite(cast)).any():
        raise ConvertError(f"{name} holds {_largest_overflow(tensor):.6g}, beyond fp16's range "
                           f"(+-{FP16_MAX:g}): convert with --dtype f32")
    return cast


def _largest_overflow(tensor):
    largest = 0.0
    for _, block in row_blocks(tensor):
        with np.errstate(over="ignore"):
            overflow = np.isfinite(block) & ~np.isfinite(block.astype(np.float16))
        if overflow.any():
            largest = max(largest, float(np.abs(block[overflow]).max()))
    return largest
