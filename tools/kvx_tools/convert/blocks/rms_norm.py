"""RMSNorm as torch exports HF's LlamaRMSNorm:
    x -> Pow(2) -> ReduceMean(last axis) -> Add(eps) -> Sqrt -> Reciprocal -> Mul(x) -> Mul(weight)
also accepted: Div(1, Sqrt) or Div(x, Sqrt) for the Reciprocal/Mul pair, either operand order in Mul."""

from dataclasses import dataclass

import numpy as np

from ..errors import cannot_map
from ..graph.index import node_attr


@dataclass
class RmsNorm:
    weight: np.ndarray  # [dim] fp32
    eps: float
    output: str  # the normalized activations [b, s, dim]


def match_rms_norm(ix, x, after):
    """The RMSNorm reading x; after: the node to blame when there is none."""
    pows = [n for n in ix.consumers(x, "Pow") if n.input[0] == x and ix.scalar(n.input[1]) == 2.0]
    if len(pows) != 1:
        raise cannot_map(after, f"an RMSNorm (Pow(x, 2) -> ReduceMean -> ...) reading '{x}'")
    pow_node = pows[0]
    mean = ix.sole_consumer(pow_node.output[0], "ReduceMean", pow_node, "ReduceMean of the squares")
    _check_last_axis_mean(ix, mean)
    add = ix.sole_consumer(mean.output[0], "Add", mean, "Add(mean square, eps)")
    eps = ix.scalar(ix.other_input(add, mean.output[0]))
    if eps is None or not eps >= 0:
        raise cannot_map(add, "a constant, non-negative eps")
    sqrt = ix.sole_consumer(add.output[0], "Sqrt", add, "Sqrt(mean square + eps)")
    scaled = _scaled_by_inverse_rms(ix, x, sqrt)
    muls = ix.consumers(scaled, "Mul")
    weight = ix.constant(ix.other_input(muls[0], scaled)) if len(muls) == 1 else None
    if weight is None or weight.ndim != 1:
        raise cannot_map(ix.producer(scaled), "a Mul by the constant RMSNorm weight [dim]")
    return RmsNorm(weight=weight, eps=eps, output=muls[0].output[0])


def _check_last_axis_mean(ix, mean):
    axes = node_attr(mean, "axes")
    if axes is None and len(mean.input) > 1:  # opset 18 moved axes to an input
        axes = ix.constant(mean.input[1])
    last_axis = axes is not None and list(np.asarray(axes).reshape(-1)) in ([-1], [2])
    if not last_axis or node_attr(mean, "keepdims", 1) != 1:
        raise cannot_map(mean, "a mean over the last axis with keepdims=1")


def _scaled_by_inverse_rms(ix, x, sqrt):
    """x / sqrt(...) in any of its exported spellings; returns the tensor holding it."""
    rms = sqrt.output[0]
    for node in ix.consumers(rms):
        if node.op_type == "Div" and node.input[1] == rms and node.input[0] == x:
            return node.output[0]
        inverse = None
        if node.op_type == "Reciprocal":
            inverse = node.output[0]
        elif node.op_type == "Div" and node.input[1] == rms and ix.scalar(node.input[0]) == 1.0:
            inverse = node.output[0]
        if inverse is not None:
            for mul in ix.consumers(inverse, "Mul"):
                if ix.other_input(mul, inverse) == x:
                    return mul.output[0]
    raise cannot_map(sqrt, "x multiplied by 1/Sqrt(...) (Reciprocal or Div) or divided by it")
