"""GPT-2 in ONNX Runtime's fused operators (com.microsoft), as ONNX Runtime's transformer optimizer and
GenAI write it:

  EmbedLayerNormalization(input_ids, wte, wpe, ln_1 of layer 0, position_ids)
      outputs: ln_1(embeddings), mask index, embeddings (the residual stream)
  per layer:
    Attention(normed, c_attn [dim, 3 * width], bias, mask, past_i) -> MatMul(c_proj)
    SkipLayerNormalization(that, residual, ln_2, c_proj bias) -> ln_2(sum), ..., sum (the residual stream)
    MatMul(c_fc) -> FastGelu(., c_fc bias) -> MatMul(c_proj)
    SkipLayerNormalization(that, residual, next ln_1 or ln_f, c_proj bias) -> next normed, ..., residual
  MatMul(classifier) -> logits

Each LayerNorm sits in the node that also does the residual Add before it, so the walk carries the
normed activations and the residual stream side by side. The KV cache inputs (past_i [2, batch, heads,
past, head_dim]) and the attention mask are ONNX Runtime's business; kvx keeps its own cache and builds its
own causal mask, so the walk only checks that the attention is causal.
"""

import numpy as np

from ...errors import cannot_map
from .gpt2_model import Gpt2Attention, Gpt2Graph, Gpt2Layer, LinearWeights, assemble_gpt2, split_fused_qkv
from ...graph.index import node_attr
from ...blocks.embedding import match_classifier
from ...blocks.layer_norm import LayerNorm
from ...blocks.linear import biased_linear, sole_linear_consumer
from ...domains import MS_DOMAIN

# The fused operators this walk maps (op_support lets them through).
ORTGENAI_GPT2_OPS = frozenset({"EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "FastGelu"})
FUSED_NORM_DEFAULT_EPS = 1e-12  # ONNX Runtime's default epsilon of both fused LayerNorms


def _is_fused(node, op_type):
    return node.op_type == op_type and node.domain == MS_DOMAIN


def _optional_input(node, k):
    return node.input[k] if len(node.input) > k and node.input[k] else None


def _optional_output(node, k):
    return node.output[k] if len(node.output) > k and node.output[k] else None


def fused_embed_layer_norm(ix):
    """The EmbedLayerNormalization reading input_ids (through a Cast to int32), or None."""
    for node in ix.graph.node:
        if _is_fused(node, "EmbedLayerNormalization") and ix.trace_back(node.input[0]) == "input_ids":
            return node
    return None


def _constant(ix, node, k, ndim, what):
    value = ix.constant(node.input[k]) if _optional_input(node, k) else None
    if value is None or value.ndim != ndim:
        raise cannot_map(node, f"a constant {ndim}-D {what} as input {k}")
    return value


def _fused_norm(ix, node, gamma_at, beta_at, output):
    """The LayerNorm of a fused node: scale and (optional) bias inputs, epsilon attribute."""
    weight = _constant(ix, node, gamma_at, 1, "LayerNorm scale")
    bias = _constant(ix, node, beta_at, 1, "LayerNorm bias") if _optional_input(node, beta_at) \
        else np.zeros_like(weight)
    if bias.shape != weight.shape:
        raise cannot_map(node, "a LayerNorm bias of the scale's shape")
    return LayerNorm(weight=weight, bias=bias, eps=float(node_attr(node, "epsilon", FUSED_NORM_DEFAULT_EPS)),
                     output=output)


def _embeddings(ix, eln):
    """(wte, wpe, ln_1 of layer 0, the residual stream) from the EmbedLayerNormalization. Its inputs:
    input_ids, segment_ids, word_embedding, position_embedding, segment_embedding, gamma, beta, mask,
    position_ids; outputs: normed, mask_index, embedding_sum."""
    if _optional_input(eln, 1) or _optional_input(eln, 4):
        raise cannot_map(eln, "no segment embedding (a BERT feature GPT-2 does not have)")
    positions = _optional_input(eln, 8)
    if positions is None or ix.trace_back(positions) != "position_ids":
        raise cannot_map(eln, "positions from the position_ids input (without them the operator counts "
                              "from 0 in every run, which no KV cache can follow)")
    residual = _optional_output(eln, 2)
    if residual is None:
        raise cannot_map(eln, "the embedding sum as output 2: the residual stream")
    wte = _constant(ix, eln, 2, 2, "word embedding")
    wpe = _constant(ix, eln, 3, 2, "position embedding")
    return wte, wpe, _fused_norm(ix, eln, 5, 6, eln.output[0]), residual


def _fused_attention(ix, normed, after):
    """The causal Attention reading normed; returns ([q, k, v] LinearWeights, n_heads, head_dim, the
    node). Inputs: input, weights, bias, mask_index, past, attention_bias, ..."""
    nodes = [n for n in ix.consumers(normed) if _is_fused(n, "Attention") and n.input[0] == normed]
    if len(nodes) != 1:
        raise cannot_map(after, f"one com.microsoft Attention reading '{normed}'")
    node = nodes[0]
    weight = _constant(ix, node, 1, 2, "fused QKV weight [dim, 3 * width]")
    bias = _constant(ix, node, 2, 1, "fused QKV bias") if _optional_input(node, 2) else None
    n_heads = node_attr(node, "num_heads")
    widths = list(node_attr(node, "qkv_hidden_sizes", [weight.shape[1] // 3] * 3))
    if not n_heads or len(set(widths)) != 1 or sum(widths) != weight.shape[1] or widths[0] % n_heads:
        raise cannot_map(node, f"num_heads dividing three equal parts of the weight's {weight.shape[1]} "
                               f"columns (num_heads {n_heads}, qkv_hidden_sizes {widths})")
    if bias is not None and bias.shape != (weight.shape[1],):
        raise cannot_map(node, f"a QKV bias of {weight.shape[1]} values")
    head_dim = widths[0] // n_heads
    if node_attr(node, "unidirectional", 0) != 1:
        raise cannot_map(node, "causal attention (unidirectional = 1)")
    if node_attr(node, "do_rotary", 0) != 0:
        raise cannot_map(node, "no rotary embedding (do_rotary = 0): GPT-2 has learned positions")
    scale = node_attr(node, "scale", 0.0)
    if scale and not np.isclose(scale, 1 / np.sqrt(head_dim), rtol=1e-5):
        raise cannot_map(node, f"scores scaled by 1/sqrt(head_dim) = {1 / np.sqrt(head_dim):.6g}, found {scale:.6g}")
    if _optional_input(node, 5):
        raise cannot_map(node, "no additive attention bias (input 5): kvx applies only the causal mask")
    return split_fused_qkv(weight, bias, widths), n_heads, head_dim, node


def _skip_norm(ix, branch, residual, after):
    """The SkipLayerNormalization adding branch (a MatMul output) and residual; returns (its bias input
    (the branch's Linear bias) or None, its LayerNorm, the residual stream after it or None). Inputs:
    input, skip, gamma, beta, bias; outputs: normed, mean, inv_std_var, input + skip + bias."""
    for node in ix.consumers(branch):
        if _is_fused(node, "SkipLayerNormalization") and {node.input[0], node.input[1]} == {branch, residual}:
            bias = _constant(ix, node, 4, 1, "bias") if _optional_input(node, 4) else None
            return bias, _fused_norm(ix, node, 2, 3, node.output[0]), _optional_output(node, 3)
    raise cannot_map(after, f"a com.microsoft SkipLayerNormalization adding its output to the residual "
                            f"stream '{residual}'")


def _fast_gelu(ix, up):
    """FastGelu (GELU in its tanh form) after the c_fc MatMul; returns (c_fc's bias or None, its output).
    The bias is FastGelu's second input, or an Add before it."""
    linear = biased_linear(ix, up)
    gelus = [n for n in ix.consumers(linear.output) if _is_fused(n, "FastGelu") and n.input[0] == linear.output]
    if len(gelus) != 1:
        raise cannot_map(linear.node, "a com.microsoft FastGelu after c_fc")
    gelu_bias = _constant(ix, gelus[0], 1, 1, "bias") if _optional_input(gelus[0], 1) else None
    if linear.bias is not None and gelu_bias is not None:
        raise cannot_map(gelus[0], "one bias for c_fc, in an Add or in FastGelu, not both")
    return (linear.bias if gelu_bias is None else gelu_bias), gelus[0].output[0]


def map_ortgenai_gpt2(ix):
    eln = fused_embed_layer_norm(ix)
    wte, wpe, norm, residual = _embeddings(ix, eln)
    layers, after = [], eln
    while True:
        classifier = match_classifier(ix, norm.output)
        if classifier is not None:
            break
        if residual is None:
            raise cannot_map(after, "the residual stream (SkipLayerNormalization output 3) for the next layer")
        (q, k, v), n_heads, head_dim, attention_node = _fused_attention(ix, norm.output, after)
        o_proj = sole_linear_consumer(ix, attention_node.output[0], attention_node, "c_proj")
        o_bias, ffn_norm, residual = _skip_norm(ix, o_proj.output[0], residual, o_proj)
        attention = Gpt2Attention(q=q, k=k, v=v, o=LinearWeights(ix.constant(o_proj.input[1]), o_bias),
                                  n_heads=n_heads, n_kv_heads=n_heads, head_dim=head_dim)
        if residual is None:
            raise cannot_map(o_proj, "the residual stream (SkipLayerNormalization output 3) after attention")
        up = sole_linear_consumer(ix, ffn_norm.output, ix.producer(ffn_norm.output), "c_fc")
        up_bias, activated = _fast_gelu(ix, up)
        down = sole_linear_consumer(ix, activated, ix.producer(activated), "the MLP's c_proj")
        down_bias, next_norm, residual = _skip_norm(ix, down.output[0], residual, down)
        layers.append(Gpt2Layer(attn_norm=norm, attention=attention, ffn_norm=ffn_norm,
                                up=LinearWeights(ix.constant(up.input[1]), up_bias),
                                down=LinearWeights(ix.constant(down.input[1]), down_bias)))
        norm, after = next_norm, ix.producer(next_norm.output)
    return assemble_gpt2(Gpt2Graph(tok_embeddings=wte, pos_embeddings=wpe, layers=layers, final_norm=norm,
                                   classifier=classifier))
