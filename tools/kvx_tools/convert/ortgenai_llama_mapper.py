"""Maps a Llama graph of ONNX Runtime GenAI's model builder onto kvx's tensors. The residual stream runs
through the fused norms (patterns_ortgenai_llama.py), which also do the residual adds:

  Gather(embedding, input_ids) -> SimplifiedLayerNormalization
  -> [attention -> SkipSimplifiedLayerNormalization -> SwiGLU -> SkipSimplifiedLayerNormalization] x n_layers
  (the last one is the final norm) -> MatMul(lm_head) -> logits

The context length is the RoPE tables' row count: RotaryEmbedding cannot look up a later position.
"""

from .llama_mapper import DecoderWalk
from .mapped_model import float_weight
from .patterns_embedding import token_embedding_gather
from .patterns_mlp import match_swiglu
from .patterns_ortgenai_llama import match_fused_attention, match_simplified_norm, match_skip_norm


def map_ortgenai_llama(ix):
    gather = token_embedding_gather(ix)
    walk = DecoderWalk(ix, float_weight(ix.constant(gather.input[0]), "the token embedding"))
    hidden = gather.output[0]
    norm = match_simplified_norm(ix, hidden, gather)
    max_positions = []
    while not walk.at_classifier(norm):
        attention, max_position = match_fused_attention(ix, norm.output, ix.producer(norm.output))
        ffn_norm, hidden = match_skip_norm(ix, hidden, attention.output, ix.producer(attention.output))
        mlp = match_swiglu(ix, ffn_norm.output, None, ix.producer(ffn_norm.output))
        walk.add_layer(norm, attention, ffn_norm, mlp)
        norm, hidden = match_skip_norm(ix, hidden, mlp.output, ix.producer(mlp.output))
        max_positions.append(max_position)
    return walk.model(min(max_positions, default=None))
