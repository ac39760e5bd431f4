"""ONNX Runtime's com.microsoft GroupQueryAttention as ONNX Runtime GenAI's model builder writes it for
Llama and Mistral on CPU in fp32:

  normed -> MatMul(packed [dim, (H + 2 Hkv) * D]) -> GroupQueryAttention(query=packed, key='', value='',
            past_key, past_value, seqlens_k, total_sequence_length, cos_cache, sin_cache)
         -> MatMul(o_proj)
  (or three MatMuls into the query, key and value slots; a packed bias Add (Qwen2); a Split of the packed
  MatMul, which graph/normalise.py turns into three MatMuls, with a per-head RMSNorm on q and k (Qwen3))

The packed projection's columns are the query's H * D, then the key's Hkv * D, then the value's (the
operator schema's packed layout); H and Hkv are the num_heads and kv_num_heads attributes. RoPE is inside
the op (do_rotary=1) with precomputed cos/sin tables, fitted back to inverse frequencies (blocks/rope_tables.py);
kvx computes positions itself, so seqlens_k and total_sequence_length (the builder's attention-mask
arithmetic) are not read. local_window_size W >= 0 is a window of W keys (the query's own included), as
kvx's sliding_window counts it: tests/python/test_convert_exporter_fixtures.py checks that against ONNX
Runtime on a graph given a window. Another scale and softcap are config.json's attention_scale and
attn_logit_softcap (Gemma 2). What kvx lacks is refused:
interleaved rotary pairs, RoPE on part of the head, bidirectional attention, smooth softmax, quantized
caches, and the optional inputs after sin_cache (position ids, attention bias, head sinks, cache scales,
q/k norm weights, padded query lengths).
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...errors import ConvertError, cannot_map
from ...graph.index import node_attr
from ...blocks.attention import Attention
from ...blocks.linear import linear_consumers, linear_weight, sole_linear_consumer
from ...domains import MS_DOMAIN
from .llama_patterns import projection_end
from ...blocks.rope_tables import plain_inv_freq

GQA_OP = (MS_DOMAIN, "GroupQueryAttention")
(GQA_QUERY, GQA_KEY, GQA_VALUE, GQA_PAST_KEY, GQA_PAST_VALUE, GQA_SEQLENS_K, GQA_TOTAL_SEQUENCE_LENGTH,
 GQA_COS_CACHE, GQA_SIN_CACHE) = range(9)
# Optional inputs after sin_cache, by position, none of which kvx has a place for.
GQA_UNSUPPORTED_INPUTS = ("position_ids", "attention_bias", "head_sink", "k_scale", "v_scale", "q_norm_weight",
                          "k_norm_weight", "query_seqlens")
# Attributes whose non-default value changes the result in a way kvx does not compute: name -> default.
GQA_UNSUPPORTED_ATTRIBUTES = {"rotary_interleaved": 0, "causal": 1, "smooth_softmax": 0,
                              "qk_output": 0}


@dataclass
class GqaAttention:
    attention: Attention
    max_position: int  # rows of the RoPE tables: the longest context the graph can run
    window: Optional[int]  # local_window_size, or None for attention over the whole sequence
    node: object  # the GroupQueryAttention, to name in messages


def _input(node, k):
    return node.input[k] if len(node.input) > k else ""


def gqa_consumer(ix, tensor):
    """The GroupQueryAttention reading tensor (in any slot) through at most a bias Add, a Split or the
    Reshape/norm of a per-head q/k norm, or None."""
    frontier, seen = [tensor], set()
    for _ in range(5):
        following = []
        for t in frontier:
            for node in ix.consumers(t):
                if node.op_type == "GroupQueryAttention":
                    return node
                if node.output and node.output[0] not in seen:
                    seen.add(node.output[0])
                    following.extend(o for o in node.output if o)
        frontier = following
    return None


def _check_attributes(gqa, head_dim):
    for name in ("kv_cache_bit_width",):
        if node_attr(gqa, name, 0):
            raise cannot_map(gqa, f"an unquantized KV cache (found {name} {node_attr(gqa, name, 0)})")
    for name in ("k_quant_type", "v_quant_type"):
        value = node_attr(gqa, name, b"NONE")
        value = value.decode() if isinstance(value, bytes) else value
        if value != "NONE":
            raise cannot_map(gqa, f"an unquantized KV cache (found {name} {value})")
    for name, default in GQA_UNSUPPORTED_ATTRIBUTES.items():
        value = node_attr(gqa, name, default)
        if value != default:
            raise ConvertError(f"node '{gqa.name}' (GroupQueryAttention) has {name}={value}; kvx's attention "
                               f"has no such option (expected {default})")
    if not node_attr(gqa, "do_rotary", 0):
        raise cannot_map(gqa, "do_rotary=1 (RoPE inside the op; kvx's llama family rotates Q and K)")
    softcap = node_attr(gqa, "softcap", 0.0)
    if softcap < 0:
        raise cannot_map(gqa, f"a non-negative softcap, found {softcap}")
    scale = node_attr(gqa, "scale", 0.0) or 1.0 / np.sqrt(head_dim)  # 0 or absent: 1/sqrt(head_dim)
    # (the q.k scale where it is not 1/sqrt(head_dim): config.json's attention_scale; the soft-cap or None)
    return (None if np.isclose(scale, 1.0 / np.sqrt(head_dim), rtol=1e-5) else float(scale)), (float(softcap) or None)


def _check_inputs(ix, gqa):
    for k, name in enumerate(GQA_UNSUPPORTED_INPUTS, start=GQA_SIN_CACHE + 1):
        if _input(gqa, k):
            raise ConvertError(f"node '{gqa.name}' (GroupQueryAttention) has input {name}; kvx's attention has no "
                               "place for it")
    pasts = [_input(gqa, GQA_PAST_KEY), _input(gqa, GQA_PAST_VALUE)]
    presents = list(gqa.output[1:3])
    if not all(p in ix.input_names for p in pasts) or len(presents) != 2 \
            or not all(p in ix.output_names for p in presents):
        raise cannot_map(gqa, "past key/value graph inputs and present key/value graph outputs (the KV cache)")


def _rotary(ix, gqa, head_dim):
    cos, sin = ix.constant(_input(gqa, GQA_COS_CACHE)), ix.constant(_input(gqa, GQA_SIN_CACHE))
    if cos is None or sin is None or cos.ndim != 2 or cos.shape != sin.shape or cos.shape[0] < 1:
        raise cannot_map(gqa, "constant cos_cache and sin_cache of one shape [max_position, head_dim / 2]")
    if 2 * cos.shape[1] != head_dim:
        raise ConvertError(f"node '{gqa.name}' (GroupQueryAttention) rotates {2 * cos.shape[1]} of the {head_dim} "
                           "dims of each head; kvx's RoPE rotates the whole head")
    inv_freq = plain_inv_freq(gqa, cos, sin)
    return inv_freq, cos.shape[0]


def _projection_weights(ix, normed, gqa, n_heads, n_kv_heads):
    """(wq, wk, wv, head_dim, {"wq": bias, ...}, q_norm, k_norm) with weights [in, out], from the packed MatMul
    or the three MatMuls feeding gqa, each through an optional bias Add (Qwen2) and per-head RMSNorm (Qwen3)."""
    ends = {}
    for m in linear_consumers(ix, normed):
        end = projection_end(ix, m.output[0])
        ends[end.tensor] = (m, end)
    query, key, value = (_input(gqa, s) for s in (GQA_QUERY, GQA_KEY, GQA_VALUE))
    if query in ends and not key and not value:
        matmul, end = ends[query]
        packed = linear_weight(ix, matmul)
        width = packed.shape[1]
        if width % (n_heads + 2 * n_kv_heads) or end.norm is not None:
            raise cannot_map(gqa, f"a packed projection of (num_heads {n_heads} + 2 x kv_num_heads {n_kv_heads}) "
                                  f"x head_dim columns, found {width}")
        head_dim = width // (n_heads + 2 * n_kv_heads)
        edges = [0, n_heads * head_dim, (n_heads + n_kv_heads) * head_dim, width]
        biases = {}
        if end.bias is not None:
            if end.bias.shape != (width,):
                raise cannot_map(gqa, f"a packed bias of {width}, found {list(end.bias.shape)}")
            biases = dict(zip(("wq", "wk", "wv"), (end.bias[a:b] for a, b in zip(edges[:-1], edges[1:]))))
        wq, wk, wv = (packed[:, a:b] for a, b in zip(edges[:-1], edges[1:]))  # views, of a LazyTensor too
        return wq, wk, wv, head_dim, biases, None, None
    if query in ends and key in ends and value in ends:
        (mq, eq), (mk, ek), (mv, ev) = (ends[t] for t in (query, key, value))
        wq, wk, wv = (linear_weight(ix, m) for m in (mq, mk, mv))
        head_dim = wq.shape[1] // n_heads
        if wq.shape[1] != n_heads * head_dim or wk.shape[1] != n_kv_heads * head_dim or wv.shape != wk.shape:
            raise cannot_map(gqa, f"q, k, v widths num_heads {n_heads} and kv_num_heads {n_kv_heads} x one head_dim, "
                                  f"found {wq.shape[1]}, {wk.shape[1]}, {wv.shape[1]}")
        if (eq.norm is None) != (ek.norm is None) or ev.norm is not None \
                or any(e.norm is not None and e.norm.weight.shape != (head_dim,) for e in (eq, ek)):
            raise cannot_map(gqa, f"a per-head RMSNorm of width {head_dim} on both the query and the key, or neither")
        biases = {name: e.bias for name, e in (("wq", eq), ("wk", ek), ("wv", ev)) if e.bias is not None}
        return wq, wk, wv, head_dim, biases, eq.norm, ek.norm
    raise cannot_map(gqa, f"its query fed by a packed q/k/v MatMul reading '{normed}' (key and value empty), or "
                          "its query, key and value each by a MatMul reading it")


def match_gqa_attention(ix, normed, gqa):
    """The attention block of GroupQueryAttention gqa whose projections read normed [b, s, dim]."""
    if gqa.domain != MS_DOMAIN:
        raise cannot_map(gqa, "the com.microsoft GroupQueryAttention")
    n_heads, n_kv_heads = node_attr(gqa, "num_heads", 0), node_attr(gqa, "kv_num_heads", 0)
    if n_heads <= 0 or n_kv_heads <= 0 or n_heads % n_kv_heads:
        raise cannot_map(gqa, f"num_heads a positive multiple of kv_num_heads (found {n_heads}, {n_kv_heads})")
    wq, wk, wv, head_dim, biases, q_norm, k_norm = _projection_weights(ix, normed, gqa, n_heads, n_kv_heads)
    _check_inputs(ix, gqa)
    scale, softcap = _check_attributes(gqa, head_dim)
    inv_freq, max_position = _rotary(ix, gqa, head_dim)
    o_proj = sole_linear_consumer(ix, gqa.output[0], gqa, "o_proj")
    window = node_attr(gqa, "local_window_size", -1)
    if window == 0 or window < -1:
        raise cannot_map(gqa, f"local_window_size -1 (none) or a positive window, found {window}")
    attention = Attention(wq=wq, wk=wk, wv=wv,
                          wo=linear_weight(ix, o_proj), n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim,
                          inv_freq=inv_freq, output=o_proj.output[0], biases=biases, q_norm=q_norm, k_norm=k_norm,
                          scale=scale, softcap=softcap)
    return GqaAttention(attention, max_position, None if window == -1 else int(window), gqa)
