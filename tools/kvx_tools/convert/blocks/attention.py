"""Self-attention with a KV cache, as torch exports HF's LlamaAttention.

The three projections reading the normed activations are told apart by where their outputs go, never
by name:
  (each projection may add a bias (Qwen2), and query and key may go through a per-head RMSNorm between the
  head split and the transpose (Qwen3's q/k norm))
  query: split into heads -> RoPE -> (scale) -> MatMul with K^T
  key:   split into heads -> RoPE -> Concat(past key input, .) = a graph output (present key)
  value: split into heads ->         Concat(past value input, .) = a graph output (present value)
Then the core is checked: scores scaled by 1/sqrt(head_dim) (as kvx computes them), mask Add, Softmax,
MatMul with the (head-repeated) cached values, heads merged, o_proj, residual Add. GPT-2's matcher
(blocks/fused_qkv.py) shares the core and the head splitting.
"""

from dataclasses import dataclass, field
from typing import Optional

import math

import numpy as np
from onnx import NodeProto

from ..errors import ConvertError, cannot_map
from ..graph.index import node_attr
from .linear import BiasedLinear, biased_linear, linear_consumers, linear_weight, residual_add, \
    sole_linear_consumer
from .rms_norm import RmsNorm, match_rms_norm
from .rope import Rope, match_rope

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
    biases: dict = field(default_factory=dict)  # "wq"/"wk"/"wv" -> [out] where the projection has one (Qwen2)
    q_norm: Optional["RmsNorm"] = None  # per-head RMSNorm of the query / key before RoPE (Qwen3, Gemma 3)
    k_norm: Optional["RmsNorm"] = None
    scale: Optional[float] = None  # the q.k scale where it is not 1/sqrt(head_dim) (Gemma 2/3), else None
    softcap: Optional[float] = None  # cap * tanh(scores / cap) before the mask (Gemma 2), else None
    mask: Optional[str] = None  # the tensor added to the scores (the layer's mask), where the graph has one
    post_norm: Optional["RmsNorm"] = None  # the sandwich norm of the block's output before the residual add


@dataclass
class _Projection:
    matmul: NodeProto
    linear: BiasedLinear
    norm: Optional[RmsNorm]  # the per-head RMSNorm between the head split and RoPE, if any
    n_heads: int
    head_dim: int
    rope: Optional[Rope]  # None for the value projection
    end: str  # where the path was followed to: rotated query, or the cache Concat output


def match_attention(ix, normed, residual, after):
    """The attention block reading normed [b, s, dim] and adding into residual."""
    linears = linear_consumers(ix, normed)
    if len(linears) == 1:
        raise ConvertError(f"node '{linears[0].name}': one projection of width {linear_weight(ix, linears[0]).shape[1]} "
                           "where the attention needs three (a fused query/key/value projection such as Phi-3's "
                           "qkv_proj); kvx's llama mapper reads separate q, k, v projections")
    if len(linears) != 3:
        raise cannot_map(after, f"three MatMuls (q, k, v projections) reading '{normed}', "
                                f"found {len(linears)}")
    roles = {}
    for matmul in linears:
        role, projection = _classify_projection(ix, matmul)
        if role in roles:
            raise cannot_map(matmul, f"one {role} projection per layer, found a second")
        roles[role] = projection
    q, k, v = roles["query"], roles["key"], roles["value"]
    _check_head_shapes(q, k, v)
    if not np.array_equal(q.rope.inv_freq, k.rope.inv_freq):
        raise cannot_map(k.matmul, "the same RoPE frequencies for Q and K")

    if (q.norm is None) != (k.norm is None) or v.norm is not None:
        raise cannot_map(q.matmul, "a per-head RMSNorm on both the query and the key, or on neither")

    found = {}
    o_proj = match_attention_core(ix, q.end, k.end, v.end, q.head_dim, q.matmul, found)
    post_norm, output = residual_after(ix, residual, o_proj.output[0], o_proj)
    biases = {name: p.linear.bias for name, p in (("wq", q), ("wk", k), ("wv", v)) if p.linear.bias is not None}
    return Attention(
        wq=q.linear.weight, wk=k.linear.weight, wv=v.linear.weight,
        wo=linear_weight(ix, o_proj), n_heads=q.n_heads, n_kv_heads=k.n_heads, head_dim=q.head_dim,
        inv_freq=q.rope.inv_freq, output=output, biases=biases, q_norm=q.norm, k_norm=k.norm,
        scale=_with_rope_amplitude(found.get("scale"), q, k), softcap=found.get("softcap"), mask=found.get("mask"),
        post_norm=post_norm)


def _with_rope_amplitude(scale, q, k):
    """The q.k scale (None: 1/sqrt(head_dim)) with the RoPE's attention factor folded in: cos and sin scaled
    by a on both q and k scale every score by a^2 (blocks/rope.py). None where there is no factor."""
    amplitude = q.rope.amplitude * k.rope.amplitude
    if amplitude == 1.0:
        return scale
    return (scale if scale is not None else 1.0 / math.sqrt(q.head_dim)) * amplitude


def residual_after(ix, residual, branch, branch_node):
    """(post-norm or None, the residual stream after the block): the block's output added to residual, or
    first through an RMSNorm (Gemma 2/3's sandwich norms)."""
    if any(ix.other_input(add, branch) == residual for add in ix.consumers(branch, "Add")):
        return None, residual_add(ix, residual, branch, branch_node)
    if any(n.input[0] == branch and ix.scalar(n.input[1]) == 2.0 for n in ix.consumers(branch, "Pow")):
        norm = match_rms_norm(ix, branch, branch_node)
        return norm, residual_add(ix, residual, norm.output, ix.producer(norm.output))
    return None, residual_add(ix, residual, branch, branch_node)


def match_attention_core(ix, query, key, value, head_dim, blame, found=None):
    """What follows the projections: Softmax(query K^T / sqrt(head_dim) + mask) V, heads merged, into
    the output projection. query, key, value: [b, heads, s or t, head_dim] tensors, key and value the
    cached ones where the graph has a cache; blame: the node to name when there is no Q K^T. Returns the
    output projection's MatMul. found: a dict that receives "scale" (where it is not 1/sqrt(head_dim)),
    "softcap" and "mask" (the tensor added to the scores); without it only the plain scale is accepted."""
    probs = _unguarded(ix, _match_scores(ix, query, key, head_dim, blame, found))
    pv = _sole_matmul_reading(ix, probs, ix.producer(probs), "Softmax(scores) @ V")
    if ix.trace_back(pv.input[1], REPEAT_KV_OPS) != value:
        raise cannot_map(pv, f"probabilities times the cached values '{value}'")
    return _match_merge_heads(ix, pv)


def split_heads(ix, tensor, width, after, norm_out=None):
    """Follows tensor [b, s, width] -> Reshape [b, s, heads, head_dim] -> Transpose [b, heads, s,
    head_dim]; after: the node that wrote tensor. Returns (heads, head_dim, transposed tensor).
    norm_out: a list to receive the per-head RMSNorm between Reshape and Transpose (Qwen3's q/k norm), which
    is then accepted; without it such a norm is not followed."""
    reshape = ix.sole_consumer(tensor, "Reshape", after, "Reshape to [batch, seq, heads, head_dim]")
    dims = ix.fold_dims(reshape.input[1], reshape)
    if len(dims) != 4 or dims[3] is None or dims[3] <= 0 or dims[2] is None:
        raise cannot_map(reshape, f"a target shape [batch, seq, heads, head_dim] with constant heads and "
                                  f"head_dim, found {dims}")
    head_dim = dims[3]
    heads = width // head_dim if dims[2] == -1 else dims[2]
    if heads <= 0 or heads * head_dim != width:
        raise cannot_map(reshape, f"heads x head_dim = {width} (the projection's width), found {dims}")
    split, split_node = reshape.output[0], reshape
    if norm_out is not None and ix.consumers(split, "Pow"):
        norm = match_rms_norm(ix, split, reshape)
        if norm.weight.shape != (head_dim,):
            raise cannot_map(reshape, f"a per-head RMSNorm weight of head_dim {head_dim}, found {list(norm.weight.shape)}")
        norm_out.append(norm)
        split, split_node = norm.output, ix.producer(norm.output)
    transpose = ix.sole_consumer(split, "Transpose", split_node, "Transpose to [b, heads, s, hd]")
    if list(node_attr(transpose, "perm", [])) != [0, 2, 1, 3]:
        raise cannot_map(transpose, "perm [0, 2, 1, 3]")
    out = transpose.output[0]
    if norm_out is not None and not norm_out and any(
            n.input[0] == out and ix.scalar(n.input[1]) == 2.0 for n in ix.consumers(out, "Pow")):
        norm = match_rms_norm(ix, out, transpose)  # Gemma 3 normalises after the transpose
        if norm.weight.shape != (head_dim,):
            raise cannot_map(transpose, f"a per-head RMSNorm weight of head_dim {head_dim}, found {list(norm.weight.shape)}")
        norm_out.append(norm)
        out = norm.output
    return heads, head_dim, out


def cache_concat(ix, tensor):
    """The Concat(past input, tensor) along the sequence axis whose output is a graph output."""
    for concat in ix.consumers(tensor, "Concat"):
        past = concat.input[0]
        if list(concat.input) == [past, tensor] and past in ix.input_names \
                and concat.output[0] in ix.output_names and node_attr(concat, "axis") in (2, -2):
            return concat
    return None


def _classify_projection(ix, matmul):
    linear = biased_linear(ix, matmul)
    norms = []
    heads, head_dim, split = split_heads(ix, linear.output, linear.weight.shape[1], linear.node, norms)
    rope = match_rope(ix, split, head_dim)
    end = rope.output if rope else split
    cache = cache_concat(ix, end)
    if cache is not None:
        role, end = ("key" if rope else "value"), cache.output[0]
    elif rope is None:
        role = "value"  # a graph without a cache: the one projection that is not rotated
    elif _is_left_of_matmul(ix, end):
        role = "query"
    else:
        role = "key"  # rotated, then transposed into the right of Q K^T (a graph without a cache)
    return role, _Projection(matmul, linear, norms[0] if norms else None, heads, head_dim, rope, end)


def _is_left_of_matmul(ix, tensor):
    """Whether tensor, through constant scalings, is the left operand of a MatMul (the query in Q K^T)."""
    for _ in range(4):
        if any(m.input[0] == tensor for m in ix.consumers(tensor, "MatMul")):
            return True
        scalings = [n for n in ix.consumers(tensor) if _scale_of(ix, n, tensor) is not None]
        if len(scalings) != 1:
            return False
        tensor = scalings[0].output[0]
    return False


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


def _match_scores(ix, query, key_end, head_dim, blame, found=None):
    """Checks Q K^T, its scaling and the Softmax; returns the attention probabilities tensor.

    The scale may sit after the MatMul (HF eager) or be split over Q and K (torch's export of
    scaled_dot_product_attention); kvx applies 1/sqrt(head_dim) once, so only the product matters."""
    scale, tensor = 1.0, query
    while len(ix.consumers(tensor)) == 1 and _scale_of(ix, ix.consumers(tensor)[0], tensor) is not None:
        node = ix.consumers(tensor)[0]
        scale, tensor = scale * _scale_of(ix, node, tensor), node.output[0]
    scores = _sole_matmul_reading(ix, tensor, blame, "the query times K^T")

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
    if not transposed or ix.trace_back(key, REPEAT_KV_OPS) != key_end:
        raise cannot_map(scores, f"the query times the transposed cached keys '{key_end}'")

    tensor = scores.output[0]
    last_factor, softcap, mask = None, None, None
    while True:
        consumers = ix.consumers(tensor)
        node = consumers[0] if len(consumers) == 1 else None
        if node is None:
            raise cannot_map(ix.producer(tensor), "one consumer on the path from Q K^T to Softmax")
        if node.op_type == "Softmax":
            break
        factor = _scale_of(ix, node, tensor)
        if node.op_type == "Tanh" and softcap is None and found is not None:
            # cap * tanh(scores / cap): Gemma 2's attention logit soft-cap, after the scale
            outer = ix.consumers(node.output[0])
            cap = _scale_of(ix, outer[0], node.output[0]) if len(outer) == 1 else None
            if last_factor is None or cap is None or not np.isclose(cap * last_factor, 1.0, rtol=1e-6):
                raise cannot_map(node, "a soft-cap cap * Tanh(scores / cap) with one constant cap")
            softcap, scale, node = cap, scale / last_factor, outer[0]
        elif factor is not None:
            if softcap is not None:
                raise cannot_map(node, "no scaling after the soft-cap")
            scale *= factor
            last_factor = factor
        elif node.op_type == "Where" and _masked_branch(ix, node, tensor):
            pass  # where(mask, scores, -big): the causal mask as GPT-2 writes it; kvx builds its own
        elif node.op_type != "Add":  # the attention mask; kvx builds its own causal mask
            raise cannot_map(node, "scaling, the mask Add and Softmax after Q K^T")
        else:
            mask = ix.other_input(node, tensor)
        tensor = node.output[0]
    if node_attr(node, "axis", -1) not in (-1, 3):
        raise cannot_map(node, "Softmax over the key axis")
    expected = 1.0 / np.sqrt(head_dim)
    if found is not None:
        found.update({"softcap": softcap, "mask": mask})
        if not np.isclose(scale, expected, rtol=1e-5):
            found["scale"] = float(scale)
    elif not np.isclose(scale, expected, rtol=1e-5):
        raise ConvertError(f"cannot map node '{scores.name}' (op MatMul): expected attention scores "
                           f"scaled by 1/sqrt(head_dim) = {expected:.6g}, found {scale:.6g}")
    return node.output[0]


def _masked_branch(ix, where, tensor):
    """Whether Where(cond, tensor, c) or Where(cond, c, tensor) keeps tensor or a constant (a mask)."""
    if len(where.input) != 3 or where.input[0] == tensor:
        return False
    other = where.input[2] if where.input[1] == tensor else where.input[1]
    return ix.constant(other) is not None and ix.constant(other).size == 1


def _unguarded(ix, probs):
    """The probabilities after optimum's NaN guard Where(IsNaN(p), 0, p), or probs without one."""
    for where in ix.consumers(probs, "Where"):
        isnan = ix.producer_op(where.input[0], "IsNaN")
        if isnan is not None and isnan.input[0] == probs and where.input[2] == probs \
                and ix.scalar(where.input[1]) == 0.0:
            return where.output[0]
    return probs


def _match_merge_heads(ix, pv):
    """[b, heads, s, hd] -> Transpose -> Reshape [b, s, heads*hd] -> o_proj MatMul; returns o_proj."""
    transpose = ix.sole_consumer(pv.output[0], "Transpose", pv, "Transpose back to [b, s, heads, hd]")
    if list(node_attr(transpose, "perm", [])) != [0, 2, 1, 3]:
        raise cannot_map(transpose, "perm [0, 2, 1, 3]")
    reshape = ix.sole_consumer(transpose.output[0], "Reshape", transpose, "Reshape to [b, s, heads * hd]")
    return sole_linear_consumer(ix, reshape.output[0], reshape, "o_proj")
