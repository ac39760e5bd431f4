"""GGUF's 32-element quantized blocks (Q8_0, Q4_0, Q4_1) as the operands of ONNX Runtime's com.microsoft
MatMulNBits and GatherBlockQuantized, value for value, and any other GGUF type re-quantized to Q8_0 or Q4_0
first (llama.cpp's own rounding, as the gguf package implements it).

GGUF blocks along a row, 32 elements each:
  Q8_0  fp16 d, int8 q[32]                      w = d * q
  Q4_0  fp16 d, 16 bytes of nibbles             w = d * (q - 8)
  Q4_1  fp16 d, fp16 m, 16 bytes of nibbles     w = d * q + m
  nibbles: byte t holds element t (low nibble) and element t + 16 (high nibble).
MatMulNBits (uint8 q, block 32) computes w = s * (q - z):
  bits 8: q = GGUF's q + 128, zero point absent (its default is 128);
  bits 4: byte t holds element 2t (low) and 2t + 1 (high); zero point absent (default 8) for Q4_0; for Q4_1 a
          float zero point z = -m / d (ONNX Runtime's CPU kernel takes float zero points, one per block).
Scales are fp16 in GGUF and become fp32 exactly (the graph computes in fp32).
"""

from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from .gguf_metadata import GgufError

BLOCK = 32  # elements per block in every GGUF type kept here
ROWS_AT_A_TIME = 4096  # rows converted at a time: the conversions' temporaries stay a few MB, not the matrix's size
KEPT_TYPES = {GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1}
REQUANTIZE_TYPES = {"q8_0": GGMLQuantizationType.Q8_0, "q4_0": GGMLQuantizationType.Q4_0}


@dataclass
class QuantizedMatrix:
    """A [rows, cols] matrix in MatMulNBits' operands. The first axis of every array is the row, so rows can be
    permuted by permuting each array alike."""
    bits: int  # 8 or 4
    cols: int  # the input dimension, a multiple of BLOCK
    q: np.ndarray  # uint8 [rows, n_blocks, BLOCK * bits / 8], MatMulNBits' B
    scales: np.ndarray  # fp32 [rows, n_blocks]
    zero_points: np.ndarray = None  # fp32 [rows, n_blocks] (Q4_1), or None: the default zero point

    @property
    def rows(self):
        return self.q.shape[0]

    def map_rows(self, rows_fn):
        """A copy with rows_fn (same shape in, same shape out, acting on axis 0) applied to every array."""
        return QuantizedMatrix(self.bits, self.cols, rows_fn(self.q), rows_fn(self.scales),
                               None if self.zero_points is None else rows_fn(self.zero_points))

    def dequantized(self):
        """fp32 [rows, cols]: the values the graph's MatMulNBits multiplies by (computed in fp64, then rounded)."""
        if self.bits == 8:
            q = self.q.reshape(self.rows, -1, BLOCK).astype(np.float64)
        else:
            q = np.stack([self.q & 15, self.q >> 4], axis=-1).reshape(self.rows, -1, BLOCK).astype(np.float64)
        zero = (128 if self.bits == 8 else 8) if self.zero_points is None else self.zero_points[..., None]
        return (self.scales[..., None].astype(np.float64) * (q - zero)).reshape(self.rows, self.cols).astype(np.float32)


def _blocks(data, rows, block_bytes):
    """GGUF tensor bytes -> uint8 [rows, n_blocks, block_bytes]."""
    return np.asarray(data, dtype=np.uint8).reshape(rows, -1, block_bytes)


def _fp16_field(blocks, offset):
    """fp16 at byte offset of every block -> fp32 [rows, n_blocks] (exact)."""
    return np.ascontiguousarray(blocks[..., offset:offset + 2]).view(np.float16)[..., 0].astype(np.float32)


def _gguf_nibbles_to_ort(nibble_bytes):
    """uint8 [..., 16]: GGUF's order (byte t = element t | element t+16 << 4) -> ORT's (byte t = element 2t |
    element 2t+1 << 4). Moves nibbles, never changes a value."""
    elements = np.concatenate([nibble_bytes & 15, nibble_bytes >> 4], axis=-1)  # [..., 32] in element order
    return (elements[..., 0::2] | (elements[..., 1::2] << 4)).astype(np.uint8)


def _float_zero_points(d, m):
    """fp32 z per block with d * (q - z) = d * q + m, that is fp32(d * z) == -m where some fp32 z gives it
    exactly (the nearest quotient or a neighbour), so that a reader that turns the zero point back into a
    minimum (m = -d * z) gets GGUF's m bit for bit. Blocks with d = 0 have every weight equal to m, which no
    zero point can give unless m = 0; the caller re-quantizes such a matrix."""
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (-m.astype(np.float64) / d.astype(np.float64)).astype(np.float32)
    z = np.where(d == 0, np.float32(0), z)
    for step in (np.inf, -np.inf):  # try the two neighbours where the quotient misses
        miss = (d * z != -m) & (d != 0)
        neighbour = np.nextafter(z, np.float32(step))
        z = np.where(miss & (d * neighbour == -m), neighbour, z)
    return z


def _by_rows(convert, values, width):
    """convert(rows of values) -> uint8 [rows, n_blocks, width], ROWS_AT_A_TIME rows at a time."""
    out = np.empty((values.shape[0], values.shape[1], width), np.uint8)
    for start in range(0, values.shape[0], ROWS_AT_A_TIME):
        out[start:start + ROWS_AT_A_TIME] = convert(values[start:start + ROWS_AT_A_TIME])
    return out


def _q8_0_to_ort(q):
    return (q.view(np.int8).astype(np.int16) + 128).astype(np.uint8)


def _from_q8_0(data, rows):
    b = _blocks(data, rows, 2 + BLOCK)
    return QuantizedMatrix(8, b.shape[1] * BLOCK, _by_rows(_q8_0_to_ort, b[..., 2:], BLOCK), _fp16_field(b, 0))


def _from_q4_0(data, rows):
    b = _blocks(data, rows, 2 + BLOCK // 2)
    return QuantizedMatrix(4, b.shape[1] * BLOCK, _by_rows(_gguf_nibbles_to_ort, b[..., 2:], BLOCK // 2),
                           _fp16_field(b, 0))


def _from_q4_1(data, rows):
    b = _blocks(data, rows, 4 + BLOCK // 2)
    d, m = _fp16_field(b, 0), _fp16_field(b, 2)
    if np.any((d == 0) & (m != 0)):
        return None
    return QuantizedMatrix(4, b.shape[1] * BLOCK, _by_rows(_gguf_nibbles_to_ort, b[..., 4:], BLOCK // 2), d,
                           _float_zero_points(d, m))


_READERS = {GGMLQuantizationType.Q8_0: _from_q8_0, GGMLQuantizationType.Q4_0: _from_q4_0,
            GGMLQuantizationType.Q4_1: _from_q4_1}


def gguf_quantized_matrix(tensor, data, requantize):
    """A 2-D GGUF tensor (the reader's tensor, and data: what its tensor.data holds, read) as a QuantizedMatrix:
    Q8_0, Q4_0 and Q4_1 blocks as they are; any other type, and a Q4_1 matrix whose blocks no float zero point
    can express, dequantized and re-quantized to requantize ("q8_0" or "q4_0"). None when the tensor is to stay
    fp32: requantize "none" and a type not kept, or a row length that is not a multiple of 32."""
    if len(tensor.shape) != 2 or int(tensor.shape[0]) % BLOCK:
        return None
    rows, cols = int(tensor.shape[1]), int(tensor.shape[0])  # GGUF lists the fastest dim first
    if tensor.tensor_type in KEPT_TYPES:
        matrix = _READERS[tensor.tensor_type](data, rows)
        if matrix is not None:
            return matrix
    if requantize == "none":
        return None
    target = REQUANTIZE_TYPES[requantize]
    try:
        values = dequantize(data, tensor.tensor_type).reshape(rows, cols).astype(np.float32)
    except (NotImplementedError, ValueError) as e:
        raise GgufError(f"tensor '{tensor.name}': cannot dequantize type {tensor.tensor_type.name} ({e})") from None
    return _READERS[target](quantize(values, target), rows)
