"""Loads an ONNX file for conversion, turning every way the input can be bad into a ConvertError.

External data is read here rather than by onnx.load: onnx reads a truncated data file silently short,
and the converter must say which file is broken instead of failing later on a reshape.
"""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, external_data_helper, helper

from .convert_errors import ConvertError


def load_onnx_model(path):
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
    _read_external_data(_locate_external_data(model, path))
    _check_inline_sizes(model, path)
    return model


def check_onnx_model(path, graph):
    """onnx.checker's verdict on the file, by path, so that it resolves external data as the runtime
    would and never needs the weights in memory (models over 2 GB cannot be checked in memory).

    Run after the operator check: some exporters (ONNX Runtime GenAI's builder) write graphs that are
    not topologically sorted, which the checker rejects; the unsupported operator is the better answer.
    Graphs with operators that onnx does not define (ONNX Runtime's fused ones, which the operator check
    has let through) are beyond the checker: for them the dataflow is checked instead."""
    if any(not onnx.defs.has(node.op_type, node.domain) for node in graph.node):
        _check_dataflow(path, graph)
        return
    try:
        onnx.checker.check_model(str(path))
    except Exception as e:
        raise ConvertError(f"{path}: invalid ONNX model ({_one_line(e)})") from None


def _check_dataflow(path, graph):
    """Every node input is a graph input, an initializer or some node's output, and the nodes have an
    order that computes each input before it is read (no cycle), whatever order the file lists them in."""
    produced_by = {out: node for node in graph.node for out in node.output if out}
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
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


def _all_tensors(model):
    """Initializers and Constant-node values of the main graph."""
    yield from model.graph.initializer
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t


def _expected_bytes(tensor):
    count = int(np.prod(tensor.dims, dtype=np.int64)) if tensor.dims else 1
    return count * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


def _locate_external_data(model, model_path):
    """[(tensor, data file, offset, length)] for every tensor stored outside the model file, after
    checking that each range lies inside an existing file in the model's folder."""
    base = model_path.parent.resolve()
    located = []
    for tensor in _all_tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        try:
            info = external_data_helper.ExternalDataInfo(tensor)
        except ValueError as e:
            raise ConvertError(f"{model_path}: bad external data entry: {_one_line(e)}") from None
        data_path = (base / info.location).resolve()
        if base not in data_path.parents:
            raise ConvertError(f"{model_path}: external data location '{info.location}' of tensor "
                               f"'{tensor.name}' lies outside the model's folder")
        if not data_path.is_file():
            raise ConvertError(f"{model_path}: external data file '{info.location}' (tensor '{tensor.name}') "
                               f"not found next to the model")
        offset = info.offset or 0
        length = info.length if info.length is not None else _expected_bytes(tensor)
        if length != _expected_bytes(tensor):
            raise ConvertError(f"{model_path}: tensor '{tensor.name}' has {length} bytes of external data, "
                               f"its shape needs {_expected_bytes(tensor)}")
        file_size = data_path.stat().st_size
        if offset + length > file_size:
            raise ConvertError(f"{data_path}: truncated: tensor '{tensor.name}' needs bytes "
                               f"{offset}..{offset + length} but the file has {file_size}")
        located.append((tensor, data_path, offset, length))
    return located


def _read_external_data(located):
    for tensor, data_path, offset, length in located:
        with open(data_path, "rb") as f:
            f.seek(offset)
            tensor.raw_data = f.read(length)
        del tensor.external_data[:]
        tensor.data_location = TensorProto.DEFAULT


def _check_inline_sizes(model, model_path):
    for tensor in _all_tensors(model):
        if tensor.HasField("raw_data") and len(tensor.raw_data) != _expected_bytes(tensor):
            raise ConvertError(f"{model_path}: tensor '{tensor.name}' holds {len(tensor.raw_data)} bytes, "
                               f"its shape needs {_expected_bytes(tensor)} (truncated file?)")
