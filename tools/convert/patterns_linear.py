"""Linear layers: a MatMul of an activation by a constant [in, out] matrix (torch's export of a
bias-free nn.Linear), and the residual Add that closes a block."""

from convert_errors import cannot_map


def linear_weight(ix, matmul):
    """matmul's constant right operand, [in, out] fp32 as stored in ONNX, or None."""
    if matmul.op_type != "MatMul":
        return None
    w = ix.constant(matmul.input[1])
    return w if w is not None and w.ndim == 2 else None


def linear_consumers(ix, tensor):
    """MatMul nodes that multiply tensor by a constant weight."""
    return [m for m in ix.consumers(tensor, "MatMul")
            if m.input[0] == tensor and linear_weight(ix, m) is not None]


def sole_linear_consumer(ix, tensor, after, what):
    linears = linear_consumers(ix, tensor)
    if len(linears) != 1:
        raise cannot_map(after, f"one MatMul by a constant weight ({what}) reading '{tensor}'")
    return linears[0]


def residual_add(ix, residual, branch, branch_node):
    """The Add of the residual stream and a block's output; returns its output tensor."""
    for add in ix.consumers(branch, "Add"):
        if ix.other_input(add, branch) == residual:
            return add.output[0]
    raise cannot_map(branch_node, f"its output added to the residual stream '{residual}'")
