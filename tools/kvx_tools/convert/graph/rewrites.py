"""Structural rewrites of a decoder graph into the spelling the matchers read: the same computation, fewer
forms of it (graph/normalise.py runs them; each says what it rewrites and why)."""

import numpy as np
from onnx import helper, numpy_helper

from .index import node_attr
from .lazy_tensor import LazyTensor


BYPASSED = frozenset({"Identity", "Dropout"})
# Passes at most: each slice rewrite can let one more level of shape arithmetic fold (Phi-3's q, then k).


def _rank_of(ix, tensor, shape):
    """tensor's rank from inference, or from the Reshape that wrote it."""
    from ..errors import ConvertError
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
    from ..errors import ConvertError
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


def split_key_transposes(graph):
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


def split_fused_linears(graph, weights):
    """MatMul(x, W) read only by Slices/Splits of its columns -> one MatMul(x, W[:, a:b]) per part (a view of
    W where it is large: weights holds it)."""
    from .index import GraphIndex
    ix = GraphIndex(graph, weights)
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
                    graph.initializer.append(weights.initializer(name, weight[:, start:end]))
                graph.node.append(helper.make_node("MatMul", [matmul.input[0], name], [output], name=f"{name}/MatMul"))
            reader.output[:] = [f"{o}/unused" for o in reader.output]
        changed = True
    return changed


# A Slice end at least this large keeps the rest of its axis whatever its length (torch writes INT64_MAX).
WHOLE_AXIS_END = 1 << 31


def drop_whole_and_empty_slices(graph, weights):
    from .index import GraphIndex
    ix = GraphIndex(graph, weights)
    renamed, changed = {}, False
    for node in [n for n in graph.node if n.op_type == "Slice" and len(n.input) >= 4]:
        shape = ix.static_shape(node.input[0])
        bounds = [ix.constant(n) for n in node.input[1:4]]
        steps = ix.constant(node.input[4]) if len(node.input) > 4 and node.input[4] else np.ones(1, np.int64)
        if any(b is None or b.size != 1 for b in [*bounds, steps]) \
                or int(np.asarray(steps).reshape(-1)[0]) != 1:  # a 0-d step too (fuzz_convert_onnx.py found it)
            continue
        start, end, axis = (int(np.asarray(b).reshape(-1)[0]) for b in bounds)
        if start == 0 and end >= WHOLE_AXIS_END and node.output[0] not in ix.output_names:
            renamed[node.output[0]] = node.input[0]  # x[:, 0:] whatever the length (HF's logits_to_keep=0)
            continue
        if shape is None:
            continue
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


def unflatten_linears(graph, weights):
    """x [b, s, K] -> Reshape [-1, K] -> MatMul(W [K, N]) (-> Add(bias [N])) -> Reshape [b, s, N], as torch
    writes GPT-2's Conv1D, becomes MatMul(x, W) (-> Add): MatMul multiplies over the leading dims itself.
    The first target must fold to [-1, K]; the second to as many dims as x has, ending in N."""
    from ..errors import ConvertError
    from .index import GraphIndex
    ix = GraphIndex(graph, weights)
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


def bypassed_input(node, inferred):
    """The tensor a node merely passes on (Identity, inference-time Dropout, Cast to its own type)."""
    if node.op_type in BYPASSED and node.input and node.input[0]:
        if node.op_type == "Dropout" and len([o for o in node.output if o]) > 1:
            return None
        return node.input[0]
    if node.op_type == "Cast" and node.input:
        source = inferred.elem_types.get(node.input[0])
        if source is not None and source == node_attr(node, "to"):
            return node.input[0]
    if node.op_type == "CastLike" and len(node.input) == 2:  # dynamo's type_as of a tensor already that type
        source, like = (inferred.elem_types.get(name) for name in node.input)
        if source is not None and source == like:
            return node.input[0]
    return None


def _scaled(value, factor):
    """value * factor in value's dtype (numpy's arithmetic); value itself for a factor of 1, which changes no
    element, so that a large weight stays the same view of its data (graph/lazy_tensor.py)."""
    if factor == 1.0:
        return value
    scaled = (value * np.asarray(factor, dtype=value.dtype)).astype(value.dtype)
    return scaled if isinstance(scaled, LazyTensor) else np.ascontiguousarray(scaled)


def gemm_as_matmul(node, value_of):
    """Gemm(A, B, C) with constant B (and C) as MatMul(A, B') + Add(C'): alpha, beta and transB folded
    into the constants (views of them where they are large). None for any other node, or a Gemm with transA."""
    if node.op_type != "Gemm" or len(node.input) < 2 or node_attr(node, "transA", 0):
        return None
    b = value_of(node.input[1])
    if b is None or b.ndim != 2:
        return None
    alpha, beta = node_attr(node, "alpha", 1.0), node_attr(node, "beta", 1.0)
    weight = _scaled(b.T if node_attr(node, "transB", 0) else b, alpha)
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
        new_values[bias_name] = _scaled(c, beta)
        nodes.append(helper.make_node("Add", [matmul_out, bias_name], [node.output[0]], name=f"{base}/bias"))
    return nodes, new_values


def sequence_splits_as_split(graph, weights):
    """SplitToSequence(x, split) read only by SequenceAt(seq, constant i), as dynamo writes torch.split without
    its optimizer, becomes Split(x) whose outputs are the SequenceAts' (so a fused projection's parts are
    plain Split outputs). Needs x's width along the axis where split is one chunk size."""
    from .index import GraphIndex
    ix = GraphIndex(graph, weights)
    renamed = {}
    for node in [n for n in graph.node if n.op_type == "SplitToSequence" and len(n.input) == 2]:
        readers = ix.consumers(node.output[0])
        split, axis = ix.constant(node.input[1]), node_attr(node, "axis", 0)
        shape = ix.static_shape(node.input[0])
        indices = [ix.scalar(r.input[1]) if r.op_type == "SequenceAt" and len(r.input) == 2 else None for r in readers]
        if split is None or not readers or None in indices or node_attr(node, "keepdims", 1) != 1 or shape is None \
                or not -len(shape) <= axis < len(shape) or shape[axis] is None:
            continue
        width = shape[axis]
        sizes = [int(v) for v in np.asarray(split).reshape(-1)]
        if split.ndim == 0:
            sizes = [sizes[0]] * (width // sizes[0]) + ([width % sizes[0]] if width % sizes[0] else [])
        if sum(sizes) != width or min(sizes) <= 0 or any(not 0 <= i < len(sizes) for i in indices):
            continue
        outputs = [f"{node.output[0]}/part_{k}" for k in range(len(sizes))]
        sizes_name = f"{node.output[0]}/sizes"
        graph.initializer.append(numpy_helper.from_array(np.array(sizes, np.int64), sizes_name))
        graph.node.append(helper.make_node("Split", [node.input[0], sizes_name], outputs, name=f"{node.name}/as_split",
                                           axis=axis))
        for reader, index in zip(readers, indices):
            renamed[reader.output[0]] = outputs[int(index)]
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in renamed:
                node.input[k] = renamed[name]
    return bool(renamed)


def merge_duplicate_nodes(graph):
    """A node computing what an earlier node computes (same op, inputs and attributes) is dropped and its
    outputs read from the earlier one's: dynamo without its optimizer writes q.view(...).transpose(1, 2) twice,
    once for x * cos and once for rotate_half(x). Nodes whose result is not a function of their inputs
    (random numbers) and graph outputs are kept."""
    from .order import dependency_order
    order = dependency_order(graph)
    if order is None:
        return False
    outputs = {o.name for o in graph.output}
    renamed, first = {}, {}
    for node in order:
        for k, name in enumerate(node.input):
            if name in renamed:
                node.input[k] = renamed[name]
        if "Random" in node.op_type or any(o in outputs for o in node.output):
            continue
        key = (node.domain, node.op_type, tuple(node.input), tuple(a.SerializeToString() for a in node.attribute))
        if key in first:
            for mine, theirs in zip(node.output, first[key].output):
                renamed[mine] = theirs
        else:
            first[key] = node
    if not renamed:
        return False
    for node in graph.node:
        for k, name in enumerate(node.input):
            while name in renamed:
                name = renamed[name]
            node.input[k] = name
    return True
