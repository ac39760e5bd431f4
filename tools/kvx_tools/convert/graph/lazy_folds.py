"""Folds that only move, reshape or cast a large constant: Identity, Transpose, Cast between floats, Reshape,
Squeeze, Unsqueeze, Flatten and a Slice with constant bounds and positive steps. Their result is a LazyTensor
view of the same data (graph/lazy_tensor.py), made without reading it and allocating nothing, so no size
bound applies to them: a Transpose of a 128k-row embedding folds as a Transpose of a tiny one does.
graph/folding.py evaluates every other fold, reading its inputs."""

import numpy as np
from onnx import helper

from .index import node_attr
from .lazy_tensor import LazyTensor

FLOAT_TYPES = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64))


def lazy_fold(node, inputs, opset):
    """[the node's output as a LazyTensor] when its data input is one and the node only moves, reshapes or
    casts it (the other inputs, shapes and axes, are small arrays); None otherwise, for the caller to
    evaluate. A node whose attributes or inputs do not fit (a bad perm, a shape of another size) is left to
    the caller too, which leaves it for the matchers to name."""
    fold = FOLDS.get(node.op_type)
    if fold is None or not inputs or not isinstance(inputs[0], LazyTensor) \
            or any(isinstance(v, LazyTensor) for v in inputs[1:]):
        return None
    try:
        value = fold(node, inputs, opset)
    except (ValueError, IndexError, TypeError):
        return None
    return None if value is None else [value]


def _ints(value):
    return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


def _axes(node, inputs, opset, since):
    """The axes input (opset >= since) or attribute, as ints; None when absent."""
    if opset >= since:
        return _ints(inputs[1]) if len(inputs) > 1 else None
    axes = node_attr(node, "axes")
    return None if axes is None else [int(a) for a in axes]


def _identity(node, inputs, opset):
    return inputs[0]


def _transpose(node, inputs, opset):
    x = inputs[0]
    perm = node_attr(node, "perm")
    return x.transpose(list(perm)) if perm is not None else x.transpose()


def _cast(node, inputs, opset):
    x, target = inputs[0], np.dtype(helper.tensor_dtype_to_np_dtype(node_attr(node, "to", 0)))
    return x.astype(target) if x.dtype in FLOAT_TYPES and target in FLOAT_TYPES else None


def _reshape(node, inputs, opset):
    x, dims = inputs[0], _ints(inputs[1])
    if dims is None:
        return None
    if not node_attr(node, "allowzero", 0):  # 0 copies the input's dim
        if any(d == 0 and i >= x.ndim for i, d in enumerate(dims)):
            return None
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(dims)


def _squeeze(node, inputs, opset):
    x, axes = inputs[0], _axes(node, inputs, opset, 13)
    axes = [i for i, d in enumerate(x.shape) if d == 1] if axes is None else [a % x.ndim for a in axes]
    if any(x.shape[a] != 1 for a in axes):
        return None
    return x.reshape([d for i, d in enumerate(x.shape) if i not in axes])


def _unsqueeze(node, inputs, opset):
    x, axes = inputs[0], _axes(node, inputs, opset, 13)
    if axes is None:
        return None
    rank = x.ndim + len(axes)
    axes = sorted(a % rank for a in axes)
    if len(set(axes)) != len(axes):
        return None
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return x.reshape(shape)


def _flatten(node, inputs, opset):
    x = inputs[0]
    axis = node_attr(node, "axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis <= x.ndim:
        return None
    return x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), int(np.prod(x.shape[axis:], dtype=np.int64)))


def _slice(node, inputs, opset):
    x = inputs[0]
    if opset >= 10:
        starts, ends = (_ints(inputs[k]) if len(inputs) > k else None for k in (1, 2))
        axes, steps = (_ints(inputs[k]) if len(inputs) > k else None for k in (3, 4))
    else:
        starts, ends, axes, steps = node_attr(node, "starts"), node_attr(node, "ends"), node_attr(node, "axes"), None
    if starts is None or ends is None or len(starts) != len(ends):
        return None
    axes = list(range(len(starts))) if axes is None else [a + x.ndim if a < 0 else a for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if len(axes) != len(starts) or len(steps) != len(starts) or len(set(axes)) != len(axes) \
            or any(not 0 <= a < x.ndim for a in axes) or any(s <= 0 for s in steps):
        return None  # a negative step clamps differently from Python's slices: evaluated instead
    key = [slice(None)] * x.ndim
    for a, start, end, step in zip(axes, starts, ends, steps):
        key[a] = slice(start, end, step)
    return x[tuple(key)]


FOLDS = {"Identity": _identity, "Transpose": _transpose, "Cast": _cast, "Reshape": _reshape, "Squeeze": _squeeze,
         "Unsqueeze": _unsqueeze, "Flatten": _flatten, "Slice": _slice}
