"""The two ends of a decoder graph: the token embedding Gather that starts the residual stream, and the
classifier MatMul that ends it in the logits output."""

from .convert_errors import ConvertError, cannot_map
from .graph_index import node_attr


def token_embedding_gather(ix):
    """The one Gather of a constant [vocab, dim] table by the input_ids input."""
    if "input_ids" not in ix.input_names:
        raise ConvertError("cannot map graph: it has no input named 'input_ids'")
    gathers = [g for g in ix.consumers("input_ids", "Gather")
               if g.input[1] == "input_ids" and node_attr(g, "axis", 0) == 0]
    tables = [g for g in gathers if ix.constant(g.input[0]) is not None and ix.constant(g.input[0]).ndim == 2]
    if len(tables) != 1:
        raise ConvertError("cannot map graph: expected one Gather of a constant [vocab, dim] embedding "
                           f"by 'input_ids', found {len(tables)}")
    return tables[0]


def match_classifier(ix, normed):
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
