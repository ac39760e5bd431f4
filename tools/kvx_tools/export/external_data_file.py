"""ONNX external data written while the graph is built: each initializer's bytes go to MODEL.onnx.data as it is
added (OnnxGraphBuilder), and its TensorProto keeps only where they are. An exporter then holds one weight at a
time, whatever the model's size, and the model file is a graph without weights.

The file is what onnx.save_model(..., save_as_external_data=True, all_tensors_to_one_file=True,
size_threshold=0) writes for the same initializers: every tensor's raw bytes (little-endian) appended in the
order the initializers are added, without gaps, each proto's external_data entries location, offset and
length in that order. A large weight may also come as blocks of rows (a StreamedWeight), written as made.
"""

import os

import numpy as np
from onnx import TensorProto, helper


class ExternalDataFile:
    """MODEL.onnx.data next to the model path, written from empty (a stale file of an earlier export would
    otherwise keep its bytes at the end)."""

    def __init__(self, model_path):
        model_path = os.fspath(model_path)
        self.location = os.path.basename(model_path) + ".data"
        self.path = os.path.join(os.path.dirname(model_path), self.location)
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        self._file = open(self.path, "wb")
        self._offset = 0

    def tensor(self, name, array):
        """The TensorProto of array, its bytes appended to the file."""
        array = np.asarray(array)
        return self._append(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape, [array])

    def streamed_tensor(self, name, weight):
        """The TensorProto of a StreamedWeight (shape, dtype, blocks()), its blocks appended as made."""
        return self._append(name, helper.np_dtype_to_tensor_dtype(np.dtype(weight.dtype)), weight.shape,
                            weight.blocks())

    def close(self):
        self._file.close()

    def discard(self):
        """Closes and removes the file (a build that failed)."""
        self._file.close()
        os.unlink(self.path)

    def _append(self, name, data_type, shape, blocks):
        start = self._offset
        for block in blocks:
            data = np.ascontiguousarray(block)
            if data.dtype.byteorder == ">":
                data = data.astype(data.dtype.newbyteorder("<"))
            self._file.write(memoryview(data).cast("B"))
            self._offset += data.nbytes
        tensor = TensorProto(name=name, data_type=data_type, dims=list(shape), data_location=TensorProto.EXTERNAL)
        for key, value in (("location", self.location), ("offset", start), ("length", self._offset - start)):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
        return tensor
