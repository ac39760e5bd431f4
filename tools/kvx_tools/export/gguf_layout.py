"""Checks a GGUF file's counts and sizes before gguf's GGUFReader walks it.

The reader trusts them: it loops in Python once per key, per tensor and per metadata array element (about
10 us each, numbers included), so a crafted file with counts to match its few hundred MB keeps it busy for
hours; a tensor reaching past the end of the file surfaces as a reshape error. Here every count is checked
against the bytes left in the file and against limits far above any real model's, arrays of fixed-size
values are skipped rather than walked, and every tensor's data must lie inside the file, each failure one
GgufError naming what is wrong.

Layout (GGUF v2/v3): magic "GGUF", u32 version, u64 tensor count, u64 key count; keys (string, u32 type,
value); tensor infos (string name, u32 n_dims, u64 dims fastest first, u32 ggml type, u64 offset into the
data); the data, aligned to general.alignment (32 by default). Strings are a u64 length and the bytes.
"""

import math
import mmap
import struct

from gguf.constants import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType, GGUFValueType

from .gguf_metadata import GgufError

SUPPORTED_VERSIONS = (2, 3)  # gguf's reader's
MAX_KEYS = 65536  # real files have a few dozen
MAX_TENSORS = 1 << 20  # a few hundred per model, a few thousand for the largest
# In all metadata arrays together. The largest real ones are a vocabulary's tokens, scores, types and merges:
# about a million values for 256k tokens. The reader takes ~40 s for this many.
MAX_ARRAY_VALUES = 4_000_000
MAX_ARRAY_NESTING = 4
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_STRING_BYTES = 1 << 26  # a chat template is kB; a key or a tensor name tens of bytes

SCALAR_BYTES = {GGUFValueType.UINT8: 1, GGUFValueType.INT8: 1, GGUFValueType.BOOL: 1, GGUFValueType.UINT16: 2,
                GGUFValueType.INT16: 2, GGUFValueType.UINT32: 4, GGUFValueType.INT32: 4, GGUFValueType.FLOAT32: 4,
                GGUFValueType.UINT64: 8, GGUFValueType.INT64: 8, GGUFValueType.FLOAT64: 8}
MIN_KEY_BYTES = 8 + 4 + 1  # empty name, type, a one-byte value
MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # empty name, no dims, type, offset


class _Reader:
    """Reads the header in order, never past the end of the file."""

    def __init__(self, data, path):
        self.data, self.path, self.pos, self.order = data, path, 0, "<"

    def left(self):
        return len(self.data) - self.pos

    def take(self, n, what):
        if n > self.left():
            raise GgufError(f"{self.path}: truncated: {what} needs {n} bytes at offset {self.pos}, the file has "
                            f"{self.left()} left")
        start, self.pos = self.pos, self.pos + n
        return self.data[start:self.pos]

    def u32(self, what):
        return struct.unpack(self.order + "I", self.take(4, what))[0]

    def u64(self, what):
        return struct.unpack(self.order + "Q", self.take(8, what))[0]

    def string(self, what):
        n = self.u64(what)
        if n > MAX_STRING_BYTES:
            raise GgufError(f"{self.path}: {what} claims {n} bytes (more than {MAX_STRING_BYTES})")
        return self.take(n, what)


def check_gguf_layout(path):
    """Raises GgufError unless path's counts, sizes and tensor extents are sane and inside the file."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size < 24:
            raise GgufError(f"{path}: not a GGUF file ({size} bytes)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            _check(_Reader(data, path))


def _check(r):
    if r.take(4, "the magic") != b"GGUF":
        raise GgufError(f"{r.path}: not a GGUF file (no GGUF magic)")
    version = r.u32("the version")
    if version & 0xFFFF == 0:  # written on a machine of the other byte order, as the reader guesses
        r.order, version = ">", struct.unpack(">I", struct.pack("<I", version))[0]
    if version not in SUPPORTED_VERSIONS:
        raise GgufError(f"{r.path}: not a GGUF file, or of a version this reader does not know ({version}; it "
                        f"reads {' and '.join(map(str, SUPPORTED_VERSIONS))})")
    n_tensors, n_keys = r.u64("the tensor count"), r.u64("the key count")
    _check_count(r, n_keys, "keys", MAX_KEYS, MIN_KEY_BYTES)
    _check_count(r, n_tensors, "tensors", MAX_TENSORS, MIN_TENSOR_INFO_BYTES)
    alignment, budget = GGUF_DEFAULT_ALIGNMENT, [MAX_ARRAY_VALUES]
    for _ in range(n_keys):
        key = r.string("a metadata key").decode("utf-8", "replace")
        value_type = r.u32(f"the type of '{key}'")
        start = r.pos
        _skip_value(r, value_type, key, budget, 0)
        if key == "general.alignment":
            if value_type != GGUFValueType.UINT32:
                raise GgufError(f"{r.path}: general.alignment is not a u32")
            alignment = struct.unpack(r.order + "I", r.data[start:start + 4])[0]
            if alignment == 0 or alignment & (alignment - 1):
                raise GgufError(f"{r.path}: general.alignment {alignment} is not a power of two")
    tensors = [_tensor_info(r) for _ in range(n_tensors)]
    data_start = -(-r.pos // alignment) * alignment
    for name, dims, ggml_type, offset in tensors:
        block, type_bytes = GGML_QUANT_SIZES[ggml_type]
        if dims and dims[0] % block:
            raise GgufError(f"{r.path}: tensor '{name}' has {dims[0]} values per row, not a multiple of the "
                            f"{ggml_type.name} block of {block}")
        end = data_start + offset + math.prod(dims) // block * type_bytes
        if end > len(r.data):
            raise GgufError(f"{r.path}: truncated: tensor '{name}' ({ggml_type.name} {dims}) needs bytes up to {end}, "
                            f"the file has {len(r.data)}")


def _check_count(r, count, what, limit, min_bytes):
    if count > limit:
        raise GgufError(f"{r.path}: claims {count} {what} (more than {limit})")
    if count * min_bytes > r.left():
        raise GgufError(f"{r.path}: claims {count} {what}, more than its remaining {r.left()} bytes can hold")


def _skip_value(r, value_type, key, budget, depth):
    """Moves past one value of value_type, charging array lengths to budget[0]."""
    if value_type in SCALAR_BYTES:
        r.take(SCALAR_BYTES[value_type], f"the value of '{key}'")
    elif value_type == GGUFValueType.STRING:
        r.string(f"the value of '{key}'")
    elif value_type == GGUFValueType.ARRAY:
        if depth >= MAX_ARRAY_NESTING:
            raise GgufError(f"{r.path}: metadata '{key}' nests arrays more than {MAX_ARRAY_NESTING} deep")
        item_type, count = r.u32(f"the item type of '{key}'"), r.u64(f"the length of '{key}'")
        budget[0] -= count
        if budget[0] < 0:
            raise GgufError(f"{r.path}: metadata arrays hold more than {MAX_ARRAY_VALUES} values ('{key}' has "
                            f"{count})")
        if item_type in SCALAR_BYTES:  # fixed size: skipped at once
            r.take(count * SCALAR_BYTES[item_type], f"the {count} values of '{key}'")
        elif count * 8 > r.left():  # every string or array takes at least 8 bytes
            raise GgufError(f"{r.path}: metadata '{key}' claims {count} items, more than the file can hold")
        else:
            for _ in range(count):
                _skip_value(r, item_type, key, budget, depth + 1)
    else:
        raise GgufError(f"{r.path}: metadata '{key}' has unknown type {value_type}")


def _tensor_info(r):
    """(name, dims fastest first, GGMLQuantizationType, offset of the data)."""
    name = r.string("a tensor name").decode("utf-8", "replace")
    n_dims = r.u32(f"the rank of tensor '{name}'")
    if n_dims > MAX_DIMS:
        raise GgufError(f"{r.path}: tensor '{name}' has {n_dims} dims (GGUF allows {MAX_DIMS})")
    dims = [r.u64(f"the dims of tensor '{name}'") for _ in range(n_dims)]
    raw_type = r.u32(f"the type of tensor '{name}'")
    try:
        ggml_type = GGMLQuantizationType(raw_type)
    except ValueError:
        raise GgufError(f"{r.path}: tensor '{name}' has unknown type {raw_type}") from None
    if ggml_type not in GGML_QUANT_SIZES:
        raise GgufError(f"{r.path}: tensor '{name}' has type {ggml_type.name}, which has no known size")
    return name, dims, ggml_type, r.u64(f"the data offset of tensor '{name}'")
