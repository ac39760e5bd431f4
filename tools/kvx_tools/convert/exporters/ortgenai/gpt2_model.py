"""ONNX Runtime's fused GPT-2 (exporters/ortgenai/gpt2.py) as the walk found it, and kvx's tensors made of it:
weights in ONNX's MatMul layout [in, out] until assemble_gpt2 transposes them."""

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from ...errors import ConvertError
from ...families.mapped_model import MappedModel, add_classifier, check_shapes, float_weight, the_one_eps
from ...blocks.layer_norm import LayerNorm


@dataclass
class LinearWeights:
    weight: np.ndarray  # [in, out]
    bias: Optional[np.ndarray]  # [out], or None for a layer without bias


@dataclass
class Gpt2Attention:
    q: LinearWeights  # [dim, n_heads * head_dim]: the query's columns of the fused projection
    k: LinearWeights  # [dim, n_kv_heads * head_dim]
    v: LinearWeights  # [dim, n_kv_heads * head_dim]
    o: LinearWeights  # [n_heads * head_dim, dim]
    n_heads: int
    n_kv_heads: int
    head_dim: int


@dataclass
class Gpt2Layer:
    attn_norm: LayerNorm
    attention: Gpt2Attention
    ffn_norm: LayerNorm
    up: LinearWeights  # c_fc [dim, hidden_dim]
    down: LinearWeights  # c_proj [hidden_dim, dim]


@dataclass
class Gpt2Graph:
    tok_embeddings: np.ndarray  # [vocab, dim]
    pos_embeddings: np.ndarray  # [n_positions, dim]
    layers: List[Gpt2Layer]
    final_norm: LayerNorm
    classifier: np.ndarray  # [vocab, dim]


def split_fused_qkv(weight, bias, widths):
    """The fused projection [dim, q + k + v] (+ bias [q + k + v]) as q, k, v LinearWeights: the columns of
    the query, then the key's, then the value's, the order of HF's c_attn and ONNX Runtime's Attention."""
    bounds = np.cumsum([0, *widths])
    return [LinearWeights(weight[:, a:b], None if bias is None else bias[a:b])
            for a, b in zip(bounds[:-1], bounds[1:])]


def assemble_gpt2(graph):
    """kvx's tensors ([out, in] weights) and hyperparameters from a walked graph, after checking that
    every layer agrees with the first."""
    if not graph.layers:
        raise ConvertError("cannot map graph: no decoder layer between the embedding and the classifier")
    embedding = float_weight(graph.tok_embeddings, "the token embedding")
    tensors = {"tok_embeddings": embedding, "pos_embeddings": float_weight(graph.pos_embeddings, "the position embedding")}
    first = graph.layers[0].attention
    heads = (first.n_heads, first.n_kv_heads, first.head_dim)
    for i, layer in enumerate(graph.layers):
        a = layer.attention
        if (a.n_heads, a.n_kv_heads, a.head_dim) != heads:
            raise ConvertError(f"cannot map graph: layer {i} has heads, KV heads, head_dim "
                               f"{(a.n_heads, a.n_kv_heads, a.head_dim)}, layer 0 {heads}")
        p = f"layers.{i}."
        _add_norm(tensors, p + "attn_norm", layer.attn_norm)
        _add_norm(tensors, p + "ffn_norm", layer.ffn_norm)
        for name, linear in (("wq", a.q), ("wk", a.k), ("wv", a.v), ("wo", a.o), ("w_up", layer.up),
                             ("w_down", layer.down)):
            tensors[p + name] = float_weight(linear.weight.T, f"layer {i} {name}")
            if linear.bias is not None:
                tensors[p + name + "_bias"] = float_weight(linear.bias, f"layer {i} {name} bias")
    _add_norm(tensors, "final_norm", graph.final_norm)
    norms = [graph.final_norm, *(n for layer in graph.layers for n in (layer.attn_norm, layer.ffn_norm))]
    hyper = {
        "dim": embedding.shape[1],
        "hidden_dim": graph.layers[0].up.weight.shape[1],
        "n_layers": len(graph.layers),
        "n_heads": first.n_heads,
        "n_kv_heads": first.n_kv_heads,
        "head_dim": first.head_dim,
        "vocab_size": embedding.shape[0],
        "norm_eps": the_one_eps({n.eps for n in norms}, "LayerNorm"),
        "tied_embeddings": add_classifier(tensors, graph.classifier, embedding),
    }
    check_shapes("gpt2", {**hyper, "max_seq_len": graph.pos_embeddings.shape[0]}, tensors)
    return MappedModel(architecture="gpt2", hyperparameters=hyper, tensors=tensors)


def _add_norm(tensors, name, norm):
    tensors[name] = float_weight(norm.weight, name)
    tensors[name + "_bias"] = float_weight(norm.bias, name + " bias")
