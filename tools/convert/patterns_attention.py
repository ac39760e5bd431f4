"""Self-attention, as torch exports HF's LlamaAttention with a KV cache or without one.

The three projections reading the normed activations are told apart by where their outputs go, never
by name:
  query: split into heads -> RoPE -> (scale) -> MatMul with K^T
  key:   split into heads -> RoPE -> [Concat(past key input, .) = a graph output (present key)] -> K^T
  value: split into heads ->         [Concat(past value input, .) = a graph output (present value)]
The bracketed cache Concat is there in graphs exported with past_key_values and absent in those without;
both give the same model, since kvx keeps its own cache. Without it, query and key are told apart by
which side of the scores MatMul they reach. Then the core is checked: scores scaled by 1/sqrt(head_dim)
(as kvx computes them), mask Add, Softmax, MatMul with the (head-repeated) values, heads merged, o_proj,
residual Add.
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np
from onnx import NodeProto

from convert_errors import ConvertError, cannot_map
from graph_index import node_attr
from patterns_linear import linear_consumers, linear_weight, residual_add, sole_linear_consumer
from patterns_rope import Rope, match_rope

# What GQA's repeat_kv (Unsqueeze -> Expand -> Reshape) and the K transpose are built from.
REPEAT_KV_OPS = frozenset({"Unsqueeze", "Expand", "Reshape"})


@dataclass
class Attention:
    wq: np.ndarray  # [dim, n_heads * head_dim], ONNX MatMul layout [in, out]
    wk: np.ndarray  # [dim, n_kv_heads * head_dim]
    wv: np.ndarray  # [dim, n_kv_heads * head_dim]
    wo: np.ndarray  # [n_heads * head_dim, dim]
    n_heads: int
    n_kv_heads: int
    head_dim: int
    inv_freq: np.ndarray  # [head_dim / 2] fp32
    output: str  # the residual stream after the block


@dataclass
class _Projection:
    matmul: NodeProto
    n_heads: int
    head_dim: int
    rope: Optional[Rope]  # None for the value projection
    end: str  # where the path was followed to: the cache Concat output, else the rotated or split heads
    cached: bool  # whether end is a cache Concat (a graph exported with past_key_values)


def match_attention(ix, normed, residual, after):
    """The attention block reading normed [b, s, dim] and adding into residual."""
    linears = linear_consumers(ix, normed)
    if len(linears) != 3:
        raise cannot_map(after, f"three MatMuls (q, k, v projections) reading '{normed}', "
                                f"found {len(linears)}")
    q, k, v = _assign_roles(ix, [_follow_projection(ix, matmul) for matmul in linears])
    _check_head_shapes(q, k, v)
    if not np.array_equal(q.rope.inv_freq, k.rope.inv_freq):
        raise cannot_map(k.matmul, "the same RoPE frequencies for Q and K")

    probs = _match_scores(ix, q, k)
    pv = _sole_matmul_reading(ix, probs, ix.producer(probs), "Softmax(scores) @ V")
    if ix.trace_back(pv.input[1], REPEAT_KV_OPS) != v.end:
        raise cannot_map(pv, f"probabilities times the cached values '{v.end}'")
    o_proj = _match_merge_heads(ix, pv)
    return Attention(
        wq=linear_weight(ix, q.matmul), wk=linear_weight(ix, k.matmul), wv=linear_weight(ix, v.matmul),
        wo=linear_weight(ix, o_proj), n_heads=q.n_heads, n_kv_heads=k.n_heads, head_dim=q.head_dim,
        inv_freq=q.rope.inv_freq, output=residual_add(ix, residual, o_proj.output[0], o_proj))


def _split_heads(ix, matmul):
    """Follows MatMul -> Reshape [b, s, heads, head_dim] -> Transpose [b, heads, s, head_dim].
    Returns (heads, head_dim, transposed tensor)."""
    out_features = linear_weight(ix, matmul).shape[1]
    reshape = ix.sole_consumer(matmul.output[0], "Reshape", matmul,
                               "Reshape to [batch, seq, heads, head_dim]")
    dims = ix.fold_dims(reshape.input[1], reshape)
    if len(dims) != 4 or dims[3] is None or dims[3] <= 0 or dims[2] is None:
        raise cannot_map(reshape, f"a target shape [batch, seq, heads, head_dim] with constant heads and "
                                  f"head_dim, found {dims}")
    head_dim = dims[3]
    heads = out_features // head_dim if dims[2] == -1 else dims[2]
    if heads <= 0 or heads * head_dim != out_features:
        raise cannot_map(reshape, f"heads x head_dim = {out_features} (the projection's width), found {dims}")
    transpose = ix.sole_consumer(reshape.output[0], "Transpose", reshape, "Transpose to [b, heads, s, hd]")
    if list(node_attr(transpose, "perm", [])) != [0, 2, 1, 3]:
        raise cannot_map(transpose, "perm [0, 2, 1, 3]")
    return heads, head_dim, transpose.output[0]


def _cache_concat(ix, tensor):
    """The Concat(past input, tensor) along the sequence axis whose output is a graph output."""
    for concat in ix.consumers(tensor, "Concat"):
        past = concat.input[0]
        if list(concat.input) == [past, tensor] and past in ix.input_names \
                and concat.output[0] in ix.output_names and node_attr(concat, "axis") in (2, -2):
            return concat
    return None


def _follow_projection(ix, matmul):
    """The projection's heads, its RoPE if any, and the tensor its path ends in: the cache Concat's
    output where there is one, else the rotated (or, for V, the split) tensor."""
    heads, head_dim, split = _split_heads(ix, matmul)
    rope = match_rope(ix, split, head_dim)
    end = rope.output if rope else split
    cache = _cache_concat(ix, end)
    return _Projection(matmul, heads, head_dim, rope, end if cache is None else cache.output[0],
                       cached=cache is not None)


def _reaches_right_of_matmul(ix, tensor):
    """Whether tensor, through head repeats, transposes and constant scalings, is the right operand of
    a MatMul (the key side of Q K^T)."""
    frontier, seen = [tensor], set()
    while frontier:
        t = frontier.pop()
        seen.add(t)
        for node in ix.consumers(t):
            if node.op_type == "MatMul" and node.input[1] == t:
                return True
            passes = node.op_type in REPEAT_KV_OPS or node.op_type == "Transpose" \
                or _scale_of(ix, node, t) is not None
            if passes and node.output[0] not in seen:
                frontier.append(node.output[0])
    return False


def _assign_roles(ix, projections):
    """(query, key, value) among the three: value is the one without RoPE; of the two with it, the key
    is the cached one, or, in a graph without a cache, the one that reaches K^T."""
    rotated = [p for p in projections if p.rope is not None]
    plain = [p for p in projections if p.rope is None]
    if len(rotated) != 2 or len(plain) != 1:
        raise cannot_map(projections[0].matmul, "two projections through RoPE (query, key) and one without "
                                                f"(value), found {len(rotated)} with RoPE")
    value = plain[0]
    keys = [p for p in rotated if p.cached] if value.cached \
        else [p for p in rotated if not p.cached and _reaches_right_of_matmul(ix, p.end)]
    if len(keys) != 1:
        cache = "with" if value.cached else "without"
        raise cannot_map(rotated[0].matmul, f"one key projection {cache} a cache Concat like the value's, "
                                            f"found {len(keys)}")
    key = keys[0]
    query = rotated[1] if rotated[0] is key else rotated[0]
    if query.cached:
        raise cannot_map(query.matmul, "the query projection without a cache Concat")
    return query, key, value


def _check_head_shapes(q, k, v):
    if k.n_heads != v.n_heads or q.n_heads % k.n_heads:
        raise cannot_map(k.matmul, f"n_kv_heads dividing n_heads and equal for K and V "
                                   f"(Q {q.n_heads}, K {k.n_heads}, V {v.n_heads})")
    if not q.head_dim == k.head_dim == v.head_dim or q.head_dim % 2:
        raise cannot_map(q.matmul, f"one even head_dim for Q, K and V "
                                   f"(found {q.head_dim}, {k.head_dim}, {v.head_dim})")


def _scale_of(ix, node, tensor):
    """The constant factor node applies to tensor when node is Mul(tensor, c) or Div(tensor, c)."""
    if node.op_type == "Mul":
        return ix.scalar(ix.other_input(node, tensor))
    if node.op_type == "Div" and node.input[0] == tensor:
        c = ix.scalar(node.input[1])
        return None if not c else 1.0 / c
    return None


def _sole_matmul_reading(ix, tensor, after, expected):
    matmuls = [m for m in ix.consumers(tensor, "MatMul") if m.input[0] == tensor]
    if len(matmuls) != 1:
        raise cannot_map(after, expected)
    return matmuls[0]


def _match_scores(ix, q, k):
    """Checks Q K^T, its scaling and the Softmax; returns the attention probabilities tensor.

    The scale may sit after the MatMul (HF eager) or be split over Q and K (torch's export of
    scaled_dot_product_attention); kvx applies 1/sqrt(head_dim) once, so only the product matters."""
    scale, tensor = 1.0, q.end
    while len(ix.consumers(tensor)) == 1 and _scale_of(ix, ix.consumers(tensor)[0], tensor) is not None:
        node = ix.consumers(tensor)[0]
        scale, tensor = scale * _scale_of(ix, node, tensor), node.output[0]
    scores = _sole_matmul_reading(ix, tensor, q.matmul, "the query times K^T")

    key, transposed = scores.input[1], False
    while ix.producer(key) is not None and ix.producer(key).op_type not in REPEAT_KV_OPS:
        node = ix.producer(key)
        swaps_last_axes = node.op_type == "Transpose" and list(node_attr(node, "perm", [])) == [0, 1, 3, 2]
        if swaps_last_axes and not transposed:
            transposed, key = True, node.input[0]
        elif node.op_type in ("Mul", "Div") and _scale_of(ix, node, node.input[0]) is not None:
            scale, key = scale * _scale_of(ix, node, node.input[0]), node.input[0]
        else:
            break
    if not transposed or ix.trace_back(key, REPEAT_KV_OPS) != k.end:
        raise cannot_map(scores, f"the query times the transposed cached keys '{k.end}'")

    tensor = scores.output[0]
    while True:
        consumers = ix.consumers(tensor)
        node = consumers[0] if len(consumers) == 1 else None
        if node is None:
            raise cannot_map(ix.producer(tensor), "one consumer on the path from Q K^T to Softmax")
        if node.op_type == "Softmax":
            break
        factor = _scale_of(ix, node, tensor)
        if factor is not None:
            scale *= factor
        elif node.op_type != "Add":  # the attention mask; kvx builds its own causal mask
            raise cannot_map(node, "scaling, the mask Add and Softmax after Q K^T")
        tensor = node.output[0]
    if node_attr(node, "axis", -1) not in (-1, 3):
        raise cannot_map(node, "Softmax over the key axis")
    expected = 1.0 / np.sqrt(q.head_dim)
    if not np.isclose(scale, expected, rtol=1e-5):
        raise ConvertError(f"cannot map node '{scores.name}' (op MatMul): expected attention scores "
                           f"scaled by 1/sqrt(head_dim) = {expected:.6g}, found {scale:.6g}")
    return node.output[0]


def _match_merge_heads(ix, pv):
    """[b, heads, s, hd] -> Transpose -> Reshape [b, s, heads*hd] -> o_proj MatMul; returns o_proj."""
    transpose = ix.sole_consumer(pv.output[0], "Transpose", pv, "Transpose back to [b, s, heads, hd]")
    if list(node_attr(transpose, "perm", [])) != [0, 2, 1, 3]:
        raise cannot_map(transpose, "perm [0, 2, 1, 3]")
    reshape = ix.sole_consumer(transpose.output[0], "Reshape", transpose, "Reshape to [b, s, heads * hd]")
    return sole_linear_consumer(ix, reshape.output[0], reshape, "o_proj")
