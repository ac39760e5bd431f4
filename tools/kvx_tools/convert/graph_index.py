"""Lookups over an ONNX graph: who produces and who consumes a tensor, which tensors are constants, and
the partial evaluation of the small integer subgraphs that compute Reshape targets.

Matchers navigate with these helpers only, so they never depend on node order or tensor names.
"""

import numpy as np
from onnx import helper, numpy_helper

from .convert_errors import ConvertError, cannot_map

# Ops that move or reshape data without changing values; matchers look through them when they trace
# where a tensor comes from (cos/sin caches, repeat_kv).
PASS_THROUGH_OPS = frozenset({"Unsqueeze", "Squeeze", "Reshape", "Expand", "Cast", "Identity"})


class GraphIndex:
    def __init__(self, graph):
        self.graph = graph
        self._producer = {}
        self._consumers = {}
        for node in graph.node:
            for out in node.output:
                self._producer[out] = node
            for inp in node.input:
                if inp:
                    self._consumers.setdefault(inp, []).append(node)
        self._initializers = {t.name: t for t in graph.initializer}
        self._arrays = {}
        self.input_names = {i.name for i in graph.input} - set(self._initializers)
        self.output_names = {o.name for o in graph.output}

    # -- structure ------------------------------------------------------------------------------

    def producer(self, tensor):
        """The node that writes tensor, or None for graph inputs and initializers."""
        return self._producer.get(tensor)

    def consumers(self, tensor, op_type=None):
        nodes = self._consumers.get(tensor, [])
        return [n for n in nodes if op_type is None or n.op_type == op_type]

    def sole_consumer(self, tensor, op_type, after, expected):
        """The one consumer of tensor with op_type; otherwise a 'cannot map' error at node after."""
        nodes = self.consumers(tensor, op_type)
        if len(nodes) != 1:
            raise cannot_map(after, expected)
        return nodes[0]

    def producer_op(self, tensor, op_type):
        """The producer of tensor if it is an op_type node, else None."""
        node = self.producer(tensor)
        return node if node is not None and node.op_type == op_type else None

    def other_input(self, node, tensor):
        """For a binary node known to read tensor: its other input."""
        a, b = node.input[0], node.input[1]
        return b if a == tensor else a

    def trace_back(self, tensor, through=PASS_THROUGH_OPS):
        """Follows producers while they are data-preserving ops; returns the first other tensor."""
        node = self.producer(tensor)
        while node is not None and node.op_type in through:
            tensor = node.input[0]
            node = self.producer(tensor)
        return tensor

    def ancestors(self, tensor, limit=64):
        """Tensors that tensor depends on, nearest first (breadth-first, at most limit nodes deep)."""
        seen, frontier, order = {tensor}, [tensor], []
        for _ in range(limit):
            next_frontier = []
            for t in frontier:
                node = self.producer(t)
                for inp in (node.input if node is not None else []):
                    if inp and inp not in seen:
                        seen.add(inp)
                        order.append(inp)
                        next_frontier.append(inp)
            if not next_frontier:
                break
            frontier = next_frontier
        return order

    # -- constants ------------------------------------------------------------------------------

    def constant(self, tensor):
        """The value of an initializer or Constant node output as a numpy array; None otherwise."""
        if tensor in self._arrays:
            return self._arrays[tensor]
        value = None
        if tensor in self._initializers:
            value = self._to_array(self._initializers[tensor], tensor)
        else:
            node = self.producer(tensor)
            if node is not None and node.op_type == "Constant":
                value = _constant_node_value(node)
            elif node is not None and node.op_type == "Identity":
                value = self.constant(node.input[0])
        if value is not None:
            self._arrays[tensor] = value
        return value

    def constants_read(self):
        """ONNX name -> array of every constant read so far: initializers and Constant-node outputs (the
        names matchers reached them by through Identity nodes are left out)."""
        return {name: value for name, value in self._arrays.items()
                if name in self._initializers or self.producer_op(name, "Constant") is not None}

    @staticmethod
    def _to_array(tensor_proto, name):
        try:
            return numpy_helper.to_array(tensor_proto)
        except Exception as e:  # malformed tensor data: report it as bad input, not a crash
            raise ConvertError(f"initializer '{name}' cannot be read: {e}") from None

    def scalar(self, tensor):
        """A constant holding one number, as a Python float; None if tensor is not one."""
        value = self.constant(tensor)
        if value is None or value.size != 1:
            return None
        return float(value.reshape(()))

    def fold_dims(self, tensor, at_node):
        """Evaluates a 1-D int64 shape tensor as far as constants allow: a list with an int per
        element known at export time and None per element read from a Shape at run time.

        Handles constants and torch's Concat(Unsqueeze(Gather(Shape(x), i)), constant, ...) chains.
        """
        value = self.constant(tensor)
        if value is not None:
            return [int(v) for v in np.asarray(value).reshape(-1)]
        node = self.producer(tensor)
        op = node.op_type if node is not None else None
        if op == "Concat":
            return [d for part in node.input for d in self.fold_dims(part, at_node)]
        if op in ("Unsqueeze", "Cast", "Identity"):
            return self.fold_dims(node.input[0], at_node)
        if op == "Gather" and self.producer_op(node.input[0], "Shape") is not None:
            indices = self.constant(node.input[1])
            return [None] * (1 if indices is None else max(1, np.asarray(indices).size))
        raise cannot_map(at_node, f"a shape built from constants and Shape/Gather/Unsqueeze/Concat "
                                  f"(cannot evaluate '{tensor}')")


def _constant_node_value(node):
    for attr in node.attribute:
        if attr.name == "value":
            return numpy_helper.to_array(attr.t)
        if attr.name in ("value_float", "value_floats", "value_int", "value_ints"):
            return np.asarray(helper.get_attribute_value(attr))
    return None


def node_attr(node, name, default=None):
    for attr in node.attribute:
        if attr.name == name:
            return helper.get_attribute_value(attr)
    return default
