"""Maps a GPT-NeoX ONNX graph (torch's export of HF's GPTNeoXForCausalLM) onto kvx's gpt-neox tensors:

  Gather(embedding) -> [LayerNorm -> attention, LayerNorm -> GELU MLP, both reading the same stream,
  x + (mlp + attn)] x n_layers -> LayerNorm -> MatMul(embed_out) -> logits

The attention's query_key_value projection (MatMul + bias) is reshaped to [b, s, heads, 3 * head_dim] and
sliced into q, k, v per head (rows [head][q|k|v][head_dim]); q and k rotate their first rotary_dim elements
(RoPE on a Slice, then Concat with the pass-through rest). The MLP's GELU is exact: 0.5 * x * (1 + Erf(x /
sqrt(2))) written out, or ONNX Gelu. Hyperparameters come from the weights' shapes and the graph's constants.
"""

import numpy as np

from ..errors import ConvertError, cannot_map
from ..graph.index import node_attr
from .mapped_model import MappedModel, add_classifier, check_shapes, float_weight, the_one_eps
from ..blocks.attention import cache_concat, match_attention_core
from ..blocks.embedding import match_classifier, token_embedding_gather
from ..blocks.gelu import gelu_op_output
from ..blocks.layer_norm import LAYER_NORM_DEFAULT_EPS, LayerNorm, match_layer_norm
from ..blocks.linear import biased_linear, sole_biased_linear
from ..blocks.rope import LAST_AXIS_OF_4D, match_rope


def parallel_norms(ix, hidden):
    """The two LayerNormalizations reading hidden (attention's and MLP's), or None."""
    norms = [n for n in ix.consumers(hidden, "LayerNormalization") if n.input[0] == hidden]
    return norms if len(norms) == 2 else None


def _erf_gelu(ix, x, after):
    """The tensor holding exact GELU(x): ONNX Gelu (approximate 'none') or 0.5 * x * (1 + Erf(x / sqrt(2)))."""
    found = gelu_op_output(ix, x, "none")
    if found is not None:
        return found
    for div in ix.consumers(x, "Div"):
        c = ix.scalar(div.input[1]) if div.input[0] == x else None
        if c is None or not np.isclose(c, np.sqrt(2.0), rtol=1e-6):
            continue
        erf = ix.sole_consumer(div.output[0], "Erf", div, "Erf(x / sqrt(2))")
        add = ix.sole_consumer(erf.output[0], "Add", erf, "1 + Erf(...)")
        if ix.scalar(ix.other_input(add, erf.output[0])) != 1.0:
            raise cannot_map(add, "1 + Erf(x / sqrt(2))")
        for mul in ix.consumers(add.output[0], "Mul"):
            if ix.other_input(mul, add.output[0]) == x:
                half = ix.sole_consumer(mul.output[0], "Mul", mul, "0.5 * x * (1 + Erf(...))")
                if ix.scalar(ix.other_input(half, mul.output[0])) == 0.5:
                    return half.output[0]
        raise cannot_map(add, "x * (1 + Erf(x / sqrt(2))) * 0.5")
    raise cannot_map(after, f"exact GELU (ONNX Gelu or 0.5 * x * (1 + Erf(x / sqrt(2)))) reading '{x}'")


def _partial_rope(ix, x, head_dim):
    """(rotated tensor, inv_freq, rotary_dim) for x [b, h, s, head_dim] whose first rotary_dim elements go
    through RoPE and the rest pass: Concat(rope(x[..., :r]), x[..., r:]) on the last axis."""
    slices = [n for n in ix.consumers(x, "Slice") if n.input[0] == x]
    if len(slices) == 2 and ix.consumers(x, "Mul"):  # rotary over the whole head: x * cos + rotate_half(x) * sin
        rope = match_rope(ix, x, head_dim)
        if rope is not None:
            return rope.output, rope.inv_freq, head_dim
    bounds = {}
    for node in slices:
        start, end = (ix.constant(t) for t in node.input[1:3])
        axes = ix.constant(node.input[3]) if len(node.input) > 3 and node.input[3] else None
        if start is None or end is None or axes is None or int(axes.reshape(-1)[0]) not in LAST_AXIS_OF_4D:
            raise cannot_map(node, "a Slice of the head's last axis with constant bounds (partial rotary)")
        bounds[node.name] = (int(start.reshape(-1)[0]), int(end.reshape(-1)[0]), node)
    rot = [b for b in bounds.values() if b[0] == 0]
    rest = [b for b in bounds.values() if b[0] > 0 and b[1] >= head_dim]
    if len(slices) != 2 or len(rot) != 1 or len(rest) != 1 or rot[0][1] != rest[0][0]:
        raise cannot_map(slices[0] if slices else ix.producer(x), "x[..., :rotary_dim] and x[..., rotary_dim:]")
    rotary_dim = rot[0][1]
    rope = match_rope(ix, rot[0][2].output[0], rotary_dim)
    if rope is None:
        raise cannot_map(rot[0][2], "RoPE on the rotary part of the head")
    concat = ix.sole_consumer(rope.output, "Concat", ix.producer(rope.output), "Concat(rotated, pass-through)")
    if list(concat.input) != [rope.output, rest[0][2].output[0]] or node_attr(concat, "axis") not in LAST_AXIS_OF_4D:
        raise cannot_map(concat, "Concat(rotated, pass-through) on the last axis")
    return concat.output[0], rope.inv_freq, rotary_dim


def _attention(ix, normed, after):
    qkv = sole_biased_linear(ix, normed, after, "query_key_value")
    width = qkv.weight.shape[1]
    reshape = ix.sole_consumer(qkv.output, "Reshape", qkv.node, "Reshape to [b, s, heads, 3 * head_dim]")
    dims = ix.fold_dims(reshape.input[1], reshape)
    if len(dims) == 4 and dims[2] == -1 and dims[3]:
        dims[2] = width // dims[3]
    if len(dims) != 4 or dims[2] is None or dims[3] is None or dims[2] * dims[3] != width or dims[3] % 3:
        raise cannot_map(reshape, f"a target shape [b, s, heads, 3 * head_dim] of {width} columns, found {dims}")
    n_heads, head_dim = dims[2], dims[3] // 3
    transpose = ix.sole_consumer(reshape.output[0], "Transpose", reshape, "Transpose to [b, heads, s, 3 * hd]")
    if list(node_attr(transpose, "perm", [])) != [0, 2, 1, 3]:
        raise cannot_map(transpose, "perm [0, 2, 1, 3]")
    parts = {}
    for node in ix.consumers(transpose.output[0], "Slice"):
        start, end = (ix.constant(t) for t in node.input[1:3])
        if start is not None and end is not None:
            parts[(int(start.reshape(-1)[0]), int(end.reshape(-1)[0]))] = node.output[0]
    for node in ix.consumers(transpose.output[0], "Split"):  # dynamo: one Split into 3 equal parts
        sizes = ix.constant(node.input[1]) if len(node.input) > 1 and node.input[1] else None
        equal = [head_dim] * 3 if sizes is None and node_attr(node, "num_outputs", 3) == 3 else None
        if node_attr(node, "axis", 0) in LAST_AXIS_OF_4D and len(node.output) == 3 and \
                (equal is not None or list(sizes.reshape(-1)) == [head_dim] * 3):
            for j, out in enumerate(node.output):
                parts[(j * head_dim, (j + 1) * head_dim)] = out
    try:
        q, k, v = (parts[(j * head_dim, (j + 1) * head_dim)] for j in range(3))
    except KeyError:
        raise cannot_map(transpose, f"Slices [0:{head_dim}], [{head_dim}:{2 * head_dim}], [{2 * head_dim}:"
                                    f"{3 * head_dim}] of each head (q, k, v)") from None
    q_end, q_freq, rotary_dim = _partial_rope(ix, q, head_dim)
    k_rot, k_freq, k_rotary = _partial_rope(ix, k, head_dim)
    if k_rotary != rotary_dim or not np.array_equal(q_freq, k_freq):
        raise cannot_map(ix.producer(k_rot), "the same RoPE for Q and K")
    k_cache, v_cache = cache_concat(ix, k_rot), cache_concat(ix, v)
    k_end = k_cache.output[0] if k_cache is not None else k_rot
    v_end = v_cache.output[0] if v_cache is not None else v
    dense = biased_linear(ix, match_attention_core(ix, q_end, k_end, v_end, head_dim, transpose))
    # columns [head][q|k|v][head_dim] -> wq/wk/wv [dim, heads * head_dim]
    w = qkv.weight.reshape(qkv.weight.shape[0], n_heads, 3, head_dim)
    b = qkv.bias.reshape(n_heads, 3, head_dim) if qkv.bias is not None else None
    linears = {}
    for j, name in enumerate(("wq", "wk", "wv")):
        linears[name] = (w[:, :, j].reshape(w.shape[0], n_heads * head_dim),
                         None if b is None else b[:, j].reshape(n_heads * head_dim))
    linears["wo"] = (dense.weight, dense.bias)
    return linears, dense, n_heads, head_dim, rotary_dim, q_freq


def map_gpt_neox(ix):
    gather = token_embedding_gather(ix)
    embedding = float_weight(ix.constant(gather.input[0]), "the token embedding")
    hidden = gather.output[0]
    tensors, eps, layers = {"tok_embeddings": embedding}, set(), []
    while True:
        norms = parallel_norms(ix, hidden)
        if norms is None:
            break
        found = []
        for node in norms:
            out = node.output[0]
            consumers = ix.consumers(out, "MatMul")
            width = ix.constant(consumers[0].input[1]).shape[1] if len(consumers) == 1 and \
                ix.constant(consumers[0].input[1]) is not None else None
            found.append((node, width))
        i = len(layers)
        attn_node = next((n for n, w in found if w is not None and w % 3 == 0 and w == 3 * embedding.shape[1]), None)
        mlp_node = next((n for n, w in found if n is not attn_node), None)
        if attn_node is None or mlp_node is None:
            raise cannot_map(norms[0], "one LayerNorm feeding query_key_value and one feeding the MLP")
        attn_norm = _norm_of(ix, attn_node)
        ffn_norm = _norm_of(ix, mlp_node)
        linears, dense, n_heads, head_dim, rotary_dim, inv_freq = _attention(ix, attn_norm.output, attn_node)
        up = sole_biased_linear(ix, ffn_norm.output, mlp_node, "dense_h_to_4h")
        activated = _erf_gelu(ix, up.output, up.node)
        down = sole_biased_linear(ix, activated, ix.producer(activated), "dense_4h_to_h")
        hidden = _parallel_residual(ix, hidden, dense.output, down.output, down.node)
        linears.update({"w_up": (up.weight, up.bias), "w_down": (down.weight, down.bias)})
        p = f"layers.{i}."
        for name, norm in (("attn_norm", attn_norm), ("ffn_norm", ffn_norm)):
            tensors[p + name] = float_weight(norm.weight, f"layer {i} {name}")
            tensors[p + name + "_bias"] = float_weight(norm.bias, f"layer {i} {name} bias")
            eps.add(norm.eps)
        for name, (weight, bias) in linears.items():
            tensors[p + name] = float_weight(weight.T, f"layer {i} {name}")
            if bias is not None:
                tensors[p + name + "_bias"] = float_weight(bias, f"layer {i} {name} bias")
        layers.append((n_heads, head_dim, rotary_dim, inv_freq))
    if not layers:
        raise cannot_map(gather, "GPT-NeoX's two LayerNorms reading the embedding (parallel residual)")
    final = match_layer_norm(ix, hidden, ix.producer(hidden))
    classifier = match_classifier(ix, final.output)
    if classifier is None:
        raise cannot_map(ix.producer(final.output), "the classifier MatMul reading the final LayerNorm")
    eps.add(final.eps)
    tensors["final_norm"] = float_weight(final.weight, "the final norm")
    tensors["final_norm_bias"] = float_weight(final.bias, "the final norm bias")
    n_heads, head_dim, rotary_dim, inv_freq = layers[0]
    for i, (h, hd, r, f) in enumerate(layers):
        if (h, hd, r) != (n_heads, head_dim, rotary_dim) or not np.array_equal(f, inv_freq):
            raise ConvertError(f"cannot map graph: layer {i} differs from layer 0 in heads, head_dim or RoPE")
    tensors["rope_inv_freq"] = float_weight(inv_freq, "inv_freq")
    hyper = {
        "dim": embedding.shape[1],
        "hidden_dim": tensors["layers.0.w_up"].shape[0],
        "n_layers": len(layers),
        "n_heads": n_heads,
        "n_kv_heads": n_heads,
        "head_dim": head_dim,
        "vocab_size": embedding.shape[0],
        "norm_eps": the_one_eps(eps, "LayerNorm"),
        "rope_style": "half",
        "tied_embeddings": add_classifier(tensors, classifier, embedding),
        "residual": "parallel",
    }
    if rotary_dim != head_dim:
        hyper["rotary_dim"] = rotary_dim
    check_shapes("gpt-neox", hyper, tensors)
    return MappedModel(architecture="gpt-neox", hyperparameters=hyper, tensors=tensors)


def _norm_of(ix, node):
    """The LayerNorm of one LayerNormalization node (two read the same stream here)."""
    if node_attr(node, "axis", -1) not in (-1, 2):
        raise cannot_map(node, "a LayerNormalization over the last axis (axis -1)")
    weight = ix.constant(node.input[1])
    bias = ix.constant(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if weight is None or weight.ndim != 1 or bias is None or bias.shape != weight.shape:
        raise cannot_map(node, "a constant scale and bias [dim]")
    return LayerNorm(weight=weight, bias=bias, eps=float(node_attr(node, "epsilon", LAYER_NORM_DEFAULT_EPS)),
                     output=node.output[0])


def _parallel_residual(ix, residual, attn_out, mlp_out, blame):
    """residual + (mlp + attn) in any association of the two Adds; returns the sum."""
    for add in ix.consumers(mlp_out, "Add"):
        other = ix.other_input(add, mlp_out)
        if other == attn_out:
            for outer in ix.consumers(add.output[0], "Add"):
                if ix.other_input(outer, add.output[0]) == residual:
                    return outer.output[0]
        if other == residual:
            for outer in ix.consumers(add.output[0], "Add"):
                if ix.other_input(outer, add.output[0]) == attn_out:
                    return outer.output[0]
    for add in ix.consumers(attn_out, "Add"):
        if ix.other_input(add, attn_out) == residual:
            for outer in ix.consumers(add.output[0], "Add"):
                if ix.other_input(outer, add.output[0]) == mlp_out:
                    return outer.output[0]
    raise cannot_map(blame, "the parallel residual: stream + attention output + MLP output")
