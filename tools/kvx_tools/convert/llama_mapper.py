"""Maps a Llama ONNX graph onto kvx's tensors by walking the residual stream:

  Gather(embedding, input_ids) -> [RMSNorm -> attention -> Add, RMSNorm -> SwiGLU -> Add] x n_layers
  -> RMSNorm -> MatMul(classifier) -> logits

Hyperparameters come from what the walk finds (weight shapes, Reshape targets, constants), never from
names or from assumptions about the architecture's defaults.
"""

import numpy as np

from .convert_errors import ConvertError
from .mapped_model import MappedModel, add_classifier, check_shapes, float_weight, the_one_eps
from .patterns_attention import match_attention
from .patterns_embedding import match_classifier, token_embedding_gather
from .patterns_mlp import match_swiglu
from .patterns_norm import match_rms_norm


def map_llama(ix):
    gather = token_embedding_gather(ix)
    walk = DecoderWalk(ix, float_weight(ix.constant(gather.input[0]), "the token embedding"))
    hidden = gather.output[0]
    norm = match_rms_norm(ix, hidden, ix.producer(hidden))
    while not walk.at_classifier(norm):
        attention = match_attention(ix, norm.output, hidden, ix.producer(hidden))
        ffn_norm = match_rms_norm(ix, attention.output, ix.producer(attention.output))
        mlp = match_swiglu(ix, ffn_norm.output, attention.output, ix.producer(attention.output))
        walk.add_layer(norm, attention, ffn_norm, mlp)
        hidden = mlp.output
        norm = match_rms_norm(ix, hidden, ix.producer(hidden))
    return walk.model()


class DecoderWalk:
    """What a walk along a Llama's residual stream collects, layer by layer, and the MappedModel made of
    it. The walk itself (which patterns, how the residual adds are spelled) belongs to the caller:
    map_llama for torch's standard operators, ortgenai_llama_mapper for ONNX Runtime's fused ones."""

    def __init__(self, ix, embedding):
        self.ix = ix
        self.embedding = embedding  # [vocab, dim]
        self.tensors = {"tok_embeddings": embedding}
        self.norm_eps = set()
        self.layers = []  # patterns_attention.Attention of each layer
        self.classifier = None

    def at_classifier(self, norm):
        """Whether norm (a patterns_norm.RmsNorm) feeds the classifier; if so it is the final norm."""
        self.norm_eps.add(norm.eps)
        self.classifier = match_classifier(self.ix, norm.output)
        if self.classifier is not None:
            self.tensors["final_norm"] = float_weight(norm.weight, "the final norm")
        return self.classifier is not None

    def add_layer(self, attn_norm, attention, ffn_norm, mlp):
        i = len(self.layers)
        self.norm_eps.add(ffn_norm.eps)
        self.tensors[f"layers.{i}.attn_norm"] = float_weight(attn_norm.weight, f"layer {i} attention norm")
        self.tensors[f"layers.{i}.ffn_norm"] = float_weight(ffn_norm.weight, f"layer {i} MLP norm")
        self.tensors.update(_layer_linears(i, attention, mlp))
        for name, bias in attention.biases.items():
            self.tensors[f"layers.{i}.{name}_bias"] = float_weight(bias, f"layer {i} {name} bias")
        if attention.q_norm is not None:
            self.norm_eps.update((attention.q_norm.eps, attention.k_norm.eps))
            self.tensors[f"layers.{i}.q_norm"] = float_weight(attention.q_norm.weight, f"layer {i} query norm")
            self.tensors[f"layers.{i}.k_norm"] = float_weight(attention.k_norm.weight, f"layer {i} key norm")
        self.layers.append(attention)

    def model(self, max_positions=None):
        """The MappedModel: hyperparameters from the layers found, checked against every tensor's shape.
        max_positions: the rows of the RoPE tables the graph looks positions up in, if it has such."""
        layers, tensors = self.layers, self.tensors
        if not layers:
            raise ConvertError("cannot map graph: no decoder layer between the embedding and the classifier")
        first = layers[0]

        def head_layout(layer):
            return layer.n_heads, layer.n_kv_heads, layer.head_dim

        for i, layer in enumerate(layers):
            if head_layout(layer) != head_layout(first) or not np.array_equal(layer.inv_freq, first.inv_freq):
                raise ConvertError(f"cannot map graph: layer {i} differs from layer 0 in heads, head_dim or RoPE")
            if (layer.q_norm is None) != (first.q_norm is None):
                raise ConvertError(f"cannot map graph: layer {i} differs from layer 0 in having a q/k norm")
        tensors["rope_inv_freq"] = float_weight(first.inv_freq, "inv_freq")

        tied = add_classifier(tensors, self.classifier, self.embedding)
        hyper = {
            "dim": self.embedding.shape[1],
            "hidden_dim": tensors["layers.0.w_gate"].shape[0],
            "n_layers": len(layers),
            "n_heads": first.n_heads,
            "n_kv_heads": first.n_kv_heads,
            "head_dim": first.head_dim,
            "vocab_size": self.embedding.shape[0],
            "norm_eps": the_one_eps(self.norm_eps, "RMSNorm"),
            "rope_style": "half",  # the only pairing the RoPE patterns accept (or permute into)
            "tied_embeddings": tied,
        }
        if first.q_norm is not None:
            hyper["qk_norm"] = True
        check_shapes("llama", hyper, tensors)
        return MappedModel(architecture="llama", hyperparameters=hyper, tensors=tensors, max_positions=max_positions)


def _layer_linears(i, attention, mlp):
    """kvx's [out, in] weights from ONNX's [in, out] MatMul operands."""
    onnx_in_out = {"wq": attention.wq, "wk": attention.wk, "wv": attention.wv, "wo": attention.wo,
                   "w_gate": mlp.w_gate, "w_up": mlp.w_up, "w_down": mlp.w_down}
    return {f"layers.{i}.{name}": float_weight(w.T, f"layer {i} {name}") for name, w in onnx_in_out.items()}
