"""SwiGLU MLP as torch exports HF's LlamaMLP:
    down( SiLU(gate(x)) * up(x) ),  SiLU(g) = Mul(g, Sigmoid(g))
gate and up are told apart by which one goes through the SiLU."""

from dataclasses import dataclass

import numpy as np

from ..errors import cannot_map
from .attention import residual_after
from .gelu import gelu_tanh_output
from .linear import linear_consumers, linear_weight, sole_linear_consumer


@dataclass
class SwiGlu:
    w_gate: np.ndarray  # [dim, hidden_dim], ONNX MatMul layout [in, out]
    w_up: np.ndarray  # [dim, hidden_dim]
    w_down: np.ndarray  # [hidden_dim, dim]
    output: str  # the residual stream after the block (the down projection's output when residual is None)
    activation: str = "silu"  # of the gate: "silu" (SwiGLU) or "gelu_tanh" (Gemma's GeGLU)
    post_norm: object = None  # RmsNorm of the block's output before the residual add (Gemma 2/3's sandwich)


def _silu_output(ix, matmul):
    """The tensor holding SiLU(matmul's output), or None when it does not go through one."""
    g = matmul.output[0]
    for sigmoid in ix.consumers(g, "Sigmoid"):
        for mul in ix.consumers(sigmoid.output[0], "Mul"):
            if ix.other_input(mul, sigmoid.output[0]) == g:
                return mul.output[0]
    return None


def match_swiglu(ix, normed, residual, after):
    """The MLP block reading normed [b, s, dim] and adding into residual; residual None for graphs that
    fuse the residual add into the next norm (exporters/ortgenai/llama_patterns.py)."""
    linears = linear_consumers(ix, normed)
    if len(linears) != 2:
        raise cannot_map(after, f"two MatMuls (gate, up) reading '{normed}', found {len(linears)}")
    activation = "silu"
    activated = [_silu_output(ix, m) for m in linears]
    if all(a is None for a in activated):
        activation, activated = "gelu_tanh", [gelu_tanh_output(ix, m.output[0]) for m in linears]
    if sum(a is not None for a in activated) != 1:
        raise cannot_map(linears[0], "exactly one of the two MLP projections going through SiLU "
                                     "(Mul(x, Sigmoid(x))) or GELU in its tanh form")
    gate_index = 0 if activated[0] is not None else 1
    gate, up, silu = linears[gate_index], linears[1 - gate_index], activated[gate_index]
    products = [m for m in ix.consumers(silu, "Mul") if ix.other_input(m, silu) == up.output[0]]
    if len(products) != 1:
        raise cannot_map(up, "SiLU(gate) * up")
    down = sole_linear_consumer(ix, products[0].output[0], products[0], "down projection")
    post_norm, output = (None, down.output[0]) if residual is None else residual_after(ix, residual, down.output[0], down)
    return SwiGlu(w_gate=linear_weight(ix, gate), w_up=linear_weight(ix, up), w_down=linear_weight(ix, down),
                  output=output, activation=activation, post_norm=post_norm)
