"""Rotary position embedding as HF Llama writes it (rope_style "half"):
    x * cos + rotate_half(x) * sin,   rotate_half(x) = Concat(Neg(x[..., hd/2:]), x[..., :hd/2])
with cos, sin = Cos/Sin(Concat(freqs, freqs)) and freqs = positions x inv_freq, inv_freq a constant.
cos and sin may both be multiplied by one constant, an attention factor (HF's attention_scaling: LongRoPE's
sqrt(1 + ln(s) / ln(original context)), YaRN's mscale): it scales q and k alike, so the mapper folds its square
into the attention scale, exact where every dimension is rotated (match_rope rotates all of head_dim).

Any other pairing (e.g. interleaved neighbours, x[..., ::2]) is refused: kvx stores Q/K rows in the
rotate-half order and must not guess."""

from dataclasses import dataclass

import numpy as np

from ..errors import cannot_map
from ..graph.index import node_attr

LAST_AXIS_OF_4D = (-1, 3)


@dataclass
class Rope:
    output: str  # the rotated tensor, [b, heads, s, head_dim]
    inv_freq: np.ndarray  # [head_dim / 2] fp32, the frequency of pair (j, j + head_dim/2)
    amplitude: float = 1.0  # the constant cos and sin are multiplied by (an attention factor), 1 for plain RoPE


def match_rope(ix, x, head_dim):
    """The RoPE applied to x [b, heads, s, head_dim], or None when x is not sliced (not rotated)."""
    slices = [n for n in ix.consumers(x, "Slice") if n.input[0] == x]
    if not slices:
        return None
    first, second = _rotate_half_slices(ix, slices, head_dim)
    neg = ix.sole_consumer(second.output[0], "Neg", second, "Neg of the second half (rotate_half)")
    concat = ix.sole_consumer(neg.output[0], "Concat", neg, "Concat(-x2, x1) (rotate_half)")
    if list(concat.input) != [neg.output[0], first.output[0]] \
            or node_attr(concat, "axis") not in LAST_AXIS_OF_4D:
        raise cannot_map(concat, "Concat(-x[..., hd/2:], x[..., :hd/2]) on the last axis (rotate_half)")
    sin_mul = ix.sole_consumer(concat.output[0], "Mul", concat, "rotate_half(x) * sin")
    sin_tensor = ix.other_input(sin_mul, concat.output[0])
    cos_mul, add = _cos_term_and_sum(ix, x, sin_mul)
    cos_tensor = ix.other_input(cos_mul, x)
    cos_source, cos_factor = _trace_to_trig(ix, cos_tensor)
    sin_source, sin_factor = _trace_to_trig(ix, sin_tensor)
    cos, sin = ix.producer_op(cos_source, "Cos"), ix.producer_op(sin_source, "Sin")
    if cos is None or sin is None or cos.input[0] != sin.input[0]:
        raise cannot_map(add, "x * Cos(angles) + rotate_half(x) * Sin(angles), both of the same angles")
    if cos_factor != sin_factor:
        raise cannot_map(add, f"cos and sin scaled by one factor, found {cos_factor:.6g} and {sin_factor:.6g}")
    return Rope(output=add.output[0], inv_freq=_inv_freq(ix, cos, head_dim), amplitude=cos_factor)


def _trace_to_trig(ix, tensor):
    """(where a cos/sin operand leads, the product of the constant factors on the way): walks back through
    reshapes, casts and Muls by a constant (HF's attention_scaling, 1 unless the RoPE is scaled)."""
    factor = 1.0
    while True:
        tensor = ix.trace_back(tensor)
        node = ix.producer(tensor)
        if node is None or node.op_type != "Mul":
            return tensor, factor
        scaled = [(t, ix.scalar(ix.other_input(node, t))) for t in node.input]
        scaled = [(t, f) for t, f in scaled if f is not None]
        if not scaled:
            return tensor, factor
        tensor, factor = scaled[0][0], factor * float(scaled[0][1])


def _slice_params(ix, node, head_dim=None):
    """(start, end, axis, step) of a single-axis Slice with constant parameters, else None. With head_dim,
    a bound computed from the sliced tensor's own last dimension (HF Phi-3's x[..., : x.shape[-1] // 2])
    is evaluated with that dimension = head_dim."""
    params = [ix.constant(name) if name else None for name in node.input[1:]]
    params += [None] * (4 - len(params))
    if head_dim is not None:
        for k in (0, 1):
            if params[k] is None and k + 1 < len(node.input):
                value = _head_dim_arithmetic(ix, node.input[k + 1], node.input[0], head_dim)
                params[k] = None if value is None else np.array([value])
    starts, ends, axes, steps = params
    if starts is None or ends is None or starts.size != 1 or ends.size != 1:
        return None
    axis = int(axes.reshape(-1)[0]) if axes is not None and axes.size == 1 else 0
    step = int(steps.reshape(-1)[0]) if steps is not None and steps.size == 1 else 1
    return int(starts.reshape(-1)[0]), int(ends.reshape(-1)[0]), axis, step


def _head_dim_arithmetic(ix, tensor, x, head_dim, depth=8):
    """The integer tensor holds, when it is built from x's last dimension (Gather(Shape(x), -1 or 3)) and
    constants by Unsqueeze/Squeeze/Cast/Identity and integer Div/Mul/Add/Sub; else None."""
    value = ix.constant(tensor)
    if value is not None:
        return int(value.reshape(-1)[0]) if value.size == 1 and np.issubdtype(value.dtype, np.integer) else None
    node = ix.producer(tensor)
    if node is None or depth == 0:
        return None
    if node.op_type in ("Unsqueeze", "Squeeze", "Cast", "Identity"):
        return _head_dim_arithmetic(ix, node.input[0], x, head_dim, depth - 1)
    if node.op_type == "Gather" and len(node.input) == 2:
        shape = ix.producer_op(node.input[0], "Shape")
        index = ix.constant(node.input[1])
        if shape is not None and shape.input[0] == x and node_attr(shape, "start", 0) == 0 \
                and node_attr(shape, "end") is None and index is not None and index.size == 1 \
                and int(index.reshape(-1)[0]) in LAST_AXIS_OF_4D:
            return head_dim
        return None
    if node.op_type in ("Div", "Mul", "Add", "Sub") and len(node.input) == 2:
        a, b = (_head_dim_arithmetic(ix, t, x, head_dim, depth - 1) for t in node.input)
        if a is None or b is None or (node.op_type == "Div" and b == 0):
            return None
        if node.op_type == "Div":
            return abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # ONNX integer Div truncates
        return {"Mul": a * b, "Add": a + b, "Sub": a - b}[node.op_type]
    return None


def _rotate_half_slices(ix, slices, head_dim):
    """(x[..., :hd/2] node, x[..., hd/2:] node) among slices, else an error naming the first."""
    half = head_dim // 2
    first = second = None
    for node in slices:
        params = _slice_params(ix, node, head_dim)
        if params is None:
            continue
        start, end, axis, step = params
        if axis not in LAST_AXIS_OF_4D or step != 1:
            continue
        if start == 0 and end == half:
            first = node
        elif start == half and end >= head_dim:
            second = node
    if len(slices) != 2 or first is None or second is None:
        raise cannot_map(slices[0], f"the rotate-half slices x[..., :{half}] and x[..., {half}:] with "
                                    "constant bounds (kvx supports rope_style 'half' only)")
    return first, second


def _cos_term_and_sum(ix, x, sin_mul):
    """The Mul(x, cos) and the Add that sums it with rotate_half(x) * sin."""
    for mul in ix.consumers(x, "Mul"):
        for add in ix.consumers(mul.output[0], "Add"):
            if ix.other_input(add, mul.output[0]) == sin_mul.output[0]:
                return mul, add
    raise cannot_map(sin_mul, "Add(x * cos, rotate_half(x) * sin)")


def _inv_freq(ix, cos, head_dim):
    """inv_freq [head_dim/2] fp32, found upstream of the angles Concat(freqs, freqs)."""
    concat = ix.producer_op(cos.input[0], "Concat")
    if concat is None or len(concat.input) != 2 or concat.input[0] != concat.input[1]:
        raise cannot_map(cos, "angles Concat(freqs, freqs), the rotate-half frequency layout")
    candidates = []
    for tensor in ix.ancestors(concat.input[0]):
        value = ix.constant(tensor)
        if value is not None and value.dtype.kind == "f" and value.size == head_dim // 2:
            value = value.reshape(-1).astype(np.float32)
            if not any(np.array_equal(value, c) for c in candidates):
                candidates.append(value)
    if len(candidates) != 1:
        raise cannot_map(concat, f"freqs computed from one constant inv_freq of {head_dim // 2} floats "
                                 f"(found {len(candidates)})")
    return candidates[0]
