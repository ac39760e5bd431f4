"""The quantized matrices a graph holds, and which of the mapped model's float matrices each one became.

The mappers see quantized weights as the float matrices they dequantize to (quantized/ops.py) and may
split, reorder or share them: GenAI's builder fuses q, k and v into one MatMulNBits that the mapper splits
into wq, wk and wv; a RoPE permutation reorders rows; a tied classifier is the embedding's data. So a mapped
matrix is traced back row by row: each of its rows is looked up among the dequantized rows of the graph's
quantized matrices, and when all of them come from one matrix, the mapped matrix is that matrix's rows in
that order, stored quantized. A matrix the mapper computed anew (no such rows) stays float.
"""

import hashlib
import sys

import numpy as np


def _row_keys(matrix):
    """One digest per row of a [rows, cols] float matrix (its bytes with its shape and dtype)."""
    matrix = np.ascontiguousarray(matrix)
    prefix = f"{matrix.dtype.str}{matrix.shape[1]}".encode()
    return [hashlib.blake2b(prefix + row.tobytes(), digest_size=16).digest() for row in matrix]


class QuantizedSources:
    def __init__(self):
        self.matrices = []  # QuantizedMatrix, [rows, cols]
        self._rows = {}  # row digest -> (matrix index, row); the first source of equal rows wins

    def add(self, matrix, node):
        """Registers matrix (read from node); returns the float [rows, cols] the graph computes with."""
        weight = matrix.dequantized()
        index = len(self.matrices)
        self.matrices.append(matrix)
        for row, key in enumerate(_row_keys(weight)):
            self._rows.setdefault(key, (index, row))
        return weight

    def quantized_as(self, tensor):
        """The QuantizedMatrix whose dequantized rows are tensor's rows (a float [rows, cols]), or None."""
        if not self.matrices or tensor.ndim != 2:
            return None
        found = [self._rows.get(key) for key in _row_keys(tensor)]
        if any(f is None for f in found) or len({index for index, _ in found}) != 1:
            return None
        matrix = self.matrices[found[0][0]]
        rows = np.array([row for _, row in found])
        return matrix if np.array_equal(rows, np.arange(matrix.rows)) else matrix.take_rows(rows)

    def split(self, tensors, warn=lambda line: print(f"kvx convert: warning: {line}", file=sys.stderr)):
        """(float tensors, {kvx name: QuantizedMatrix}) for the mapped tensors (kvx name -> array): the
        matrices that came from the graph's quantized weights, and the rest. Warns where a mapped matrix holds
        quantized rows from several sources (it stays float)."""
        if not self.matrices:
            return dict(tensors), {}
        floats, quantized = {}, {}
        for name, tensor in tensors.items():
            matrix = self.quantized_as(tensor)
            if matrix is None:
                if tensor.ndim == 2 and any(k in self._rows for k in _row_keys(tensor[:1])):
                    warn(f"{name} mixes rows of several quantized matrices; stored as float")
                floats[name] = tensor
            else:
                quantized[name] = matrix
        return floats, quantized
