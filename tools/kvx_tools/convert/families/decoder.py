"""Maps a decoder graph onto kvx's tensors by walking its residual stream, whatever the family:

  Gather(embedding, input_ids) [* scale] [+ Gather(position embedding)]
  -> each layer one of
       pre-norm    x + attn(norm(x)), then x + mlp(norm(x))          (Llama, Qwen, Gemma's sandwich adds a norm
                                                                       of each block's output, GPT-2, StarCoder 2)
       post-norm   x + norm(attn(x)), then x + norm(mlp(x))          (OLMo 2)
       parallel    x + attn(norm(x)) + mlp(norm'(x)), norm' = norm    (Phi, GPT-J, Falcon, Cohere) or another
                                                                       norm of x (GPT-NeoX)
     each block's output optionally times a constant before its add (Granite's residual multiplier)
  -> norm -> classifier [+ bias] [* scale] [soft-cap] -> logits

The blocks are read by blocks/norms.py, blocks/attention.py and blocks/mlp.py, whatever exporter wrote
them; this module only follows the stream and turns what it finds into config.json's fields (families.json's
kinds, the layer options of docs/model-format.md) and kvx's tensors. Every layer must agree with the first
in everything config.json holds once per model. Hyperparameters come from what the walk finds, never from
names or from assumptions about a family's defaults.
"""

import numpy as np

from ..errors import ConvertError, cannot_map, node_label
from ..blocks.embedding import classifier_reading, position_embedding_add, token_embedding_gather
from ..blocks.linear import linear_consumers
from ..blocks.mlp import match_mlp, mlp_projections
from ..blocks.norms import norm_reading, norms_reading
from ..blocks.attention import match_self_attention
from ..blocks.sliding_window import layer_mask_windows

from .mapped_model import MappedModel, add_classifier, check_shapes, float_weight, the_one_eps
from .traits import architecture_for

MAX_LAYERS = 1024


class Layer:
    """What the walk found in one layer."""

    def __init__(self):
        self.attn_norm = None  # Norm before the attention (None for post-norm placement)
        self.ffn_norm = None  # Norm before the MLP (the same Norm for a parallel block on one norm)
        self.attention = None  # blocks.attention.Attention
        self.mlp = None  # blocks.mlp.Mlp
        self.post_attn_norm = None  # Norm of the attention's output before its add (sandwich, post placement)
        self.post_ffn_norm = None
        self.residual_scale = None  # the constant each block's output is multiplied by before its add
        self.parallel = False


def map_decoder(ix):
    """The MappedModel of the graph indexed by ix; ConvertError naming the first node that does not fit."""
    gather = token_embedding_gather(ix)
    embedding = float_weight(ix.constant(gather.input[0]), "the token embedding")  # [vocab, dim]
    scale, hidden = embedding_scale(ix, gather)
    positions = position_embedding_add(ix, gather)
    if positions is not None:
        hidden = positions[0].output[0]
    layers, final, classifier = [], None, None
    while len(layers) < MAX_LAYERS:
        norms = norms_reading(ix, hidden)
        heads = [(n, classifier_reading(ix, n.output)) for n in norms]
        heads = [(n, c) for n, c in heads if c is not None]
        if heads:
            final, classifier = heads[0]
            break
        layer, hidden = _layer(ix, hidden, len(layers), norms)
        layers.append(layer)
    if classifier is None:
        raise cannot_map(ix.producer(hidden) or gather, f"a final norm and the classifier after {len(layers)} layers")
    return _assemble(ix, embedding, scale, positions, layers, final, classifier)


def embedding_scale(ix, gather):
    """(scale, tensor): the constant the token embedding is multiplied by before the first layer (Gemma's
    sqrt(hidden), rounded to the activations' dtype by HF; Granite's embedding_multiplier), or (None, the
    gather's output)."""
    hidden = gather.output[0]
    muls = [m for m in ix.consumers(hidden, "Mul") if ix.scalar(ix.other_input(m, hidden)) is not None]
    if len(muls) == 1 and all(n is muls[0] or n.op_type == "Shape" for n in ix.consumers(hidden)):
        return float(np.float32(ix.scalar(ix.other_input(muls[0], hidden)))), muls[0].output[0]
    return None, hidden


def _layer(ix, hidden, index, norms):
    """(Layer, the stream after it) for the layer reading hidden."""
    layer = Layer()
    blame = ix.producer(hidden) or ix.consumers(hidden)[0]
    if not norms and not linear_consumers(ix, hidden):
        readers = ", ".join(f"'{node_label(n)}' ({n.op_type})" for n in ix.consumers(hidden)) or "nothing"
        raise cannot_map(blame, f"a norm, or the projections of a layer, reading the residual stream '{hidden}' (or a "
                                f"position embedding added to the token embedding); it feeds {readers}")
    if len(norms) > 2:
        raise cannot_map(blame, f"at most two norms reading the residual stream '{hidden}', found {len(norms)}")
    attention_input, other_norm = _attention_input(ix, hidden, norms, blame)
    layer.attn_norm = next((n for n in norms if n.output == attention_input), None)
    layer.attention = match_self_attention(ix, attention_input, blame)
    attn_end, layer.post_attn_norm, attn_scale = _block_end(ix, layer.attention.output)
    shared = mlp_projections(ix, attention_input, exclude=layer.attention.projections) \
        if layer.attn_norm is not None else []
    if shared or other_norm is not None:  # parallel: both blocks read the stream
        layer.parallel = True
        layer.ffn_norm = layer.attn_norm if shared else other_norm
        projections = shared or mlp_projections(ix, other_norm.output)
        layer.mlp = match_mlp(ix, layer.ffn_norm.output, projections, blame)
        mlp_end, layer.post_ffn_norm, mlp_scale = _block_end(ix, layer.mlp.output)
        if attn_scale != mlp_scale:
            raise cannot_map(blame, f"layer {index}: both blocks' outputs scaled alike before the residual add")
        layer.residual_scale = attn_scale
        return layer, _parallel_sum(ix, hidden, attn_end, mlp_end, ix.producer(mlp_end))
    middle = _residual_add(ix, hidden, attn_end, ix.producer(attn_end))
    mlp_norms = norms_reading(ix, middle)
    if len(mlp_norms) > 1:
        raise cannot_map(ix.producer(middle), f"one norm before the MLP, found {len(mlp_norms)}")
    layer.ffn_norm = mlp_norms[0] if mlp_norms else None
    if (layer.ffn_norm is None) != (layer.attn_norm is None):
        raise cannot_map(ix.producer(middle), f"layer {index}: a norm before both blocks or before neither")
    mlp_input = layer.ffn_norm.output if layer.ffn_norm is not None else middle
    layer.mlp = match_mlp(ix, mlp_input, mlp_projections(ix, mlp_input), ix.producer(middle))
    mlp_end, layer.post_ffn_norm, mlp_scale = _block_end(ix, layer.mlp.output)
    if attn_scale != mlp_scale:
        raise cannot_map(ix.producer(mlp_end), f"layer {index}: both blocks' outputs scaled alike before the "
                                               "residual add")
    layer.residual_scale = attn_scale
    return layer, _residual_add(ix, middle, mlp_end, ix.producer(mlp_end))


def _attention_input(ix, hidden, norms, blame):
    """(the tensor the attention's projections read, the other norm of the stream or None): a norm's output, or
    the stream itself where no norm reads it (post-norm placement)."""
    if not norms:
        return hidden, None
    if len(norms) == 1:
        return norms[0].output, None
    with_attention = []
    for norm in norms:
        try:
            match_self_attention(ix, norm.output, blame)
            with_attention.append(norm)
        except ConvertError:
            pass
    if len(with_attention) != 1:
        raise cannot_map(blame, "one of the two norms of the stream feeding the attention, the other the MLP")
    other = next(n for n in norms if n is not with_attention[0])
    return with_attention[0].output, other


def _block_end(ix, output):
    """(the tensor added to the stream, the norm of the block's output or None, the constant it is then
    multiplied by or None), following a block's output to its residual add."""
    output = _unflattened(ix, output)
    post = norm_reading(ix, output)
    if post is not None:
        output = post.output
    consumers = ix.consumers(output)
    if len(consumers) == 1 and consumers[0].op_type in ("Mul", "Div"):
        node = consumers[0]
        factor = ix.scalar(ix.other_input(node, output))
        if factor is not None and factor != 0 and (node.op_type == "Mul" or node.input[0] == output):
            return node.output[0], post, float(np.float32(factor if node.op_type == "Mul" else 1.0 / factor))
    return output, post, None


def _unflattened(ix, tensor):
    """tensor, or what a lone Reshape makes of it: a Linear computed on rows [batch * seq, N] (dynamo's addmm of
    GPT-2's Conv1D) is put back to [batch, seq, N] before its add."""
    consumers = ix.consumers(tensor)
    if len(consumers) == 1 and consumers[0].op_type == "Reshape" and consumers[0].input[0] == tensor:
        return consumers[0].output[0]
    return tensor


def _residual_add(ix, residual, branch, blame):
    for add in ix.consumers(branch, "Add"):
        if ix.other_input(add, branch) == residual:
            return add.output[0]
    raise cannot_map(blame, f"its output added to the residual stream '{residual}'")


def _parallel_sum(ix, residual, attn, mlp, blame):
    """residual + attn + mlp in any association of the two Adds; returns the sum."""
    for first, second in ((attn, mlp), (mlp, attn)):
        for add in ix.consumers(first, "Add"):
            other = ix.other_input(add, first)
            last = residual if other == second else second if other == residual else None
            if last is None:
                continue
            for outer in ix.consumers(add.output[0], "Add"):
                if ix.other_input(outer, add.output[0]) == last:
                    return outer.output[0]
    raise cannot_map(blame, "the parallel residual: stream + attention output + MLP output")


# -- the model -----------------------------------------------------------------------------------------

def _assemble(ix, embedding, embedding_scale, positions, layers, final, classifier):
    if not layers:
        raise ConvertError("cannot map graph: no decoder layer between the embedding and the classifier")
    first = layers[0]
    a = first.attention
    norms = [final] + [n for layer in layers for n in (layer.attn_norm, layer.ffn_norm, layer.post_attn_norm,
                                                       layer.post_ffn_norm) if n is not None]
    norm_kinds = {n.kind for n in norms}
    if len(norm_kinds) != 1:
        raise ConvertError(f"cannot map graph: the layers mix norm kinds {sorted(norm_kinds)}; kvx has one per model")
    if positions is not None and a.inv_freq is not None:
        raise ConvertError("cannot map graph: both learned position embeddings and RoPE; kvx computes one or the other")
    if positions is None and a.inv_freq is None:
        raise cannot_map(a.projections[0], "RoPE on the query and key, or a learned position embedding (kvx has no "
                                           "position-free attention)")
    kinds = {"norm": norm_kinds.pop(), "positions": "learned" if positions is not None else "rotary",
             "mlp": first.mlp.kind}
    architecture, overrides = architecture_for(kinds)
    _check_layers_agree(layers)
    tensors = {"tok_embeddings": embedding}
    eps = {n.eps for n in norms}
    for i, layer in enumerate(layers):
        _layer_tensors(tensors, i, layer, eps)
    _norm_tensors(tensors, "final_norm", final)
    windows = layer_mask_windows(ix, [layer.attention.mask for layer in layers])
    local = [i for i, w in enumerate(windows) if w is not None] if windows else []
    rope_local = _rope_tables(tensors, layers, local) if a.inv_freq is not None else []
    if positions is not None:
        tensors["pos_embeddings"] = float_weight(positions[1], "the position embedding")
    tied = add_classifier(tensors, classifier.weight, embedding)
    if classifier.bias is not None:
        tensors["classifier_bias"] = float_weight(classifier.bias, "the classifier bias")
    hyper = {
        "dim": embedding.shape[1],
        "hidden_dim": first.mlp.w_up.shape[1],
        "n_layers": len(layers),
        "n_heads": a.n_heads,
        "n_kv_heads": a.n_kv_heads,
        "head_dim": a.head_dim,
        "vocab_size": embedding.shape[0],
        "norm_eps": the_one_eps(eps, {"rms": "RMSNorm", "layer": "LayerNorm"}[kinds["norm"]]),
        "rope_style": "half" if a.inv_freq is not None else None,
        "tied_embeddings": tied,
        **overrides,
    }
    options = {
        "qk_norm": {"head": True, "projection": "projection"}.get(a.qk_norm_scope),
        "norm_placement": _placement(first),
        "residual": "parallel" if first.parallel else None,
        "rotary_dim": a.rotary_dim,
        "rope_local_layers": rope_local or None,
        "embedding_scale": embedding_scale if embedding_scale not in (None, 1.0) else None,
        "attention_scale": a.scale,
        "attn_logit_softcap": a.softcap,
        "final_logit_softcap": classifier.softcap,
        "clip_qkv": a.clip,
        "residual_scale": first.residual_scale,
        "logit_scale": _float32(classifier.scale),
    }
    hyper.update({key: value for key, value in options.items() if value is not None})
    shape_config = {**hyper, "max_seq_len": positions[1].shape[0]} if positions is not None else hyper
    check_shapes(architecture, shape_config, tensors)
    model = MappedModel(architecture=architecture, hyperparameters=hyper, tensors=tensors)
    model.graph_windows = windows
    return model


def _float32(value):
    return None if value is None else float(np.float32(value))


def _placement(layer):
    if layer.attn_norm is None:
        return "post"
    return "sandwich" if layer.post_attn_norm is not None else None


def _check_layers_agree(layers):
    """Everything config.json holds once per model must be the same in every layer."""
    def traits(layer):
        a = layer.attention
        return {"heads, KV heads and head_dim": (a.n_heads, a.n_kv_heads, a.head_dim),
                "parallel residual": layer.parallel, "norm placement": _placement(layer),
                "post-norms": (layer.post_attn_norm is None, layer.post_ffn_norm is None),
                "shared norm": layer.ffn_norm is layer.attn_norm,
                "q/k norm": a.qk_norm_scope, "attention scale": a.scale, "attention soft-cap": a.softcap,
                "rotary dims": a.rotary_dim, "q/k/v clip": a.clip, "residual scale": layer.residual_scale,
                "MLP": layer.mlp.kind, "RoPE": a.inv_freq is not None}
    reference = traits(layers[0])
    for i, layer in enumerate(layers[1:], start=1):
        for what, value in traits(layer).items():
            if value != reference[what]:
                raise ConvertError(f"cannot map graph: layer {i}'s {what} ({value}) differs from layer 0's "
                                   f"({reference[what]}); kvx has one per model")


def _norm_tensors(tensors, name, norm):
    """name (and name_bias) from norm: a missing weight is ones, a missing bias is left out (zeros)."""
    width = _norm_width(norm, tensors)
    weight = norm.weight if norm.weight is not None else np.ones(width, np.float32)
    tensors[name] = float_weight(weight, name)
    if norm.bias is not None:
        tensors[name + "_bias"] = float_weight(norm.bias, name + " bias")


def _norm_width(norm, tensors):
    if norm.weight is not None:
        return norm.weight.shape[0]
    if norm.bias is not None:
        return norm.bias.shape[0]
    return tensors["tok_embeddings"].shape[1]


def _layer_tensors(tensors, i, layer, eps):
    p = f"layers.{i}."
    for name, norm in (("attn_norm", layer.attn_norm), ("ffn_norm", layer.ffn_norm),
                       ("post_attn_norm", layer.post_attn_norm), ("post_ffn_norm", layer.post_ffn_norm)):
        if norm is not None:
            _norm_tensors(tensors, p + name, norm)
    a, mlp = layer.attention, layer.mlp
    if a.q_norm is not None:
        eps.update((a.q_norm.eps, a.k_norm.eps))
        tensors[p + "q_norm"] = float_weight(a.q_norm.weight, f"layer {i} query norm")
        tensors[p + "k_norm"] = float_weight(a.k_norm.weight, f"layer {i} key norm")
    onnx_in_out = {"wq": a.wq, "wk": a.wk, "wv": a.wv, "wo": a.wo, "w_up": mlp.w_up, "w_down": mlp.w_down}
    if mlp.w_gate is not None:
        onnx_in_out["w_gate"] = mlp.w_gate
    for name, w in onnx_in_out.items():  # kvx's Linear layout is [out, in], ONNX's MatMul operand [in, out]
        tensors[p + name] = float_weight(w.T, f"layer {i} {name}")
    for name, bias in {**a.biases, **(mlp.biases or {})}.items():
        tensors[f"{p}{name}_bias"] = float_weight(bias, f"layer {i} {name} bias")


def _rope_tables(tensors, layers, local):
    """rope_inv_freq (and rope_inv_freq_local for windowed layers rotating at frequencies of their own, Gemma
    3); returns the rope_local_layers list ([] where every layer rotates alike)."""
    frequencies = [layer.attention.inv_freq for layer in layers]
    global_layers = [i for i in range(len(layers)) if i not in local]
    rope_local = []
    if local and global_layers and not np.array_equal(frequencies[local[0]], frequencies[global_layers[0]]):
        rope_local = local
    for i, freq in enumerate(frequencies):
        expected = frequencies[local[0]] if i in rope_local else frequencies[global_layers[0] if global_layers else 0]
        if not np.array_equal(freq, expected):
            raise ConvertError(f"cannot map graph: layer {i}'s RoPE frequencies differ from the other "
                               f"{'sliding ' if i in rope_local else ''}layers'; kvx has one RoPE for the sliding "
                               "layers and one for the others")
    tensors["rope_inv_freq"] = float_weight(frequencies[global_layers[0] if global_layers else 0], "inv_freq")
    if rope_local:
        tensors["rope_inv_freq_local"] = float_weight(frequencies[local[0]], "the sliding layers' inv_freq")
    return rope_local
