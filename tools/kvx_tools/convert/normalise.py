"""Rewrites an ONNX decoder graph into a plainer one with the same meaning, before the matchers read it, so
that they see one spelling of each thing whatever the exporter wrote:

  - constant subgraphs are evaluated (onnx.reference for each node, numpy for the common ones) and
    replaced by initializers: a Transpose, Cast or Reshape of a weight becomes the weight as read;
  - shape arithmetic is evaluated where onnx's shape inference knows the dims it reads: Shape(x) and
    Gather/Slice of it give constants for the static dims (head_dim, heads), not for batch or sequence;
  - Identity, Dropout (inference) and Cast to the type a tensor already has are bypassed;
  - Gemm with a constant B is rewritten as MatMul (+ Add of its bias), the transposes folded into B;
  - a Slice that keeps a whole static axis is bypassed, and an empty one (HF Phi-3's pass-through half of
    a RoPE over the whole head) is dropped from the Concat along that axis that reads it;
  - a MatMul by a constant W whose every reader takes columns of it (Slice or Split along the last axis,
    constant bounds), as torch exports Phi-3's qkv_proj and gate_up_proj, becomes one MatMul per part by
    W's columns of that part, so the matchers see separate projections;
  - nodes no graph output depends on are dropped.

Everything is bounded: each node is visited once in a dependency order computed without recursion, and a
node is folded only when its result stays under MAX_FOLD_ELEMENTS, so a crafted graph cannot make the
converter allocate without limit. What cannot be folded is simply left for the matchers, which name it.
"""

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .graph_index import constant_node_value, node_attr

DEFAULT_DOMAINS = ("", "ai.onnx")
# The largest tensor a fold may write, in elements: a weight matrix's transpose or cast fits; a mask of
# max_position^2 built from constants does not need to (it is left as it is).
MAX_FOLD_ELEMENTS = 1 << 26
# The most elements a fold may write beyond the size of its largest input (masks, shapes, Range tables).
SMALL_RESULT = 1 << 16
# Initializers at most this many elements are kept in the copy given to shape inference (the rest become
# inputs of their declared shape), so that inference never serialises the weights.
SMALL_CONSTANT = 4096

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
BYPASSED = frozenset({"Identity", "Dropout"})
# Passes at most: each slice rewrite can let one more level of shape arithmetic fold (Phi-3's q, then k).
MAX_PASSES = 4


def normalise(model):
    """model rewritten in place (graph nodes and initializers); returns it. A graph whose slices were
    rewritten (_split_fused_linears, _drop_whole_and_empty_slices) goes through once more: shapes read from
    the bypassed Slices fold only then."""
    for _ in range(MAX_PASSES):
        if not _normalise_once(model):
            break
    return model


def _normalise_once(model):
    """One pass of normalise; returns whether a slice rewrite happened."""
    graph = model.graph
    order = _dependency_order(graph)
    if order is None:  # a cycle: leave the graph as it is for the checks that name it
        return False
    opset = _default_opset(model)
    shapes = _static_shapes(model)
    values = {t.name: None for t in graph.initializer}  # name -> array, read lazily
    inits = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS:
            value = constant_node_value(node)
            if value is not None:
                values[node.output[0]] = value

    def value_of(name):
        if name not in values:
            return None
        if values[name] is None:
            values[name] = numpy_helper.to_array(inits[name])
        return values[name]

    renamed = {}  # a bypassed node's output -> the tensor it passes on
    kept = []
    output_names = {o.name for o in graph.output}
    for node in order:
        for k, name in enumerate(node.input):
            if name in renamed:
                node.input[k] = renamed[name]
        if node.domain not in DEFAULT_DOMAINS:
            kept.append(node)
            continue
        if node.op_type == "Constant":
            kept.append(node)
            continue
        folded = _fold(node, value_of, shapes, opset)
        if folded is not None:
            for name, value in zip(node.output, folded):
                values[name] = value
                if name in output_names:  # a constant graph output keeps its node
                    kept.append(node)
                    break
            continue
        bypass = _bypassed_input(node, shapes)
        if bypass is not None and node.output[0] not in output_names:
            renamed[node.output[0]] = bypass
            continue
        gemm = _gemm_as_matmul(node, value_of)
        if gemm is not None:
            kept.extend(gemm[0])
            for name, value in gemm[1].items():
                values[name] = value
            continue
        kept.append(node)

    _write_back(graph, kept, values, inits)
    _unflatten_linears(graph)
    changed = _split_fused_linears(graph)
    changed = _drop_whole_and_empty_slices(graph) or changed
    _split_key_transposes(graph)
    _write_back(graph, list(graph.node), {}, {t.name: t for t in graph.initializer})
    return changed


def _rank_of(ix, tensor, shape):
    """tensor's rank from inference, or from the Reshape that wrote it."""
    from .convert_errors import ConvertError
    if shape is not None:
        return len(shape)
    reshape = ix.producer_op(tensor, "Reshape")
    if reshape is None:
        return None
    try:
        return len(ix.fold_dims(reshape.input[1], reshape))
    except ConvertError:
        return None


def _last_dim_of(ix, tensor, shape):
    """tensor's last dim from inference, or from the Reshape that wrote it; None when unknown."""
    from .convert_errors import ConvertError
    if shape is not None and shape and shape[-1] is not None:
        return shape[-1]
    reshape = ix.producer_op(tensor, "Reshape")
    if reshape is None:
        return None
    try:
        dims = ix.fold_dims(reshape.input[1], reshape)
    except ConvertError:
        return None
    return dims[-1] if dims and dims[-1] is not None and dims[-1] > 0 else None


def _reads_last_dim(ix, target, x):
    """Whether the Reshape target Concat(..., x.shape[-1]) ends in x's own last dim (x.view(-1, x.size(-1)))."""
    concat = ix.producer_op(target, "Concat")
    if concat is None or not concat.input:
        return False
    source = ix.trace_back(concat.input[-1])
    node = ix.producer(source)
    if node is None or node.op_type not in ("Slice", "Gather"):
        return False
    shape = ix.producer_op(node.input[0], "Shape")
    index = ix.constant(node.input[1]) if len(node.input) > 1 else None
    return shape is not None and shape.input[0] == x and index is not None and index.size == 1 \
        and int(index.reshape(-1)[0]) == -1


def _split_key_transposes(graph):
    """Transpose(x, [0, 2, 3, 1]) of a [b, s, heads, hd] tensor (GPT-2's key, straight into Q K^T) becomes
    Transpose([0, 1, 3, 2]) of Transpose(x, [0, 2, 1, 3]): heads split first, then K^T, as the matchers
    read every other attention."""
    existing = {}
    for node in graph.node:
        if node.op_type == "Transpose" and list(node_attr(node, "perm", [])) == [0, 2, 1, 3]:
            existing.setdefault(node.input[0], node.output[0])
    added = []
    for node in graph.node:
        if node.op_type != "Transpose" or list(node_attr(node, "perm", [])) != [0, 2, 3, 1]:
            continue
        x = node.input[0]
        heads_first = existing.get(x)
        if heads_first is None:
            heads_first = f"{node.output[0]}/heads_first"
            added.append(helper.make_node("Transpose", [x], [heads_first], name=f"{node.name}/heads_first",
                                          perm=[0, 2, 1, 3]))
            existing[x] = heads_first
        node.input[0] = heads_first
        for attr in node.attribute:
            if attr.name == "perm":
                del attr.ints[:]
                attr.ints.extend([0, 1, 3, 2])
    graph.node.extend(added)


def _column_ranges(ix, node, width):
    """[(start, end), ...] of the columns a Slice or Split of a MatMul output [.., width] takes along its
    last axis, one per output, or None when it is anything else (another axis, a step, unknown bounds)."""
    def ints(name):
        value = ix.constant(name) if name else None
        return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]

    rank = len(ix.static_shape(node.input[0]) or ()) or None
    last_axes = (-1,) if rank is None else (-1, rank - 1)
    if node.op_type == "Slice" and len(node.input) >= 4:
        starts, ends, axes = ints(node.input[1]), ints(node.input[2]), ints(node.input[3])
        steps = ints(node.input[4]) if len(node.input) > 4 and node.input[4] else [1]
        if None in (starts, ends, axes, steps) or len(starts) != 1 or len(ends) != 1 or axes[0] not in last_axes \
                or len(axes) != 1 or steps != [1]:
            return None
        start, end = (v + width if v < 0 else v for v in (starts[0], ends[0]))
        start, end = max(0, min(start, width)), max(0, min(end, width))
        return [(start, end)] if start < end else None
    if node.op_type == "Split" and node_attr(node, "axis", 0) in last_axes:
        sizes = ints(node.input[1]) if len(node.input) > 1 and node.input[1] else list(node_attr(node, "split", []))
        parts = node_attr(node, "num_outputs", 0)
        if not sizes and parts and width % parts == 0:  # opset 18's equal parts
            sizes = [width // parts] * parts
        if not sizes or sum(sizes) != width or min(sizes) <= 0 or len(sizes) != len(node.output):
            return None
        bounds = np.cumsum([0] + sizes)
        return list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))
    return None


def _split_fused_linears(graph):
    """MatMul(x, W) read only by Slices/Splits of its columns -> one MatMul(x, W[:, a:b]) per part."""
    from .graph_index import GraphIndex
    ix = GraphIndex(graph)
    changed = False
    for matmul in [n for n in graph.node if n.op_type == "MatMul" and len(n.input) == 2]:
        weight = ix.constant(matmul.input[1])
        readers = ix.consumers(matmul.output[0])
        if weight is None or weight.ndim != 2 or not readers or matmul.output[0] in ix.output_names \
                or any(r.input[0] != matmul.output[0] for r in readers):
            continue
        parts = [_column_ranges(ix, r, weight.shape[1]) for r in readers]
        if any(p is None for p in parts):
            continue
        base = matmul.name or matmul.output[0]
        for reader, ranges in zip(readers, parts):
            for k, ((start, end), output) in enumerate(zip(ranges, reader.output)):
                name = f"{base}/columns_{start}_{end}"
                if name not in {t.name for t in graph.initializer}:
                    graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(weight[:, start:end]), name))
                graph.node.append(helper.make_node("MatMul", [matmul.input[0], name], [output], name=f"{name}/MatMul"))
            reader.output[:] = [f"{o}/unused" for o in reader.output]
        changed = True
    return changed


def _drop_whole_and_empty_slices(graph):
    from .graph_index import GraphIndex
    ix = GraphIndex(graph)
    renamed, changed = {}, False
    for node in [n for n in graph.node if n.op_type == "Slice" and len(n.input) >= 4]:
        shape = ix.static_shape(node.input[0])
        bounds = [ix.constant(n) for n in node.input[1:4]]
        steps = ix.constant(node.input[4]) if len(node.input) > 4 and node.input[4] else np.ones(1, np.int64)
        if shape is None or any(b is None or b.size != 1 for b in bounds) or steps.size != 1 or int(steps[0]) != 1:
            continue
        start, end, axis = (int(np.asarray(b).reshape(-1)[0]) for b in bounds)
        axis = axis + len(shape) if axis < 0 else axis
        if not 0 <= axis < len(shape) or shape[axis] is None:
            continue
        dim = shape[axis]
        start, end = (max(0, min(v + dim if v < 0 else v, dim)) for v in (start, end))
        if start == 0 and end == dim and node.output[0] not in ix.output_names:
            renamed[node.output[0]] = node.input[0]
        elif start >= end:
            for concat in ix.consumers(node.output[0], "Concat"):
                if node_attr(concat, "axis") in (axis, axis - len(shape)) and len(concat.input) > 1:
                    kept = [i for i in concat.input if i != node.output[0]]
                    del concat.input[:]
                    concat.input.extend(kept)
                    changed = True
    for node in graph.node:
        for k, name in enumerate(node.input):
            while name in renamed:
                name = renamed[name]
            node.input[k] = name
    for node in graph.node:  # a Concat left with one input passes it on
        if node.op_type == "Concat" and len(node.input) == 1 and node.output[0] not in ix.output_names:
            renamed_to = node.input[0]
            for other in graph.node:
                for k, name in enumerate(other.input):
                    if name == node.output[0]:
                        other.input[k] = renamed_to
    return changed or bool(renamed)


def _unflatten_linears(graph):
    """x [b, s, K] -> Reshape [-1, K] -> MatMul(W [K, N]) (-> Add(bias [N])) -> Reshape [b, s, N], as torch
    writes GPT-2's Conv1D, becomes MatMul(x, W) (-> Add): MatMul multiplies over the leading dims itself.
    The first target must fold to [-1, K]; the second to as many dims as x has, ending in N."""
    from .convert_errors import ConvertError
    from .graph_index import GraphIndex
    ix = GraphIndex(graph)
    for flatten in [n for n in graph.node if n.op_type == "Reshape" and len(n.input) == 2]:
        try:
            target = ix.fold_dims(flatten.input[1], flatten)
        except ConvertError:
            continue
        consumers = ix.consumers(flatten.output[0])
        # A valid graph's MatMul by W [K, N] forces the target's last dim to K; [-1, K] or [-1, x.shape[-1]].
        if len(target) != 2 or target[0] != -1 or len(consumers) != 1 or consumers[0].op_type != "MatMul" \
                or consumers[0].input[0] != flatten.output[0]:
            continue
        matmul = consumers[0]
        weight = ix.constant(matmul.input[1])
        x_shape = ix.static_shape(flatten.input[0])
        x_rank = _rank_of(ix, flatten.input[0], x_shape)
        x_last = _last_dim_of(ix, flatten.input[0], x_shape)
        if x_last is None and _reads_last_dim(ix, flatten.input[1], flatten.input[0]):
            x_last = target[1] if target[1] is not None else (weight.shape[0] if weight is not None else None)
        if weight is None or weight.ndim != 2 or target[1] not in (None, weight.shape[0]) or x_rank is None:
            continue
        new_target = None
        if x_last != weight.shape[0]:
            # dynamo merges heads and flattens in one: [b, s, heads, hd] -> [-1, heads * hd]
            if x_rank != 4 or x_shape is None or None in x_shape[2:] or x_shape[2] * x_shape[3] != weight.shape[0]:
                continue
            new_target = f"{flatten.output[0]}/bsd"
        x_rank = 3 if new_target else x_rank
        last = matmul
        after = ix.consumers(matmul.output[0])
        if len(after) == 1 and after[0].op_type == "Add":
            bias = ix.constant(ix.other_input(after[0], matmul.output[0]))
            if bias is not None and bias.shape == (weight.shape[1],):
                last = after[0]
        restore = ix.consumers(last.output[0])
        if len(restore) != 1 or restore[0].op_type != "Reshape" or restore[0].input[0] != last.output[0]:
            continue
        try:
            back = ix.fold_dims(restore[0].input[1], restore[0])
        except ConvertError:
            continue
        if len(back) != x_rank or back[-1] != weight.shape[1] or any(d == -1 for d in back):
            continue
        if new_target:
            graph.initializer.append(numpy_helper.from_array(np.array([0, 0, weight.shape[0]], np.int64), new_target))
            flatten.input[1] = new_target
        else:
            matmul.input[0] = flatten.input[0]
        last.output[0] = restore[0].output[0]
        restore[0].output[0] = restore[0].output[0] + "/unused"


# -- evaluation ------------------------------------------------------------------------------------

def _fold(node, value_of, shapes, opset):
    """The node's outputs as arrays when it can be evaluated at conversion time, else None."""
    op = node.op_type
    if op == "Shape":
        return _shape_value(node, shapes)
    if op == "Gather" or op == "Slice":  # of a partly known Shape: the known dims are enough
        shape_value = _partial_shape_index(node, value_of, shapes)
        if shape_value is not None:
            return [shape_value]
    if op not in FOLDABLE or not node.input:
        return None
    inputs = [value_of(name) if name else None for name in node.input]
    if any(v is None for name, v in zip(node.input, inputs) if name):
        return None
    size = _result_size(node, inputs)
    largest_input = max((v.size for v in inputs if v is not None), default=0)
    if size is None or size > MAX_FOLD_ELEMENTS or size > max(largest_input, SMALL_RESULT):
        return None  # folds never grow data beyond SMALL_RESULT: nested Concat(c, c) cannot double for ever
    try:
        return _evaluate(node, inputs, opset)
    except Exception:  # a node onnx cannot evaluate (bad attributes, shapes): the matchers will name it
        return None


def _evaluate(node, inputs, opset):
    from onnx.reference import ReferenceEvaluator  # imported here: it takes a moment to load
    feeds = {name: value for name, value in zip(node.input, inputs) if name}
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


def _partial_shape_index(node, value_of, shapes):
    """Gather(Shape(x), i) or Slice(Shape(x), ...) when the dims it selects are static."""
    # The Shape node itself was not folded (some dim is symbolic), so find x through the recorded dims.
    source = _shape_sources.get(node.input[0])
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


_shape_sources = {}  # set per normalise() call by _static_shapes: Shape output -> its input's dims


# -- rewrites --------------------------------------------------------------------------------------

def _bypassed_input(node, shapes):
    """The tensor a node merely passes on (Identity, inference-time Dropout, Cast to its own type)."""
    if node.op_type in BYPASSED and node.input and node.input[0]:
        if node.op_type == "Dropout" and len([o for o in node.output if o]) > 1:
            return None
        return node.input[0]
    if node.op_type == "Cast" and node.input:
        source = _elem_types.get(node.input[0])
        if source is not None and source == node_attr(node, "to"):
            return node.input[0]
    return None


_elem_types = {}  # set per normalise() call: tensor -> ONNX element type where inference knows it


def _gemm_as_matmul(node, value_of):
    """Gemm(A, B, C) with constant B (and C) as MatMul(A, B') + Add(C'): alpha, beta and transB folded
    into the constants. None for any other node, or a Gemm with transA."""
    if node.op_type != "Gemm" or len(node.input) < 2 or node_attr(node, "transA", 0):
        return None
    b = value_of(node.input[1])
    if b is None or b.ndim != 2:
        return None
    alpha, beta = node_attr(node, "alpha", 1.0), node_attr(node, "beta", 1.0)
    weight = (b.T if node_attr(node, "transB", 0) else b) * np.asarray(alpha, dtype=b.dtype)
    weight = np.ascontiguousarray(weight.astype(b.dtype))
    base = node.name or node.output[0]
    weight_name = f"{base}/gemm_weight"
    new_values = {weight_name: weight}
    has_bias = len(node.input) > 2 and node.input[2]
    matmul_out = node.output[0] if not has_bias else f"{base}/gemm_matmul"
    nodes = [helper.make_node("MatMul", [node.input[0], weight_name], [matmul_out], name=node.name)]
    if has_bias:
        c = value_of(node.input[2])
        if c is None:
            return None
        bias_name = f"{base}/gemm_bias"
        new_values[bias_name] = np.ascontiguousarray((c * np.asarray(beta, dtype=c.dtype)).astype(c.dtype))
        nodes.append(helper.make_node("Add", [matmul_out, bias_name], [node.output[0]], name=f"{base}/bias"))
    return nodes, new_values


# -- the graph around it ---------------------------------------------------------------------------

def _dependency_order(graph):
    """The nodes in an order that computes each input before it is read (Kahn's algorithm), or None
    when they form a cycle. Builder graphs are not always listed in such an order."""
    produced = {}
    for node in graph.node:
        for out in node.output:
            if out:
                produced[out] = node
    waiting, readers = {}, {}
    for node in graph.node:
        deps = {name for name in node.input if name in produced}
        waiting[id(node)] = len(deps)
        for name in deps:
            readers.setdefault(name, []).append(node)
    ready = [n for n in reversed(graph.node) if waiting[id(n)] == 0]
    order = []
    while ready:
        node = ready.pop()
        order.append(node)
        for out in node.output:
            for reader in readers.get(out, []):
                waiting[id(reader)] -= 1
                if waiting[id(reader)] == 0:
                    ready.append(reader)
    return order if len(order) == len(graph.node) else None


def _default_opset(model):
    for opset in model.opset_import:
        if opset.domain in DEFAULT_DOMAINS:
            return opset.version
    return onnx.defs.onnx_opset_version()


def _static_shapes(model):
    """tensor -> dims (int, or None where symbolic) as onnx's shape inference finds them, on a copy of
    the graph whose large initializers are declared inputs (no weights serialised). Also records, for
    every Shape node, the dims of what it reads (for Gather(Shape(x), i) of a static dim)."""
    _shape_sources.clear()
    _elem_types.clear()
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
    shapes = {}
    for info in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        t = info.type.tensor_type
        if t.elem_type:
            _elem_types[info.name] = t.elem_type
        if t.HasField("shape"):
            shapes[info.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    for t in model.graph.initializer:
        shapes[t.name] = list(t.dims)
        _elem_types[t.name] = t.data_type
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS:
            value = constant_node_value(node)
            if value is not None:
                shapes[node.output[0]] = list(value.shape)
    for node in model.graph.node:
        if node.op_type == "Shape" and node.domain in DEFAULT_DOMAINS and node.input[0] in shapes:
            dims = shapes[node.input[0]]
            start, end = node_attr(node, "start", 0), node_attr(node, "end", None)
            _shape_sources[node.output[0]] = dims[start:end] if end is not None else dims[start:]
    return shapes


def _small_shape_values(model, limit=1 << 12):
    """Whether every Concat builds a short vector, so that shape inference's data propagation (which
    evaluates shape arithmetic, Concat by Concat) stays cheap: a crafted nest of Concat(a, a) doubles at
    each level and would take it exponential time. Lengths are bounded from above, in dependency order."""
    order = _dependency_order(model.graph)
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


def _write_back(graph, kept, values, inits):
    """The graph's nodes become kept (minus what no output needs); every folded value a kept node reads
    becomes an initializer."""
    needed = {o.name for o in graph.output}
    producer = {}
    for node in kept:
        for out in node.output:
            producer[out] = node
    live, stack = set(), list(needed)
    while stack:
        name = stack.pop()
        node = producer.get(name)
        if node is None or id(node) in live:
            continue
        live.add(id(node))
        stack.extend(i for i in node.input if i)
    nodes = [n for n in kept if id(n) in live]
    read = {i for n in nodes for i in n.input if i} | needed
    new_inits = []
    for name in read:
        if name in producer and id(producer[name]) in live:
            continue
        if name in inits:
            new_inits.append(inits[name])
        elif name in values and values[name] is not None:
            new_inits.append(numpy_helper.from_array(np.asarray(values[name]), name))
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(sorted(new_inits, key=lambda t: t.name))
