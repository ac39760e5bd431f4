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
  - a node computing what an earlier one computes (same op, inputs, attributes) is merged into it;
  - nodes no graph output depends on are dropped.

Everything is bounded: each node is visited once in a dependency order computed without recursion, and a
node is folded only when its result stays under MAX_FOLD_ELEMENTS, so a crafted graph cannot make the
converter allocate without limit; folds that only move or cast a large constant stay unread views of it
(graph/lazy_folds.py). What cannot be folded is simply left for the matchers, which name it.

The initializers the graph keeps are never copied: those no node reads any more are deleted in place, the
new ones appended (a large new one as a placeholder whose value graph/weights.py holds).
"""

import onnx
from onnx import numpy_helper

from ..domains import DEFAULT_DOMAINS
from .folding import fold_node, infer_static_shapes
from .index import constant_node_value
from .order import dependency_order
from .weights import GraphWeights
from .rewrites import bypassed_input, drop_whole_and_empty_slices, gemm_as_matmul, merge_duplicate_nodes, \
    sequence_splits_as_split, split_fused_linears, split_key_transposes, unflatten_linears


# Passes at most: each slice rewrite can let one more level of shape arithmetic fold (Phi-3's q, then k).
MAX_PASSES = 4


def normalise(model, weights):
    """model rewritten in place (graph nodes and initializers); returns it. weights: the model's GraphWeights,
    which receives the large constants the rewrites make. A graph whose slices were rewritten
    (split_fused_linears, drop_whole_and_empty_slices) goes through once more: shapes read from the bypassed
    Slices fold only then."""
    for _ in range(MAX_PASSES):
        if not _normalise_once(model, weights):
            break
    return model


def fold_constants(model):
    """Only the evaluation part of normalise, repeated until nothing more folds: no node is bypassed or
    rewritten, so every tensor that is not folded keeps its name (graph/layout.py relies on it). For a copy of
    the graph without its weights (they are inputs there), so no GraphWeights holds any."""
    weights = GraphWeights()
    for _ in range(MAX_PASSES):
        before = len(model.graph.node)
        _normalise_once(model, weights, fold_only=True)
        if len(model.graph.node) == before:
            break
    return model


def _normalise_once(model, weights, fold_only=False):
    """One pass of normalise; returns whether a slice rewrite happened. fold_only: evaluate, and drop what
    no output reads, nothing else."""
    graph = model.graph
    order = dependency_order(graph)
    if order is None:  # a cycle: leave the graph as it is for the checks that name it
        return False
    opset = default_opset(model)
    inferred = infer_static_shapes(model)
    values = {t.name: None for t in graph.initializer}  # name -> array or LazyTensor, read when first asked
    inits = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS:
            value = weights.get(node.output[0])
            value = constant_node_value(node) if value is None else value
            if value is not None:
                values[node.output[0]] = value

    def value_of(name):
        if name not in values:
            return None
        if values[name] is None:
            lazy = weights.get(name)
            values[name] = numpy_helper.to_array(inits[name]) if lazy is None else lazy
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
        folded = fold_node(node, value_of, inferred, opset)
        if folded is not None:
            for name, value in zip(node.output, folded):
                values[name] = value
                if name in output_names:  # a constant graph output keeps its node
                    kept.append(node)
                    break
            continue
        bypass = None if fold_only else bypassed_input(node, inferred)
        if bypass is not None and node.output[0] not in output_names:
            renamed[node.output[0]] = bypass
            continue
        gemm = None if fold_only else gemm_as_matmul(node, value_of)
        if gemm is not None:
            kept.extend(gemm[0])
            for name, value in gemm[1].items():
                values[name] = value
            continue
        kept.append(node)

    _write_back(graph, kept, values, inits, weights)
    if fold_only:
        return False
    merge_duplicate_nodes(graph)
    unflatten_linears(graph, weights)
    changed = sequence_splits_as_split(graph, weights)
    changed = split_fused_linears(graph, weights) or changed
    changed = drop_whole_and_empty_slices(graph, weights) or changed
    split_key_transposes(graph)
    _write_back(graph, list(graph.node), {}, {t.name: t for t in graph.initializer}, weights)
    return changed


def default_opset(model):
    for opset in model.opset_import:
        if opset.domain in DEFAULT_DOMAINS:
            return opset.version
    return onnx.defs.onnx_opset_version()


def _write_back(graph, kept, values, inits, weights):
    """The graph's nodes become kept (minus what no output needs); every folded value a kept node reads
    becomes an initializer (weights.initializer: a large one a placeholder), and the initializers nothing
    reads go."""
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
    kept_inits, new_inits = set(), []
    for name in read:
        if name in producer and id(producer[name]) in live:
            continue
        if name in inits:
            kept_inits.add(name)
        elif name in values and values[name] is not None:
            new_inits.append(weights.initializer(name, values[name]))
    del graph.node[:]
    graph.node.extend(nodes)
    for k in reversed(range(len(graph.initializer))):  # in place: moving the protos would copy their data
        tensor = graph.initializer[k]
        if tensor.name not in kept_inits or inits.get(tensor.name) is not tensor:
            del graph.initializer[k]
    graph.initializer.extend(new_inits)
    graph.initializer.sort(key=lambda t: t.name)
