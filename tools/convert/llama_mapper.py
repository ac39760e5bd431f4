"""Maps a Llama ONNX graph onto kvx's tensors by walking the residual stream:

  Gather(embedding, input_ids) -> [RMSNorm -> attention -> Add, RMSNorm -> SwiGLU -> Add] x n_layers
  -> RMSNorm -> MatMul(classifier) -> logits

Hyperparameters come from what the walk finds (weight shapes, Reshape targets, constants), never from
names or from assumptions about the architecture's defaults.
"""

import numpy as np

from convert_errors import ConvertError
from mapped_model import MappedModel, add_classifier, check_shapes, float_weight, the_one_eps
from patterns_attention import match_attention
from patterns_embedding import match_classifier, token_embedding_gather
from patterns_mlp import match_swiglu
from patterns_norm import match_rms_norm


def map_llama(ix):
    embedding_gather = token_embedding_gather(ix)
    embedding = float_weight(ix.constant(embedding_gather.input[0]), "the token embedding")
    hidden = embedding_gather.output[0]
    tensors = {"tok_embeddings": embedding}
    norm_eps, layers = set(), []

    while True:
        norm = match_rms_norm(ix, hidden, ix.producer(hidden))
        norm_eps.add(norm.eps)
        classifier = match_classifier(ix, norm.output)
        if classifier is not None:
            tensors["final_norm"] = float_weight(norm.weight, "the final norm")
            break
        i = len(layers)
        attention = match_attention(ix, norm.output, hidden, ix.producer(hidden))
        tensors[f"layers.{i}.attn_norm"] = float_weight(norm.weight, f"layer {i} attention norm")
        hidden = attention.output
        norm = match_rms_norm(ix, hidden, ix.producer(hidden))
        norm_eps.add(norm.eps)
        mlp = match_swiglu(ix, norm.output, hidden, ix.producer(hidden))
        tensors[f"layers.{i}.ffn_norm"] = float_weight(norm.weight, f"layer {i} MLP norm")
        hidden = mlp.output
        tensors.update(_layer_linears(i, attention, mlp))
        layers.append(attention)

    if not layers:
        raise ConvertError("cannot map graph: no decoder layer between the embedding and the classifier")
    first = layers[0]

    def head_layout(layer):
        return layer.n_heads, layer.n_kv_heads, layer.head_dim

    for i, layer in enumerate(layers):
        if head_layout(layer) != head_layout(first) or not np.array_equal(layer.inv_freq, first.inv_freq):
            raise ConvertError(f"cannot map graph: layer {i} differs from layer 0 in heads, head_dim or RoPE")
    tensors["rope_inv_freq"] = float_weight(first.inv_freq, "inv_freq")

    tied = add_classifier(tensors, classifier, embedding)
    hyper = {
        "dim": embedding.shape[1],
        "hidden_dim": tensors["layers.0.w_gate"].shape[0],
        "n_layers": len(layers),
        "n_heads": first.n_heads,
        "n_kv_heads": first.n_kv_heads,
        "head_dim": first.head_dim,
        "vocab_size": embedding.shape[0],
        "norm_eps": the_one_eps(norm_eps, "RMSNorm"),
        "rope_style": "half",  # the only pairing match_rope accepts
        "tied_embeddings": tied,
    }
    check_shapes("llama", hyper, tensors)
    return MappedModel(architecture="llama", hyperparameters=hyper, tensors=tensors)


def _layer_linears(i, attention, mlp):
    """kvx's [out, in] weights from ONNX's [in, out] MatMul operands."""
    onnx_in_out = {"wq": attention.wq, "wk": attention.wk, "wv": attention.wv, "wo": attention.wo,
                   "w_gate": mlp.w_gate, "w_up": mlp.w_up, "w_down": mlp.w_down}
    return {f"layers.{i}.{name}": float_weight(w.T, f"layer {i} {name}") for name, w in onnx_in_out.items()}
