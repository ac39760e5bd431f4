"""Round-to-nearest blockwise quantization of a float matrix, giving the integers and scales ONNX Runtime's
MatMulNBitsQuantizer gives (its default RTN configuration, whose quantize_matmul_{4,8}bits run MLAS's
blockwise quantizer), so that `kvx convert --quantize` and an ORT-quantized graph can be checked against
each other (tests/python/test_convert_quantized.py compares them on the same weights).

Per block of `block` consecutive inputs of one output row, in fp32 arithmetic as MLAS does it:
  asymmetric (ORT's default): lo = min(min(x), 0), hi = max(max(x), 0), s = (hi - lo) / (2^bits - 1),
      z = clamp(round(-lo / s), 0, 2^bits - 1) (z = 0 when s = 0), q = clamp(round(x * (1 / s) + z), 0, 2^bits - 1)
  symmetric: m = the element of largest magnitude (the more negative on a tie), s = -m / 2^(bits-1),
      z = 2^(bits-1), q as above
round is C's roundf (halves away from zero); 1 / s is taken from s as stored (fp16 for an fp16 matrix), and
1 / 0 as 0. The inputs past the last whole block are zeros, as ORT pads them.
"""

import numpy as np

from ..graph.lazy_tensor import row_blocks
from .matrix import QuantizedLayout, from_unsigned_blocks

# Rows quantized at a time, by their size in fp32: quantize_rtn holds a few fp32 copies of what it quantizes.
RTN_BLOCK_BYTES = 1 << 24


def round_half_away(x):
    """C's roundf on fp32: x - trunc(x) is exact, so halves are found without the error of floor(x + 0.5)."""
    whole = np.trunc(x)
    return whole + np.where(np.abs(x - whole) >= 0.5, np.sign(x), 0).astype(x.dtype)


def quantize_rtn(weight, bits, block, symmetric=False):
    """QuantizedMatrix of weight (fp32 or fp16 [rows, cols], kvx's [out, in]), scales in weight's dtype."""
    rows, cols = weight.shape
    blocks = -(-cols // block)
    x = np.zeros((rows, blocks * block), np.float32)
    x[:, :cols] = weight.astype(np.float32)
    x = x.reshape(rows, blocks, block)
    top = np.float32((1 << bits) - 1)
    lo, hi = x.min(axis=2), x.max(axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        if symmetric:
            extreme = np.where(np.abs(hi) > np.abs(lo), hi, lo)
            scales = (-extreme / np.float32(1 << (bits - 1))).astype(weight.dtype)
            zero = np.full((rows, blocks), 1 << (bits - 1), np.float32)
        else:
            lo, hi = np.minimum(lo, np.float32(0)), np.maximum(hi, np.float32(0))
            exact = (hi - lo) / top
            zero_fp = np.where(exact != 0, np.float32(0) - lo / exact, lo).astype(np.float32)
            zero = np.clip(round_half_away(zero_fp), 0, top).astype(np.float32)
            scales = exact.astype(weight.dtype)
        stored = scales.astype(np.float32)
        reciprocal = np.where(stored != 0, np.float32(1) / stored, np.float32(0)).astype(np.float32)
    q = np.clip(round_half_away((x * reciprocal[:, :, None]).astype(np.float32) + zero[:, :, None]), 0, top)
    zero_points = None if symmetric else zero.astype(np.int16)
    return from_unsigned_blocks(bits, block, cols, q.astype(np.int16), scales, zero_points)


class RtnQuantized:
    """quantize_rtn of a float matrix (an array or a LazyTensor [rows, cols]), done a block of rows at a time as
    the writer stores it: its rows are quantized independently, so blocks give the whole matrix's result."""

    def __init__(self, values, bits, block, symmetric):
        self.values, self.bits, self.block, self.symmetric = values, bits, block, symmetric
        rows, cols = values.shape
        self.layout = QuantizedLayout(bits, block, cols, rows, values.dtype, not symmetric, False)

    def blocks(self, max_bytes=RTN_BLOCK_BYTES):
        """(first row, the rows' float values, their QuantizedMatrix), block by block."""
        for start, rows in row_blocks(self.values, max_bytes):
            yield start, rows, quantize_rtn(rows, self.bits, self.block, self.symmetric)
