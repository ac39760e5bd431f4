"""Rotary position embedding, read by what it computes:

    y = x * cos + R(x) * sin     on the rotated part of each head, the rest passed through

where R is a signed permutation that pairs the head's rotated elements (a, b): R(x)[a] = -x[b], R(x)[b] = x[a].
HF Llama and GPT-NeoX pair a with a + r/2 (rotate_half: Slice, Neg, Concat), GPT-J and Cohere pair 2i with
2i + 1 (rotate_every_two: strided Slices, Neg, stack and flatten); a partial rotary (GPT-NeoX, Phi, StableLM,
GPT-J) rotates x[..., :r] and concatenates x[..., r:]; ONNX's RotaryEmbedding (opset 23) does the same in one
node (interleaved or not, rotary_embedding_dim). R is found by tracing x to R(x) on indices (graph/layout.py),
and cos and sin by computing them for an example run of known positions: each pair's angle grows with the
position at its frequency. So neither the pairing nor the way the angles are built (Concat(freqs, freqs), a
repeat_interleave, a table gathered by position, a MatMul of positions and inv_freq) has to be spelled one way.

kvx rotates rotate-half pairs (k, k + r/2) at frequency inv_freq[k] (rope_style "half"); blocks/attention.py
orders each head's dims so that the graph's pairs land there. The frequencies are the graph's own fp32
constants where it holds them, else fitted to its tables (blocks/rope_tables.py) or to the example's angles.
cos and sin may both carry one constant factor (LongRoPE's and YaRN's attention factor): `amplitude`.
"""

from dataclasses import dataclass

import numpy as np

from ..domains import DEFAULT_DOMAINS
from ..errors import ConvertError, cannot_map
from ..graph.index import node_attr
from .rope_tables import TOLERANCE, inv_freq_from_caches

# How close the frequencies fitted to the example's angles must come to a constant of the graph for that
# constant to be taken as the exact fp32 inv_freq (a fit from fp32 cos/sin over 5 positions is good to ~1e-6).
CONSTANT_MATCH = 1e-4
ANGLE_TOLERANCE = 1e-4  # cos/sin of the kept frequencies against the graph's own, on the example


@dataclass
class RopeBlock:
    input: str  # x [.., last]: one head's elements on the last axis, or heads * head_dim (a 3-D RotaryEmbedding)
    output: str  # y, the same shape
    head_dim: int  # the elements one rotation acts on: the last axis, or its part per head
    pairs: list  # [(a, b)] positions within a head, in the order of inv_freq: y[a] = x[a] c - x[b] s, y[b] = x[b] c + x[a] s
    inv_freq: np.ndarray  # [len(pairs)] fp32
    amplitude: float = 1.0  # the constant cos and sin are multiplied by

    @property
    def rotary_dim(self):
        return 2 * len(self.pairs)


def rope_block_reading(ix, x):
    """The RopeBlock that reads x, or None where x is not rotated. Raises ConvertError where x is rotated in a
    way kvx cannot compute (frequencies that are not one per pair, or different for q and k)."""
    found = _whole_rotation(ix, x)
    if found is not None or ix.concrete is None:
        return found
    return _partially_rotated(ix, ix.concrete, x)


def _whole_rotation(ix, x):
    """The RopeBlock rotating all of x's last axis: ONNX's RotaryEmbedding, or written out."""
    for node in ix.consumers(x):
        if node.op_type == "RotaryEmbedding" and node.domain in DEFAULT_DOMAINS and node.input[0] == x:
            return _rotary_embedding_op(ix, node)
    return _rotated(ix, ix.concrete, x) if ix.concrete is not None else None


def _last_dim(ix, x):
    shape = ix.concrete.shape(x) if ix.concrete is not None else ix.static_shape(x)
    return shape[-1] if shape else None


def _rotated(ix, concrete, x):
    """The RopeBlock over all of x's last axis: Add(x * C, R(x) * S)."""
    for cos_mul in ix.consumers(x, "Mul"):
        cos_tensor = ix.other_input(cos_mul, x)
        for add in ix.consumers(cos_mul.output[0], "Add"):
            sin_mul = ix.producer_op(ix.other_input(add, cos_mul.output[0]), "Mul")
            if sin_mul is None:
                continue
            for rotated in sin_mul.input:
                pairing = _pairing(concrete, x, rotated)
                if pairing is not None:
                    return _block(ix, concrete, x, add.output[0], pairing, cos_tensor,
                                  ix.other_input(sin_mul, rotated), add)
    return None


def _pairing(concrete, x, rotated):
    """[(a, b)] when rotated is R(x) for a signed permutation R pairing x's last-axis elements within each row
    (R(x)[a] = -x[b], R(x)[b] = x[a]), else None."""
    if rotated == x:
        return None
    trace = concrete.trace(x, rotated)
    shape = concrete.shape(x)
    if trace is None or shape is None or trace.ids.shape != tuple(shape) or trace.scale != 1.0:
        return None
    ids = trace.ids.reshape(-1, shape[-1])  # [rows, last]
    rows = np.arange(ids.shape[0])[:, None]
    source = np.abs(ids) - 1
    if (ids == 0).any() or not np.array_equal(source // shape[-1], np.broadcast_to(rows, ids.shape)):
        return None  # an element from another row, or from outside x
    partner, negated = source[0] % shape[-1], ids[0] < 0
    if not all(np.array_equal(source[r] % shape[-1], partner) and np.array_equal(ids[r] < 0, negated)
               for r in range(ids.shape[0])):
        return None
    pairs = []
    for a in range(shape[-1]):
        b = int(partner[a])
        if negated[a]:
            if partner[b] != a or negated[b] or a == b:
                return None
            pairs.append((a, b))
    return pairs if 2 * len(pairs) == shape[-1] else None


def _block(ix, concrete, x, output, pairs, cos_tensor, sin_tensor, blame):
    """The RopeBlock of pairs rotated by the angles in cos_tensor and sin_tensor (broadcast over x)."""
    values = concrete.values([cos_tensor, sin_tensor])
    shape = concrete.shape(x)
    if values is None:
        raise cannot_map(blame, "cos and sin computed from the positions alone (kvx computes RoPE's angles itself)")
    cos = np.broadcast_to(values[cos_tensor], shape).astype(np.float64)
    sin = np.broadcast_to(values[sin_tensor], shape).astype(np.float64)
    seq = concrete.seq
    seq_axis = _sequence_axis(cos, sin, seq)
    if seq_axis is None:
        raise cannot_map(blame, "cos and sin that vary with the position only")
    # [positions, last]: one row of the example per position (every other axis is the same there)
    cos = np.moveaxis(cos, seq_axis, 0).reshape(seq, -1, shape[-1])[:, 0]
    sin = np.moveaxis(sin, seq_axis, 0).reshape(seq, -1, shape[-1])[:, 0]
    firsts = [a for a, _ in pairs]
    seconds = [b for _, b in pairs]
    if not (np.allclose(cos[:, firsts], cos[:, seconds], atol=1e-6) and np.allclose(sin[:, firsts], sin[:, seconds], atol=1e-6)):
        raise cannot_map(blame, "one angle per rotated pair (both elements of a pair at the same frequency)")
    amplitude = _amplitude(cos[:, firsts], sin[:, firsts], blame)
    inv_freq = _frequencies(ix, cos_tensor, cos[:, firsts] / amplitude, sin[:, firsts] / amplitude, blame)
    return RopeBlock(input=x, output=output, head_dim=shape[-1], pairs=pairs, inv_freq=inv_freq, amplitude=amplitude)


def _sequence_axis(cos, sin, seq):
    """The one axis along which the example's cos and sin change: the position's (of seq rows)."""
    varying = [axis for axis in range(cos.ndim - 1) if cos.shape[axis] == seq and
               not (np.allclose(cos, np.take(cos, [0], axis=axis)) and np.allclose(sin, np.take(sin, [0], axis=axis)))]
    others_constant = all(np.allclose(cos, np.take(cos, [0], axis=a)) for a in range(cos.ndim - 1)
                          if a not in varying)
    return varying[0] if len(varying) == 1 and others_constant else None


def _amplitude(cos, sin, blame):
    radius = np.sqrt(cos ** 2 + sin ** 2)
    amplitude = float(np.float32(radius.mean()))
    if not np.allclose(radius, amplitude, rtol=1e-5):
        raise cannot_map(blame, "cos and sin of one amplitude for every frequency and position")
    return amplitude


def _frequencies(ix, cos_tensor, cos, sin, blame):
    """inv_freq [pairs] fp32 from the example's cos and sin [positions, pairs]: the graph's own constant where
    one of its vectors matches the fit (in some order of its elements), else the fit."""
    positions = ix.concrete.positions.astype(np.float64)
    angles = np.unwrap(np.arctan2(sin, cos), axis=0)
    slope = np.polyfit(positions, angles, 1)[0] if len(positions) > 1 else angles[0] / max(positions[0], 1)
    fitted = np.asarray(slope, dtype=np.float64)
    exact = _graph_constant(ix, cos_tensor, fitted)
    inv_freq = exact if exact is not None else _fitted_from_table(ix, cos_tensor, fitted)
    if inv_freq is None:
        inv_freq = fitted.astype(np.float32)
    expected = positions[:, None] * inv_freq.astype(np.float32)[None, :]
    error = max(float(np.abs(np.cos(expected) - cos).max()), float(np.abs(np.sin(expected) - sin).max()))
    if not error <= ANGLE_TOLERANCE:
        raise cannot_map(blame, f"angles position * inv_freq (one frequency per pair; off by {error:.3g})")
    return inv_freq.astype(np.float32)


def _graph_constant(ix, tensor, fitted):
    """A float constant upstream of tensor holding the fitted frequencies (the same values in the same order,
    or twice over as Concat(freqs, freqs) or repeat_interleave leave them), else None."""
    for name in ix.ancestors(tensor, limit=48):
        value = ix.constant(name)
        if value is None or value.dtype.kind != "f" or value.size < fitted.size:
            continue
        flat = value.reshape(-1).astype(np.float64)
        for candidate in (flat, flat[: flat.size // 2], flat[::2]):
            if candidate.size == fitted.size and np.allclose(candidate, fitted, rtol=CONSTANT_MATCH, atol=1e-7):
                return candidate.astype(np.float32)
    return None


def _fitted_from_table(ix, tensor, fitted):
    """inv_freq fitted to a table of cos or sin by position upstream of tensor (GPT-J's embed_positions
    [max_pos, rotary_dim] = [sin | cos]), where one is there: the fp32 values that reproduce it best."""
    for name in ix.ancestors(tensor, limit=48):
        value = ix.constant(name)
        if value is None or value.ndim != 2 or value.dtype.kind != "f" or value.shape[0] < 2:
            continue
        half = fitted.size
        for sin_part, cos_part in ((value[:, :half], value[:, half:2 * half]), (value[:, half:2 * half], value[:, :half])):
            if cos_part.shape[1] != half or not np.allclose(cos_part[0], 1.0) or not np.allclose(sin_part[0], 0.0):
                continue
            inv_freq, error = inv_freq_from_caches(cos_part, sin_part)
            if error <= TOLERANCE and np.allclose(inv_freq, fitted, rtol=CONSTANT_MATCH, atol=1e-7):
                return inv_freq
    return None


def _partially_rotated(ix, concrete, x):
    """Concat(rope(x[..., :r]), x[..., r:]) along the last axis (GPT-NeoX, Phi, StableLM, GPT-J)."""
    width = _last_dim(ix, x)
    if width is None:
        return None
    slices = [n for n in ix.consumers(x, "Slice") if n.input[0] == x]
    for rot in slices:
        block = _whole_rotation(ix, rot.output[0])
        if block is None:
            continue
        for concat in ix.consumers(block.output, "Concat"):
            if len(concat.input) != 2 or concat.input[0] != block.output:
                continue
            rest = concat.input[1]
            parts = [concrete.trace(x, rot.output[0]), concrete.trace(x, rest)]
            if None in parts:
                continue
            first = np.abs(parts[0].ids).reshape(-1, parts[0].ids.shape[-1])[0] - 1
            second = np.abs(parts[1].ids).reshape(-1, parts[1].ids.shape[-1])[0] - 1
            r = len(first)
            if list(first % width) != list(range(r)) or list(second % width) != list(range(r, width)):
                continue
            return RopeBlock(input=x, output=concat.output[0], head_dim=width, pairs=block.pairs,
                             inv_freq=block.inv_freq, amplitude=block.amplitude)
    return None


def _rotary_embedding_op(ix, node):
    """ONNX RotaryEmbedding (opset 23): X, cos_cache, sin_cache[, position_ids]; attributes interleaved,
    rotary_embedding_dim (0: the whole head), num_heads (for 3-D X)."""
    x = node.input[0]
    shape = ix.concrete.shape(x) if ix.concrete is not None else ix.static_shape(x)
    if shape is None or shape[-1] is None:
        raise cannot_map(node, "an input of known width")
    heads = node_attr(node, "num_heads", 0)
    head_dim = shape[-1] // heads if len(shape) == 3 and heads else shape[-1]
    rotary = node_attr(node, "rotary_embedding_dim", 0) or head_dim
    half = rotary // 2
    if node_attr(node, "interleaved", 0):
        pairs = [(2 * k, 2 * k + 1) for k in range(half)]
    else:
        pairs = [(k, k + half) for k in range(half)]
    cos_name, sin_name = node.input[1], node.input[2]
    with_positions = len(node.input) > 3 and node.input[3]
    if with_positions:  # tables [max_position, half] indexed by position_ids
        cos_cache, sin_cache = ix.constant(cos_name), ix.constant(sin_name)
        if cos_cache is None or sin_cache is None or cos_cache.ndim != 2:
            raise cannot_map(node, "constant cos/sin tables [positions, rotary_dim / 2]")
        inv_freq, error = inv_freq_from_caches(cos_cache, sin_cache)
        if not error <= TOLERANCE:
            raise cannot_map(node, "cos/sin tables of plain RoPE (position * inv_freq)")
        return RopeBlock(input=x, output=node.output[0], head_dim=head_dim, pairs=pairs, inv_freq=inv_freq)
    if ix.concrete is None:
        raise cannot_map(node, "cos and sin computed from the positions alone")
    values = ix.concrete.values([cos_name, sin_name])
    if values is None:
        raise cannot_map(node, "cos and sin computed from the positions alone")
    cos, sin = (np.asarray(values[t], dtype=np.float64) for t in (cos_name, sin_name))  # [batch, seq, half]
    if cos.ndim != 3 or cos.shape[1] != ix.concrete.seq or cos.shape[2] != half:
        raise ConvertError(f"cannot map node '{node.name}' (op RotaryEmbedding): expected cos/sin [batch, seq, "
                           f"{half}], found {list(cos.shape)}")
    amplitude = _amplitude(cos[0], sin[0], node)
    inv_freq = _frequencies(ix, cos_name, cos[0] / amplitude, sin[0] / amplitude, node)
    return RopeBlock(input=x, output=node.output[0], head_dim=head_dim, pairs=pairs, inv_freq=inv_freq,
                     amplitude=amplitude)
