"""Maps a Llama graph of ONNX Runtime GenAI's model builder onto kvx's tensors. The residual stream runs
through the fused norms (exporters/ortgenai/llama_patterns.py), which also do the residual adds:

  Gather(embedding, input_ids) -> SimplifiedLayerNormalization
  -> [attention -> SkipSimplifiedLayerNormalization -> SwiGLU -> SkipSimplifiedLayerNormalization] x n_layers
  (the last one is the final norm) -> MatMul(lm_head) -> logits

The attention is GroupQueryAttention with a packed q/k/v projection (the builder's CPU fp32 and int4
graphs, exporters/ortgenai/gqa.py) or RotaryEmbedding + MultiHeadAttention (its fp16 CPU graphs, and older
builders). The context length is the RoPE tables' row count: the op cannot look up a later position.
"""

import numpy as np

from ...errors import ConvertError
from ...families.decoder import embedding_scale
from ...families.mapped_model import float_weight
from ...blocks.embedding import match_classifier, token_embedding_gather
from ...blocks.linear import linear_consumers
from ...blocks.mlp import match_mlp, mlp_projections
from .walk import DecoderWalk
from .gqa import gqa_consumer, match_gqa_attention
from .llama_patterns import match_fused_attention, match_simplified_norm, match_skip_norm


def _attention(ix, normed, after):
    """(Attention, RoPE table rows, window or None) of the block whose projections read normed."""
    gqas = {id(n): n for n in (gqa_consumer(ix, m.output[0]) for m in linear_consumers(ix, normed)) if n is not None}
    if len(gqas) > 1:
        raise ConvertError(f"the projections reading '{normed}' feed {len(gqas)} GroupQueryAttention nodes; "
                           "kvx convert expects one per layer")
    if gqas:
        found = match_gqa_attention(ix, normed, next(iter(gqas.values())))
        return found.attention, found.max_position, found.window
    attention, max_position = match_fused_attention(ix, normed, after)
    return attention, max_position, None


def _refuse_early_classifier(ix, norm, layer):
    """The builder's Phi-3 graphs (onnxruntime-genai 0.18.0) wire lm_head to layer 0's MLP norm, so the logits
    skip every later layer (testdata/exporters/README.md); kvx cannot compute that, and should not pretend to."""
    if match_classifier(ix, norm.output) is not None or \
            any(m.output[0] in ix.output_names for m in linear_consumers(ix, norm.output)):
        raise ConvertError(f"the classifier reads layer {layer}'s MLP-norm output '{norm.output}', not the final "
                           "norm: the graph's logits skip the layers after it (a miswired lm_head, as ONNX Runtime "
                           "GenAI's builder writes for Phi-3); kvx converts decoders whose classifier reads the "
                           "last norm")


def _post_norm(ix, branch):
    """(RmsNorm, its output) where a block's output goes through a SimplifiedLayerNormalization before the
    residual add (Gemma 2's sandwich norms), else (None, branch)."""
    if ix.consumers(branch, "SimplifiedLayerNormalization"):
        norm = match_simplified_norm(ix, branch, ix.producer(branch))
        return norm, norm.output
    return None, branch


def _scaled(ix, branch):
    """(factor, its output) where a block's output is multiplied by a constant before the residual add (the
    builder's residual_mul for Granite), else (None, branch)."""
    consumers = ix.consumers(branch)
    if len(consumers) == 1 and consumers[0].op_type == "Mul":
        factor = ix.scalar(ix.other_input(consumers[0], branch))
        if factor is not None:
            return float(np.float32(factor)), consumers[0].output[0]
    return None, branch


def map_ortgenai_llama(ix):
    gather = token_embedding_gather(ix)
    walk = DecoderWalk(ix, float_weight(ix.constant(gather.input[0]), "the token embedding"))
    walk.embedding_scale, hidden = embedding_scale(ix, gather)  # Gemma's sqrt(hidden)
    norm = match_simplified_norm(ix, hidden, ix.producer(hidden))
    max_positions, windows = [], []
    while not walk.at_classifier(norm):
        attention, max_position, window = _attention(ix, norm.output, ix.producer(norm.output))
        attention.post_norm, branch = _post_norm(ix, attention.output)
        attn_scale, branch = _scaled(ix, branch)
        ffn_norm, hidden = match_skip_norm(ix, hidden, branch, ix.producer(branch))
        _refuse_early_classifier(ix, ffn_norm, len(walk.layers))
        mlp = match_mlp(ix, ffn_norm.output, mlp_projections(ix, ffn_norm.output), ix.producer(ffn_norm.output))
        mlp.post_norm, branch = _post_norm(ix, mlp.output)
        mlp_scale, branch = _scaled(ix, branch)
        walk.add_layer(norm, attention, ffn_norm, mlp, (attn_scale, mlp_scale))
        norm, hidden = match_skip_norm(ix, hidden, branch, ix.producer(branch))
        max_positions.append(max_position)
        windows.append(window)
    model = walk.model(min(max_positions, default=None))
    model.graph_windows = windows
    return model
