"""Every norm over the last axis a decoder uses, in each spelling exporters write, as one Norm:

  RMSNorm   x / sqrt(mean(x^2) + eps) * w         Pow/ReduceMean/Add/Sqrt/Reciprocal|Div/Mul written out (HF
                                                   Llama through torch), ONNX RMSNormalization (opset 23),
                                                   ONNX Runtime's SimplifiedLayerNormalization
  LayerNorm (x - mean) / sqrt(var + eps) * w + b   ONNX LayerNormalization (scale, optional bias), or written
                                                   out (Cohere's hand-made LayerNorm: ReduceMean, Sub, Pow,
                                                   ReduceMean, Add, Sqrt, Reciprocal|Div, Mul), or an RMSNorm of
                                                   x - mean(x) (dynamo's optimizer on Cohere's), with or without
                                                   the weight and the bias (OLMo's has neither)

The weight and the bias are None where the graph has none: a missing weight multiplies by one, a missing bias
adds zero, which is how kvx writes them (families/decoder.py)."""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..domains import DEFAULT_DOMAINS
from ..errors import ConvertError, cannot_map
from ..graph.index import node_attr
from .layer_norm import LAYER_NORM_DEFAULT_EPS
from .rms_norm import match_rms_norm

LAST_AXES = ([-1],)


@dataclass
class Norm:
    kind: str  # "rms" or "layer"
    weight: Optional[np.ndarray]  # [width], or None for a norm without a scale (ones)
    bias: Optional[np.ndarray]  # [width], LayerNorm only, or None (zeros)
    eps: float
    input: str  # x [.., width]
    output: str  # the normalised x


def norm_reading(ix, x):
    """The Norm over x's last axis that reads x, or None where x feeds none."""
    for match in (_rms_written_out, _rms_operator, _layer_norm_operator, _layer_norm_written_out, _layer_norm_as_rms):
        try:
            found = match(ix, x)
        except ConvertError:
            found = None
        if found is not None:
            return found
    return None


def norms_reading(ix, x):
    """Every Norm that reads x (GPT-NeoX's layers read the stream with two LayerNorms), each once."""
    found = {}
    for node in ix.consumers(x):
        single = _norm_from(ix, x, node)
        if single is not None:
            found.setdefault(single.output, single)
    return list(found.values())


def _norm_from(ix, x, node):
    """The Norm that starts with node, a consumer of x, or None."""
    try:
        if node.op_type == "Pow":
            return _rms_written_out(ix, x)
        if node.op_type in ("RMSNormalization", "SimplifiedLayerNormalization"):
            return _rms_operator(ix, x)
        if node.op_type == "LayerNormalization" and node.input[0] == x:
            return _layer_norm_node(ix, x, node)
        if node.op_type == "ReduceMean":
            return _layer_norm_written_out(ix, x) or _layer_norm_as_rms(ix, x)
    except ConvertError:
        return None
    return None


def match_norm(ix, x, after):
    """The Norm reading x; after: the node to blame when there is none."""
    found = norm_reading(ix, x)
    if found is None:
        raise cannot_map(after, f"a norm (RMSNorm or LayerNorm over the last axis) reading '{x}'")
    return found


def _rms_written_out(ix, x):
    if not any(n.input[0] == x and ix.scalar(n.input[1]) == 2.0 for n in ix.consumers(x, "Pow")):
        return None
    rms = match_rms_norm(ix, x, ix.producer(x) or ix.consumers(x)[0])
    return Norm("rms", rms.weight, None, rms.eps, x, rms.output)


def _rms_operator(ix, x):
    """ONNX RMSNormalization (opset 23) or ONNX Runtime's SimplifiedLayerNormalization (default domain)."""
    for node in ix.consumers(x):
        if node.input[0] != x or node.domain not in DEFAULT_DOMAINS or \
                node.op_type not in ("RMSNormalization", "SimplifiedLayerNormalization"):
            continue
        if node_attr(node, "axis", -1) != -1 and node_attr(node, "axis", -1) != _rank(ix, x) - 1:
            raise cannot_map(node, "a norm over the last axis (axis -1)")
        weight = ix.constant(node.input[1]) if len(node.input) > 1 else None
        if weight is None or weight.ndim != 1:
            raise cannot_map(node, "a constant scale [width]")
        return Norm("rms", weight, None, float(node_attr(node, "epsilon", LAYER_NORM_DEFAULT_EPS)), x, node.output[0])
    return None


def _layer_norm_operator(ix, x):
    for node in ix.consumers(x, "LayerNormalization"):
        if node.input[0] == x:
            return _layer_norm_node(ix, x, node)
    return None


def _layer_norm_node(ix, x, node):
    if node_attr(node, "axis", -1) != -1 and node_attr(node, "axis", -1) != _rank(ix, x) - 1:
        raise cannot_map(node, "a LayerNormalization over the last axis (axis -1)")
    weight = ix.constant(node.input[1])
    bias = ix.constant(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if weight is None or weight.ndim != 1 or (len(node.input) > 2 and node.input[2] and bias is None):
        raise cannot_map(node, "a constant scale [width] and a constant bias, if any")
    eps = float(node_attr(node, "epsilon", LAYER_NORM_DEFAULT_EPS))
    if not eps >= 0:
        raise cannot_map(node, "a non-negative epsilon")
    return Norm("layer", _unless_all(weight, 1.0), _unless_all(bias, 0.0), eps, x, node.output[0])


def _layer_norm_written_out(ix, x):
    """mean = ReduceMean(x); d = x - mean; d * 1/Sqrt(ReduceMean(d^2) + eps) (or d / Sqrt(...)) [* w] [+ b]."""
    centred = _centred(ix, x)
    if centred is None:
        return None
    square = [n for n in ix.consumers(centred) if (n.op_type == "Pow" and ix.scalar(n.input[1]) == 2.0) or
              (n.op_type == "Mul" and list(n.input) == [centred, centred])]
    if len(square) != 1:
        return None
    variance = ix.sole_consumer(square[0].output[0], "ReduceMean", square[0], "the mean of the squares")
    if not _last_axis_mean(ix, variance):
        raise cannot_map(variance, "a mean over the last axis with keepdims=1")
    add = ix.sole_consumer(variance.output[0], "Add", variance, "variance + eps")
    eps = ix.scalar(ix.other_input(add, variance.output[0]))
    if eps is None or not eps >= 0:
        raise cannot_map(add, "a constant, non-negative eps")
    sqrt = ix.sole_consumer(add.output[0], "Sqrt", add, "Sqrt(variance + eps)")
    normalised = _divided_by(ix, centred, sqrt.output[0])
    if normalised is None:
        raise cannot_map(sqrt, "the centred x divided by Sqrt(variance + eps)")
    weight, out = _scaled_by_constant(ix, normalised, "Mul")
    bias, out = _scaled_by_constant(ix, out, "Add")
    return Norm("layer", weight, bias, float(eps), x, out)


def _layer_norm_as_rms(ix, x):
    """RMSNorm(x - mean(x)): a LayerNorm, as dynamo's optimizer rewrites Cohere's written-out one (the variance of
    x is the mean square of x - mean(x))."""
    centred = _centred(ix, x)
    if centred is None:
        return None
    for node in ix.consumers(centred):
        if node.op_type in ("Pow", "RMSNormalization", "SimplifiedLayerNormalization"):
            rms = _rms_written_out(ix, centred) if node.op_type == "Pow" else _rms_operator(ix, centred)
            if rms is not None:
                bias, out = _scaled_by_constant(ix, rms.output, "Add")
                return Norm("layer", rms.weight, bias, rms.eps, x, out)
    return None


def _centred(ix, x):
    """x - ReduceMean(x) over the last axis, or None."""
    means = [n for n in ix.consumers(x, "ReduceMean") if n.input[0] == x and _last_axis_mean(ix, n)]
    subs = [n for n in ix.consumers(x, "Sub") for m in means if list(n.input) == [x, m.output[0]]]
    return subs[0].output[0] if len(subs) == 1 else None


def _divided_by(ix, x, root):
    for node in ix.consumers(root):
        if node.op_type == "Div" and list(node.input) == [x, root]:
            return node.output[0]
        inverse = node.output[0] if node.op_type == "Reciprocal" else None
        if node.op_type == "Div" and node.input[1] == root and ix.scalar(node.input[0]) == 1.0:
            inverse = node.output[0]
        for mul in ix.consumers(inverse, "Mul") if inverse else []:
            if ix.other_input(mul, inverse) == x:
                return mul.output[0]
    return None


def _scaled_by_constant(ix, tensor, op_type):
    """(the constant vector, the output) of op_type(tensor, vector) when tensor's one consumer is such, else
    (None, tensor)."""
    consumers = ix.consumers(tensor)
    if len(consumers) == 1 and consumers[0].op_type == op_type:
        value = ix.constant(ix.other_input(consumers[0], tensor))
        if value is not None and value.ndim == 1:
            return value, consumers[0].output[0]
    return None, tensor


def _last_axis_mean(ix, mean):
    axes = node_attr(mean, "axes")
    if axes is None and len(mean.input) > 1:
        axes = ix.constant(mean.input[1])
    if axes is None or node_attr(mean, "keepdims", 1) != 1:
        return False
    axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    rank = _rank(ix, mean.input[0])
    return axes == [-1] or (rank is not None and axes == [rank - 1])


def _rank(ix, tensor):
    shape = ix.static_shape(tensor)
    return len(shape) if shape is not None else None


def _unless_all(value, constant):
    """value, or None where it is None or every element equals constant (a norm without that parameter)."""
    if value is None or np.all(value == constant):
        return None
    return value
