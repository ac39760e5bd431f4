"""Checks of llama2.c tokenizer files (tokenizer.bin in the model directory).

Layout: int32 max_token_length, then per token: float32 score, int32 byte length, the bytes. There is
no count field; the engine reads vocab_size entries (from config.json), so the file must hold exactly
that many."""

import struct
from pathlib import Path

from ..errors import ConvertError

LLAMA2C_BOS = 1
LLAMA2C_EOS_IDS = [2, 1]  # TinyStories models end a story with BOS; run.c stops on it


def count_llama2c_tokens(path):
    """Number of token entries in the file; a ConvertError if it is not a well-formed llama2.c tokenizer."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConvertError(f"cannot read tokenizer {path}: {e.strerror}") from None
    if len(data) < 4:
        raise ConvertError(f"tokenizer {path}: too short for a llama2.c tokenizer")
    (max_token_length,) = struct.unpack_from("<i", data, 0)
    if max_token_length <= 0:
        raise ConvertError(f"tokenizer {path}: max_token_length {max_token_length} is not positive")
    offset, count = 4, 0
    while offset < len(data):
        if offset + 8 > len(data):
            raise ConvertError(f"tokenizer {path}: truncated in the header of entry {count}")
        _score, length = struct.unpack_from("<fi", data, offset)
        if not 0 <= length <= max_token_length or offset + 8 + length > len(data):
            raise ConvertError(f"tokenizer {path}: entry {count} has a bad length {length} "
                               f"(max_token_length {max_token_length}, file truncated?)")
        offset += 8 + length
        count += 1
    return count


def check_llama2c_tokenizer(path, vocab_size):
    count = count_llama2c_tokens(path)
    if count != vocab_size:
        raise ConvertError(f"tokenizer {path} has {count} tokens but the model's vocab_size is {vocab_size}")
