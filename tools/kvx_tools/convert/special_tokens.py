"""The BOS and EOS token ids the ONNX model's metadata_props hold when the exporter wrote them
(bos_token_id: a JSON int; eos_token_id: a JSON int or list of ints, as in HF's config.json). They win over
what the tokenizer files imply (tokenizer_bundle.py)."""

import json

from .convert_errors import ConvertError

BOS_METADATA = "bos_token_id"
EOS_METADATA = "eos_token_id"


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


def special_token_ids(model, vocab_size):
    """(bos_token_id, eos_token_ids) from the metadata, each None where the metadata has none."""
    props = {p.key: p.value for p in model.metadata_props}
    bos, eos = None, None
    if BOS_METADATA in props:
        ids = _token_ids(props, BOS_METADATA, vocab_size)
        if len(ids) != 1:
            raise ConvertError(f"metadata '{BOS_METADATA}' must be one token id, got {props[BOS_METADATA]!r}")
        bos = ids[0]
    if EOS_METADATA in props:
        eos = _token_ids(props, EOS_METADATA, vocab_size)
    return bos, eos
