"""The two ends of a decoder graph: the token embedding Gather that starts the residual stream (with a learned
position embedding added, where there is one), and the classifier MatMul that ends it in the logits output."""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import ConvertError, cannot_map
from ..graph.index import node_attr
from .linear import bias_after


def token_embedding_gather(ix):
    """The one Gather of a constant [vocab, dim] table by the input_ids input."""
    if "input_ids" not in ix.input_names:
        raise ConvertError("cannot map graph: it has no input named 'input_ids'")
    gathers = [g for g in _index_readers(ix, "input_ids") if node_attr(g, "axis", 0) == 0]
    tables = [g for g in gathers if ix.constant(g.input[0]) is not None and ix.constant(g.input[0]).ndim == 2]
    if len(tables) != 1:
        raise ConvertError("cannot map graph: expected one Gather of a constant [vocab, dim] embedding "
                           f"by 'input_ids', found {len(tables)}")
    return tables[0]


# What exporters put between input_ids and the lookup without changing which ids are read: GPT-2's
# input_ids.view(-1, seq) (Reshape), a Flatten, or a Cast to int64.
ID_RESHAPING_OPS = frozenset({"Reshape", "Flatten", "Cast", "Squeeze", "Unsqueeze", "Identity"})
MAX_ID_RESHAPES = 8


def position_embedding_add(ix, token_gather):
    """(the Add of token and position embeddings, the position table [n_positions, dim]) when the token
    embedding is added to a Gather of a constant table by positions, else None. The positions must be
    the position_ids input or a Range computed in the graph: what kvx feeds, absolute positions (or the
    constant 0, 1, .. n - 1 a graph fixed to n tokens folds that Range into)."""
    hidden = token_gather.output[0]
    for add in ix.consumers(hidden, "Add"):
        folded = ix.constant(ix.other_input(add, hidden))
        if folded is not None and folded.ndim >= 2 and folded.shape[-1] == ix.constant(token_gather.input[0]).shape[1] \
                and folded.size == folded.shape[-2] * folded.shape[-1]:
            # An export fixed to n tokens (torch.onnx.export without dynamic shapes) folds the lookup of positions
            # 0 .. n-1 into a constant [1, n, dim]: a table of n rows, which bounds the context to n.
            return add, folded.reshape(folded.shape[-2], folded.shape[-1])
        gather = ix.producer_op(ix.other_input(add, hidden), "Gather")
        table = ix.constant(gather.input[0]) if gather is not None else None
        if table is None or table.ndim != 2 or node_attr(gather, "axis", 0) != 0:
            continue
        positions = ix.trace_back(gather.input[1])
        value = ix.constant(positions)
        counting = value is not None and np.array_equal(value.reshape(-1), np.arange(value.size))
        if positions != "position_ids" and ix.producer_op(positions, "Range") is None and not counting:
            raise cannot_map(gather, "a position embedding indexed by the position_ids input or a Range of "
                                     f"positions, found '{positions}'")
        return add, table
    return None


def _index_readers(ix, ids):
    """Gather nodes whose indices are ids, directly or through a short chain of ID_RESHAPING_OPS."""
    found, frontier = [], [ids]
    for _ in range(MAX_ID_RESHAPES):
        next_frontier = []
        for tensor in frontier:
            for node in ix.consumers(tensor):
                if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] == tensor:
                    found.append(node)
                elif node.op_type in ID_RESHAPING_OPS and node.input[0] == tensor:
                    next_frontier.append(node.output[0])
        frontier = next_frontier
    return found


def softcapped_logits(ix, tensor):
    """(cap, output) for cap * Tanh(tensor / cap) (Gemma 2's final logit soft-cap), else (None, tensor)."""
    consumers = ix.consumers(tensor)
    if len(consumers) != 1 or consumers[0].op_type not in ("Div", "Mul"):
        return None, tensor
    inner = consumers[0]
    c = ix.scalar(ix.other_input(inner, tensor))
    if c is None or (inner.op_type == "Div" and inner.input[0] != tensor) or c == 0:
        return None, tensor
    inverse = 1.0 / c if inner.op_type == "Div" else c
    tanh = ix.consumers(inner.output[0])
    if len(tanh) != 1 or tanh[0].op_type != "Tanh":
        return None, tensor
    outer = ix.consumers(tanh[0].output[0])
    if len(outer) != 1 or outer[0].op_type != "Mul":
        return None, tensor
    cap = ix.scalar(ix.other_input(outer[0], tanh[0].output[0]))
    if cap is None or not np.isclose(cap * inverse, 1.0, rtol=1e-6):
        return None, tensor
    return float(cap), outer[0].output[0]


def final_softcap(ix, normed):
    """The final logit soft-cap after the classifier reading normed, or None."""
    matmuls = [m for m in ix.consumers(normed, "MatMul") if m.input[0] == normed]
    return softcapped_logits(ix, matmuls[0].output[0])[0] if len(matmuls) == 1 else None


@dataclass
class Classifier:
    """The LM head: logits = ((normed . weight^T) + bias) * scale, then cap * tanh(logits / cap)."""
    weight: np.ndarray  # [vocab, dim]
    bias: Optional[np.ndarray] = None  # [vocab] (Phi, GPT-J), or None
    scale: Optional[float] = None  # a constant the logits are multiplied by (Cohere) or divided by (Granite)
    softcap: Optional[float] = None  # Gemma 2's final soft-cap


def classifier_reading(ix, normed):
    """The Classifier when normed feeds the MatMul whose result, through a bias, a constant scaling and a
    soft-cap, is a graph output (the logits); else None."""
    matmuls = [m for m in ix.consumers(normed, "MatMul") if m.input[0] == normed]
    if not matmuls:  # GPT-2's hidden.view(batch, seq, dim): a Reshape keeping rows of dim, row-wise harmless
        for reshape in ix.consumers(normed, "Reshape"):
            if reshape.input[0] == normed and _keeps_rows(ix, reshape):
                matmuls += [m for m in ix.consumers(reshape.output[0], "MatMul") if m.input[0] == reshape.output[0]]
    if len(matmuls) != 1:
        return None
    matmul = matmuls[0]
    scale = None
    bias, tensor = bias_after(ix, matmul.output[0])
    consumers = ix.consumers(tensor)
    if len(consumers) == 1 and consumers[0].op_type in ("Mul", "Div") and _outer_scaling(ix, consumers[0], tensor):
        scale, tensor = _outer_scaling(ix, consumers[0], tensor)
    softcap, tensor = softcapped_logits(ix, tensor)
    tensor = _through_casts(ix, tensor)
    if tensor not in ix.output_names:
        return None
    weight = _classifier_weight(ix, matmul)
    if bias is not None and bias.shape != (weight.shape[0],):
        raise cannot_map(matmul, f"a classifier bias of the vocabulary's {weight.shape[0]} entries")
    return Classifier(weight, bias, scale, softcap)


def _through_casts(ix, tensor):
    """The output a Cast or two lead to (TorchScript's logits.float() is kept where it writes the graph output)."""
    for _ in range(2):
        consumers = ix.consumers(tensor)
        if len(consumers) != 1 or consumers[0].op_type not in ("Cast", "Identity"):
            break
        tensor = consumers[0].output[0]
    return tensor


def _outer_scaling(ix, node, tensor):
    """(factor, output) for Mul(tensor, c) or Div(tensor, c), unless it is the inner step of a soft-cap."""
    if softcapped_logits(ix, tensor)[1] != tensor:
        return None
    c = ix.scalar(ix.other_input(node, tensor))
    if c is None or c == 0 or (node.op_type == "Div" and node.input[0] != tensor):
        return None
    return (1.0 / c if node.op_type == "Div" else c), node.output[0]


def _classifier_weight(ix, matmul):
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


def match_classifier(ix, normed):
    """[vocab, dim] when normed feeds the final MatMul that writes a graph output (the logits, possibly
    soft-capped), else None. The weight is a constant [dim, vocab] or a Transpose of a constant [vocab, dim]."""
    found = classifier_reading(ix, normed)
    if found is None or found.bias is not None or found.scale is not None:
        return None
    return found.weight


def _keeps_rows(ix, reshape):
    """Whether a Reshape's target ends in a constant dim equal to its input's static last dim."""
    try:
        dims = ix.fold_dims(reshape.input[1], reshape)
    except ConvertError:
        return False
    shape = ix.static_shape(reshape.input[0])
    return bool(dims) and shape is not None and bool(shape) and dims[-1] is not None and dims[-1] > 0 \
        and dims[-1] == shape[-1]
