"""The tensors an ONNX model holds (initializers and Constant-node values) and the storage each one's shape
and type need, checked before anything is read or allocated by them: a crafted file can declare any dims and
any type number, and numpy would trust them (its int64 product of dims wraps around; an unknown type raises
KeyError deep inside onnx)."""

import math

import onnx
from onnx import TensorProto, helper

from ..errors import ConvertError, node_label

# Types whose elements pack several to a byte or to an int32, with their bits per element: their storage is
# not one entry per element. Of them kvx reads int4 / uint4 (blockwise DequantizeLinear's weights); for the
# typed fields only the type and the dims are checked, raw data against its packed size.
PACKED_BITS = {getattr(TensorProto, name): bits for name, bits in
               (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2)) if hasattr(TensorProto, name)}
PACKED_TYPES = frozenset(PACKED_BITS)
COMPLEX_TYPES = frozenset((TensorProto.COMPLEX64, TensorProto.COMPLEX128))  # two entries per element


def all_tensors(model):
    """(name for messages, TensorProto) of every initializer and Constant-node value of the main graph."""
    for tensor in model.graph.initializer:
        yield tensor.name, tensor
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t.name or f"value of Constant node {node_label(node)}", attr.t


def constant_values(model):
    """(tensor name, TensorProto) of every constant a graph index reads by name: the initializers and the
    value of each Constant node (named by its output)."""
    for tensor in model.graph.initializer:
        yield tensor.name, tensor
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                    yield node.output[0], attr.t


def element_count(tensor, name, where):
    """The product of tensor's dims as an exact Python int."""
    if any(d < 0 for d in tensor.dims):
        raise ConvertError(f"{where}: tensor '{name}' has a negative dimension in its shape {list(tensor.dims)}")
    return math.prod(tensor.dims)


def element_type(tensor, name, where):
    """tensor's numpy dtype."""
    try:
        if tensor.data_type == TensorProto.UNDEFINED:
            raise KeyError(tensor.data_type)
        return helper.tensor_dtype_to_np_dtype(tensor.data_type)
    except KeyError:
        raise ConvertError(f"{where}: tensor '{name}' has unknown data type {tensor.data_type}") from None


def expected_bytes(tensor, name, where):
    """The bytes tensor's dims and type need when stored raw (onnx's raw_data, or external data)."""
    count = element_count(tensor, name, where)
    if tensor.data_type in PACKED_BITS:
        return -(-count * PACKED_BITS[tensor.data_type] // 8)
    return count * element_type(tensor, name, where).itemsize


def check_inline_sizes(model, where):
    """Every tensor stored in the model file holds as much data as its shape needs: raw_data bytes, or the
    entries of the typed field (float_data, int64_data, ...) its type stores in."""
    for name, tensor in all_tensors(model):
        if tensor.data_location == TensorProto.EXTERNAL:
            continue  # checked against its data file when located
        needed = expected_bytes(tensor, name, where)
        if tensor.HasField("raw_data"):
            if len(tensor.raw_data) != needed:
                raise ConvertError(f"{where}: tensor '{name}' holds {len(tensor.raw_data)} bytes, its shape needs "
                                   f"{needed} (truncated file?)")
            continue
        if tensor.data_type in PACKED_TYPES:
            continue
        count = element_count(tensor, name, where) * (2 if tensor.data_type in COMPLEX_TYPES else 1)
        entries = len(getattr(tensor, helper.tensor_dtype_to_field(tensor.data_type)))
        if entries != count:
            raise ConvertError(f"{where}: tensor '{name}' holds {entries} values, its shape "
                               f"{list(tensor.dims)} needs {count}")
