"""A random weight made a block of rows at a time as it is written (a StreamedWeight for OnnxGraphBuilder:
shape, dtype, blocks()), so that a random model of any size is exported in bounded memory."""

import math

import numpy as np

BLOCK_VALUES = 1 << 24  # made at a time: 64 MiB of fp32 before the cast


class RandomMatrix:
    """scale * N(0, 1) values of shape in dtype, from a generator seeded with seed alone, so that no weight
    depends on another's values or on the order they are written in. Its transpose is a RandomMatrix of the
    transposed shape: independent values are independent in any layout, so it is made in the layout it is
    stored in (the values differ from a transpose of this one's; their distribution does not)."""

    def __init__(self, shape, scale, seed, dtype):
        self.shape, self.scale, self.seed, self.dtype = tuple(shape), float(scale), seed, np.dtype(dtype)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def T(self):
        return RandomMatrix(tuple(reversed(self.shape)), self.scale, self.seed, self.dtype)

    def blocks(self):
        """The values, a block of rows at a time (dtype, [rows, *shape[1:]])."""
        rng = np.random.default_rng(self.seed)
        row = math.prod(self.shape[1:])
        step = max(1, BLOCK_VALUES // max(1, row))
        for start in range(0, self.shape[0], step):
            rows = min(step, self.shape[0] - start)
            values = rng.standard_normal((rows, *self.shape[1:]), dtype=np.float32)
            values *= np.float32(self.scale)
            yield values.astype(self.dtype)

    def __array__(self, dtype=None, copy=None):
        values = np.concatenate(list(self.blocks()))
        return values if dtype is None else values.astype(dtype)
