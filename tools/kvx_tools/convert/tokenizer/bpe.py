"""Checks of byte-level BPE tokenizer files before they are copied into a model directory: HF's
tokenizer.json, or GPT-2's encoder.json with its vocab.bpe. The engine reads them (engine/bpe_*.cpp);
these checks stop a conversion early for what it would refuse: a file that does not parse, components it
does not implement, and token ids beyond the model's vocabulary."""

import json
from pathlib import Path

from ..errors import ConvertError

SUPPORTED_PRE_TOKENIZERS = {"ByteLevel", "Split", "Digits"}
SUPPORTED_POST_PROCESSORS = {"ByteLevel", "TemplateProcessing", "RobertaProcessing", "BertProcessing", "Sequence"}
ENDOFTEXT = "<|endoftext|>"


def read_json(path, what):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConvertError(f"cannot read {what} {path}: {e.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConvertError(f"{what} {path} is not valid JSON ({e})") from None
    except RecursionError:  # json's parser recurses once per nesting level
        raise ConvertError(f"{what} {path} nests JSON deeper than Python's parser can follow") from None


def _vocab(vocab, path):
    if not isinstance(vocab, dict) or not vocab:
        raise ConvertError(f"tokenizer {path}: the vocabulary is missing or empty")
    for token, i in vocab.items():
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise ConvertError(f"tokenizer {path}: vocabulary entry {token!r} has no valid id")
    return vocab


def _check_merges(merges, vocab, path):
    """merges: (a, b) pairs in rank order; each part and their concatenation must be tokens."""
    for rank, (a, b) in enumerate(merges):
        for token in (a, b, a + b):
            if token not in vocab:
                raise ConvertError(f"tokenizer {path}: merge {rank} ({a!r} {b!r}) uses {token!r}, "
                                   "which is not in the vocabulary")


def _split_merge(line, rank, path):
    parts = line.split(" ")
    if len(parts) != 2:
        raise ConvertError(f"tokenizer {path}: merge {rank} {line!r} is not two tokens separated by one space")
    return tuple(parts)


def _check_fits(ids, path, vocab_size):
    if max(ids) >= vocab_size:
        raise ConvertError(f"tokenizer {path} has {len(set(ids))} tokens (ids up to {max(ids)}) "
                           f"but the model's vocab_size is {vocab_size}")


def _component_type(component):
    return component.get("type", "?") if isinstance(component, dict) else "?"


def _check_components(j, path):
    """The components the engine implements (docs/tokenizers.md); a ConvertError names any other."""
    normalizer = j.get("normalizer")
    if normalizer is not None and not (_component_type(normalizer) == "Sequence" and not normalizer.get("normalizers")):
        raise ConvertError(f"tokenizer {path}: normalizer '{_component_type(normalizer)}' is not supported")
    leaves, todo = [], [j.get("pre_tokenizer")]
    while todo:
        p = todo.pop(0)
        if _component_type(p) == "Sequence":
            todo[:0] = p.get("pretokenizers", [])
        elif p is not None:
            leaves.append(_component_type(p))
    for leaf in leaves:
        if leaf not in SUPPORTED_PRE_TOKENIZERS:
            raise ConvertError(f"tokenizer {path}: pre_tokenizer '{leaf}' is not supported")
    if not leaves or leaves[-1] != "ByteLevel" or leaves.count("ByteLevel") != 1:
        raise ConvertError(f"tokenizer {path}: the pre_tokenizer must end with its one ByteLevel "
                           "(kvx reads byte-level BPE tokenizers)")
    if _component_type(j.get("decoder")) != "ByteLevel":
        raise ConvertError(f"tokenizer {path}: decoder '{_component_type(j.get('decoder'))}' is not supported")
    post = j.get("post_processor")
    if post is not None and _component_type(post) not in SUPPORTED_POST_PROCESSORS:
        raise ConvertError(f"tokenizer {path}: post_processor '{_component_type(post)}' is not supported")


def hf_token_ids(j):
    """token text -> id, added tokens included, with the ids HF gives added tokens when it loads the file:
    their id in the vocabulary, else the next one from the vocabulary's size up, in file order."""
    ids = dict(j["model"]["vocab"])
    next_id = len(ids)
    for token in j.get("added_tokens") or []:
        content = token.get("content") if isinstance(token, dict) else None
        if not isinstance(content, str):
            raise ConvertError("an added token has no content")
        if content and content not in ids:
            ids[content] = next_id
            next_id += 1
    return ids


def is_encoder_json(j):
    """GPT-2's encoder.json: one flat object of token -> id."""
    return isinstance(j, dict) and bool(j) and all(isinstance(i, int) for i in j.values())


def check_hf_tokenizer_json(j, path, vocab_size):
    """j: the parsed tokenizer.json at path. Returns token text -> id (added tokens included)."""
    model = j.get("model")
    if not isinstance(model, dict):
        raise ConvertError(f"tokenizer {path} has no model")
    if model.get("type") != "BPE":
        raise ConvertError(f"tokenizer {path}: model type '{model.get('type')}' is not supported (kvx reads BPE)")
    vocab = _vocab(model.get("vocab"), path)
    merges = []
    for rank, m in enumerate(model.get("merges") or []):
        if isinstance(m, str):
            merges.append(_split_merge(m, rank, path))
        elif isinstance(m, list) and len(m) == 2 and all(isinstance(part, str) for part in m):
            merges.append(tuple(m))
        else:
            raise ConvertError(f"tokenizer {path}: merge {rank} is neither \"a b\" nor [\"a\", \"b\"]")
    _check_merges(merges, vocab, path)
    _check_components(j, path)
    try:
        ids = hf_token_ids(j)
    except ConvertError as e:
        raise ConvertError(f"tokenizer {path}: {e}") from None
    _check_fits(ids.values(), path, vocab_size)
    return ids


def check_gpt2_tokenizer(encoder, encoder_path, merges_path, vocab_size):
    """encoder: the parsed encoder.json at encoder_path. Returns token text -> id."""
    vocab = _vocab(encoder, encoder_path)
    try:
        lines = Path(merges_path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ConvertError(f"cannot read merges {merges_path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConvertError(f"merges {merges_path} is not UTF-8 text") from None
    lines = [line.rstrip("\r") for line in lines]
    merges = [_split_merge(line, rank, merges_path)
              for rank, line in enumerate(line for line in lines if line and not line.startswith("#version"))]
    if not merges:
        raise ConvertError(f"merges {merges_path} holds no merges")
    _check_merges(merges, vocab, merges_path)
    _check_fits(vocab.values(), encoder_path, vocab_size)
    return vocab


def special_token_ids(tokenizer_json_path, ids):
    """(bos id, [eos ids]) from the tokenizer_config.json beside a tokenizer.json, as HF's
    transformers keeps them; (-1, []) for what it does not name or when there is none."""
    config_path = Path(tokenizer_json_path).with_name("tokenizer_config.json")
    if not config_path.is_file():
        return -1, []
    config = read_json(config_path, "tokenizer config")
    if not isinstance(config, dict):
        raise ConvertError(f"tokenizer config {config_path} is not a JSON object")

    def token_id(key):
        token = config.get(key)
        if isinstance(token, dict):
            token = token.get("content")
        return ids.get(token, -1) if isinstance(token, str) else -1

    bos, eos = token_id("bos_token"), token_id("eos_token")
    return bos, [eos] if eos >= 0 else []
