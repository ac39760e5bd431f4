"""External data: tensors whose bytes lie in another file, named by key-value entries in the model file
(location, offset, length, checksum; onnx's external_data_helper also writes basepath).

The entries are parsed here rather than by onnx.load or its ExternalDataInfo: onnx reads a truncated data file
silently short, warns on stderr about keys it does not know, and lets a NUL byte or a non-numeric offset
through to a traceback. Every malformed entry becomes one ConvertError naming the tensor, and a location must
name a regular file inside the model's folder (as kvx's own loader requires of a model directory's files).
"""

import re

from onnx import TensorProto, external_data_helper

from ..errors import ConvertError
from .tensors import all_tensors, expected_bytes

KNOWN_KEYS = ("location", "offset", "length", "checksum", "basepath")
DECIMAL = re.compile(r"[0-9]+")  # int() would also take "+1", " 1" and "1_000"


def _entries(tensor, name, where):
    """tensor's external-data entries as a dict; unknown keys are ignored, as onnx does (without its warning)."""
    entries = {}
    for entry in tensor.external_data:
        if entry.key in entries:
            raise ConvertError(f"{where}: tensor '{name}' has external data entry '{entry.key}' twice")
        if entry.key in KNOWN_KEYS:
            entries[entry.key] = entry.value
    return entries


def _byte_count(entries, key, name, where):
    """The offset or length entry as a non-negative int, None when absent."""
    text = entries.get(key)
    if text is None:
        return None
    if not DECIMAL.fullmatch(text):
        raise ConvertError(f"{where}: tensor '{name}' has external data {key} {text!r}; "
                           "it must be a non-negative integer")
    return int(text)


def _data_file(location, name, model_path):
    """The resolved path of a location, after checking that it names a regular file in the model's folder."""
    where = model_path
    if not location:
        raise ConvertError(f"{where}: tensor '{name}' is stored externally but its entry gives no location")
    if "\0" in location:
        raise ConvertError(f"{where}: external data location of tensor '{name}' holds a NUL byte")
    base = model_path.parent.resolve()
    data_path = (base / location).resolve()
    if base not in data_path.parents:
        raise ConvertError(f"{where}: external data location '{location}' of tensor '{name}' lies outside "
                           "the model's folder")
    if not data_path.is_file():
        raise ConvertError(f"{where}: external data file '{location}' (tensor '{name}') not found next to the "
                           "model")
    return data_path


def locate_external_data(model, model_path):
    """[(tensor, data file, offset, length)] for every tensor stored outside the model file, after checking
    that each range lies inside an existing file in the model's folder."""
    located = []
    for name, tensor in all_tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        entries = _entries(tensor, name, model_path)
        offset = _byte_count(entries, "offset", name, model_path) or 0
        length = _byte_count(entries, "length", name, model_path)
        data_path = _data_file(entries.get("location", ""), name, model_path)
        needed = expected_bytes(tensor, name, model_path)
        if length is None:
            length = needed
        if length != needed:
            raise ConvertError(f"{model_path}: tensor '{name}' has {length} bytes of external data, its shape "
                               f"needs {needed}")
        file_size = data_path.stat().st_size
        if offset + length > file_size:
            raise ConvertError(f"{data_path}: truncated: tensor '{name}' needs bytes {offset}..{offset + length} "
                               f"but the file has {file_size}")
        located.append((tensor, data_path, offset, length))
    return located


def read_external_data(located):
    """Moves each located range into its tensor's raw_data (the small tensors: graph/weights.py leaves the large
    ones in their file)."""
    for tensor, data_path, offset, length in located:
        with open(data_path, "rb") as f:
            f.seek(offset)
            tensor.raw_data = f.read(length)
        del tensor.external_data[:]
        tensor.data_location = TensorProto.DEFAULT
