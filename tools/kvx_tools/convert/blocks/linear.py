"""Linear layers: a MatMul of an activation by a constant [in, out] matrix (torch's export of a
bias-free nn.Linear), optionally followed by the Add of a constant bias, and the residual Add that closes
a block."""

from dataclasses import dataclass
from typing import Optional

import numpy as np
from onnx import NodeProto

from ..errors import cannot_map


def linear_weight(ix, matmul):
    """matmul's constant right operand, [in, out] fp32 as stored in ONNX, or None."""
    if matmul.op_type != "MatMul":
        return None
    w = ix.constant(matmul.input[1])
    return w if w is not None and w.ndim == 2 else None


def linear_consumers(ix, tensor):
    """MatMul nodes that multiply tensor by a constant weight."""
    return [m for m in ix.consumers(tensor, "MatMul")
            if m.input[0] == tensor and linear_weight(ix, m) is not None]


def sole_linear_consumer(ix, tensor, after, what):
    linears = linear_consumers(ix, tensor)
    if len(linears) != 1:
        raise cannot_map(after, f"one MatMul by a constant weight ({what}) reading '{tensor}'")
    return linears[0]


@dataclass
class BiasedLinear:
    weight: np.ndarray  # [in, out], ONNX MatMul layout
    bias: Optional[np.ndarray]  # [out], or None for a layer without bias
    output: str  # the layer's result: the bias Add's output, else the MatMul's
    node: NodeProto  # the node that writes output, to name in errors about what follows


def biased_linear(ix, matmul):
    """A linear layer from its MatMul by a constant weight: torch exports a Linear with bias as
    MatMul(x, W) followed by Add with a constant [out] vector (in either operand order)."""
    weight = linear_weight(ix, matmul)
    adds = ix.consumers(matmul.output[0])
    if len(adds) == 1 and adds[0].op_type == "Add":
        bias = ix.constant(ix.other_input(adds[0], matmul.output[0]))
        if bias is not None and bias.shape == (weight.shape[1],):
            return BiasedLinear(weight, bias, adds[0].output[0], adds[0])
    return BiasedLinear(weight, None, matmul.output[0], matmul)




def bias_after(ix, tensor):
    """(bias, its Add's output) when tensor's one reader adds a constant vector to it, else (None, tensor)."""
    consumers = ix.consumers(tensor)
    if len(consumers) == 1 and consumers[0].op_type == "Add":
        value = ix.constant(ix.other_input(consumers[0], tensor))
        if value is not None and value.ndim == 1:
            return value, consumers[0].output[0]
    return None, tensor
