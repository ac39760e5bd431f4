"""The operators the converter knows how to read. A node outside this set stops the conversion before
any pattern matching, naming the node, so that a new kind of graph fails at its first unknown piece.

Extending: add the op here, and teach a matcher in the *_patterns modules what it means.
"""

from convert_errors import ConvertError, node_label

DEFAULT_DOMAINS = ("", "ai.onnx")

# Standard ops that torch.onnx.export emits for HF Llama: the computation proper plus the shape and
# mask arithmetic around it, which the engine does itself and the converter therefore only walks past.
SUPPORTED_DEFAULT_OPS = frozenset({
    # computation that maps onto kvx weights and kernels
    "Gather", "MatMul", "Pow", "ReduceMean", "Add", "Sqrt", "Reciprocal", "Div", "Mul", "Neg",
    "Cos", "Sin", "Softmax", "Sigmoid",
    # tensor plumbing
    "Reshape", "Transpose", "Slice", "Concat", "Unsqueeze", "Squeeze", "Expand", "Identity", "Cast",
    # shape and mask arithmetic
    "Shape", "Constant", "ConstantOfShape", "Range", "Sub", "Where", "Equal", "Less", "LessOrEqual",
    "Greater", "GreaterOrEqual", "And", "Or", "Not", "Trilu", "Min", "Max",
})


def check_supported_ops(graph):
    """Raises for the first unsupported node, looking at non-standard domains first: in graphs with
    fused operators those are what needs support, not the plumbing around them."""
    for node in graph.node:
        if node.domain not in DEFAULT_DOMAINS:
            raise ConvertError(f"unsupported operator '{node.op_type}' at node '{node_label(node)}' "
                               f"(op type {node.op_type}, domain {node.domain})")
    for node in graph.node:
        if node.op_type not in SUPPORTED_DEFAULT_OPS:
            raise ConvertError(f"unsupported operator '{node.op_type}' at node '{node_label(node)}' "
                               f"(op type {node.op_type})")
