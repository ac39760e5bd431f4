"""Writes model.safetensors a block of rows at a time, so that no more than one tensor's data is in memory,
in exactly the bytes safetensors.numpy.save_file writes for the same tensors (kvx's loader, and every other
safetensors reader, reads it unchanged; tests/python/test_safetensors_file.py compares the two):

  8 bytes    the header's length N, little-endian u64
  N bytes    JSON {"name": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}, ...}, compact,
             non-ASCII kept as UTF-8, padded with spaces to a multiple of 8
  the data   each tensor's bytes, row-major, little-endian, at data_offsets from the end of the header

save_file orders the tensors by dtype, the last of safetensors' enumeration first (widest first: F32 before F16
before I8 before U8), then by name, and lays their data out in that order without gaps. Since every offset is
known before any data is written, the data are written in any order, each where it belongs (os.pwrite).
"""

import json
import math
import os
import struct

import numpy as np

# safetensors' dtypes in the order of its Dtype enumeration (save_file sorts by it, last first)
DTYPE_ORDER = ("BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64")
SAFETENSORS_DTYPES = {np.dtype(t): name for t, name in (
    (np.bool_, "BOOL"), (np.uint8, "U8"), (np.int8, "I8"), (np.int16, "I16"), (np.uint16, "U16"),
    (np.float16, "F16"), (np.int32, "I32"), (np.uint32, "U32"), (np.float32, "F32"), (np.float64, "F64"),
    (np.int64, "I64"), (np.uint64, "U64"))}


class SafetensorsWriter:
    """A safetensors file of the tensors entries ({name: (numpy dtype, shape)}), written by write_rows in
    blocks, in any order; close() checks that every tensor was written whole."""

    def __init__(self, path, entries):
        self._slots = {}  # name -> (byte offset in the file, bytes, dtype, shape)
        header, offset = {}, 0
        for name in sorted(entries, key=lambda n: (-DTYPE_ORDER.index(_safetensors_dtype(entries[n][0])), n)):
            dtype, shape = np.dtype(entries[name][0]), tuple(int(d) for d in entries[name][1])
            size = math.prod(shape) * dtype.itemsize
            header[name] = {"dtype": _safetensors_dtype(dtype), "shape": list(shape),
                            "data_offsets": [offset, offset + size]}
            self._slots[name] = (offset, size, dtype, shape)
            offset += size
        text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        self._data_start = 8 + len(text)
        self._end = self._data_start + offset
        self._written = dict.fromkeys(self._slots, 0)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)  # a plain write's mode, umask applied
        try:
            self._pwrite(struct.pack("<Q", len(text)) + text, 0)
        except BaseException:
            os.close(self._fd)
            raise

    def write_rows(self, name, first_row, block):
        """Rows first_row.. of tensor name (its dtype, its shape but the first dim); written where they belong."""
        offset, size, dtype, shape = self._slots[name]
        block = np.asarray(block)
        block = block if block.flags.c_contiguous else block.copy()  # (ascontiguousarray makes a 0-d array 1-d)
        if block.dtype != dtype or tuple(block.shape[1:]) != shape[1:] or (not shape and block.shape):
            raise ValueError(f"internal: a block of {name} is {block.dtype} {list(block.shape)}, the tensor "
                             f"{dtype} {list(shape)}")
        row_bytes = math.prod(shape[1:]) * dtype.itemsize
        start = first_row * row_bytes
        if start + block.nbytes > size:
            raise ValueError(f"internal: rows {first_row}.. of {name} reach past its {size} bytes")
        self._pwrite(memoryview(block).cast("B"), self._data_start + offset + start)
        self._written[name] += block.nbytes

    def close(self):
        """Closes the file; ValueError (a writer bug) when some tensor was not written whole."""
        try:
            os.ftruncate(self._fd, self._end)  # the length, also where the last tensors hold no bytes
        finally:
            os.close(self._fd)
        short = [name for name, (_, size, _, _) in self._slots.items() if self._written[name] != size]
        if short:
            raise ValueError(f"internal: {', '.join(short[:4])} not written whole")

    def abandon(self):
        os.close(self._fd)

    def _pwrite(self, data, offset):
        data = memoryview(data)
        while data:
            n = os.pwrite(self._fd, data, offset)
            data, offset = data[n:], offset + n


def _safetensors_dtype(dtype):
    try:
        return SAFETENSORS_DTYPES[np.dtype(dtype)]
    except KeyError:
        raise ValueError(f"internal: safetensors stores no {np.dtype(dtype)}") from None
