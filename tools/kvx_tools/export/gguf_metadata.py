"""Typed access to a GGUF file's metadata. A value of the wrong type (a string where a count belongs, a list of
numbers for the vocabulary) or text that is not UTF-8 is a one-line GgufError naming the key, not a TypeError
or UnicodeDecodeError further on."""

import math


class GgufError(Exception):
    pass


def metadata_value(reader, key, default=None):
    """The value of a GGUF metadata key (int, float, str, bool or list), default when absent."""
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise GgufError(f"GGUF metadata has no '{key}'")
        return default
    try:
        return field.contents()
    except (ValueError, IndexError) as e:  # UnicodeDecodeError is a ValueError
        raise GgufError(f"GGUF metadata '{key}' cannot be read ({e})") from None


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def metadata_int(reader, key, default=None, minimum=1):
    """An integer key's value, at least minimum (counts and sizes: 1)."""
    value = metadata_value(reader, key, default)
    if not _is_int(value) or value < minimum:
        raise GgufError(f"GGUF metadata '{key}' is {value!r}; expected an integer of at least {minimum}")
    return value


def metadata_float(reader, key, default=None):
    """A positive, finite number (eps, RoPE base)."""
    value = metadata_value(reader, key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise GgufError(f"GGUF metadata '{key}' is {value!r}; expected a positive number")
    return float(value)


def metadata_str(reader, key, default=None):
    value = metadata_value(reader, key, default)
    if not isinstance(value, str):
        raise GgufError(f"GGUF metadata '{key}' is {type(value).__name__}, not a string")
    return value


def metadata_list(reader, key, item_type):
    """A list key whose items are all item_type (str or int)."""
    value = metadata_value(reader, key)
    check = _is_int if item_type is int else (lambda v: isinstance(v, item_type))
    if not isinstance(value, list) or not all(check(v) for v in value):
        raise GgufError(f"GGUF metadata '{key}' is not a list of {item_type.__name__}")
    return value
