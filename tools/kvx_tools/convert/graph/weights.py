"""The values of a graph's large constants, kept out of its TensorProtos as LazyTensors (graph/lazy_tensor.py):
read from their file or their proto only when a weight is written, one at a time.

Large means more than LARGE_ELEMENTS elements: every weight matrix, embedding and position table. Smaller
constants (norm weights, shapes, scalars, masks of a few positions) are read at once and stay numpy arrays,
so shape inference and the matchers' arithmetic see them as before.

The graph keeps a TensorProto for every initializer, the large ones' without data (a placeholder: the
external-data entries it was read with, or just its type and dims), so that the rewrites and onnx's shape
inference see its name, type and dims; the value by name comes from here. A rewrite that makes a new large
constant (a folded Transpose of a weight, a dequantized matrix) registers it with initializer().
"""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from .external_data import read_external_data
from .lazy_tensor import FileRange, LazyTensor, ProtoData
from .tensors import constant_values, element_type

# Constants of at most this many elements are read at once; shape inference gets them, with their data
# (graph/folding.py, SMALL_CONSTANT), so a placeholder is never among them.
LARGE_ELEMENTS = 4096


def is_large(value):
    return value.size > LARGE_ELEMENTS


class GraphWeights:
    """Tensor name -> LazyTensor for the graph's large initializers and Constant-node values."""

    def __init__(self):
        self._lazy = {}

    def get(self, name):
        """The LazyTensor of constant name, or None where it is small (its proto holds it) or unknown."""
        return self._lazy.get(name)

    def initializer(self, name, value):
        """An initializer holding value (a numpy array or a LazyTensor) to add to the graph: a small value's
        data itself, a large LazyTensor's placeholder (its value registered here under name)."""
        if isinstance(value, LazyTensor) and is_large(value):
            self._lazy[name] = value
            return _placeholder(name, value)
        return numpy_helper.from_array(np.asarray(value), name)


def _placeholder(name, value):
    """A TensorProto of value's type and dims and no data."""
    return TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(value.dtype), dims=value.shape)


def model_weights(model, path, located):
    """The GraphWeights of a loaded model (graph/load.py) whose external data located (external_data.py)
    lists: large external tensors become FileRanges of their data file, large inline ones ProtoData of the
    parsed model; the small external ones are read into their protos now."""
    weights = GraphWeights()
    external = {id(tensor): (data_path, offset, length) for tensor, data_path, offset, length in located}
    small = []
    for name, tensor in constant_values(model):
        count = int(np.prod(tensor.dims, dtype=np.float64)) if tensor.dims else 1
        where = external.pop(id(tensor), None)
        if count <= LARGE_ELEMENTS:
            if where is not None:
                small.append((tensor, *where))
            continue
        dtype = element_type(tensor, name, path)
        if where is not None:
            weights._lazy[name] = LazyTensor(FileRange(where[0], where[1], where[2], tensor.data_type, tensor.dims,
                                                       dtype))
        else:
            weights._lazy[name] = LazyTensor(ProtoData(tensor, tensor.dims, dtype))
    # What external data no name reads (a tensor attribute of another op) is read now, as it always was.
    small.extend((tensor, *where) for tensor, where in _still_located(located, external))
    read_external_data(small)
    return weights


def _still_located(located, external):
    for tensor, *_ in located:
        if id(tensor) in external:
            yield tensor, external[id(tensor)]
