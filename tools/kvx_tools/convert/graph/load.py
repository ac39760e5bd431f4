"""Loads an ONNX file for conversion, turning every way the input can be bad into a ConvertError.

External data is located and checked here rather than by onnx.load (graph/external_data.py says why), and
every tensor's storage is checked against its shape before numpy sees it (graph/tensors.py). The large
constants are not read: they stay in their data file, or in the parsed model, as LazyTensors
(graph/weights.py) until the writer needs them.
"""

from pathlib import Path

import onnx

from ..errors import ConvertError, node_label
from .external_data import locate_external_data
from .tensors import check_inline_sizes
from .weights import model_weights


def load_onnx_model(path):
    """(model, its GraphWeights) for the ONNX file path; ConvertError for anything unreadable."""
    path = Path(path)
    if not path.exists():
        raise ConvertError(f"{path}: no such file")
    if not path.is_file():
        raise ConvertError(f"{path}: not a file")
    try:
        model = onnx.load_model(str(path), load_external_data=False)
    except OSError as e:
        raise ConvertError(f"{path}: cannot read ({e.strerror or e})") from None
    except Exception as e:  # protobuf's DecodeError and friends; the reason is all the user needs
        raise ConvertError(f"{path}: not an ONNX model, or a truncated one ({_one_line(e)})") from None
    if not model.graph.node:
        raise ConvertError(f"{path}: not an ONNX model (no graph nodes; wrong or truncated file?)")
    located = locate_external_data(model, path)
    check_inline_sizes(model, path)
    return model, model_weights(model, path, located)


def check_onnx_model(path, model):
    """onnx.checker's verdict on the file, by path, so that it resolves external data as the runtime
    would and never needs the weights in memory (models over 2 GB cannot be checked in memory).

    Run after the operator check: some exporters (ONNX Runtime GenAI's builder) write graphs that are
    not topologically sorted, which the checker rejects; the unsupported operator is the better answer.
    Graphs with operators that onnx does not define (ONNX Runtime's fused ones, which the operator check
    has let through) are beyond the checker: for them the dataflow is checked instead, and each node of an
    operator onnx does define against its schema (inputs, outputs, attributes), which the matchers rely on
    as they index a node's inputs."""
    graph = model.graph
    if any(not onnx.defs.has(node.op_type, node.domain) for node in graph.node):
        _check_standard_nodes(path, model)
        _check_dataflow(path, graph)
        return
    try:
        onnx.checker.check_model(str(path))
    except Exception as e:
        raise ConvertError(f"{path}: invalid ONNX model ({_one_line(e)})") from None


def _check_standard_nodes(path, model):
    """Checked in the default domain "" also when a node spells it "ai.onnx", which the converter (like ONNX
    Runtime) accepts as its alias but onnx's schema lookup does not."""
    context = onnx.checker.C.CheckerContext()
    context.ir_version = model.ir_version
    context.opset_imports = {_schema_domain(opset.domain): opset.version for opset in model.opset_import}
    for node in model.graph.node:
        if onnx.defs.has(node.op_type, _schema_domain(node.domain)):
            if node.domain != _schema_domain(node.domain):
                node = _in_domain(node, "")
            try:
                onnx.checker.check_node(node, context)
            except Exception as e:
                raise ConvertError(f"{path}: invalid ONNX model (node '{node_label(node)}': {_one_line(e)})") \
                    from None


def _schema_domain(domain):
    return "" if domain == "ai.onnx" else domain


def _in_domain(node, domain):
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.domain = domain
    return copy


def _check_dataflow(path, graph):
    """Every tensor has one writer (single assignment), every node input is a graph input, an initializer or
    some node's output, and the nodes have an order that computes each input before it is read (no cycle),
    whatever order the file lists them in. A tensor with two writers could hide a cycle from the last check
    (one writer is computable, the other closes a loop) and send the matchers round it for ever."""
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    produced_by = {}
    for node in graph.node:
        for out in node.output:
            if out and (out in produced_by or out in known):
                raise ConvertError(f"{path}: invalid ONNX model (tensor '{out}' is written twice, by node "
                                   f"'{node.name}' and before it)")
            if out:
                produced_by[out] = node
    for node in graph.node:
        for name in node.input:
            if name not in known and name not in produced_by:
                raise ConvertError(f"{path}: invalid ONNX model (node '{node.name}' reads '{name}', which "
                                   "is no graph input, initializer or node output)")
    waiting = {id(node): sum(1 for name in node.input if name not in known) for node in graph.node}
    readers = {}
    for node in graph.node:
        for name in node.input:
            if name not in known:
                readers.setdefault(name, []).append(node)
    ready = [node for node in graph.node if waiting[id(node)] == 0]
    done = 0
    while ready:
        node = ready.pop()
        done += 1
        for out in node.output:
            for reader in readers.get(out, []):
                waiting[id(reader)] -= 1
                if waiting[id(reader)] == 0:
                    ready.append(reader)
    if done != len(graph.node):
        raise ConvertError(f"{path}: invalid ONNX model (its nodes form a cycle)")


def _one_line(error):
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
