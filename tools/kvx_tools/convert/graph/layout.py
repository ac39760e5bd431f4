"""Where each element of a tensor comes from, found by running the graph's data movement on indices.

Exporters write the same rearrangements (a projection split into heads, the keys transposed, KV heads repeated
for grouped-query attention, heads merged again) in many spellings: Reshape then Transpose, 3-D reshapes on
either side of a transpose (dynamo's sdpa), Expand, Tile or Unsqueeze/Expand/Reshape for GQA, a Split or Slices
of a fused projection, a Concat with the cached keys. Rather than recognise each spelling, the matchers ask what
a chain of such nodes does: the chain is evaluated on a tensor holding each element's own index, with the
graph's dimensions made concrete, and the result says which source element each output element is.

ConcreteGraph is a copy of the normalised graph without its weights (they become inputs of their declared
shape), with every symbolic input dimension given a value (batch 2, a run of 5 tokens after a past of 6) and
its shape arithmetic folded (graph/normalise.py's fold_constants), so that every Reshape target, Expand shape
and Slice bound on a chain is a constant. fold_constants bypasses nothing, so a tensor of the normalised graph
has the same name here. The values are chosen apart from each other and from 1, so that no axis of the
example can be confused with another.
"""

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from ..domains import DEFAULT_DOMAINS
from .folding import SMALL_CONSTANT, evaluate_node, infer_static_shapes
from .index import GraphIndex
from .normalise import default_opset, fold_constants

CONCRETE_BATCH, CONCRETE_SEQ, CONCRETE_PAST = 2, 5, 6

# Nodes that only move, copy or select elements: a chain of them is traced by evaluating it on indices. Cast,
# Identity and Dropout pass their input on; Mul and Div by a constant scalar too, their factor recorded.
MOVING_OPS = frozenset({"Reshape", "Transpose", "Unsqueeze", "Squeeze", "Expand", "Tile", "Flatten", "Split",
                        "Slice", "Concat", "Gather", "GatherND", "Neg"})
PASSING_OPS = frozenset({"Cast", "Identity", "Dropout"})
SCALING_OPS = frozenset({"Mul", "Div"})
MAX_CHAIN_NODES = 64
MAX_TRACE_ELEMENTS = 1 << 24
MAX_EXAMPLE_NODES = 512


@dataclass
class Trace:
    """What a chain of data movement makes of its source. ids holds, for each element of the destination (its
    concrete shape), 1 + the flat index of the source element it is, negated where a Neg on the way negated it
    (RoPE's rotate-half), or 0 where it comes from elsewhere (the cached past a Concat puts before the new keys).
    scale: the product of the constant factors on the way."""
    ids: np.ndarray
    scale: float = 1.0

    def source_index(self):
        """The flat source index of each element (-1 where it comes from elsewhere), signs dropped."""
        return np.abs(self.ids) - 1


class ConcreteGraph:
    def __init__(self, model, ix, dims, opset):
        self._model = model  # the concrete copy, a ModelProto (weights as inputs of their shape)
        self.ix = ix  # GraphIndex of the concrete copy
        self._dims = dims  # tensor -> tuple of ints, where shape inference found every dim
        self._opset = opset  # the default domain's, which decides how Split, Squeeze, Slice read their inputs
        self._values = {}  # tensor -> its value on the example run (values()), or None where it cannot be had
        self.has_past = any(_is_cache_input(i.name) for i in model.graph.input)
        # The example's batch and run length: the concrete values, or the graph's own where an export fixed them
        # (torch.onnx.export without dynamic shapes).
        ids = dims.get("input_ids") or (CONCRETE_BATCH, CONCRETE_SEQ)
        self.batch, self.seq = (ids[0], ids[1]) if len(ids) == 2 else (CONCRETE_BATCH, CONCRETE_SEQ)
        self.positions = example_positions(self.has_past, self.seq)

    @classmethod
    def of(cls, model):
        """The concrete copy of model (a normalised ModelProto, not modified), or None where its inputs follow
        no convention this knows (then the matchers fall back on structure alone)."""
        light = _light_copy(model)
        if light is None:
            return None
        try:
            fold_constants(light)
            inferred = infer_static_shapes(light)
        except Exception:  # a graph onnx cannot infer at all: no oracle, the matchers say what they miss
            return None
        dims = {name: tuple(d) for name, d in inferred.dims.items() if all(x is not None for x in d)}
        return cls(light, GraphIndex(light.graph), dims, default_opset(model))

    def shape(self, tensor):
        """tensor's concrete dims, or None where they are unknown."""
        value = self.ix.constant(tensor)
        if value is not None:
            return tuple(value.shape)
        return self._dims.get(tensor)

    def trace(self, source, destination):
        """The Trace of destination from source through data movement alone, or None when destination is not
        such a rearrangement of source (another kind of node on the way, an unknown shape, no path)."""
        nodes = self._chain(source, destination)
        if nodes is None:
            return None
        shape = self.shape(source)
        if shape is None or int(np.prod(shape)) > MAX_TRACE_ELEMENTS:
            return None
        values = {source: np.arange(1, int(np.prod(shape)) + 1, dtype=np.int64).reshape(shape)}
        scale = 1.0
        for node in nodes:
            try:
                outputs, factor = self._run(node, values)
            except Exception:  # a chain onnx cannot evaluate on this example: not a rearrangement we can read
                return None
            if outputs is None:
                return None
            scale *= factor
            values.update(outputs)
        result = values.get(destination)
        return None if result is None else Trace(np.asarray(result), scale)

    def values(self, tensors):
        """{tensor: value} on an example run: the batch's rows a run of self.seq tokens at positions
        CONCRETE_PAST .. (0 .. without a cache), the attention mask all ones, the cache zeros. For what is
        computed from positions alone (RoPE's cos and sin); None where a tensor needs a weight or an input of no
        known convention."""
        for t in tensors:  # folded in the concrete copy (positions from a Range of the concrete length)
            if t not in self._values and self.ix.constant(t) is not None:
                self._values[t] = self.ix.constant(t)
        wanted = [t for t in tensors if t not in self._values]
        if wanted:
            computed = self._run_example(wanted)
            for t in wanted:
                self._values[t] = None if computed is None else computed.get(t)
        if any(self._values[t] is None for t in tensors):
            return None
        return {t: self._values[t] for t in tensors}

    def _run_example(self, tensors):
        graph = self._model.graph
        inputs = {i.name: i for i in graph.input}
        nodes, needed_inputs, stack, seen = [], set(), list(tensors), set()
        while stack:
            t = stack.pop()
            if t in seen or not t:
                continue
            seen.add(t)
            node = self.ix.producer(t)
            if node is None:
                if t in inputs:
                    needed_inputs.add(t)
                elif self.ix.constant(t) is None:
                    return None
                continue
            if node.domain not in DEFAULT_DOMAINS or len(nodes) > MAX_EXAMPLE_NODES:
                return None
            nodes.append(node)
            stack.extend(node.input)
        feeds = {}
        for name in needed_inputs:
            value = _example_input(inputs[name], self._dims.get(name), self.has_past)
            if value is None:
                return None
            feeds[name] = value
        sub = onnx.ModelProto()
        sub.ir_version = self._model.ir_version
        sub.opset_import.extend(self._model.opset_import)
        order = {id(n): k for k, n in enumerate(graph.node)}
        sub.graph.node.extend(sorted(nodes, key=lambda n: order[id(n)]))
        read = {i for n in nodes for i in n.input}
        sub.graph.initializer.extend(t for t in graph.initializer if t.name in read)
        sub.graph.input.extend(inputs[name] for name in needed_inputs)
        sub.graph.output.extend(helper.make_empty_tensor_value_info(t) for t in tensors)
        try:
            from onnx.reference import ReferenceEvaluator
            results = ReferenceEvaluator(sub, new_ops=[_gather_elements_op()]).run(None, feeds)
        except Exception:  # not computable on its own: the matcher says what it could not read
            return None
        return {t: np.asarray(r) for t, r in zip(tensors, results)}

    # -- the chain ---------------------------------------------------------------------------------

    def _chain(self, source, destination):
        """The nodes between source and destination, in an order that computes each input first, when every
        path back from destination that reaches source passes through data movement only; None otherwise."""
        reaches = {}  # tensor -> whether source is upstream of it through data movement

        def data_inputs(node):
            if node.op_type in SCALING_OPS:
                other = [i for i in node.input if self.ix.scalar(i) is None]
                return other if len(other) == 1 and len(node.input) == 2 else None
            if node.op_type == "Concat":
                return list(node.input)
            if node.op_type in ("Gather", "GatherND") and self.ix.constant(node.input[1]) is None:
                return None
            return [node.input[0]] if node.input else None

        order, stack, visiting = [], [(destination, False)], set()
        while stack:
            tensor, expanded = stack.pop()
            if tensor in reaches:
                continue
            if tensor == source:
                reaches[tensor] = True
                continue
            node = self.ix.producer(tensor)
            movable = node is not None and node.domain in DEFAULT_DOMAINS and \
                node.op_type in MOVING_OPS | PASSING_OPS | SCALING_OPS
            inputs = data_inputs(node) if movable else None
            if not inputs:
                reaches[tensor] = False
                continue
            if expanded:
                reaches[tensor] = any(reaches.get(i, False) for i in inputs)
                if reaches[tensor]:
                    order.append(node)
                continue
            if tensor in visiting or len(visiting) > MAX_CHAIN_NODES * 4:
                return None
            visiting.add(tensor)
            stack.append((tensor, True))
            stack.extend((i, False) for i in inputs if i not in reaches)
        if not reaches.get(destination):
            return None
        seen, nodes = set(), []
        for node in order:
            if id(node) not in seen:
                seen.add(id(node))
                nodes.append(node)
        return nodes if len(nodes) <= MAX_CHAIN_NODES else None

    def _run(self, node, values):
        """({output: ids}, factor) of one node on the ids of its traced inputs; inputs off the path are filled
        with 0 (data) or read as the constants they are (shapes, axes, bounds)."""
        op = node.op_type
        if op in PASSING_OPS:
            return {node.output[0]: values[node.input[0]]}, 1.0
        if op == "Neg":
            return {node.output[0]: -values[node.input[0]]}, 1.0
        if op in SCALING_OPS:
            traced = node.input[0] if node.input[0] in values else node.input[1]
            factor = self.ix.scalar(self.ix.other_input(node, traced))
            if op == "Div":
                if traced != node.input[0] or not factor:
                    return None, 1.0
                factor = 1.0 / factor
            return {node.output[0]: values[traced]}, float(factor)
        inputs = []
        for k, name in enumerate(node.input):
            if not name:
                inputs.append(None)
            elif name in values:
                inputs.append(values[name])
            elif (value := self.ix.constant(name)) is not None:
                inputs.append(value)
            elif op == "Concat" and (shape := self.shape(name)) is not None:
                inputs.append(np.zeros(shape, dtype=np.int64))
            else:
                return None, 1.0
        if op == "Slice":  # a 0-d bound or step, which ONNX Runtime takes as [value] and onnx.reference does not
            inputs = inputs[:1] + [None if v is None else np.atleast_1d(v) for v in inputs[1:]]
        results = evaluate_node(node, inputs, self._opset)
        return dict(zip(node.output, results)), 1.0


def _light_copy(model):
    """The graph's nodes and small constants, its weights as inputs of their shape, and its inputs' symbolic
    dims made concrete; None where an input follows no convention known here."""
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    has_past = any(_is_cache_input(i.name) for i in inputs)
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    g = light.graph
    g.node.extend(graph.node)
    for node in g.node:  # "ai.onnx" is the default domain's other name, which shape inference does not take
        if node.domain == "ai.onnx":
            node.domain = ""
    # Outputs without their declared (symbolic) shapes, which inference would otherwise keep.
    g.output.extend(helper.make_tensor_value_info(o.name, o.type.tensor_type.elem_type, None) for o in graph.output)
    for info in inputs:
        dims = _concrete_dims(info, has_past)
        if dims is None:
            return None
        g.input.append(helper.make_tensor_value_info(info.name, info.type.tensor_type.elem_type, dims))
    for t in graph.initializer:
        if int(np.prod(t.dims, dtype=np.int64)) <= SMALL_CONSTANT:
            g.initializer.append(t)
        else:
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return light


def _gather_elements_op():
    """GatherElements for onnx.reference, whose own (numpy.choose) takes at most 64 values along the axis: a
    table of RoPE angles by position (GPT-J's) has a row per position."""
    from onnx.reference.op_run import OpRun

    class GatherElements(OpRun):
        def _run(self, data, indices, axis=None):
            axis = axis or 0
            indices = np.where(indices < 0, indices + data.shape[axis], indices)
            return (np.take_along_axis(data, indices, axis=axis),)
    return GatherElements


def example_positions(has_past, seq=CONCRETE_SEQ):
    """The positions of the example run's seq tokens."""
    start = CONCRETE_PAST if has_past else 0
    return np.arange(start, start + seq)


def _example_input(info, dims, has_past):
    """The example run's value of a graph input of the concrete copy, or None for an input of no known role."""
    if dims is None:
        return None
    elem = onnx.helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type)
    name = info.name
    if _is_cache_input(name):
        return np.zeros(dims, elem)
    if name == "attention_mask":
        return np.ones(dims, elem)
    if name in ("input_ids", "token_type_ids"):
        return np.zeros(dims, elem)
    if name in ("position_ids", "cache_position"):
        return np.broadcast_to(example_positions(has_past, dims[-1]), dims).astype(elem)
    return None


def _is_cache_input(name):
    return name.startswith("past")


def _concrete_dims(info, has_past):
    """The input's dims with each symbolic one given its concrete value by the input's role, or None."""
    t = info.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    total = CONCRETE_PAST + CONCRETE_SEQ if has_past else CONCRETE_SEQ
    name = info.name
    if _is_cache_input(name) and len(dims) in (4, 5):
        batch_axis = len(dims) - 4  # [batch, heads, past, head_dim] or [2, batch, heads, past, head_dim]
        wanted = {batch_axis: CONCRETE_BATCH, batch_axis + 2: CONCRETE_PAST}
    elif name == "attention_mask" and len(dims) == 2:
        wanted = {0: CONCRETE_BATCH, 1: total}
    elif name in ("input_ids", "position_ids", "token_type_ids") and len(dims) == 2:
        wanted = {0: CONCRETE_BATCH, 1: CONCRETE_SEQ}
    elif name == "cache_position" and len(dims) == 1:
        wanted = {0: CONCRETE_SEQ}
    else:
        wanted = {}
    concrete = [d if d is not None else wanted.get(axis) for axis, d in enumerate(dims)]
    return None if any(d is None for d in concrete) else concrete
