"""A tensor that is not in memory: where its values are (a range of an external-data file, the raw data of
a TensorProto the parsed model holds, or a computation such as a dequantization) and the views the converter
has taken of it since (transposes, reshapes, slices, casts). A graph's large constants stay LazyTensors from
loading to writing, so that the converter holds one weight at a time whatever the model's size
(docs/model-format.md, "Large models: memory").

What a matcher asks of a weight, its shape, dtype and rank, needs no data. numpy reads the values through
__array__ (np.asarray, np.array_equal, arithmetic): the source is read and the views applied, every time.
Nothing is cached: a cache would grow into the whole-model copy this type exists to avoid. The writer reads
blocks of rows (row_blocks), which read only those rows of the source where the views keep rows apart, and
applies casts a block at a time.

The views are kept in a canonical order and form, so that two spellings of one tensor have one identity()
without reading either: shape operations (transpose, reshape, basic indexing) first, then element operations
(casts, a scale factor), which commute with them; a transpose of a transpose is composed (the Transpose of a
tied embedding, transposed back by the classifier's mapper, is the embedding), an index moves ahead of a
transpose, and a cast to a wider float and back is dropped.
"""

import math

import numpy as np
from onnx import TensorProto, numpy_helper

BLOCK_BYTES = 1 << 26  # what row_blocks reads or casts at a time: 64 MiB
TILE = 256  # rows and columns copied at a time when a block of a transposed matrix is made contiguous
# dtypes np.fromfile reads as ONNX stores them (little-endian, one element per item); others (int4, bfloat16,
# float8: numpy has no type of their own) are decoded by onnx's numpy_helper.
PLAIN_TYPES = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32,
                                              np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_))
# (from, to) float casts that lose nothing, so a cast back undoes them
EXACT_WIDENINGS = frozenset((np.dtype(a), np.dtype(b)) for a, b in
                            ((np.float16, np.float32), (np.float16, np.float64), (np.float32, np.float64)))


class FileRange:
    """length bytes at offset in path: an external-data tensor of ONNX type proto_type and shape. Read with
    np.fromfile into memory the process owns and frees, not mapped: an mmap's pages stay resident once
    touched, and a model's worth of them would count against the process as its own."""

    def __init__(self, path, offset, length, proto_type, shape, dtype):
        self.path, self.offset, self.length = str(path), offset, length
        self.proto_type, self.shape, self.dtype = proto_type, tuple(shape), np.dtype(dtype)
        self.key = ("file", self.path, offset, length, proto_type, self.shape)
        self.rows_apart = self.dtype in PLAIN_TYPES  # whether read_rows reads only the rows' bytes

    def read(self):
        if self.dtype not in PLAIN_TYPES:
            return self._decoded()
        count = math.prod(self.shape)
        return _checked(np.fromfile(self.path, self.dtype, count, offset=self.offset), count, self.path) \
            .reshape(self.shape)

    def read_rows(self, start, stop):
        """Rows start:stop of the tensor (first axis), reading only their bytes."""
        if self.dtype not in PLAIN_TYPES or not self.shape:
            return self.read()[start:stop]
        row = math.prod(self.shape[1:])
        count = (stop - start) * row
        values = np.fromfile(self.path, self.dtype, count, offset=self.offset + start * row * self.dtype.itemsize)
        return _checked(values, count, self.path).reshape((stop - start, *self.shape[1:]))

    def _decoded(self):
        tensor = TensorProto(data_type=self.proto_type, dims=self.shape)
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            tensor.raw_data = f.read(self.length)
        return numpy_helper.to_array(tensor)


def _checked(values, count, path):
    """values as np.fromfile read them; an OSError when the file has shrunk since it was checked."""
    if values.size != count:
        raise OSError(f"{path}: shorter than when it was opened (read {values.size} of {count} values)")
    return values


class ProtoData:
    """The data of a TensorProto the parsed model holds (an ONNX file with its weights inside): numpy_helper
    copies it out when read, so the parsed model stays the one whole copy."""

    def __init__(self, proto, shape, dtype):
        self.proto, self.shape, self.dtype = proto, tuple(shape), np.dtype(dtype)
        self.key = ("proto", id(proto))  # proto is held, so the id stays its own
        self.rows_apart = False  # numpy_helper copies out the whole tensor at every read

    def read(self):
        return numpy_helper.to_array(self.proto)

    def read_rows(self, start, stop):
        return self.read()[start:stop]


class Computed:
    """Values computed rows at a time: compute_rows(start, stop) gives rows start:stop of a [rows, ...]
    tensor (a dequantized matrix). origin: what computes them, for readers that can use it whole (the
    quantized matrix a dequantization came from). rows_apart: whether computing rows reads only their
    inputs (else the values are computed once, whole, where all are needed)."""

    def __init__(self, shape, dtype, compute_rows, origin=None, rows_apart=True):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.compute_rows, self.origin, self.rows_apart = compute_rows, origin, rows_apart
        self.key = ("computed", id(self))

    def read(self):
        return self.compute_rows(0, self.shape[0])

    def read_rows(self, start, stop):
        return self.compute_rows(start, stop)


class LazyTensor:
    """source (FileRange, ProtoData or Computed) seen through shape_ops, then element_ops (the module's
    docstring). Immutable: every view returns a new LazyTensor."""

    def __init__(self, source, shape_ops=(), element_ops=(), shapes=None, dtypes=None):
        self.source = source
        self.shape_ops = tuple(shape_ops)  # ("transpose", perm) | ("reshape", shape) | ("index", items) |
        #                                    ("take", (axis, indices))
        self.element_ops = tuple(element_ops)  # ("cast", dtype) | ("scale", factor)
        self._shapes = shapes or (source.shape,)  # the shape before the first shape op and after each
        self._dtypes = dtypes or (source.dtype,)  # the dtype before the first element op and after each

    # -- what a matcher reads without data -------------------------------------------------------

    @property
    def shape(self):
        return self._shapes[-1]

    @property
    def dtype(self):
        return self._dtypes[-1]

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self):
        return f"LazyTensor({self.source.key[0]}, shape={list(self.shape)}, dtype={self.dtype})"

    def identity(self):
        """What the values are made of: equal identities mean equal values (the converse need not hold)."""
        return self.source.key, self.shape_ops, tuple((kind, str(value)) for kind, value in self.element_ops)

    # -- views -----------------------------------------------------------------------------------

    @property
    def T(self):
        return self.transpose()

    def transpose(self, *axes):
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0]) if axes[0] is not None else ()
        perm = tuple(int(a) % self.ndim for a in axes) if axes else tuple(reversed(range(self.ndim)))
        if sorted(perm) != list(range(self.ndim)):
            raise ValueError(f"axes {axes} do not match a tensor of {self.ndim} dims")
        return self._with_transpose(perm)

    def swapaxes(self, a, b):
        perm = list(range(self.ndim))
        perm[a], perm[b] = perm[b], perm[a]
        return self._with_transpose(tuple(perm))

    def reshape(self, *shape):
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        return self._with_reshape(_resolved_shape(self.shape, shape))

    def __getitem__(self, key):
        items = _basic_index(key, self.shape)
        if items is None:  # advanced indexing (arrays, None, booleans): numpy's, on the values
            return self.read()[key]
        return self._with_index(items)

    def take(self, indices, axis=None):
        """numpy's take along axis: the elements at indices (a permutation of heads' rows or columns, as
        blocks/attention.py re-lays a projection out)."""
        if axis is None:
            return self.reshape(-1).take(indices, 0)
        axis = int(axis) % self.ndim
        size = self.shape[axis]
        indices = tuple(int(i) % size if -size <= int(i) < size else _out_of_bounds(i, size)
                        for i in np.asarray(indices).reshape(-1))
        return self._with_take(axis, indices)

    def astype(self, dtype, copy=True):
        dtype = np.dtype(dtype)
        if dtype == self.dtype:
            return self
        last = self.element_ops[-1] if self.element_ops else None
        if last is not None and last[0] == "cast" and dtype == self._dtypes[-2] \
                and (self._dtypes[-2], self.dtype) in EXACT_WIDENINGS:
            return self._replace(element_ops=self.element_ops[:-1], dtypes=self._dtypes[:-1])
        return self._replace(element_ops=self.element_ops + (("cast", dtype),), dtypes=self._dtypes + (dtype,))

    def __mul__(self, factor):
        """x * a scalar, in numpy's result type (Gemm's alpha folded into its B)."""
        if np.ndim(factor) != 0:
            return NotImplemented
        factor = np.asarray(factor)
        dtype = np.result_type(self.dtype, factor)
        return self._replace(element_ops=self.element_ops + (("scale", factor),), dtypes=self._dtypes + (dtype,))

    __rmul__ = __mul__

    # -- values ----------------------------------------------------------------------------------

    def read(self):
        """The values, as a numpy array (not necessarily contiguous)."""
        return self._elements(self._shaped())

    def __array__(self, dtype=None, copy=None):
        values = self.read()
        return values if dtype is None else values.astype(dtype)

    def __iter__(self):
        return iter(self.read())

    def row_blocks(self, max_bytes=BLOCK_BYTES, rows=None):
        """(first row, values of rows first.. as an array) in order along the first axis, each block rows long
        (by default as many as fit max_bytes in the widest dtype the values pass through, one at least). Where
        every shape operation keeps the rows apart, each block reads only its rows of the source; otherwise
        the source is read once, whole, and the element operations (casts) still go a block at a time."""
        if not self.shape:
            yield 0, self.read()
            return
        step = rows or block_rows(self.shape, max(d.itemsize for d in self._dtypes), max_bytes)
        per_rows = self._ops_per_rows() if self.source.rows_apart else None
        whole = self._shaped() if per_rows is None else None
        for start in range(0, self.shape[0], step):
            stop = min(self.shape[0], start + step)
            if whole is not None:
                block = _contiguous(whole[start:stop])
            else:
                offset, ops = per_rows
                block = self.source.read_rows(offset + start, offset + stop)
                for op in ops:
                    block = _apply_shape_op(block, op, stop - start)
            yield start, self._elements(block)

    # -- inside ----------------------------------------------------------------------------------

    def _replace(self, shape_ops=None, element_ops=None, shapes=None, dtypes=None):
        return LazyTensor(self.source, self.shape_ops if shape_ops is None else shape_ops,
                          self.element_ops if element_ops is None else element_ops,
                          self._shapes if shapes is None else shapes, self._dtypes if dtypes is None else dtypes)

    def _push(self, op, shape):
        return self._replace(shape_ops=self.shape_ops + (op,), shapes=self._shapes + (shape,))

    def _pop(self):
        return self._replace(shape_ops=self.shape_ops[:-1], shapes=self._shapes[:-1])

    def _with_transpose(self, perm):
        if perm == tuple(range(len(perm))):
            return self
        if self.shape_ops and self.shape_ops[-1][0] == "transpose":  # composed: one transpose, or none
            return self._pop()._with_transpose(tuple(self.shape_ops[-1][1][p] for p in perm))
        return self._push(("transpose", perm), tuple(self.shape[p] for p in perm))

    def _with_reshape(self, shape):
        if shape == self.shape:
            return self
        if self.shape_ops and self.shape_ops[-1][0] == "reshape":  # row-major reshapes compose
            return self._pop()._with_reshape(shape)
        return self._push(("reshape", shape), shape)

    def _with_index(self, items):
        if all(isinstance(item, tuple) and item == (0, dim, 1) for item, dim in zip(items, self.shape)):
            return self
        last = self.shape_ops[-1] if self.shape_ops else None
        if last is not None and last[0] == "transpose" and all(isinstance(item, tuple) for item in items):
            perm = last[1]  # index first, then transpose: axis i of the result is axis perm[i] before it
            before = [None] * len(perm)
            for i, p in enumerate(perm):
                before[p] = items[i]
            return self._pop()._with_index(tuple(before))._with_transpose(perm)
        shape = tuple(len(range(*item)) for item in items if isinstance(item, tuple))
        return self._push(("index", items), shape)

    def _with_take(self, axis, indices):
        if indices == tuple(range(self.shape[axis])):
            return self
        last = self.shape_ops[-1] if self.shape_ops else None
        if last is not None and last[0] == "transpose":  # take first, then transpose, as _with_index does
            perm = last[1]
            return self._pop()._with_take(perm[axis], indices)._with_transpose(perm)
        shape = self.shape[:axis] + (len(indices),) + self.shape[axis + 1:]
        return self._push(("take", (axis, indices)), shape)

    def _shaped(self):
        """The source read (only the rows a leading index keeps, where it has one) with the shape ops applied."""
        ops = self.shape_ops
        if ops and ops[0][0] == "index" and isinstance(ops[0][1][0], tuple) and ops[0][1][0][2] == 1:
            start, stop, _ = ops[0][1][0]
            values = self.source.read_rows(start, max(start, stop))
            ops = (("index", ((0, max(0, stop - start), 1),) + ops[0][1][1:]),) + ops[1:]
        else:
            values = self.source.read()
        for op in ops:
            values = _apply_shape_op(values, op)
        return values

    def _elements(self, values):
        for kind, value in self.element_ops:
            if kind == "cast":
                values = values.astype(value)
            else:
                values = values * value
        return values

    def _ops_per_rows(self):
        """(offset, shape ops for a block of rows) when row r of the result is row offset + r of the source
        seen through ops that act on each row alone (a transpose of the other axes, a reshape of them, a
        slice of rows with step 1); else None."""
        offset, ops = 0, []
        for op, before, after in zip(self.shape_ops, self._shapes, self._shapes[1:]):
            kind, value = op
            if kind == "transpose" and value[0] == 0:
                ops.append(op)
            elif kind == "reshape" and before and after and before[0] == after[0]:
                ops.append(op)
            elif kind == "take" and value[0] != 0:
                ops.append(op)
            elif kind == "index" and isinstance(value[0], tuple) and value[0][2] == 1:
                offset += value[0][0]  # every op here keeps row numbers, so the slices' starts add up
                ops.append(("index", (None,) + value[1:]))
            else:
                return None
        return offset, ops


def _contiguous(values):
    """values as a C-contiguous array. A transposed matrix's rows are copied a tile at a time: numpy's own copy
    walks the source down its columns, a cache miss per element, where a tile's source rows stay in cache
    (0.2 s rather than 0.7 to 1.0 s for a 4096 x 14336 fp16 matrix on the 2-core test machine)."""
    if values.flags.c_contiguous or values.ndim != 2:
        return values
    out = np.empty(values.shape, values.dtype)
    for i in range(0, values.shape[0], TILE):
        for j in range(0, values.shape[1], TILE):
            out[i:i + TILE, j:j + TILE] = values[i:i + TILE, j:j + TILE]
    return out


def _apply_shape_op(values, op, rows=None):
    """op on values; rows: the rows of a block, where a reshape's leading dim and a row index are the block's."""
    kind, value = op
    if kind == "transpose":
        return values.transpose(value)
    if kind == "reshape":
        return values.reshape(value if rows is None else (rows, *value[1:]))
    if kind == "take":
        return np.take(values, value[1], axis=value[0])
    return values[tuple(slice(None) if item is None else slice(*item) if isinstance(item, tuple) else item
                        for item in value)]


def _out_of_bounds(index, size):
    raise IndexError(f"index {index} is out of bounds for axis with size {size}")


def _resolved_shape(shape, target):
    """target with a -1 resolved, as numpy's reshape takes it; ValueError as numpy's when it does not fit."""
    target = tuple(int(d) for d in target)
    size = math.prod(shape)
    if target.count(-1) > 1 or any(d < -1 for d in target):
        raise ValueError(f"cannot reshape a tensor of shape {list(shape)} into shape {list(target)}")
    if -1 in target:
        known = math.prod(d for d in target if d != -1)
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape array of size {size} into shape {list(target)}")
        target = tuple(size // known if d == -1 else d for d in target)
    if math.prod(target) != size:
        raise ValueError(f"cannot reshape array of size {size} into shape {list(target)}")
    return target


def _basic_index(key, shape):
    """key as one item per axis, (start, stop, step) for a slice and an int for an index, resolved against
    shape; None for indexing that is not basic (arrays, None, booleans). IndexError as numpy's."""
    key = key if isinstance(key, tuple) else (key,)
    if any(k is None or isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer, slice, type(Ellipsis)))
           for k in key):
        return None
    if key.count(Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (len(shape) - len(key) + 1) + key[at + 1:]
    if len(key) > len(shape):
        raise IndexError(f"too many indices for a tensor of {len(shape)} dims")
    key = key + (slice(None),) * (len(shape) - len(key))
    items = []
    for k, dim in zip(key, shape):
        if isinstance(k, slice):
            items.append(k.indices(dim))
        else:
            k = int(k)
            if not -dim <= k < dim:
                raise IndexError(f"index {k} is out of bounds for axis with size {dim}")
            items.append(k % dim)
    return tuple(items)


def block_rows(shape, itemsize, max_bytes=BLOCK_BYTES):
    """How many rows of a tensor of shape (first axis the rows) fit max_bytes at itemsize, one at least."""
    return max(1, max_bytes // max(1, math.prod(shape[1:]) * itemsize))


def same_values(a, b, max_bytes=BLOCK_BYTES):
    """np.array_equal(a, b) for arrays or LazyTensors, without holding both whole: equal identities answer
    without reading; otherwise the two are compared a block of rows at a time (a LazyTensor whose views mix
    rows is read once, whole, the other a block at a time)."""
    if tuple(a.shape) != tuple(b.shape):
        return False
    if isinstance(a, LazyTensor) and isinstance(b, LazyTensor) and a.identity() == b.identity():
        return True
    rows = block_rows(a.shape, 8, max_bytes) if a.shape else None
    return all(np.array_equal(x, y) for (_, x), (_, y) in zip(row_blocks(a, rows=rows), row_blocks(b, rows=rows)))


def row_blocks(tensor, max_bytes=BLOCK_BYTES, rows=None):
    """LazyTensor.row_blocks, also for a numpy array (views of it)."""
    if isinstance(tensor, LazyTensor):
        yield from tensor.row_blocks(max_bytes, rows)
        return
    if tensor.ndim == 0:
        yield 0, tensor
        return
    step = rows or block_rows(tensor.shape, tensor.dtype.itemsize, max_bytes)
    for start in range(0, tensor.shape[0], step):
        yield start, tensor[start:start + step]
