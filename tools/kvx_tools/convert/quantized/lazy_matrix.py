"""A quantized matrix of the graph before its integers are read: its layout (quantized/matrix.py) and a
function that reads a range of its rows into a QuantizedMatrix. quantized/ops.py makes one per quantized
node without reading the node's constants; the dequantized weights the matchers see are a LazyTensor
computed from it, and the writer stores it a block of rows at a time, so a model's integers are never
all in memory at once (whether as the graph's packed bytes, unpacked, or dequantized)."""

from dataclasses import replace

import numpy as np

from ..graph.lazy_tensor import BLOCK_BYTES, Computed, LazyTensor, block_rows


class LazyQuantizedMatrix:
    """layout: the QuantizedLayout of the whole matrix; read_rows(start, stop): the QuantizedMatrix of rows
    start:stop. rows_apart: whether read_rows reads only those rows (False where the graph stores the matrix
    transposed, as DequantizeLinear's [K, N]: it is then read whole, once)."""

    def __init__(self, layout, read_rows, rows_apart=True):
        self.layout, self.read_rows, self.rows_apart = layout, read_rows, rows_apart
        self.values = LazyTensor(Computed((layout.rows, layout.cols), layout.scales_dtype,
                                          lambda start, stop: self.read_rows(start, stop).dequantized(),
                                          origin=self, rows_apart=rows_apart))

    @property
    def rows(self):
        return self.layout.rows

    def take_rows(self, index):
        """The matrix of rows index (a permutation or a part: a fused projection split by the mapper)."""
        index = np.asarray(index)
        layout = replace(self.layout, rows=len(index))

        def read_rows(start, stop):
            wanted = index[start:stop]
            if not wanted.size:
                return self.read_rows(0, 0)
            first = int(wanted.min())
            return self.read_rows(first, int(wanted.max()) + 1).take_rows(wanted - first)
        return LazyQuantizedMatrix(layout, read_rows, self.rows_apart)

    def blocks(self, max_bytes=BLOCK_BYTES):
        """(first row, None: no float values are at hand, their QuantizedMatrix), block by block."""
        step = block_rows((self.rows, self.layout.cols), 4, max_bytes) if self.rows_apart else max(1, self.rows)
        for start in range(0, self.rows, step):
            yield start, None, self.read_rows(start, min(self.rows, start + step))
