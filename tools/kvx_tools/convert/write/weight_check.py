"""--check-weights (on by default): no weight the model directory stores may hold a NaN or an infinity. Such a
value converts silently and surfaces only at run time, as garbage text from a model that loaded fine.

Only the tensors kvx stores are checked, not every float in the graph: exporters legitimately put -inf into
attention-mask constants, which the engine never reads.
"""

import numpy as np

from ..errors import ConvertError

CHUNK = 1 << 24  # elements counted at a time: the boolean mask of a whole embedding could take gigabytes


def nonfinite_count(array):
    """How many of array's values are NaN or infinite."""
    flat = array.reshape(-1)
    return sum(int(np.count_nonzero(~np.isfinite(flat[start:start + CHUNK])))
               for start in range(0, flat.size, CHUNK))


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


def check_finite_weights(tensors, constants):
    """tensors: kvx name -> array to store; constants: ONNX name -> array of every constant the mapper read."""
    for name, array in tensors.items():
        count = nonfinite_count(array)
        if count:
            source = _onnx_source(array, count, constants)
            origin = f" (ONNX initializer '{source}')" if source else ""
            raise ConvertError(f"weight {name}{origin} holds {count} non-finite value{'s' * (count != 1)} "
                               "(NaN or infinity); convert with --no-check-weights to keep them")
