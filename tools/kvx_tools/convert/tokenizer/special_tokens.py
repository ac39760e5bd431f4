"""The BOS and EOS token ids the ONNX model's metadata_props hold when the exporter wrote them
(bos_token_id: a JSON int; eos_token_id: a JSON int or list of ints, as in HF's config.json). They win over
what the tokenizer files imply (tokenizer/bundle.py). Beside them, what a llama2.c tokenizer.bin cannot say of
its SentencePiece model: add_dummy_prefix (a JSON true or false: a space before the text), and
user_defined_token_ids and control_token_ids (JSON lists: the pieces cut out of the text whole)."""

import json

from ..errors import ConvertError

BOS_METADATA = "bos_token_id"
EOS_METADATA = "eos_token_id"
DUMMY_PREFIX_METADATA = "add_dummy_prefix"
WHOLE_PIECE_METADATA = {"user_defined_ids": "user_defined_token_ids", "control_ids": "control_token_ids"}


def _token_ids(props, key, vocab_size):
    """The ids stored under key as a list; a ConvertError names the key when they are not ids."""
    try:
        value = json.loads(props[key])
    except ValueError:
        value = None
    ids = value if isinstance(value, list) else [value]
    if not ids or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise ConvertError(f"metadata '{key}' is not a token id or a list of them: {props[key]!r}")
    for t in ids:
        if not 0 <= t < vocab_size:
            raise ConvertError(f"metadata '{key}' holds token id {t}, outside the vocabulary of {vocab_size}")
    return ids


def _check_ids(ids, what, vocab_size):
    for t in ids:
        if not 0 <= t < vocab_size:
            raise ConvertError(f"{what} holds token id {t}, outside the vocabulary of {vocab_size}")
    return ids


def special_token_ids(model, vocab_size, genai=None):
    """(bos_token_id, eos_token_ids) from the metadata, else from genai_config.json (genai: a GenaiConfig or
    None), each None where neither has it."""
    props = {p.key: p.value for p in model.metadata_props}
    bos, eos = None, None
    if BOS_METADATA in props:
        ids = _token_ids(props, BOS_METADATA, vocab_size)
        if len(ids) != 1:
            raise ConvertError(f"metadata '{BOS_METADATA}' must be one token id, got {props[BOS_METADATA]!r}")
        bos = ids[0]
    if EOS_METADATA in props:
        eos = _token_ids(props, EOS_METADATA, vocab_size)
    if genai is not None:
        if bos is None and genai.bos_token_id is not None:
            bos = _check_ids([genai.bos_token_id], "genai_config.json's bos_token_id", vocab_size)[0]
        if eos is None and genai.eos_token_ids is not None:
            eos = _check_ids(list(genai.eos_token_ids), "genai_config.json's eos_token_id", vocab_size)
    return bos, eos


def dummy_prefix(model):
    """The add_dummy_prefix metadata as a bool, None when the model has none."""
    props = {p.key: p.value for p in model.metadata_props}
    if DUMMY_PREFIX_METADATA not in props:
        return None
    try:
        value = json.loads(props[DUMMY_PREFIX_METADATA])
    except ValueError:
        value = None
    if not isinstance(value, bool):
        raise ConvertError(f"metadata '{DUMMY_PREFIX_METADATA}' must be true or false, not "
                           f"{props[DUMMY_PREFIX_METADATA]!r}")
    return value


def whole_piece_ids(model, vocab_size):
    """{"user_defined_ids": [...], "control_ids": [...]} as far as the metadata holds them, each list sorted."""
    props = {p.key: p.value for p in model.metadata_props}
    return {entry: sorted(set(_token_ids(props, key, vocab_size)))
            for entry, key in WHOLE_PIECE_METADATA.items() if key in props}
