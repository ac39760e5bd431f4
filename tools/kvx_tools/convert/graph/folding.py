"""Evaluation at conversion time: a node whose inputs are all constant (or whose result follows from shapes
onnx's shape inference knows) is computed, with onnx.reference, into a constant. Every fold is bounded: its
result stays under MAX_FOLD_ELEMENTS and grows no data beyond SMALL_RESULT, so a crafted graph cannot make
the converter allocate without limit. A fold that only moves, reshapes or casts a large constant (a
Transpose of a weight) computes nothing: graph/lazy_folds.py gives it as a view of the same data, unbounded
since it allocates nothing."""

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from ..domains import DEFAULT_DOMAINS
from .index import constant_node_value, node_attr
from .lazy_folds import lazy_fold
from .lazy_tensor import LazyTensor
from .order import dependency_order
from .weights import LARGE_ELEMENTS


@dataclass
class InferredShapes:
    """What onnx's shape inference found on one pass over the graph."""
    dims: dict = field(default_factory=dict)  # tensor -> [int, or None where symbolic]
    elem_types: dict = field(default_factory=dict)  # tensor -> ONNX element type, where known
    shape_sources: dict = field(default_factory=dict)  # Shape node output -> the dims of the tensor it reads


# The largest tensor a fold may write, in elements: a weight matrix's transpose or cast fits; a mask of
# max_position^2 built from constants does not need to (it is left as it is).
MAX_FOLD_ELEMENTS = 1 << 26
# The most elements a fold may write beyond the size of its largest input (masks, shapes, Range tables).


# The most elements a fold may write beyond the size of its largest input (masks, shapes, Range tables).
SMALL_RESULT = 1 << 16
# Initializers at most this many elements are kept in the copy given to shape inference (the rest become
# inputs of their declared shape), so that inference never serialises the weights. The larger ones are the
# LazyTensors of graph/weights.py, whose protos hold no data.
SMALL_CONSTANT = LARGE_ELEMENTS

# Ops folded when every input is constant. Their result is at most as large as the bound _result_size
# gives; others (random numbers, loops, anything out of the default domain) are never evaluated.


# Ops folded when every input is constant. Their result is at most as large as the bound _result_size
# gives; others (random numbers, loops, anything out of the default domain) are never evaluated.
ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "LessOrEqual", "Greater",
                         "GreaterOrEqual", "And", "Or", "Not", "Neg", "Sqrt", "Reciprocal", "Cos", "Sin", "Exp",
                         "Log", "Abs", "Where", "Max", "Min", "Floor", "Ceil", "Sigmoid", "Tanh", "Erf",
                         "IsNaN", "Mod"})


SAME_SIZE = frozenset({"Cast", "Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Transpose",
                       "Softmax", "CumSum", "Trilu"})


SHRINKING = frozenset({"Slice", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "Shape", "Size"})


FOLDABLE = ELEMENTWISE | SAME_SIZE | SHRINKING | frozenset(
    {"Concat", "Gather", "Range", "ConstantOfShape", "Expand", "Tile", "Split", "MatMul"})


def fold_node(node, value_of, inferred, opset):
    """The node's outputs as arrays when it can be evaluated at conversion time, else None."""
    op = node.op_type
    if op == "Shape":
        return _shape_value(node, inferred.dims)
    if op == "Gather" or op == "Slice":  # of a partly known Shape: the known dims are enough
        shape_value = _partial_shape_index(node, value_of, inferred)
        if shape_value is not None:
            return [shape_value]
    if op == "CastLike":  # a constant cast to an activation's type (dynamo's unoptimised scale): needs only the type
        value, like = value_of(node.input[0]), inferred.elem_types.get(node.input[1])
        if value is None or like is None or value.size > SMALL_RESULT:
            return None
        return [value.astype(onnx.helper.tensor_dtype_to_np_dtype(like))]
    if op not in FOLDABLE or not node.input:
        return None
    table = inferred.dims.get(node.input[0]) if op == "Gather" else None
    if table and None not in table and int(np.prod(table, dtype=np.int64)) > SMALL_CONSTANT:
        return None  # rows of a weight (a position table looked up at a fixed length) stay a lookup of the table
    inputs = [value_of(name) if name else None for name in node.input]
    if any(v is None for name, v in zip(node.input, inputs) if name):
        return None
    lazy = lazy_fold(node, inputs, opset)
    if lazy is not None:
        return lazy
    size = _result_size(node, inputs)
    largest_input = max((v.size for v in inputs if v is not None), default=0)
    if size is None or size > MAX_FOLD_ELEMENTS or size > max(largest_input, SMALL_RESULT):
        return None  # folds never grow data beyond SMALL_RESULT: nested Concat(c, c) cannot double for ever
    try:
        return evaluate_node(node, inputs, opset)
    except Exception:  # a node onnx cannot evaluate (bad attributes, shapes): the matchers will name it
        return None


def evaluate_node(node, inputs, opset):
    from onnx.reference import ReferenceEvaluator  # imported here: it takes a moment to load
    feeds = {name: np.asarray(value) if isinstance(value, LazyTensor) else value  # read: a bounded fold
             for name, value in zip(node.input, inputs) if name}
    evaluator = ReferenceEvaluator(_standalone(node), opsets={"": opset})
    results = evaluator.run(None, feeds)
    return [np.asarray(r) for r in results]


def _standalone(node):
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.domain = ""
    return copy


def _result_size(node, inputs):
    """An upper bound on the elements the node writes, from its constant inputs; None when unknown."""
    op = node.op_type
    sizes = [v.size for v in inputs if v is not None]
    if op in SAME_SIZE or op in SHRINKING or op == "Split":
        return max(sizes, default=0)
    if op in ELEMENTWISE:
        try:
            return int(np.prod(np.broadcast_shapes(*[v.shape for v in inputs if v is not None]), dtype=np.int64))
        except ValueError:
            return None
    if op == "Concat":
        return sum(sizes)
    if op == "Gather":
        data, indices = inputs[0], inputs[1]
        axis = node_attr(node, "axis", 0)
        if data.ndim == 0 or not -data.ndim <= axis < data.ndim:
            return None
        return data.size // max(data.shape[axis], 1) * indices.size
    if op == "MatMul":
        a, b = inputs[0], inputs[1]
        if a.ndim < 1 or b.ndim < 1:
            return None
        return max(a.size // max(a.shape[-1], 1), 1) * (b.shape[-1] if b.ndim > 1 else 1) * max(1, b.size // max(
            b.shape[-1] * (b.shape[-2] if b.ndim > 1 else 1), 1))
    if op in ("ConstantOfShape", "Expand", "Tile"):
        shape = inputs[1] if op != "ConstantOfShape" else inputs[0]
        if shape is None or shape.ndim != 1 or shape.size > 64:
            return None
        dims = [int(d) for d in shape]
        if any(d < 0 for d in dims):
            return None
        if op == "Expand":
            return int(np.prod([max(a, b) for a, b in _aligned(inputs[0].shape, dims)], dtype=np.float64))
        if op == "Tile":
            return int(inputs[0].size * np.prod(dims, dtype=np.float64))
        return int(np.prod(dims, dtype=np.float64))
    if op == "Range":
        start, limit, delta = (float(np.asarray(v).reshape(-1)[0]) if v.size == 1 else np.nan for v in inputs)
        if not all(np.isfinite([start, limit, delta])) or delta == 0:
            return None
        return max(int(np.ceil((limit - start) / delta)), 0)
    return None


def _aligned(shape, dims):
    n = max(len(shape), len(dims))
    shape = (1,) * (n - len(shape)) + tuple(shape)
    dims = (1,) * (n - len(dims)) + tuple(dims)
    return list(zip(shape, dims))


def _shape_value(node, shapes):
    dims = shapes.get(node.input[0])
    if dims is None:
        return None
    start, end = node_attr(node, "start", 0), node_attr(node, "end", None)
    dims = dims[start:end] if end is not None else dims[start:]
    if any(d is None for d in dims):
        return None
    return [np.array(dims, dtype=np.int64)]


def _partial_shape_index(node, value_of, inferred):
    """Gather(Shape(x), i) or Slice(Shape(x), ...) when the dims it selects are static."""
    # The Shape node itself was not folded (some dim is symbolic), so find x through the recorded dims.
    source = inferred.shape_sources.get(node.input[0])
    if source is None:
        return None
    dims = source
    if node.op_type == "Gather":
        indices = value_of(node.input[1])
        if indices is None or indices.size > 64:
            return None
        picked = [dims[int(i)] if -len(dims) <= int(i) < len(dims) else None for i in indices.reshape(-1)]
        if any(d is None for d in picked):
            return None
        return np.array(picked, dtype=np.int64).reshape(indices.shape)
    params = [value_of(name) if name else None for name in node.input[1:5]]
    if any(p is None for p in params[:2]) or any(p is None for n, p in zip(node.input[3:5], params[2:]) if n):
        return None
    starts, ends = params[0].reshape(-1), params[1].reshape(-1)
    axes = params[2].reshape(-1) if len(params) > 2 and params[2] is not None else np.zeros(1, np.int64)
    steps = params[3].reshape(-1) if len(params) > 3 and params[3] is not None else np.ones(1, np.int64)
    if not starts.size == ends.size == axes.size == steps.size == 1 or int(axes[0]) not in (0, -1) or steps[0] == 0:
        return None
    picked = dims[slice(int(starts[0]), int(ends[0]), int(steps[0]))]
    if any(d is None for d in picked):
        return None
    return np.array(picked, dtype=np.int64)


def infer_static_shapes(model):
    """tensor -> dims (int, or None where symbolic) as onnx's shape inference finds them, on a copy of
    the graph whose large initializers are declared inputs (no weights serialised). Also records, for
    every Shape node, the dims of what it reads (for Gather(Shape(x), i) of a static dim). Returns an
    InferredShapes; the model's value_info becomes what inference found (for GraphIndex.static_shape)."""
    result = InferredShapes()
    shapes, elem_types, shape_sources = result.dims, result.elem_types, result.shape_sources
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    g = light.graph
    g.node.extend(model.graph.node)
    g.input.extend(model.graph.input)
    g.output.extend(model.graph.output)
    declared = {i.name for i in model.graph.input}
    for t in model.graph.initializer:
        if int(np.prod(t.dims, dtype=np.int64)) <= SMALL_CONSTANT:
            g.initializer.append(t)
        elif t.name not in declared:
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    try:
        inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False, data_prop=_small_shape_values(model))
    except Exception:  # inference is a help, not a need: without it fewer shapes fold
        inferred = light
    del model.graph.value_info[:]  # what inference found, for GraphIndex.static_shape
    model.graph.value_info.extend(inferred.graph.value_info)
    for info in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        t = info.type.tensor_type
        if t.elem_type:
            elem_types[info.name] = t.elem_type
        if t.HasField("shape"):
            shapes[info.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    for t in model.graph.initializer:
        shapes[t.name] = list(t.dims)
        elem_types[t.name] = t.data_type
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS:
            value = constant_node_value(node)
            if value is not None:
                shapes[node.output[0]] = list(value.shape)
    for node in model.graph.node:
        if node.op_type == "Shape" and node.domain in DEFAULT_DOMAINS and node.input[0] in shapes:
            dims = shapes[node.input[0]]
            start, end = node_attr(node, "start", 0), node_attr(node, "end", None)
            shape_sources[node.output[0]] = dims[start:end] if end is not None else dims[start:]
    return result


def _small_shape_values(model, limit=1 << 12):
    """Whether every Concat builds a short vector, so that shape inference's data propagation (which
    evaluates shape arithmetic, Concat by Concat) stays cheap: a crafted nest of Concat(a, a) doubles at
    each level and would take it exponential time. Lengths are bounded from above, in dependency order."""
    order = dependency_order(model.graph)
    if order is None:
        return False
    length = {t.name: int(np.prod(t.dims, dtype=np.int64)) for t in model.graph.initializer}
    for node in order:
        if node.op_type == "Concat":
            total = sum(length.get(name, 1) for name in node.input)
            if total > limit:
                return False
            length[node.output[0]] = total
        elif node.op_type in ("Unsqueeze", "Squeeze", "Cast", "Identity") and node.input:
            length[node.output[0]] = length.get(node.input[0], 1)
    return True
