"""The one exception the converter raises for anything it cannot or will not convert. pipeline.py
prints its message as a single line on stderr and exits 1."""


class ConvertError(Exception):
    pass


def node_label(node):
    """How a node is named in messages: its name, or its first output when it has none."""
    return node.name or f"<unnamed, output '{node.output[0] if node.output else '?'}'>"


def cannot_map(node, expected):
    return ConvertError(f"cannot map node '{node_label(node)}' (op {node.op_type}): expected {expected}")
