"""LayerNorm as torch exports nn.LayerNorm at opset 17: one LayerNormalization node over the last axis,
with constant scale and bias:
    y = (x - mean(x)) / sqrt(var(x) + epsilon) * scale + bias"""

from dataclasses import dataclass

import numpy as np

from ..errors import cannot_map
from ..graph.index import node_attr

LAYER_NORM_DEFAULT_EPS = 1e-5  # the ONNX operator's default when the attribute is absent


@dataclass
class LayerNorm:
    weight: np.ndarray  # [dim] fp32, the scale
    bias: np.ndarray  # [dim] fp32, zeros when the node has none
    eps: float
    output: str  # the normalized activations [b, s, dim]


def match_layer_norm(ix, x, after):
    """The LayerNormalization reading x; after: the node to blame when there is none."""
    norms = [n for n in ix.consumers(x, "LayerNormalization") if n.input[0] == x]
    if len(norms) != 1:
        raise cannot_map(after, f"a LayerNormalization reading '{x}'")
    norm = norms[0]
    if node_attr(norm, "axis", -1) not in (-1, 2):
        raise cannot_map(norm, "a LayerNormalization over the last axis (axis -1)")
    weight = ix.constant(norm.input[1])
    if weight is None or weight.ndim != 1:
        raise cannot_map(norm, "a constant scale [dim]")
    bias = ix.constant(norm.input[2]) if len(norm.input) > 2 and norm.input[2] else np.zeros_like(weight)
    if bias is None or bias.shape != weight.shape:
        raise cannot_map(norm, f"a constant bias of the scale's shape [{weight.shape[0]}]")
    eps = float(node_attr(norm, "epsilon", LAYER_NORM_DEFAULT_EPS))
    if not eps >= 0:
        raise cannot_map(norm, "a non-negative epsilon")
    return LayerNorm(weight=weight, bias=bias, eps=eps, output=norm.output[0])
