"""Maps a Llama ONNX graph onto kvx's tensors by walking the residual stream:

  Gather(embedding, input_ids) -> [RMSNorm -> attention -> Add, RMSNorm -> SwiGLU -> Add] x n_layers
  -> RMSNorm -> MatMul(classifier) -> logits

Hyperparameters come from what the walk finds (weight shapes, Reshape targets, constants), never from
names or from assumptions about the architecture's defaults.
"""

from dataclasses import dataclass

import numpy as np

from convert_errors import ConvertError, cannot_map
from graph_index import node_attr
from kvx_layout import expected_tensor_shapes
from patterns_attention import match_attention
from patterns_mlp import match_swiglu
from patterns_norm import match_rms_norm


@dataclass
class MappedModel:
    architecture: str  # config.json's "architecture"
    hyperparameters: dict  # config.json's model fields: dim ... tied_embeddings
    tensors: dict  # kvx name -> fp32 array in kvx layout (Linear weights [out, in])


def map_llama(ix):
    embedding_gather = _embedding_gather(ix)
    embedding = _fp32(ix.constant(embedding_gather.input[0]), "the token embedding")
    hidden = embedding_gather.output[0]
    tensors = {"tok_embeddings": embedding}
    norm_eps, layers = set(), []

    while True:
        norm = match_rms_norm(ix, hidden, ix.producer(hidden))
        norm_eps.add(norm.eps)
        classifier = _classifier(ix, norm.output)
        if classifier is not None:
            tensors["final_norm"] = _fp32(norm.weight, "the final norm")
            break
        i = len(layers)
        attention = match_attention(ix, norm.output, hidden, ix.producer(hidden))
        tensors[f"layers.{i}.attn_norm"] = _fp32(norm.weight, f"layer {i} attention norm")
        hidden = attention.output
        norm = match_rms_norm(ix, hidden, ix.producer(hidden))
        norm_eps.add(norm.eps)
        mlp = match_swiglu(ix, norm.output, hidden, ix.producer(hidden))
        tensors[f"layers.{i}.ffn_norm"] = _fp32(norm.weight, f"layer {i} MLP norm")
        hidden = mlp.output
        tensors.update(_layer_linears(i, attention, mlp))
        layers.append(attention)

    if not layers:
        raise ConvertError("cannot map graph: no decoder layer between the embedding and the classifier")
    if len(norm_eps) != 1:
        raise ConvertError(f"cannot map graph: RMSNorms use different eps values {sorted(norm_eps)}")
    first = layers[0]

    def head_layout(layer):
        return layer.n_heads, layer.n_kv_heads, layer.head_dim

    for i, layer in enumerate(layers):
        if head_layout(layer) != head_layout(first) or not np.array_equal(layer.inv_freq, first.inv_freq):
            raise ConvertError(f"cannot map graph: layer {i} differs from layer 0 in heads, head_dim or RoPE")
    tensors["rope_inv_freq"] = _fp32(first.inv_freq, "inv_freq")

    tied = classifier.shape == embedding.shape and np.array_equal(classifier, embedding)
    if not tied:
        tensors["classifier"] = _fp32(classifier, "the classifier")
    hyper = {
        "dim": embedding.shape[1],
        "hidden_dim": tensors["layers.0.w_gate"].shape[0],
        "n_layers": len(layers),
        "n_heads": first.n_heads,
        "n_kv_heads": first.n_kv_heads,
        "head_dim": first.head_dim,
        "vocab_size": embedding.shape[0],
        "norm_eps": norm_eps.pop(),
        "rope_style": "half",  # the only pairing match_rope accepts
        "tied_embeddings": bool(tied),
    }
    _check_shapes(hyper, tensors)
    return MappedModel(architecture="llama", hyperparameters=hyper, tensors=tensors)


def _embedding_gather(ix):
    if "input_ids" not in ix.input_names:
        raise ConvertError("cannot map graph: it has no input named 'input_ids'")
    gathers = [g for g in ix.consumers("input_ids", "Gather")
               if g.input[1] == "input_ids" and node_attr(g, "axis", 0) == 0]
    tables = [g for g in gathers if ix.constant(g.input[0]) is not None and ix.constant(g.input[0]).ndim == 2]
    if len(tables) != 1:
        raise ConvertError("cannot map graph: expected one Gather of a constant [vocab, dim] embedding "
                           f"by 'input_ids', found {len(tables)}")
    return tables[0]


def _classifier(ix, normed):
    """[vocab, dim] when normed feeds the final MatMul that writes a graph output (the logits), else
    None. The weight is a constant [dim, vocab] or a Transpose of a constant [vocab, dim]."""
    matmuls = [m for m in ix.consumers(normed, "MatMul") if m.input[0] == normed]
    if len(matmuls) != 1 or matmuls[0].output[0] not in ix.output_names:
        return None
    matmul = matmuls[0]
    weight = ix.constant(matmul.input[1])
    if weight is not None and weight.ndim == 2:
        return weight.T
    transpose = ix.producer_op(matmul.input[1], "Transpose")
    if transpose is not None and list(node_attr(transpose, "perm", [1, 0])) == [1, 0]:
        weight = ix.constant(transpose.input[0])
        if weight is not None and weight.ndim == 2:
            return weight
    raise cannot_map(matmul, "the classifier: a MatMul by a constant [dim, vocab] or by Transpose of a "
                             "constant [vocab, dim]")


def _layer_linears(i, attention, mlp):
    """kvx's [out, in] weights from ONNX's [in, out] MatMul operands."""
    onnx_in_out = {"wq": attention.wq, "wk": attention.wk, "wv": attention.wv, "wo": attention.wo,
                   "w_gate": mlp.w_gate, "w_up": mlp.w_up, "w_down": mlp.w_down}
    return {f"layers.{i}.{name}": _fp32(w.T, f"layer {i} {name}") for name, w in onnx_in_out.items()}


def _fp32(array, what):
    if array.dtype != np.float32:
        raise ConvertError(f"{what} is {array.dtype}; kvx model directories hold fp32 weights only")
    return np.ascontiguousarray(array)


def _check_shapes(hyper, tensors):
    """Every weight found must agree with the hyperparameters read elsewhere in the graph."""
    expected = expected_tensor_shapes(hyper)
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise ConvertError(f"cannot map graph: {name} has shape {list(tensors[name].shape)}, "
                               f"the graph's other dimensions imply {list(shape)}")
