"""Which mapper reads a graph, told by what it is built of:
  ONNX Runtime's fused EmbedLayerNormalization reading input_ids      -> exporters/ortgenai/gpt2.py
  ONNX Runtime GenAI's builder graphs (SimplifiedLayerNormalization of the embedding, com.microsoft
  GroupQueryAttention / MultiHeadAttention / SkipSimplifiedLayerNormalization)
                                                                      -> exporters/ortgenai/llama.py
  anything else (torch.onnx.export, TorchScript or dynamo, optimum)   -> families/decoder.py, which reads any
                                                                         decoder made of the traits kvx computes
"""

from ..domains import MS_DOMAIN
from ..errors import ConvertError
from ..blocks.embedding import token_embedding_gather
from ..exporters.ortgenai.gpt2 import fused_embed_layer_norm, map_ortgenai_gpt2
from ..exporters.ortgenai.llama import map_ortgenai_llama
from .decoder import embedding_scale, map_decoder

# The builder's fused operators: a graph holding one is walked by the builder's own mapper.
BUILDER_OPS = frozenset({"GroupQueryAttention", "MultiHeadAttention", "SkipSimplifiedLayerNormalization",
                         "RotaryEmbedding"})


def map_graph(ix):
    """The MappedModel of the graph indexed by ix; ConvertError when no mapper fits."""
    if fused_embed_layer_norm(ix) is not None:
        return map_ortgenai_gpt2(ix)
    hidden = embedding_scale(ix, token_embedding_gather(ix))[1]
    if any(n.domain == MS_DOMAIN and n.op_type in BUILDER_OPS for n in ix.graph.node):
        layer_norms = ix.consumers(hidden, "LayerNormalization")
        if layer_norms:
            raise ConvertError(f"node '{layer_norms[0].name}': the builder's LayerNorm decoder (Phi-2's layout: "
                               "LayerNormalization and SkipLayerNormalization around com.microsoft RotaryEmbedding and "
                               "MultiHeadAttention in parallel blocks); kvx reads the builder's RMSNorm decoders, and this "
                               "model from torch.onnx.export or optimum")
        casts = ix.consumers(hidden, "Cast")
        if len(casts) == 1 and ix.consumers(casts[0].output[0], "SimplifiedLayerNormalization"):
            raise ConvertError(f"node '{casts[0].name}': the residual stream cast to another precision before the "
                               "first norm (the builder's mixed-precision fp16 graph, as it writes Gemma 2); kvx "
                               "convert does not map it")
        return map_ortgenai_llama(ix)
    return map_decoder(ix)
