"""What a conversion bundles besides the weights: the tokenizer (a llama2.c tokenizer.bin, an HF
tokenizer.json, or GPT-2's encoder.json + vocab.bpe), checked against the model's vocabulary, the token ids
config.json gets from it, and an optional Jinja chat template."""

from dataclasses import dataclass, field
from pathlib import Path

from .bpe import (ENDOFTEXT, check_gpt2_tokenizer, check_hf_tokenizer_json, is_encoder_json, read_json,
                           special_token_ids)
from ...input_file import special_file_reason
from .chat_template import analyse_chat_template
from ..errors import ConvertError
from .llama2c import LLAMA2C_BOS, LLAMA2C_EOS_IDS, check_llama2c_tokenizer

LLAMA2C_FILE = "tokenizer.bin"
HF_FILE = "tokenizer.json"
GPT2_FILE = "encoder.json"
GPT2_MERGES_FILE = "vocab.bpe"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
# Chat templates are text of a few kB (tens with tool-use instructions); this bounds what is read into memory.
MAX_CHAT_TEMPLATE_BYTES = 1 << 20
# Every file a model directory may hold besides weights and config: a new conversion removes those it
# does not write, since a stale one would contradict config.json.
BUNDLED_FILES = (LLAMA2C_FILE, HF_FILE, GPT2_FILE, GPT2_MERGES_FILE, CHAT_TEMPLATE_FILE)


@dataclass
class Bundle:
    tokenizer: dict = None      # config.json's "tokenizer" entry, None without one
    chat_template: dict = None  # config.json's "chat" entry, None without a template
    # Without a tokenizer (or metadata, pipeline.py) a model has no known BOS and no stop token.
    bos_token_id: int = -1
    eos_token_ids: list = field(default_factory=list)
    files: dict = field(default_factory=dict)  # name in the model directory -> file to copy


def _is_json(path):
    """JSON text starts with '{' (after whitespace); a llama2.c tokenizer starts with a small int32."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as e:
        raise ConvertError(f"cannot read tokenizer {path}: {e.strerror}") from None
    return head.lstrip().startswith(b"{") and b"\0" not in head


def _bundle_tokenizer(b, path, merges_path, vocab_size):
    if not _is_json(path):
        if merges_path is not None:
            raise ConvertError(f"--merges goes with a GPT-2 encoder.json, not with {path}")
        check_llama2c_tokenizer(path, vocab_size)
        b.tokenizer = {"type": "llama2c", "file": LLAMA2C_FILE}
        b.bos_token_id, b.eos_token_ids = LLAMA2C_BOS, list(LLAMA2C_EOS_IDS)
        b.files[LLAMA2C_FILE] = path
        return
    j = read_json(path, "tokenizer")
    if is_encoder_json(j):  # tested first: "model" is one of GPT-2's tokens
        if merges_path is None:
            raise ConvertError(f"{path} is GPT-2's encoder.json: give its merges with --merges vocab.bpe")
        ids = check_gpt2_tokenizer(j, path, merges_path, vocab_size)
        b.tokenizer = {"type": "gpt2", "file": GPT2_FILE, "merges_file": GPT2_MERGES_FILE}
        b.files[GPT2_FILE], b.files[GPT2_MERGES_FILE] = path, merges_path
        # GPT-2 marks both ends of a text with <|endoftext|>.
        end = ids.get(ENDOFTEXT, -1)
        b.bos_token_id, b.eos_token_ids = end, [end] if end >= 0 else []
    elif isinstance(j, dict) and isinstance(j.get("model"), dict):
        if merges_path is not None:
            raise ConvertError(f"--merges goes with a GPT-2 encoder.json; {path} holds its merges")
        ids = check_hf_tokenizer_json(j, path, vocab_size)
        b.tokenizer = {"type": "bpe", "file": HF_FILE}
        b.files[HF_FILE] = path
        b.bos_token_id, b.eos_token_ids = special_token_ids(path, ids)
    else:
        raise ConvertError(f"tokenizer {path} is JSON but neither an HF tokenizer.json nor GPT-2's encoder.json")


def _bundle_chat_template(b, path):
    try:
        size = Path(path).stat().st_size
        if size > MAX_CHAT_TEMPLATE_BYTES:
            raise ConvertError(f"chat template {path} is {size} bytes; a chat template is at most "
                               f"{MAX_CHAT_TEMPLATE_BYTES} (text of a few kB)")
        source = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConvertError(f"cannot read chat template {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConvertError(f"chat template {path} is not UTF-8 text") from None
    # A template kvx cannot apply is still bundled, with the reason, so that `kvx chat` can give it.
    b.chat_template = {"template_file": CHAT_TEMPLATE_FILE, **analyse_chat_template(source)}
    b.files[CHAT_TEMPLATE_FILE] = path


def carry_sentencepiece_options(b, add_dummy_prefix, whole_pieces):
    """Puts the model's add_dummy_prefix (None: the model does not say) and its whole-piece ids
    ({"user_defined_ids": [...], "control_ids": [...]}, either absent) into the llama2c tokenizer's entry.
    Only a false add_dummy_prefix is written: absent means true to kvx, so configs of models that do not say
    are unchanged. A tokenizer.json or GPT-2 vocabulary has its own rules for spaces and added tokens, so
    these facts cannot go with one."""
    said = {**({} if add_dummy_prefix is None else {"add_dummy_prefix": add_dummy_prefix}), **whole_pieces}
    if not said or b.tokenizer is None:
        return
    if b.tokenizer["type"] != "llama2c":
        raise ConvertError(f"the model's metadata gives {', '.join(said)}, which is for a llama2.c tokenizer.bin, "
                           f"not a {b.tokenizer['type']} tokenizer")
    if add_dummy_prefix is False:
        b.tokenizer["add_dummy_prefix"] = False
    b.tokenizer.update(whole_pieces)


def bundle(tokenizer_path, merges_path, chat_template_path, vocab_size):
    """The files to copy and the config entries; a ConvertError for anything that does not check out."""
    b = Bundle()
    if merges_path is not None and tokenizer_path is None:
        raise ConvertError("--merges goes with --tokenizer encoder.json")
    for path, what in ((tokenizer_path, "tokenizer"), (merges_path, "merges"), (chat_template_path, "chat template")):
        reason = special_file_reason(path) if path is not None else None
        if reason is not None:  # opening a FIFO would block for ever
            raise ConvertError(f"{what} {path}: {reason}")
    if tokenizer_path is not None:
        _bundle_tokenizer(b, tokenizer_path, merges_path, vocab_size)
    if chat_template_path is not None:
        _bundle_chat_template(b, chat_template_path)
    return b
