"""A quantized matrix in kvx's terms (docs/model-format.md, "Quantized matrices"), and the tensors that store it.

Every source of quantized weights (ONNX Runtime's MatMulNBits, blockwise DequantizeLinear, GatherBlockQuantized,
the converter's own --quantize) builds one of these from its integers; only to_tensors knows the file's
packing, so the nibble order and the padding rules live in one place.
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import ConvertError

GROUP = 32  # the 4-bit packing works in groups of 32 elements; rows are padded to a multiple of it
BLOCK_SIZES = (16, 32, 64, 128, 256)  # powers of two kvx's loader takes
IMPLIED_ZERO = {4: 8, 8: 0}  # the zero point of a matrix without zero_points (q8 is stored signed)


def padded_length(cols, block):
    """L: cols rounded up to a multiple of max(block, 32)."""
    step = max(block, GROUP)
    return -(-cols // step) * step


def check_block_size(block, where):
    if block not in BLOCK_SIZES:
        raise ConvertError(f"{where}: block_size {block} is not a power of two from 16 to 256 (kvx's quantized "
                           "matrices)")


@dataclass(frozen=True)
class QuantizedLayout:
    """What a quantized matrix stores, known before its integers are read: the names, dtypes and shapes of
    QuantizedMatrix.to_tensors, so that the writer can lay the file out first and fill it block by block."""
    bits: int
    block: int
    cols: int
    rows: int
    scales_dtype: np.dtype
    zero_points: bool  # whether X.zero_points is stored
    mins: bool  # whether X.mins is stored

    def entries(self, name):
        """{safetensors name: (dtype, shape)} of to_tensors(name) for the whole matrix."""
        length = padded_length(self.cols, self.block)
        blocks = length // self.block
        out = {f"{name}.scales": (np.dtype(self.scales_dtype), (self.rows, blocks))}
        if self.bits == 8:
            out[f"{name}.q8"] = (np.dtype(np.int8), (self.rows, length))
        else:
            out[f"{name}.q4"] = (np.dtype(np.uint8), (self.rows, length // 2))
        if self.zero_points:
            out[f"{name}.zero_points"] = (np.dtype(np.uint8 if self.bits == 4 else np.int8), (self.rows, blocks))
        if self.mins:
            out[f"{name}.mins"] = (np.dtype(self.scales_dtype), (self.rows, blocks))
        return out


@dataclass
class QuantizedMatrix:
    """rows x cols weights w[r][j] = scales[r][j // block] * (q[r][j] - z[r][j // block]) (or + mins).
    q: int [rows, L] in kvx's terms (0..15 for 4 bits, -128..127 for 8), padding past cols 0.
    scales: fp32 or fp16 [rows, L / block]; zero_points: int [rows, L / block] or None; mins: like scales or
    None."""
    bits: int
    block: int
    cols: int
    q: np.ndarray
    scales: np.ndarray
    zero_points: Optional[np.ndarray] = None
    mins: Optional[np.ndarray] = None

    @property
    def rows(self):
        return self.q.shape[0]

    def implied_zero(self):
        return IMPLIED_ZERO[self.bits]

    @property
    def layout(self):
        return QuantizedLayout(self.bits, self.block, self.cols, self.rows, self.scales.dtype,
                               self.zero_points is not None, self.mins is not None)

    def dequantized(self):
        """The weights as the graph computes them, [rows, cols], in the scales' dtype (fp32 arithmetic)."""
        rows, blocks = self.scales.shape
        q = self.q.astype(np.float32).reshape(rows, blocks, self.block)  # each block against its scale
        scales = self.scales.astype(np.float32)[:, :, None]
        if self.mins is not None:
            w = q * scales + self.mins.astype(np.float32)[:, :, None]
        else:
            zero = self.implied_zero() if self.zero_points is None else self.zero_points.astype(np.float32)[:, :, None]
            w = (q - zero) * scales
        return np.ascontiguousarray(w.reshape(rows, -1)[:, :self.cols].astype(self.scales.dtype))

    def surely_finite(self):
        """Whether no dequantized weight can be NaN or infinite, known from the scales (and mins) alone: they are
        finite and small enough that s * (q - z) + m stays inside the scales' dtype whatever the integers."""
        limit = float(np.finfo(self.scales.dtype).max) / (2 << self.bits)  # |q - z| < 2^bits
        return all(np.isfinite(part).all() and float(np.abs(part).max(initial=0)) <= limit
                   for part in (self.scales, self.mins) if part is not None)

    def take_rows(self, index):
        """The matrix of rows index (a permutation or a part: a fused projection split by the mapper)."""
        def part(a):
            return None if a is None else np.ascontiguousarray(a[index])
        return QuantizedMatrix(self.bits, self.block, self.cols, part(self.q), part(self.scales),
                               part(self.zero_points), part(self.mins))

    def to_tensors(self, name):
        """The safetensors entries X.q4 / X.q8, X.scales, X.zero_points or X.mins for kvx name X."""
        out = {f"{name}.scales": np.ascontiguousarray(self.scales)}
        if self.bits == 8:
            out[f"{name}.q8"] = np.ascontiguousarray(self.q.astype(np.int8))
        else:
            # GGUF Q4_0 order: byte t of each 32-element group holds element t (low nibble) and t + 16 (high).
            groups = self.q.astype(np.uint8).reshape(self.rows, -1, 2, GROUP // 2)
            out[f"{name}.q4"] = np.ascontiguousarray((groups[:, :, 0, :] | (groups[:, :, 1, :] << 4))
                                                     .reshape(self.rows, -1))
        if self.zero_points is not None:
            out[f"{name}.zero_points"] = np.ascontiguousarray(
                self.zero_points.astype(np.uint8 if self.bits == 4 else np.int8))
        if self.mins is not None:
            out[f"{name}.mins"] = np.ascontiguousarray(self.mins)
        return out


def from_unsigned_blocks(bits, block, cols, q, scales, zero_points=None, float_zero_points=None):
    """A QuantizedMatrix from ONNX Runtime's unsigned form: q int [rows, n, block] (n = ceil(cols / block)
    blocks, values 0..2^bits - 1, zero point 2^(bits-1) unless given), scales [rows, n], zero_points int
    [rows, n] or float_zero_points [rows, n] (the scales' dtype; stored as mins = -z * s). Pads each row to
    L = padded_length(cols, block) with q 0; a block wholly of padding gets scale 0."""
    rows, n = scales.shape
    length = padded_length(cols, block)
    padded = np.zeros((rows, length), np.int16)
    padded[:, :cols] = q.reshape(rows, n * block)[:, :cols]
    blocks = length // block

    def widen(a, fill):
        out = np.full((rows, blocks), fill, a.dtype)
        out[:, :n] = a
        return out

    scales = widen(scales, 0)
    offset = 128 if bits == 8 else 0  # kvx stores 8-bit integers signed: q - 128, and zero points z - 128
    padded[:, :cols] -= offset
    zp = mins = None
    if zero_points is not None:
        zp = widen(zero_points.astype(np.int16) - offset, IMPLIED_ZERO[bits])
    if float_zero_points is not None:  # w = s * (q - z) = s * q + m with m = -z * s
        z = widen(float_zero_points.astype(np.float32) - offset, 0)
        mins = (-z * scales.astype(np.float32)).astype(scales.dtype)
    return QuantizedMatrix(bits, block, cols, padded.astype(np.int8 if bits == 8 else np.uint8), scales, zp, mins)
