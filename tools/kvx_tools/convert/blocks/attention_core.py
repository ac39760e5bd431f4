"""The core of a self-attention block, found by what it computes, in the forms exporters write:

  eager (HF's default before sdpa):  MatMul(q, K^T) [* scale] [soft-cap] [+ mask] -> Softmax -> MatMul(., V)
  sdpa (TorchScript and dynamo):     the scale split as sqrt(scale) on q and on K^T, K^T written as 3-D
                                     Reshape/Transpose/Reshape, boolean masks through Where, the softmax cleaned
                                     of NaN by Where(IsNaN(p), 0, p)
  ONNX Attention (opset 23):         one node, Q/K/V 3-D [b, s, heads * d] or 4-D [b, heads, s, d], the cache
                                     concatenated inside (past_key/past_value inputs, present outputs)

What sits between the projections and these operands (head splits, RoPE, repeated KV heads, the cache Concat)
is left to blocks/attention.py, which traces it; this module reads only the scores and the probabilities: the
constants that scale the scores, a soft-cap, the mask (which kvx builds itself, so it is only recorded for the
sliding-window analysis), and the output projection that reads the merged heads.
"""

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
from onnx import NodeProto

from ..domains import DEFAULT_DOMAINS
from ..errors import cannot_map
from ..graph.index import node_attr
from ..graph.layout import MOVING_OPS, PASSING_OPS
from .linear import linear_consumers

# How far from the normed activations the core may lie (projections, head split, RoPE, cache, scores).
CORE_SEARCH_NODES = 400
MAX_SCORE_STEPS = 24


@dataclass
class AttentionCore:
    kind: str  # "matmul": Softmax between two MatMuls; "attention_op": ONNX's Attention operator
    node: NodeProto  # the Softmax, or the Attention node: what errors name
    query: str  # the scores MatMul's left operand [.., s, d] (kind matmul), or the op's Q input
    key: str  # the scores MatMul's right operand [.., d, t], or the op's K input
    value: str  # the probabilities MatMul's right operand [.., t, d], or the op's V input
    output: str  # the probabilities MatMul's output [.., s, d], or the op's output Y
    o_proj: NodeProto  # the MatMul by a constant that reads the merged heads
    merged: str  # its input: the heads of output merged into [b, s, heads * d]
    scale: float = 1.0  # the constant factors between the scores MatMul and the Softmax (the op's scale)
    scale_given: bool = True  # False for an Attention op without a scale attribute: 1/sqrt(d) by definition
    softcap: Optional[float] = None  # cap in cap * tanh(scores / cap), before the mask
    mask: Optional[str] = None  # the tensor added to the scores, where there is one
    q_heads: Optional[int] = None  # the op's q_num_heads / kv_num_heads (3-D inputs need them)
    kv_heads: Optional[int] = None
    past_key: Optional[str] = None  # the op's own cache inputs, where it concatenates them itself
    past_value: Optional[str] = None


def find_attention_core(ix, normed, blame):
    """The AttentionCore fed by the projections of normed; blame: the node to name when there is none."""
    node = _first_reached(ix, normed, lambda n: n.op_type == "Softmax" or _is_attention_op(n))
    if node is None:
        raise cannot_map(blame, f"an attention (a Softmax between two MatMuls, or an Attention operator) fed by "
                                f"projections of '{normed}'")
    if node.op_type == "Softmax":
        return _matmul_core(ix, node)
    return _attention_op_core(ix, node)


def _is_attention_op(node):
    return node.op_type == "Attention" and node.domain in DEFAULT_DOMAINS


def _first_reached(ix, start, wanted):
    """The first node downstream of start (breadth first, at most CORE_SEARCH_NODES) that wanted accepts."""
    seen, frontier = {start}, [start]
    visited = 0
    while frontier and visited < CORE_SEARCH_NODES:
        next_frontier = []
        for tensor in frontier:
            for node in ix.consumers(tensor):
                visited += 1
                if wanted(node):
                    return node
                for out in node.output:
                    if out and out not in seen:
                        seen.add(out)
                        next_frontier.append(out)
        frontier = next_frontier
    return None


def _is_activation_matmul(ix, node):
    return node.op_type == "MatMul" and all(ix.constant(i) is None for i in node.input)


def _scores_distance(ix, tensor, depth=MAX_SCORE_STEPS):
    """How many nodes back tensor's value comes from a MatMul of two activations (not counting what a Shape
    reads), or None beyond depth: the scores side of the mask Add is the nearer one (the mask itself may take
    its size from the keys, and RoPE's angles are a MatMul of activations too, further away)."""
    frontier, seen = [tensor], {tensor}
    for distance in range(depth):
        nxt = []
        for t in frontier:
            node = ix.producer(t)
            if node is None or node.op_type == "Shape":
                continue
            if _is_activation_matmul(ix, node):
                return distance
            for i in node.input:
                if i and i not in seen and ix.constant(i) is None:
                    seen.add(i)
                    nxt.append(i)
        frontier = nxt
    return None


def _scores_side(ix, candidates):
    """The one candidate nearest the scores MatMul, or None where none is, or two are as near."""
    distances = [(_scores_distance(ix, t), t) for t in candidates if ix.constant(t) is None]
    distances = sorted((d, t) for d, t in distances if d is not None)
    if not distances or (len(distances) > 1 and distances[0][0] == distances[1][0]):
        return None
    return distances[0][1]


def _scalar_factor(ix, node, tensor):
    """The constant factor node applies to tensor when node is Mul(tensor, c) or Div(tensor, c), else None."""
    if node.op_type == "Mul":
        return ix.scalar(ix.other_input(node, tensor))
    if node.op_type == "Div" and node.input[0] == tensor:
        c = ix.scalar(node.input[1])
        return None if not c else 1.0 / c
    return None


def _matmul_core(ix, softmax):
    if node_attr(softmax, "axis", -1) not in (-1, 3):
        raise cannot_map(softmax, "a Softmax over the key axis (the last)")
    scores, scale, softcap, mask = _scores_before(ix, softmax)
    probabilities = _probabilities_after(ix, softmax)
    pv = [m for m in ix.consumers(probabilities, "MatMul") if m.input[0] == probabilities]
    if len(pv) != 1:
        raise cannot_map(softmax, "the probabilities multiplied by the values (one MatMul reading them)")
    o_proj, merged = _output_projection(ix, pv[0].output[0], pv[0])
    return AttentionCore(kind="matmul", node=softmax, query=scores.input[0], key=scores.input[1],
                         value=pv[0].input[1], output=pv[0].output[0], o_proj=o_proj, merged=merged, scale=scale,
                         softcap=softcap, mask=mask)


def _scores_before(ix, softmax):
    """(the scores MatMul, the product of the constant factors after it, the soft-cap, the mask) walking back
    from the Softmax through scalings, a soft-cap, the mask Add or Where, casts and reshapes."""
    tensor, scale, softcap, mask = softmax.input[0], 1.0, None, None
    for _ in range(MAX_SCORE_STEPS):
        node = ix.producer(tensor)
        if node is None:
            break
        if _is_activation_matmul(ix, node):
            return node, scale, softcap, mask
        op = node.op_type
        if op == "Mul" and softcap is None and _softcap_before(ix, node) is not None:
            softcap, tensor = _softcap_before(ix, node)
            continue
        factor = None
        if op in ("Mul", "Div"):
            for t in node.input:
                factor = _scalar_factor(ix, node, t)
                if factor is not None:
                    tensor = t
                    break
        if factor is not None:
            scale *= factor
        elif op == "Add":
            side = _scores_side(ix, node.input)
            if side is None:
                raise cannot_map(node, "scores plus a mask (one side computed from Q K^T)")
            mask = ix.other_input(node, side)
            tensor = side
        elif op == "Where" and len(node.input) == 3:
            side = _scores_side(ix, node.input[1:])
            if side is None:
                raise cannot_map(node, "Where(mask, scores, -inf) or Where(mask, -inf, scores)")
            mask = mask or node.input[0]
            tensor = side
        elif op in PASSING_OPS or op in ("Reshape", "Squeeze", "Unsqueeze"):
            tensor = node.input[0]
        else:
            raise cannot_map(node, "scalings, a soft-cap, a mask and reshapes between Q K^T and the Softmax")
    raise cannot_map(softmax, "the scores Q K^T (a MatMul of two activations) before the Softmax")


def _softcap_before(ix, outer):
    """(cap, the tensor before it) when outer is Mul(Tanh(x * (1/cap) or x / cap), cap), else None."""
    for t in outer.input:
        cap = ix.scalar(ix.other_input(outer, t))
        tanh = ix.producer_op(t, "Tanh")
        if cap is None or tanh is None:
            continue
        inner = ix.producer(tanh.input[0])
        if inner is None or inner.op_type not in ("Mul", "Div"):
            continue
        for x in inner.input:
            factor = _scalar_factor(ix, inner, x)
            if factor is not None and np.isclose(factor * cap, 1.0, rtol=1e-6):
                return float(cap), x
    return None


def _probabilities_after(ix, softmax):
    """The probabilities as the values' MatMul reads them: after optimum's and sdpa's NaN guard
    Where(IsNaN(p), 0, p), casts and reshapes."""
    tensor = softmax.output[0]
    for _ in range(MAX_SCORE_STEPS):
        consumers = [n for n in ix.consumers(tensor) if n.op_type != "IsNaN"]
        if any(n.op_type == "MatMul" and n.input[0] == tensor for n in consumers) or len(consumers) != 1:
            return tensor
        node = consumers[0]
        if node.op_type == "Where" and len(node.input) == 3 and ix.producer_op(node.input[0], "IsNaN") is not None:
            tensor = node.output[0]
        elif node.op_type in PASSING_OPS or node.op_type in ("Reshape", "Squeeze", "Unsqueeze"):
            tensor = node.output[0]
        else:
            return tensor
    return tensor


def _output_projection(ix, output, blame):
    """(o_proj, merged): the MatMul by a constant reached from the attention output through data movement."""
    seen, frontier = {output}, [output]
    for _ in range(MAX_SCORE_STEPS):
        nxt = []
        for tensor in frontier:
            linears = linear_consumers(ix, tensor)
            if len(linears) == 1:
                return linears[0], tensor
            for node in ix.consumers(tensor):
                if node.domain in DEFAULT_DOMAINS and node.op_type in MOVING_OPS | PASSING_OPS:
                    for out in node.output:
                        if out not in seen:
                            seen.add(out)
                            nxt.append(out)
        frontier = nxt
    raise cannot_map(blame, "the heads merged into the output projection (a MatMul by a constant)")


def _attention_op_core(ix, node):
    """ONNX Attention (opset 23): Q, K, V, attn_mask, past_key, past_value -> Y, present_key, present_value."""
    inputs = list(node.input) + [""] * (6 - len(node.input))
    if node_attr(node, "qk_matmul_output_mode", 0) != 0:
        raise cannot_map(node, "an Attention without extra outputs (qk_matmul_output_mode 0)")
    o_proj, merged = _output_projection(ix, node.output[0], node)
    scale = node_attr(node, "scale")
    softcap = node_attr(node, "softcap", 0.0)
    return AttentionCore(kind="attention_op", node=node, query=inputs[0], key=inputs[1], value=inputs[2],
                         output=node.output[0], o_proj=o_proj, merged=merged,
                         scale=float(scale) if scale is not None else 1.0, scale_given=scale is not None,
                         softcap=float(softcap) if softcap else None, mask=inputs[3] or None,
                         q_heads=node_attr(node, "q_num_heads"), kv_heads=node_attr(node, "kv_num_heads"),
                         past_key=inputs[4] or None, past_value=inputs[5] or None)


def default_scale(head_dim):
    return 1.0 / math.sqrt(head_dim)
