"""The fused operators of ONNX Runtime GenAI's model builder for Llama graphs:

  SimplifiedLayerNormalization(x, weight)             RMSNorm (ONNX Runtime registers it in the default domain)
  SkipSimplifiedLayerNormalization(x, skip, weight)   residual add + RMSNorm: output 0 the normed sum, output 3
                                                      the sum itself (the residual stream)
  RotaryEmbedding(x, position_ids, cos_cache, sin_cache)   RoPE from precomputed tables [max_pos, head_dim/2]
  MultiHeadAttention(q, k, v, ..., attention_bias, past_key, past_value) -> (out, present_key, present_value)

all but the first in the com.microsoft domain. Q, K and V stay [batch, seq, heads * head_dim]; the KV cache
is [batch, kv_heads, seq, head_dim]: MultiHeadAttention's past/present inputs and outputs, or, in the builder's
fp16 CPU graphs with GQA, the cache outside the op (_match_repeat_kv): K (rotated) and V each go
Reshape [b, s, Hkv, D] -> Transpose -> Concat(past input, .) = present output -> Unsqueeze(axis 2) ->
Expand -> Reshape [b, H, t, D] (query head h reads KV head h // (H / Hkv), as kvx's GQA does) -> Transpose ->
Reshape [b, t, H * D] into MultiHeadAttention's key or value slot. As in the torch graphs, the three projections are told apart by where
they go (RotaryEmbedding then the query or key slot of MultiHeadAttention, or straight into its value slot),
never by name. kvx builds its own causal mask, so the attention_bias input (the builder's causal and padding
mask) is required but not read.
"""

from dataclasses import dataclass
import numpy as np

from ...errors import cannot_map
from ...graph.index import node_attr
from ...blocks.attention import Attention
from ...blocks.linear import bias_after, linear_consumers, linear_weight, sole_linear_consumer
from ...blocks.rms_norm import RmsNorm
from ...domains import MS_DOMAIN
from ...blocks.rope_tables import plain_inv_freq

# (domain, op type) of every operator this module maps; graph/op_support.py lets them through.
ORTGENAI_LLAMA_OPS = frozenset({
    ("", "SimplifiedLayerNormalization"),
    (MS_DOMAIN, "SkipSimplifiedLayerNormalization"),
    (MS_DOMAIN, "RotaryEmbedding"),
    (MS_DOMAIN, "MultiHeadAttention"),
})
# MultiHeadAttention's inputs and outputs by position (ONNX Runtime's contrib operator schema).
(MHA_QUERY, MHA_KEY, MHA_VALUE, MHA_BIAS, MHA_KEY_PADDING_MASK, MHA_ATTENTION_BIAS, MHA_PAST_KEY,
 MHA_PAST_VALUE) = range(8)


def _input(node, k):
    """node's input k, or '' when it has fewer inputs or leaves that one out."""
    return node.input[k] if len(node.input) > k else ""


def _norm_eps(node):
    eps = node_attr(node, "epsilon", 1e-5)
    if not eps >= 0:
        raise cannot_map(node, "a non-negative epsilon")
    return float(eps)


def _norm_weight(ix, node, k):
    weight = ix.constant(_input(node, k))
    if weight is None or weight.ndim != 1:
        raise cannot_map(node, "a constant RMSNorm weight [dim]")
    return weight


@dataclass
class ProjectionEnd:
    """What follows a q/k/v projection's MatMul in the builder's graphs before the attention op reads it."""
    tensor: str  # the tensor the attention (or RotaryEmbedding) reads
    bias: object  # [out] constant of a bias Add (Qwen2), or None
    norm: object  # RmsNorm per head (Qwen3's q/k norm: Reshape [0, -1, D] -> SimplifiedLayerNormalization ->
    #               Reshape back), or None


def projection_end(ix, tensor):
    """Follows a projection's output through an optional bias Add and an optional per-head RMSNorm."""
    norm = None
    bias, tensor = bias_after(ix, tensor)
    consumers = ix.consumers(tensor)
    if len(consumers) == 1 and consumers[0].op_type == "Reshape":
        after = ix.consumers(consumers[0].output[0])
        if len(after) == 1 and after[0].op_type in ("SimplifiedLayerNormalization", "RMSNormalization"):
            node = after[0]
            if node_attr(node, "axis", -1) != -1:
                raise cannot_map(node, "a per-head RMSNorm over the last axis")
            weight = _norm_weight(ix, node, 1)
            dims = ix.fold_dims(consumers[0].input[1], consumers[0])
            if not dims or dims[-1] != weight.shape[0]:
                raise cannot_map(node, f"a per-head RMSNorm of width head_dim over a [.., {weight.shape[0]}] split")
            back = ix.sole_consumer(node.output[0], "Reshape", node, "Reshape back to [batch, seq, heads * head_dim]")
            norm = RmsNorm(weight=weight, eps=_norm_eps(node), output=back.output[0])
            tensor = back.output[0]
    return ProjectionEnd(tensor, bias, norm)


def match_simplified_norm(ix, x, after):
    """The SimplifiedLayerNormalization (RMSNorm over the last axis) reading x."""
    node = ix.sole_consumer(x, "SimplifiedLayerNormalization", after,
                            f"one SimplifiedLayerNormalization (RMSNorm) reading '{x}'")
    if node.input[0] != x or node_attr(node, "axis", -1) not in (-1, 2):
        raise cannot_map(node, f"the normalization of '{x}' over the last axis")
    return RmsNorm(weight=_norm_weight(ix, node, 1), eps=_norm_eps(node), output=node.output[0])


def match_skip_norm(ix, residual, branch, after):
    """The SkipSimplifiedLayerNormalization adding branch to the residual stream and normalizing the sum.
    Returns (the RmsNorm, the sum as the new residual stream or None when the graph does not use it)."""
    nodes = [n for n in ix.consumers(branch, "SkipSimplifiedLayerNormalization")
             if {n.input[0], n.input[1]} == {residual, branch}]
    if len(nodes) != 1:
        raise cannot_map(after, f"its output '{branch}' added to the residual stream '{residual}' by one "
                                "SkipSimplifiedLayerNormalization")
    node = nodes[0]
    if _input(node, 3):
        raise cannot_map(node, "a SkipSimplifiedLayerNormalization without bias (kvx's RMSNorm has none)")
    total = node.output[3] if len(node.output) > 3 and node.output[3] else None
    return RmsNorm(weight=_norm_weight(ix, node, 2), eps=_norm_eps(node), output=node.output[0]), total


@dataclass
class _Rotary:
    node: object
    head_dim: int
    interleaved: bool
    inv_freq: np.ndarray  # [head_dim / 2] fp32
    max_position: int  # rows of the tables: the longest context the graph can run


def _match_rotary(ix, tensor, projection):
    """The RotaryEmbedding reading a projection's output tensor, or None when none does (the value)."""
    nodes = [n for n in ix.consumers(tensor, "RotaryEmbedding") if n.input[0] == tensor]
    if not nodes:
        return None
    node = nodes[0]
    if len(nodes) != 1 or node.domain != MS_DOMAIN:
        raise cannot_map(projection, "one com.microsoft RotaryEmbedding of the projection")
    if _input(node, 1) not in ix.input_names:
        raise cannot_map(node, "position ids read straight from a graph input (kvx computes positions)")
    cos, sin = ix.constant(_input(node, 2)), ix.constant(_input(node, 3))
    if cos is None or sin is None or cos.ndim != 2 or cos.shape != sin.shape or cos.shape[0] < 1:
        raise cannot_map(node, "constant cos_cache and sin_cache of one shape [max_position, head_dim / 2]")
    head_dim = 2 * cos.shape[1]
    rotary_dim = node_attr(node, "rotary_embedding_dim", 0)
    if rotary_dim not in (0, head_dim) or node_attr(node, "is_packed_batching", 0) \
            or node_attr(node, "scale", 1.0) != 1.0:
        raise cannot_map(node, f"RoPE over the whole head (rotary_embedding_dim 0 or {head_dim}), unscaled "
                               "positions and no packed batching")
    inv_freq = plain_inv_freq(node, cos, sin)
    return _Rotary(node, head_dim, bool(node_attr(node, "interleaved", 0)), inv_freq, cos.shape[0])


def _attention_node(ix, tensor, slot, after, what):
    """The MultiHeadAttention reading tensor in slot, directly or through the repeat_kv subgraph (then
    returned with the cache Concat: (node, Concat or None))."""
    nodes = [n for n in ix.consumers(tensor, "MultiHeadAttention") if _input(n, slot) == tensor]
    if not nodes:
        nodes = [n for n in _downstream(ix, tensor, "MultiHeadAttention")
                 if _match_repeat_kv(ix, _input(n, slot))[0] == tensor]
        if len(nodes) == 1 and nodes[0].domain == MS_DOMAIN:
            return nodes[0], _match_repeat_kv(ix, _input(nodes[0], slot))[1]
    if len(nodes) != 1 or nodes[0].domain != MS_DOMAIN:
        raise cannot_map(after, f"{what} going into one com.microsoft MultiHeadAttention")
    return nodes[0], None


REPEAT_KV_DEPTH = 12  # nodes from a projection to MultiHeadAttention through the cache and repeat_kv


def _downstream(ix, tensor, op_type):
    """The op_type nodes within REPEAT_KV_DEPTH consumers of tensor along first inputs."""
    found, frontier, seen = {}, [tensor], {tensor}
    for _ in range(REPEAT_KV_DEPTH):
        following = []
        for t in frontier:
            for node in ix.consumers(t):
                if node.op_type == op_type:
                    found[node.name or id(node)] = node
                elif node.output and node.output[0] not in seen:
                    seen.add(node.output[0])
                    following.append(node.output[0])
        frontier = following
    return list(found.values())


def _match_repeat_kv(ix, tensor):
    """(the [b, s, Hkv * D] tensor the cache is built from, the cache Concat, the Unsqueeze axes or None)
    for tensor = the builder's repeat_kv of a cache Concat(past input, Transpose(Reshape(x))) into a graph
    output, or (None, None, None). Only Reshape, Transpose, Expand and one Unsqueeze may lie between the
    Concat and tensor."""
    axes = None
    node = ix.producer(tensor)
    while node is not None and node.op_type in ("Reshape", "Transpose", "Expand", "Unsqueeze"):
        if node.op_type == "Unsqueeze":
            if axes is not None:
                return None, None, None
            axes = ix.constant(node.input[1]) if len(node.input) > 1 else node_attr(node, "axes")
            axes = [int(a) for a in np.asarray(axes).reshape(-1)] if axes is not None else []
        node = ix.producer(node.input[0])
    if node is None or node.op_type != "Concat" or len(node.input) != 2 or node.input[0] not in ix.input_names \
            or node.output[0] not in ix.output_names or node_attr(node, "axis") not in (2, -2):
        return None, None, None
    transpose = ix.producer_op(node.input[1], "Transpose")
    reshape = ix.producer_op(transpose.input[0], "Reshape") if transpose is not None else None
    if reshape is None or list(node_attr(transpose, "perm", [])) != [0, 2, 1, 3]:
        return None, None, None
    return reshape.input[0], node, axes


def _check_cache_io(ix, mha, n_kv_heads, head_dim):
    """past_key/past_value are graph inputs and present_key/present_value graph outputs, shaped
    [batch, kv_heads, seq, head_dim] wherever the graph declares those two dims."""
    pasts = [_input(mha, MHA_PAST_KEY), _input(mha, MHA_PAST_VALUE)]
    presents = list(mha.output[1:3])
    if not all(p in ix.input_names for p in pasts) or len(presents) != 2 \
            or not all(p in ix.output_names for p in presents):
        raise cannot_map(mha, "past key/value graph inputs and present key/value graph outputs (the KV cache)")
    declared = {v.name: v for v in list(ix.graph.input) + list(ix.graph.output)}
    for name in pasts + presents:
        dims = [d.dim_value if d.HasField("dim_value") else None for d in declared[name].type.tensor_type.shape.dim]
        if len(dims) != 4 or dims[1] not in (None, n_kv_heads) or dims[3] not in (None, head_dim):
            raise cannot_map(mha, f"a KV cache [batch, {n_kv_heads} kv heads, seq, {head_dim}], "
                                  f"found '{name}' declared {dims}")


def match_fused_attention(ix, normed, after):
    """The attention block reading normed [b, s, dim]: (Attention, the RoPE tables' rows). The
    Attention's output is the o_proj MatMul's (the residual add is the next SkipSimplifiedLayerNormalization's)."""
    linears = linear_consumers(ix, normed)
    if len(linears) != 3:
        raise cannot_map(after, f"three MatMuls (q, k, v projections) reading '{normed}', found {len(linears)}")
    ends = {id(m): projection_end(ix, m.output[0]) for m in linears}  # Qwen2's biases, Qwen3's q/k norms
    rotaries = {id(m): _match_rotary(ix, ends[id(m)].tensor, m) for m in linears}
    rotated = [m for m in linears if rotaries[id(m)] is not None]
    values = [m for m in linears if rotaries[id(m)] is None]
    if len(rotated) != 2 or len(values) != 1:
        raise cannot_map(linears[0], "RotaryEmbedding on exactly two of the q, k, v projections")
    v = values[0]
    mha, v_cache = _attention_node(ix, ends[id(v)].tensor, MHA_VALUE, v, "the value projection")
    key_input, k_cache = _input(mha, MHA_KEY), None
    if v_cache is not None:
        key_input, k_cache, k_axes = _match_repeat_kv(ix, key_input)
    q = next((m for m in rotated if _input(mha, MHA_QUERY) == rotaries[id(m)].node.output[0]), None)
    k = next((m for m in rotated if key_input == rotaries[id(m)].node.output[0]), None)
    if q is None or k is None:
        raise cannot_map(mha, "the rotated query and key projections as its query and key")
    q_rope, k_rope = rotaries[id(q)], rotaries[id(k)]
    if q_rope.head_dim != k_rope.head_dim or q_rope.interleaved != k_rope.interleaved \
            or not np.array_equal(q_rope.inv_freq, k_rope.inv_freq):
        raise cannot_map(k_rope.node, "the same RoPE tables and pairing for Q and K")

    wq, wk, wv = (linear_weight(ix, m) for m in (q, k, v))
    n_heads, head_dim = node_attr(mha, "num_heads", 0), q_rope.head_dim
    n_kv_heads = wk.shape[1] // head_dim
    if n_heads <= 0 or wq.shape[1] != n_heads * head_dim or n_kv_heads == 0 or wk.shape[1] % head_dim \
            or wk.shape[1] != wv.shape[1] or n_heads % n_kv_heads:
        raise cannot_map(mha, f"num_heads x head_dim {head_dim} = the query width {wq.shape[1]}, and K and V "
                              f"as wide as a divisor of the heads (found num_heads {n_heads}, K {wk.shape[1]}, "
                              f"V {wv.shape[1]})")
    _check_attention_inputs(ix, mha, head_dim)
    if v_cache is None:
        _check_cache_io(ix, mha, n_kv_heads, head_dim)
    else:
        _check_repeat_kv(ix, mha, (k_cache, v_cache), (k_axes, _match_repeat_kv(ix, _input(mha, MHA_VALUE))[2]),
                         n_heads, n_kv_heads, head_dim)
    o_proj = sole_linear_consumer(ix, mha.output[0], mha, "o_proj")
    if q_rope.interleaved:  # pairs (2j, 2j + 1): reorder Q and K so that kvx's rotate-half pairs the same
        wq, wk = _interleaved_to_rotate_half(wq, n_heads), _interleaved_to_rotate_half(wk, n_kv_heads)
    q_end, k_end, v_end = ends[id(q)], ends[id(k)], ends[id(v)]
    biases = {name: e.bias for name, e in (("wq", q_end), ("wk", k_end), ("wv", v_end)) if e.bias is not None}
    if q_rope.interleaved:
        biases = {name: _interleaved_to_rotate_half(b[None, :], n_heads if name == "wq" else n_kv_heads)[0]
                  if name != "wv" else b for name, b in biases.items()}
        for e in (q_end, k_end):  # a per-head norm's weight follows the head's columns
            if e.norm is not None:
                e.norm = RmsNorm(_interleaved_to_rotate_half(e.norm.weight[None, :], 1)[0], e.norm.eps, e.norm.output)
    attention = Attention(wq=wq, wk=wk, wv=wv, wo=linear_weight(ix, o_proj), n_heads=n_heads,
                          n_kv_heads=n_kv_heads, head_dim=head_dim, inv_freq=q_rope.inv_freq, output=o_proj.output[0],
                          biases=biases, q_norm=q_end.norm, k_norm=k_end.norm, scale=attention_scale(mha, head_dim))
    if (q_end.norm is None) != (k_end.norm is None) or v_end.norm is not None:
        raise cannot_map(q, "a per-head RMSNorm on both the query and the key, or on neither")
    return attention, min(q_rope.max_position, k_rope.max_position)


def _check_repeat_kv(ix, mha, caches, axes, n_heads, n_kv_heads, head_dim):
    """The cache Concats outside the op hold [batch, kv_heads, seq, head_dim] as declared, MultiHeadAttention
    itself has no past, and each query head reads KV head h // (H / Hkv): the KV heads were unsqueezed at axis
    2 (after the head axis) before being expanded, so each is repeated in place, not tiled."""
    if _input(mha, MHA_PAST_KEY) or _input(mha, MHA_PAST_VALUE):
        raise cannot_map(mha, "no past key/value of its own where the cache is concatenated outside it")
    declared = {v.name: v for v in list(ix.graph.input) + list(ix.graph.output)}
    for concat in caches:
        for name in (concat.input[0], concat.output[0]):
            dims = [d.dim_value if d.HasField("dim_value") else None
                    for d in declared[name].type.tensor_type.shape.dim]
            if len(dims) != 4 or dims[1] not in (None, n_kv_heads) or dims[3] not in (None, head_dim):
                raise cannot_map(concat, f"a KV cache [batch, {n_kv_heads} kv heads, seq, {head_dim}], "
                                         f"found '{name}' declared {dims}")
    for found in axes:
        if found != ([2] if n_heads != n_kv_heads else found) or (n_heads == n_kv_heads and found not in (None, [2])):
            raise cannot_map(mha, f"K/V heads repeated in place (Unsqueeze at axis 2 before Expand), found axes {found}")


def _check_attention_inputs(ix, mha, head_dim):
    if _input(mha, MHA_BIAS):
        raise cannot_map(mha, "no bias input (kvx's llama projections have none)")
    if not _input(mha, MHA_ATTENTION_BIAS) and not node_attr(mha, "unidirectional", 0):
        raise cannot_map(mha, "causal attention: an attention_bias mask or unidirectional=1")


def attention_scale(mha, head_dim):
    """MultiHeadAttention's scale where it is not 1/sqrt(head_dim) (Granite's attention_multiplier), else None."""
    scale = node_attr(mha, "scale", 0.0) or 1.0 / np.sqrt(head_dim)  # 0 (or none) means 1/sqrt(head_dim)
    return None if np.isclose(scale, 1.0 / np.sqrt(head_dim), rtol=1e-5) else float(scale)


def _interleaved_to_rotate_half(w, n_heads):
    """w [in, n_heads * head_dim] (ONNX MatMul layout) with each head's output columns reordered from
    neighbour pairs (2j, 2j + 1) to rotate-half pairs (j, j + head_dim/2): column 2j goes to j and 2j + 1
    to j + head_dim/2, as the llama2.c exporter does to its checkpoints' rows."""
    rows, cols = w.shape
    head_dim = cols // n_heads
    return w.reshape(rows, n_heads, head_dim // 2, 2).transpose(0, 1, 3, 2).reshape(rows, cols)

