"""What model.safetensors stores for each mapped tensor, and its writing a block of rows at a time:

  StoredFloat       a float weight in its stored dtype (write/weight_dtype.py)
  StoredQuantized   a quantized matrix's integers, scales and zero points or mins (quantized/matrix.py): the
                    graph's own (quantized/lazy_matrix.py), or quantized here under --quantize (quantized/rtn.py)

Each block is read (graph/lazy_tensor.py), checked for NaN and infinity (write/weight_check.py), cast or
quantized, and written where it belongs in the file (write/safetensors_file.py) before the next is read, so
the converter holds one weight at most, whatever the model's size. Tensors are written in the mapped order,
so a check that fails names the same weight the whole-model check named.
"""

from .safetensors_file import SafetensorsWriter
from .weight_dtype import cast_block, stored_dtype
from ..graph.lazy_tensor import LazyTensor, row_blocks


class StoredFloat:
    def __init__(self, name, tensor, dtype):
        """tensor: array or LazyTensor in kvx layout; dtype: weights.dtype ("f32" or "f16")."""
        self.name, self.tensor = name, tensor
        self.dtype = stored_dtype(name, tensor, dtype)

    def entries(self):
        return {self.name: (self.dtype, tuple(self.tensor.shape))}

    def write(self, out, check):
        values = self.tensor
        if isinstance(values, LazyTensor) and len(values.astype(self.dtype).element_ops) < len(values.element_ops):
            values = values.astype(self.dtype)  # stored as read: the graph's Cast widened them exactly
        for start, block in row_blocks(values):
            if check is not None:
                check.check_block(self.name, self.tensor, block)
            out.write_rows(self.name, start, cast_block(self.name, block, self.dtype, self.tensor))


class StoredQuantized:
    def __init__(self, name, matrix):
        """matrix: a LazyQuantizedMatrix or RtnQuantized (layout, values, blocks)."""
        self.name, self.matrix = name, matrix

    def entries(self):
        return self.matrix.layout.entries(self.name)

    def write(self, out, check):
        for start, values, matrix in self.matrix.blocks():
            # Checked what the graph computes with, as the float weights are: the floats quantized here, or the
            # graph's integers dequantized, unless their scales alone show every value finite.
            if check is not None and (values is not None or not matrix.surely_finite()):
                floats = values if values is not None else matrix.dequantized()
                check.check_block(self.name, self.matrix.values, floats)
            for entry, array in matrix.to_tensors(self.name).items():
                out.write_rows(entry, start, array)


def stored_weights(names, floats, quantized, dtype):
    """The StoredFloat and StoredQuantized of the tensors names (the mapped order). floats: kvx name -> array or
    LazyTensor; quantized: kvx name -> LazyQuantizedMatrix or RtnQuantized; dtype: weights.dtype."""
    return [StoredQuantized(name, quantized[name]) if name in quantized else StoredFloat(name, floats[name], dtype)
            for name in names if name in floats or name in quantized]


def write_weights(path, weights, check=None):
    """Writes model.safetensors at path: weights, a list of StoredFloat / StoredQuantized; check: a
    weight_check.FiniteCheck, or None."""
    entries = {}
    for weight in weights:
        entries.update(weight.entries())
    out = SafetensorsWriter(path, entries)
    try:
        for weight in weights:
            weight.write(out, check)
    except BaseException:
        out.abandon()
        raise
    out.close()
