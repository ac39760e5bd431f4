"""Which decoder family a graph holds, told by its structure where the residual stream starts, and the
mapper for it:
  ONNX Runtime's fused EmbedLayerNormalization reading input_ids    -> gpt2 (patterns_ortgenai_gpt2)
  token embedding Gather + position embedding Gather                -> gpt2 (gpt2_mapper)
  token embedding Gather into an RMSNorm (Pow(x, 2) -> ReduceMean)  -> llama (llama_mapper)
  token embedding Gather into ONNX Runtime's SimplifiedLayerNormalization
                                                                    -> llama (ortgenai_llama_mapper)
Anything else stops the conversion at the embedding, naming what it feeds."""

from ..errors import ConvertError, cannot_map, node_label
from .gpt2 import map_gpt2, position_embedding_add
from .gpt_neox import map_gpt_neox, parallel_norms
from .llama import embedding_scale, map_llama
from ..exporters.ortgenai.llama import map_ortgenai_llama
from ..blocks.embedding import token_embedding_gather
from ..exporters.ortgenai.gpt2 import fused_embed_layer_norm, map_ortgenai_gpt2


def map_graph(ix):
    """The MappedModel of the graph indexed by ix; ConvertError when no mapper fits."""
    if fused_embed_layer_norm(ix) is not None:
        return map_ortgenai_gpt2(ix)
    token_gather = token_embedding_gather(ix)
    if position_embedding_add(ix, token_gather) is not None:
        return map_gpt2(ix)
    hidden = embedding_scale(ix, token_gather)[1]
    if any(ix.scalar(n.input[1]) == 2.0 for n in ix.consumers(hidden, "Pow") if n.input[0] == hidden):
        return map_llama(ix)
    if ix.consumers(hidden, "SimplifiedLayerNormalization"):
        return map_ortgenai_llama(ix)
    casts = ix.consumers(hidden, "Cast")
    if len(casts) == 1 and ix.consumers(casts[0].output[0], "SimplifiedLayerNormalization"):
        raise ConvertError(f"node '{casts[0].name}': the residual stream cast to another precision before the first "
                           "norm (the builder's mixed-precision fp16 graph, as it writes Gemma 2); kvx convert does "
                           "not map it")
    if parallel_norms(ix, hidden) is not None:
        return map_gpt_neox(ix)
    consumers = ", ".join(f"'{node_label(n)}' ({n.op_type})" for n in ix.consumers(hidden)) or "nothing"
    raise cannot_map(token_gather, "the token embedding going into an RMSNorm (llama) or added to a position "
                                   f"embedding (gpt2); it feeds {consumers}")
