"""A Hugging Face tokenizer.json rebuilt from a GGUF file's tokenizer metadata, and its chat template.

GGUF stores a byte-level BPE tokenizer (tokenizer.ggml.model "gpt2") as its vocabulary
(tokenizer.ggml.tokens, id order), its merges ("left right", priority order) and a type per token
(tokenizer.ggml.token_type: 1 normal, 3 control). What GGUF names only by a label is the pre-tokenizer
(tokenizer.ggml.pre), so the ones kvx knows are spelled out here; any other label is refused rather than
guessed, since a wrong pre-tokenizer splits text differently without any error.
"""

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

from .gguf_metadata import GgufError, metadata_list, metadata_str, metadata_value

TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_UNKNOWN = 2
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4


def _smollm_pre_tokenizer():
    """SmolLM/SmolLM2's: every digit on its own, then GPT-2's byte-level split (regex, no prefix space)."""
    return pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])


PRE_TOKENIZERS = {"smollm": _smollm_pre_tokenizer}


def gguf_tokenizer(reader):
    """The tokenizers.Tokenizer the GGUF metadata describes: BPE over byte-level pieces, no normalizer,
    control tokens as special added tokens, nothing added around an encoding (no BOS)."""
    kind = metadata_str(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise GgufError(f"GGUF tokenizer model '{kind}' is not supported (byte-level BPE 'gpt2' only)")
    pre = metadata_str(reader, "tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise GgufError(f"GGUF pre-tokenizer '{pre}' is not supported (known: {', '.join(PRE_TOKENIZERS)})")
    tokens = metadata_list(reader, "tokenizer.ggml.tokens", str)
    types = metadata_list(reader, "tokenizer.ggml.token_type", int)
    merges = metadata_list(reader, "tokenizer.ggml.merges", str)
    vocab = {token: i for i, token in enumerate(tokens)}
    if len(vocab) != len(tokens) or len(types) != len(tokens):
        raise GgufError(f"GGUF vocabulary of {len(tokens)} tokens has duplicates or {len(types)} token types")
    unknown_types = sorted(set(types) - {TOKEN_TYPE_NORMAL, TOKEN_TYPE_CONTROL})
    if unknown_types:
        raise GgufError(f"GGUF token types {unknown_types} are not supported (normal and control only)")
    pairs = [tuple(merge.split(" ")) for merge in merges]
    if any(len(pair) != 2 for pair in pairs):
        raise GgufError("a GGUF merge is not two pieces separated by one space")

    try:
        bpe = models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False)
    except Exception as e:  # tokenizers' own error for merges of pieces that are not tokens, and the like
        raise GgufError(f"GGUF tokenizer cannot be built: {str(e).splitlines()[0] if str(e) else type(e).__name__}") \
            from None
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = PRE_TOKENIZERS[pre]()
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)  # offsets only; adds no token
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False)
                                  for token, kind in zip(tokens, types) if kind == TOKEN_TYPE_CONTROL])
    return tokenizer


def gguf_chat_template(reader):
    """The Jinja chat template text, or None when the file has none."""
    if "tokenizer.chat_template" not in reader.fields:
        return None
    return metadata_str(reader, "tokenizer.chat_template")


LLAMA2C_TOKENIZER_FILE = "tokenizer.bin"
ADD_SPACE_PREFIX_KEY = "tokenizer.ggml.add_space_prefix"


def gguf_add_space_prefix(reader):
    """Whether the SentencePiece tokenizer of the file puts a space before the text: the file's
    tokenizer.ggml.add_space_prefix (Gemma's: false), else true, llama.cpp's default for a "llama" vocabulary."""
    value = metadata_value(reader, ADD_SPACE_PREFIX_KEY, default=True)
    if not isinstance(value, bool):
        raise GgufError(f"GGUF metadata '{ADD_SPACE_PREFIX_KEY}' is {value!r}; expected true or false")
    return value


def gguf_llama2c_tokenizer(reader):
    """The bytes of a llama2.c tokenizer.bin for a GGUF SentencePiece vocabulary (tokenizer.ggml.model
    "llama": pieces with scores, '▁' for a space, <0xXX> byte-fallback pieces), kvx's tokenizer of that kind.
    Layout: int32 max piece bytes, then per token float32 score, int32 byte length, the bytes; '▁' becomes
    a space as llama2.c's tokenizer export writes it.

    Whether a space goes before the text (SentencePiece's add_dummy_prefix) is not in this file: it is
    gguf_add_space_prefix's, which the exporter stores in the ONNX metadata for config.json."""
    import struct
    kind = metadata_str(reader, "tokenizer.ggml.model")
    if kind != "llama":
        raise GgufError(f"GGUF tokenizer model '{kind}' is not a SentencePiece ('llama') vocabulary")
    tokens = metadata_list(reader, "tokenizer.ggml.tokens", str)
    scores = metadata_value(reader, "tokenizer.ggml.scores")
    if not isinstance(scores, list) or len(scores) != len(tokens):
        raise GgufError(f"GGUF tokenizer.ggml.scores does not give one score per token ({len(tokens)})")
    pieces = [t.replace("\u2581", " ").encode("utf-8") for t in tokens]
    out = [struct.pack("<i", max(len(p) for p in pieces))]
    for piece, score in zip(pieces, scores):
        out.append(struct.pack("<fi", float(score), len(piece)) + piece)
    return b"".join(out)


def gguf_whole_piece_ids(reader):
    """(user_defined, control): the ids of the SentencePiece pieces a tokenizer cuts out of the text whole
    before merging, from tokenizer.ggml.token_type: user-defined ones always (Gemma's runs of spaces and HTML
    tags), control and unknown ones where special tokens are read (llama.cpp's special-token partition)."""
    tokens = metadata_list(reader, "tokenizer.ggml.tokens", str)
    if "tokenizer.ggml.token_type" not in reader.fields:
        return [], []
    types = metadata_list(reader, "tokenizer.ggml.token_type", int)
    if len(types) != len(tokens):
        raise GgufError(f"GGUF tokenizer.ggml.token_type gives {len(types)} types for {len(tokens)} tokens")
    user_defined = [i for i, kind in enumerate(types) if kind == TOKEN_TYPE_USER_DEFINED]
    control = [i for i, kind in enumerate(types) if kind in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_UNKNOWN)]
    return user_defined, control
