"""Lookups over an ONNX graph: who produces and who consumes a tensor, which tensors are constants, and
the partial evaluation of the small integer subgraphs that compute Reshape targets.

Matchers navigate with these helpers only, so they never depend on node order or tensor names.
"""

import numpy as np
from onnx import helper, numpy_helper

from ..errors import ConvertError, cannot_map
from .weights import GraphWeights

# Ops that move or reshape data without changing values; matchers look through them when they trace
# where a tensor comes from (cos/sin caches, repeat_kv).
PASS_THROUGH_OPS = frozenset({"Unsqueeze", "Squeeze", "Reshape", "Expand", "Cast", "Identity"})
# Reshape targets in decoders have 3 or 4 dims; a longer one is no shape but a crafted graph's attempt to make
# fold_dims build an enormous list.
MAX_SHAPE_RANK = 64


class GraphIndex:
    def __init__(self, graph, weights=None, model=None):
        """weights: the GraphWeights holding the graph's large constants (graph/weights.py); without it every
        constant is read from its proto. model: the ModelProto holding graph, where matchers may ask how data
        moves through it (concrete)."""
        self.graph = graph
        self.weights = weights if weights is not None else GraphWeights()
        self._model = model
        self._concrete = None
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
        self._shapes = {}  # declared or inferred (graph/normalise.py) dims: int, or None where symbolic
        for info in [*graph.input, *graph.value_info, *graph.output]:
            t = info.type.tensor_type
            if t.HasField("shape"):
                self._shapes[info.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]

    @property
    def concrete(self):
        """The graph with concrete dimensions (graph/layout.py's ConcreteGraph), made on first use; None where
        it cannot be made (no model given, or inputs of no known convention)."""
        if self._concrete is None and self._model is not None:
            from .layout import ConcreteGraph  # layout imports this module
            self._concrete = ConcreteGraph.of(self._model) or False
        return self._concrete or None

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

    def initializer_type(self, tensor):
        """The TensorProto data type of initializer tensor, or None: it tells int4 from uint4 and packed bytes
        from uint8 values, which the numpy array alone does not."""
        init = self._initializers.get(tensor)
        return init.data_type if init is not None else None

    def static_shape(self, tensor):
        """tensor's dims as declared or inferred (int, or None where symbolic), or None when unknown."""
        value = self.constant(tensor)
        if value is not None:
            return list(value.shape)
        return self._shapes.get(tensor)

    # -- constants ------------------------------------------------------------------------------

    def constant(self, tensor):
        """The value of an initializer or Constant node output, looking through Identity nodes, as a numpy
        array, or a LazyTensor for a large one (read when written); None otherwise. Iterative: a crafted graph
        can chain any number of Identity nodes."""
        chain, followed = [], set()  # the Identity outputs followed to reach the value, cached with it
        while tensor not in self._arrays:
            node = self.producer(tensor)
            lazy = self.weights.get(tensor)
            if tensor in self._initializers:
                value = lazy if lazy is not None else self._to_array(self._initializers[tensor], tensor)
            elif node is not None and node.op_type == "Constant":
                value = lazy if lazy is not None else self._to_array(node, tensor, constant_node_value)
            elif node is not None and node.op_type == "Identity" and node.input and tensor not in followed:
                chain.append(tensor)
                followed.add(tensor)
                tensor = node.input[0]
                continue
            else:
                return None
            if value is None:  # a Constant node of a kind matchers never need (a string, a sparse tensor)
                return None
            self._arrays[tensor] = value
            break
        value = self._arrays[tensor]
        self._arrays.update(dict.fromkeys(chain, value))
        return value

    def constants_read(self):
        """ONNX name -> array (or LazyTensor) of every constant read so far: initializers and Constant-node outputs
        (the names matchers reached them by through Identity nodes are left out)."""
        return {name: value for name, value in self._arrays.items()
                if name in self._initializers or self.producer_op(name, "Constant") is not None}

    @staticmethod
    def _to_array(proto, name, read=numpy_helper.to_array):
        try:
            return read(proto)
        except Exception as e:  # malformed tensor data: report it as bad input, not a crash
            raise ConvertError(f"constant '{name}' cannot be read: {e}") from None

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
        Iterative, each tensor folded once: a crafted graph may nest these ops any number of levels deep, or
        reuse a tensor at every level (Concat(a, a) of Concat(b, b) ...), which recursion would take
        exponential time over."""
        folded, stack = {}, [tensor]
        expanding = set()  # tensors waiting for the parts above them on the stack: a part among them is a cycle
        while stack:
            t = stack[-1]
            if t in folded:
                stack.pop()
                continue
            dims, parts = self._fold_step(t, at_node)
            if parts is not None:
                pending = [p for p in parts if p not in folded]
                if pending:
                    if expanding.intersection(pending):  # only a malformed graph has one
                        raise cannot_map(at_node, f"a shape computation without a cycle (through '{t}')")
                    expanding.add(t)
                    stack.extend(pending)
                    continue
                expanding.discard(t)
                dims = [d for p in parts for d in folded[p]]
            if len(dims) > MAX_SHAPE_RANK:
                raise cannot_map(at_node, f"a target shape of at most {MAX_SHAPE_RANK} dims ('{t}' has "
                                          f"{len(dims)})")
            folded[t] = dims
            stack.pop()
        return folded[tensor]

    def _fold_step(self, tensor, at_node):
        """(dims, None) when tensor's dims are known without folding others, else (None, the tensors whose
        dims, concatenated, are its own)."""
        value = self.constant(tensor)
        if value is not None:
            if value.size > MAX_SHAPE_RANK:
                raise cannot_map(at_node, f"a target shape of at most {MAX_SHAPE_RANK} dims ('{tensor}' holds "
                                          f"{value.size})")
            return [int(v) for v in np.asarray(value).reshape(-1)], None
        node = self.producer(tensor)
        op = node.op_type if node is not None else None
        if op == "Concat":
            return None, list(node.input)
        if op in ("Unsqueeze", "Squeeze", "Cast", "Identity") and node.input:
            return None, [node.input[0]]
        if op == "Gather" and len(node.input) == 2 and self.producer_op(node.input[0], "Shape") is not None:
            indices = self.constant(node.input[1])
            return [None] * (1 if indices is None else max(1, np.asarray(indices).size)), None
        if op == "Shape" and node_attr(node, "end") is not None and node_attr(node, "start", 0) >= 0 \
                and node_attr(node, "end") >= node_attr(node, "start", 0):
            return [None] * min(node_attr(node, "end") - node_attr(node, "start", 0), MAX_SHAPE_RANK + 1), None
        if op == "Slice" and self.producer_op(node.input[0], "Shape") is not None:
            bounds = [self.constant(name) for name in node.input[1:3]]
            if all(b is not None and b.size == 1 for b in bounds):
                start, end = (int(b.reshape(-1)[0]) for b in bounds)
                if start < 0 <= end:  # x.shape[-n:]
                    return [None] * min(-start, MAX_SHAPE_RANK + 1), None
                if 0 <= start <= end:
                    return [None] * min(end - start, MAX_SHAPE_RANK + 1), None
        shape = self.static_shape(tensor)
        if shape is not None and len(shape) == 1 and shape[0] is not None and shape[0] <= MAX_SHAPE_RANK:
            return [None] * shape[0], None  # a run-time value of known length (dynamo's sym_size arithmetic)
        raise cannot_map(at_node, f"a shape built from constants and Shape/Gather/Unsqueeze/Concat "
                                  f"(cannot evaluate '{tensor}')")


def constant_node_value(node):
    """The value a Constant node holds, as a numpy array; None for an attribute kind it does not read."""
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
