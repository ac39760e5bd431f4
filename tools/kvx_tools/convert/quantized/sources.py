"""The quantized matrices a graph holds, and which of the mapped model's float matrices each one became.

The mappers see quantized weights as the float matrices they dequantize to (quantized/ops.py) and may
split, reorder or share them: GenAI's builder fuses q, k and v into one MatMulNBits that the mapper splits
into wq, wk and wv; a RoPE permutation reorders rows; a tied classifier is the embedding's data.

A mapped matrix that is a LazyTensor of the dequantized values, whole, a range of their rows or their rows in
another order, is that matrix (or those rows of it), known from its views without reading anything. Any other mapped matrix that
may hold dequantized rows (one computed from them, or a small one read at once) is traced back row by row:
each of its rows is looked up among the dequantized rows of the graph's quantized matrices, and when all of
them come from one matrix, the mapped matrix is that matrix's rows in that order, stored quantized. A
matrix the mapper computed anew (no such rows), or read from a float initializer, stays float.
"""

import hashlib
import sys

import numpy as np

from ..graph.lazy_tensor import Computed, LazyTensor, row_blocks


def _row_keys(matrix):
    """One digest per row of a [rows, cols] float matrix (its bytes with its shape and dtype), a block of rows
    at a time."""
    prefix = f"{matrix.dtype.str}{matrix.shape[1]}".encode()
    return [hashlib.blake2b(prefix + row.tobytes(), digest_size=16).digest()
            for _, block in row_blocks(matrix) for row in np.ascontiguousarray(block)]


class QuantizedSources:
    def __init__(self):
        self.matrices = []  # LazyQuantizedMatrix, [rows, cols]
        self._index = None  # row digest -> (matrix index, row), built when a mapped matrix is first traced

    def add(self, matrix):
        """Registers matrix (a LazyQuantizedMatrix); returns the float [rows, cols] the graph computes with,
        a LazyTensor of its dequantized values."""
        self.matrices.append(matrix)
        return matrix.values

    def quantized_as(self, tensor):
        """The (lazy) quantized matrix whose dequantized rows are tensor's rows (a float [rows, cols]), or None."""
        if not self.matrices or tensor.ndim != 2:
            return None
        if isinstance(tensor, LazyTensor):
            matrix = self._viewed(tensor)
            if matrix is not None or not self._computed(tensor):
                return matrix
        rows = self._rows()
        found = [rows.get(key) for key in _row_keys(tensor)]
        if any(f is None for f in found) or len({index for index, _ in found}) != 1:
            return None
        matrix = self.matrices[found[0][0]]
        index = np.array([row for _, row in found])
        return matrix if np.array_equal(index, np.arange(matrix.rows)) else matrix.take_rows(index)

    def split(self, tensors, warn=lambda line: print(f"kvx convert: warning: {line}", file=sys.stderr)):
        """(float tensors, {kvx name: quantized matrix}) for the mapped tensors (kvx name -> array or
        LazyTensor): the matrices that came from the graph's quantized weights, and the rest. Warns where a
        mapped matrix holds quantized rows from several sources (it stays float)."""
        if not self.matrices:
            return dict(tensors), {}
        floats, quantized = {}, {}
        for name, tensor in tensors.items():
            matrix = self.quantized_as(tensor)
            if matrix is None:
                if tensor.ndim == 2 and self._computed(tensor) and any(k in self._rows() for k in _row_keys(tensor[:1])):
                    warn(f"{name} mixes rows of several quantized matrices; stored as float")
                floats[name] = tensor
            else:
                quantized[name] = matrix
        return floats, quantized

    def _viewed(self, tensor):
        """The matrix a LazyTensor is, or the rows it is of one (a slice of the first axis), from its views."""
        origin = getattr(tensor.source, "origin", None)
        if not any(origin is m for m in self.matrices) or tensor.element_ops:
            return None
        if not tensor.shape_ops:
            return origin
        if len(tensor.shape_ops) == 1 and tensor.shape_ops[0][0] == "index":
            (start, stop, step), columns = tensor.shape_ops[0][1]
            if columns == (0, origin.layout.cols, 1):
                return origin.take_rows(np.arange(start, stop, step))
        if len(tensor.shape_ops) == 1 and tensor.shape_ops[0][0] == "take" and tensor.shape_ops[0][1][0] == 0:
            return origin.take_rows(np.array(tensor.shape_ops[0][1][1]))  # rows in another order (heads re-laid out)
        return None

    def _computed(self, tensor):
        """Whether tensor may hold dequantized rows: a numpy array (read at once, or computed), or a
        LazyTensor of a dequantization; not a LazyTensor of a float initializer."""
        return not isinstance(tensor, LazyTensor) or isinstance(tensor.source, Computed)

    def _rows(self):
        """Row digest -> (matrix index, row), the first source of equal rows winning; each matrix dequantized
        a block of rows at a time."""
        if self._index is None:
            self._index = {}
            for index, matrix in enumerate(self.matrices):
                for row, key in enumerate(_row_keys(matrix.values)):
                    self._index.setdefault(key, (index, row))
        return self._index
