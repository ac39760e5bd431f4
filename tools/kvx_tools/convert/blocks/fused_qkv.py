"""GPT-2's self-attention as torch exports HF's GPT2Attention:

  normed -> MatMul(c_attn [dim, 3 * width]) -> Add(bias) -> Split(last axis) -> q, k, v
  each split into heads; k and v through the cache Concat where the graph has a cache
  -> the core of patterns_attention (Q K^T / sqrt(head_dim) + mask, Softmax, @ V, heads merged)
  -> MatMul(c_proj) -> Add(bias) -> residual Add

The Split's outputs are taken as query, key and value in that order, the column order of c_attn; the
core then proves it, since it follows the query to the left of Q K^T, the key to its right and the value
into the probabilities' MatMul, and names the node where a graph does otherwise.
"""

import numpy as np

from ..errors import cannot_map
from ..families.gpt2_layers import Gpt2Attention, LinearWeights, split_fused_qkv
from ..graph.index import node_attr
from .attention import cache_concat, match_attention_core, split_heads
from .linear import biased_linear, residual_add, sole_biased_linear


def match_fused_qkv_attention(ix, normed, residual, after):
    """The attention block reading normed [b, s, dim] and adding into residual. Returns (Gpt2Attention,
    the residual stream after the block)."""
    qkv = sole_biased_linear(ix, normed, after, "c_attn, the fused query/key/value projection")
    split = ix.sole_consumer(qkv.output, "Split", qkv.node, "Split of the fused projection into q, k, v")
    widths = _split_widths(ix, split, qkv.weight.shape[1])
    ends, heads = [], []
    for role, tensor, width in zip(("query", "key", "value"), split.output, widths):
        n_heads, head_dim, per_head = split_heads(ix, tensor, width, split)
        cache = cache_concat(ix, per_head) if role != "query" else None
        ends.append(per_head if cache is None else cache.output[0])
        heads.append((n_heads, head_dim))
    (n_heads, head_dim), (n_kv_heads, k_head_dim), (n_v_heads, v_head_dim) = heads
    if not head_dim == k_head_dim == v_head_dim or n_kv_heads != n_v_heads or n_heads % n_kv_heads:
        raise cannot_map(split, f"one head_dim for q, k and v and KV heads dividing query heads "
                                f"(found heads x head_dim {heads})")
    o_proj = biased_linear(ix, match_attention_core(ix, *ends, head_dim, split))
    q, k, v = split_fused_qkv(qkv.weight, qkv.bias, widths)
    attention = Gpt2Attention(q=q, k=k, v=v, o=LinearWeights(o_proj.weight, o_proj.bias), n_heads=n_heads,
                              n_kv_heads=n_kv_heads, head_dim=head_dim)
    return attention, residual_add(ix, residual, o_proj.output, o_proj.node)


def _split_widths(ix, split, total):
    """The widths of the Split's three outputs along the last axis, from its split input (opset 13+),
    its split attribute (older opsets), or equal parts."""
    if len(split.output) != 3 or node_attr(split, "axis", 0) not in (-1, 2):
        raise cannot_map(split, "a Split into three (q, k, v) along the last axis")
    if len(split.input) > 1 and split.input[1]:
        sizes = ix.constant(split.input[1])
        if sizes is None:
            raise cannot_map(split, "constant split sizes")
        widths = [int(w) for w in np.asarray(sizes).reshape(-1)]
    else:
        widths = list(node_attr(split, "split", [total // 3] * 3))
    if len(widths) != 3 or sum(widths) != total or min(widths) <= 0:
        raise cannot_map(split, f"three parts of the projection's {total} columns, found {widths}")
    return widths
