"""The MappedModel of a builder graph (exporters/ortgenai/llama.py's walk): the tensors and hyperparameters the
walk found, layer by layer, checked against each other."""

import numpy as np

from ...errors import ConvertError
from ...families.mapped_model import MappedModel, add_classifier, check_shapes, float_weight, the_one_eps
from ...blocks.embedding import classifier_reading


class DecoderWalk:
    """What the walk along a builder graph's residual stream (llama.py) collects, layer by layer, and the
    MappedModel made of it."""

    def __init__(self, ix, embedding):
        self.ix = ix
        self.embedding = embedding  # [vocab, dim]
        self.tensors = {"tok_embeddings": embedding}
        self.norm_eps = set()
        self.layers = []  # patterns_attention.Attention of each layer
        self.classifier = None
        self.embedding_scale = None  # the constant the embedding is multiplied by, if any
        self.mlp_kinds = set()
        self.final_softcap = None
        self.logit_scale = None  # Granite's 1 / logits_scaling
        self.classifier_bias = None
        self.residual_scales = set()  # each block's output times this before its add (Granite), None for none

    def at_classifier(self, norm):
        """Whether norm (a patterns_norm.RmsNorm) feeds the classifier; if so it is the final norm."""
        self.norm_eps.add(norm.eps)
        found = classifier_reading(self.ix, norm.output)
        if found is not None:
            self.classifier, self.classifier_bias = found.weight, found.bias
            self.final_softcap, self.logit_scale = found.softcap, found.scale
            self.tensors["final_norm"] = float_weight(norm.weight, "the final norm")
        return found is not None

    def add_layer(self, attn_norm, attention, ffn_norm, mlp, residual_scales=(None, None)):
        """residual_scales: the constants the attention's and the MLP's outputs are multiplied by before their adds."""
        i = len(self.layers)
        if residual_scales[0] != residual_scales[1]:
            raise ConvertError(f"cannot map graph: layer {i} scales its blocks' outputs differently {residual_scales}; "
                               "kvx has one residual_scale")
        self.residual_scales.add(residual_scales[0])
        self.norm_eps.add(ffn_norm.eps)
        self.tensors[f"layers.{i}.attn_norm"] = float_weight(attn_norm.weight, f"layer {i} attention norm")
        self.tensors[f"layers.{i}.ffn_norm"] = float_weight(ffn_norm.weight, f"layer {i} MLP norm")
        self.tensors.update(_layer_linears(i, attention, mlp))
        self.mlp_kinds.add(mlp.kind)
        if (attention.post_norm is None) != (mlp.post_norm is None):
            raise ConvertError(f"cannot map graph: layer {i} normalises one block's output before the residual add "
                               "but not the other's; kvx's sandwich norms come in pairs")
        if attention.post_norm is not None:
            self.norm_eps.update((attention.post_norm.eps, mlp.post_norm.eps))
            self.tensors[f"layers.{i}.post_attn_norm"] = float_weight(attention.post_norm.weight, f"layer {i} post-attention norm")
            self.tensors[f"layers.{i}.post_ffn_norm"] = float_weight(mlp.post_norm.weight, f"layer {i} post-MLP norm")
        for name, bias in attention.biases.items():
            self.tensors[f"layers.{i}.{name}_bias"] = float_weight(bias, f"layer {i} {name} bias")
        if attention.q_norm is not None:
            self.norm_eps.update((attention.q_norm.eps, attention.k_norm.eps))
            self.tensors[f"layers.{i}.q_norm"] = float_weight(attention.q_norm.weight, f"layer {i} query norm")
            self.tensors[f"layers.{i}.k_norm"] = float_weight(attention.k_norm.weight, f"layer {i} key norm")
        self.layers.append(attention)

    def model(self, max_positions=None, local_layers=None):
        """The MappedModel: hyperparameters from the layers found, checked against every tensor's shape.
        max_positions: the rows of the RoPE tables the graph looks positions up in, if it has such.
        local_layers: the sliding-window layers, which may rotate with frequencies of their own (Gemma 3)."""
        layers, tensors = self.layers, self.tensors
        if not layers:
            raise ConvertError("cannot map graph: no decoder layer between the embedding and the classifier")
        first = layers[0]

        def head_layout(layer):
            return layer.n_heads, layer.n_kv_heads, layer.head_dim

        rope_local = []
        frequencies = {i: layer.inv_freq for i, layer in enumerate(layers)}
        if local_layers and len(local_layers) < len(layers) and \
                not all(np.array_equal(frequencies[i], frequencies[local_layers[0]]) for i in frequencies):
            rope_local = local_layers  # Gemma 3: sliding layers on rope_local_base_freq, the others on rope_theta
            first_global = next(i for i in range(len(layers)) if i not in local_layers)
            global_freq, local_freq = frequencies[first_global], frequencies[local_layers[0]]
        else:
            global_freq = local_freq = first.inv_freq
        for i, layer in enumerate(layers):
            expected = local_freq if i in rope_local else global_freq
            if head_layout(layer) != head_layout(first) or not np.array_equal(layer.inv_freq, expected):
                raise ConvertError(f"cannot map graph: layer {i} differs from layer 0 in heads, head_dim or RoPE"
                                   + (" (kvx has one RoPE for the sliding layers and one for the others)"
                                      if local_layers else ""))
            if (layer.q_norm is None) != (first.q_norm is None):
                raise ConvertError(f"cannot map graph: layer {i} differs from layer 0 in having a q/k norm")
            for what in ("scale", "softcap"):
                if getattr(layer, what) != getattr(first, what):
                    raise ConvertError(f"cannot map graph: layer {i}'s attention {what} {getattr(layer, what)} differs "
                                       f"from layer 0's {getattr(first, what)}; kvx has one per model")
            if (layer.post_norm is None) != (first.post_norm is None):
                raise ConvertError(f"cannot map graph: layer {i} differs from layer 0 in its sandwich norms")
        tensors["rope_inv_freq"] = float_weight(global_freq, "inv_freq")
        if rope_local:
            tensors["rope_inv_freq_local"] = float_weight(local_freq, "the sliding layers' inv_freq")

        tied = add_classifier(tensors, self.classifier, self.embedding)
        if self.classifier_bias is not None:
            tensors["classifier_bias"] = float_weight(self.classifier_bias, "the classifier bias")
        if len(self.residual_scales) != 1:
            raise ConvertError(f"cannot map graph: the layers scale their blocks' outputs differently "
                               f"{sorted(self.residual_scales, key=str)}; kvx has one residual_scale")
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
        if rope_local:
            hyper["rope_local_layers"] = list(rope_local)
        if first.scale is not None:
            hyper["attention_scale"] = first.scale
        if first.softcap is not None:
            hyper["attn_logit_softcap"] = first.softcap
        if self.final_softcap is not None:
            hyper["final_logit_softcap"] = self.final_softcap
        if first.post_norm is not None:
            hyper["norm_placement"] = "sandwich"
        if self.embedding_scale is not None and self.embedding_scale != 1.0:
            hyper["embedding_scale"] = self.embedding_scale
        if self.logit_scale is not None:
            hyper["logit_scale"] = float(np.float32(self.logit_scale))
        residual_scale = next(iter(self.residual_scales))
        if residual_scale is not None:
            hyper["residual_scale"] = residual_scale
        if len(self.mlp_kinds) != 1 or not self.mlp_kinds <= {"swiglu", "geglu_tanh"}:
            raise ConvertError(f"cannot map graph: the layers' MLPs are {sorted(self.mlp_kinds)}; the builder's "
                               "graphs kvx reads have one gated MLP kind")
        # GeGLU (tanh GELU of the gate) is the gemma architecture's MLP (docs/model-format.md); the graph's norm
        # weights are stored as the graph multiplies by them (the builder folds Gemma's 1 + w), so no norm offset.
        architecture = "gemma" if self.mlp_kinds == {"geglu_tanh"} else "llama"
        check_shapes(architecture, hyper, tensors)
        return MappedModel(architecture=architecture, hyperparameters=hyper, tensors=tensors, max_positions=max_positions)


def _layer_linears(i, attention, mlp):
    """kvx's [out, in] weights from ONNX's [in, out] MatMul operands."""
    onnx_in_out = {"wq": attention.wq, "wk": attention.wk, "wv": attention.wv, "wo": attention.wo,
                   "w_gate": mlp.w_gate, "w_up": mlp.w_up, "w_down": mlp.w_down}
    return {f"layers.{i}.{name}": float_weight(w.T, f"layer {i} {name}") for name, w in onnx_in_out.items()}
