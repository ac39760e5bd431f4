"""--check-weights (on by default): no weight the model directory stores may hold a NaN or an infinity. Such a
value converts silently and surfaces only at run time, as garbage text from a model that loaded fine.

Only the tensors kvx stores are checked, not every float in the graph: exporters legitimately put -inf into
attention-mask constants, which the engine never reads. The writer checks each block of rows of a weight
before it stores it (write/stored_weights.py), so no weight is read twice for it.
"""

import numpy as np

from ..errors import ConvertError
from ..graph.lazy_tensor import row_blocks

def _block_count(block):
    """NaNs and infinities in block: rows of a weight (row_blocks bounds them, and so the boolean mask)."""
    return int(block.size - np.count_nonzero(np.isfinite(block)))


def nonfinite_count(array):
    """How many of array's values (an array or a LazyTensor, a block of rows at a time) are NaN or infinite."""
    return sum(_block_count(block) for _, block in row_blocks(array))


def _onnx_source(array, count, constants):
    """The name of the ONNX constant that a kvx tensor with count non-finite values came from, or None. The
    mapper transposes, permutes, slices or splits what it reads, so the source is told apart by what such
    changes keep: the same number of elements and of non-finite values; failing that, the only constant read
    that holds any non-finite value."""
    suspects = {name: nonfinite_count(value) for name, value in constants.items()
                if value.dtype in (np.float16, np.float32, np.float64)}
    suspects = {name: n for name, n in suspects.items() if n}
    same = [name for name, n in suspects.items() if n == count and constants[name].size == array.size]
    if len(same) == 1:
        return same[0]
    return next(iter(suspects)) if len(suspects) == 1 else None


class FiniteCheck:
    """The check, block by block. constants: a function giving ONNX name -> array (or LazyTensor) of every
    constant the mapper read, called only to name the source of a weight that fails."""

    def __init__(self, constants):
        self.constants = constants

    def check_block(self, name, tensor, block):
        """Raises when block (rows of the weight tensor, stored as name) holds a NaN or an infinity; the
        message counts those of the whole tensor."""
        if _block_count(block):
            count = nonfinite_count(tensor)
            source = _onnx_source(tensor, count, self.constants())
            origin = f" (ONNX initializer '{source}')" if source else ""
            raise ConvertError(f"weight {name}{origin} holds {count} non-finite value{'s' * (count != 1)} "
                               "(NaN or infinity); convert with --no-check-weights to keep them")
