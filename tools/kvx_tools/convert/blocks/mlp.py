"""A decoder's MLP block, gated or not, read by which projection goes through which activation:

  gated      down( act(gate(x)) * up(x) )    SiLU: SwiGLU (Llama, Qwen, OLMo, Granite, StableLM, Cohere);
                                             GELU-tanh: GeGLU (Gemma)
  ungated    down( act(up(x)) )              GELU-tanh (GPT-2, Phi, GPT-J, StarCoder 2, GPTBigCode),
                                             exact GELU (GPT-NeoX, Falcon)

Each Linear may carry a bias (MatMul + Add of a constant). The activations are recognised in every spelling
exporters write: SiLU as Mul(x, Sigmoid(x)); GELU as ONNX Gelu (opset 20, approximate "tanh" or "none") or
written out (blocks/gelu.py). The kind names are families.json's mlp kinds."""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import cannot_map
from .gelu import gelu_erf_output, gelu_tanh_output, match_gelu_tanh, written_out_gelu_tanh
from .linear import biased_linear, linear_consumers

# (gated, activation) -> families.json's mlp kind
MLP_KINDS = {(True, "silu"): "swiglu", (True, "gelu_tanh"): "geglu_tanh", (False, "gelu_tanh"): "gelu_tanh",
             (False, "gelu_erf"): "gelu"}


@dataclass
class Mlp:
    kind: str  # families.json's mlp kind
    w_up: np.ndarray  # [dim, hidden_dim], ONNX MatMul layout [in, out]
    w_down: np.ndarray  # [hidden_dim, dim]
    output: str  # the down projection's result (after its bias)
    w_gate: Optional[np.ndarray] = None  # [dim, hidden_dim], gated kinds only
    biases: dict = None  # "w_gate"/"w_up"/"w_down" -> [out] where the Linear has one
    post_norm: object = None  # set by the walker: a norm of the output before the residual add


def silu_output(ix, x):
    """The tensor holding SiLU(x) = x * Sigmoid(x), or None."""
    for sigmoid in ix.consumers(x, "Sigmoid"):
        for mul in ix.consumers(sigmoid.output[0], "Mul"):
            if ix.other_input(mul, sigmoid.output[0]) == x:
                return mul.output[0]
    return None


def _activation(ix, x):
    """(name, output) of the activation x goes through, or None."""
    for name, read in (("silu", silu_output), ("gelu_tanh", gelu_tanh_output), ("gelu_erf", gelu_erf_output)):
        out = read(ix, x)
        if out is not None:
            return name, out
    return None


def mlp_projections(ix, x, exclude=()):
    """The MatMuls by a constant that read x, but for those in exclude (an attention's, in a parallel block)."""
    excluded = {id(n) for n in exclude}
    return [m for m in linear_consumers(ix, x) if id(m) not in excluded]


def match_mlp(ix, x, projections, blame):
    """The Mlp whose first projections (one, or gate and up) are projections, all reading x."""
    linears = [biased_linear(ix, m) for m in projections]
    if len(linears) not in (1, 2):
        raise cannot_map(blame, f"an MLP of one or two projections reading '{x}', found {len(linears)}")
    activated = [_activation(ix, linear.output) for linear in linears]
    through = [k for k, a in enumerate(activated) if a is not None]
    if len(linears) == 2:
        if len(through) != 1:
            raise cannot_map(linears[0].node, "exactly one of the gate and up projections through SiLU or GELU")
        gate, up = linears[through[0]], linears[1 - through[0]]
        activation, act_out = activated[through[0]]
        products = [m for m in ix.consumers(act_out, "Mul") if ix.other_input(m, act_out) == up.output]
        if len(products) != 1:
            raise cannot_map(up.node, "act(gate) * up")
        inner = products[0].output[0]
    else:
        if not through:
            if written_out_gelu_tanh(ix, linears[0].output):  # name the step the written-out GELU lacks
                match_gelu_tanh(ix, linears[0].output, linears[0].node)
            raise cannot_map(linears[0].node, "the MLP's projection through SiLU, GELU-tanh or exact GELU")
        gate, up = None, linears[0]
        activation, inner = activated[0]
    kind = MLP_KINDS.get((gate is not None, activation))
    if kind is None:
        raise cannot_map(up.node, f"an MLP kvx computes (SwiGLU, GeGLU-tanh, GELU-tanh, exact GELU), found "
                                  f"{'gated' if gate is not None else 'ungated'} {activation}")
    downs = linear_consumers(ix, inner)
    if len(downs) != 1:
        raise cannot_map(ix.producer(inner), f"one down projection reading '{inner}'")
    down = biased_linear(ix, downs[0])
    biases = {name: lin.bias for name, lin in (("w_gate", gate), ("w_up", up), ("w_down", down))
              if lin is not None and lin.bias is not None}
    return Mlp(kind=kind, w_up=up.weight, w_down=down.weight, output=down.output,
               w_gate=gate.weight if gate is not None else None, biases=biases)
