"""Writes the kvx model directory of docs/model-format.md, through a staging folder (write/staged_dir.py) so that a
failed conversion never leaves a config.json naming missing or truncated files. The weights are written one
block of rows at a time (write/stored_weights.py)."""

import json
import shutil

import numpy as np

from ..errors import ConvertError
from .staged_dir import write_staged
from .stored_weights import write_weights
from ..tokenizer.bundle import BUNDLED_FILES

FORMAT_VERSION = 1
CONVERTER_ID = "kvx-convert 1"
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
# The largest value kvx's loader reads for each size in config.json (ConfigLimits, engine/model/model_config.h;
# this branch's loader still allows 2^30 for each, main's has these): a directory with a value beyond one would
# look valid and fail to load. A crafted graph reaches them through metadata, or through a tensor of zero
# elements with one huge dimension, so they are checked where the config is made.
CONFIG_LIMITS = {"dim": 1 << 16, "hidden_dim": 1 << 18, "n_layers": 1024, "n_heads": 1024, "n_kv_heads": 1024,
                 "head_dim": 4096, "vocab_size": 1 << 22, "max_seq_len": 1 << 24}
CONFIG_WIDTH_LIMIT = 1 << 18  # n_heads x head_dim
SLIDING_WINDOW_LIMIT = 1 << 30


# config.json's layer options (docs/model-format.md, Layer options) a mapper may set in its hyperparameters.
LAYER_OPTIONS = ("norm", "positions", "mlp", "norm_weight_offset", "qk_norm", "norm_placement", "residual",
                 "rotary_dim", "rope_local_layers", "embedding_scale", "attention_scale", "attn_logit_softcap",
                 "final_logit_softcap", "clip_qkv", "residual_scale", "logit_scale")


def _json_float32(value):
    """The shortest decimal that reads back as the same float32 (1e-05, not 9.999999747378752e-06)."""
    return float(str(np.float32(value)))


def kvx_config(architecture, hyperparameters, max_seq_len, bundle, onnx_name, weights_dtype="f32",
               sliding_window=None, x_rounding=None):
    """config.json's content, keys in the documented order. bundle: tokenizer_bundle.Bundle.
    weights_dtype: "f32" or "f16", the matrices' storage. sliding_window: {"window", "layers"} or None.
    x_rounding: weights.x_rounding ("onnxruntime" or "ggml"), or None for the default."""
    h = hyperparameters
    config = {
        "format": "kvx-model",
        "format_version": FORMAT_VERSION,
        "architecture": architecture,
        "dim": int(h["dim"]),
        "hidden_dim": int(h["hidden_dim"]),
        "n_layers": int(h["n_layers"]),
        "n_heads": int(h["n_heads"]),
        "n_kv_heads": int(h["n_kv_heads"]),
        "head_dim": int(h["head_dim"]),
        "vocab_size": int(h["vocab_size"]),
        "max_seq_len": int(max_seq_len),
        "norm_eps": _json_float32(h["norm_eps"]),
        "rope_style": h.get("rope_style"),  # null for gpt2: learned positions, no RoPE
        "tied_embeddings": bool(h["tied_embeddings"]),
        **{key: h[key] for key in LAYER_OPTIONS if h.get(key) is not None},
        **({"sliding_window": sliding_window} if sliding_window else {}),
        "bos_token_id": int(bundle.bos_token_id),
        "eos_token_ids": [int(t) for t in bundle.eos_token_ids],
        "weights": {"file": WEIGHTS_FILE, "dtype": weights_dtype, **({"x_rounding": x_rounding} if x_rounding else {})},
        "tokenizer": bundle.tokenizer,
    }
    if bundle.chat_template is not None:
        config["chat"] = bundle.chat_template
    config["source"] = {"onnx": onnx_name, "converter": CONVERTER_ID}
    _check_ranges(config)
    return config


def _check_ranges(config):
    sizes = [(key, config[key], limit) for key, limit in CONFIG_LIMITS.items()]
    sizes.append(("n_heads x head_dim", config["n_heads"] * config["head_dim"], CONFIG_WIDTH_LIMIT))
    if "sliding_window" in config:
        sizes.append(("sliding_window.window", config["sliding_window"]["window"], SLIDING_WINDOW_LIMIT))
    for key, value, limit in sizes:
        if not 1 <= value <= limit:
            raise ConvertError(f"the model's {key} would be {value}; kvx reads 1 to {limit}")
    if not 0 < config["norm_eps"] < 1:
        raise ConvertError(f"the model's norm eps would be {config['norm_eps']}; kvx reads a number above 0 and "
                           "below 1")


def write_model_dir(out_dir, config, weights, files, check=None):
    """weights: the StoredFloat / StoredQuantized of write/stored_weights.py, checked by check (a
    weight_check.FiniteCheck, or None) as they are written. files: name in the directory -> file copied verbatim
    (tokenizer, chat template). Raises OSError for anything the filesystem refuses (a full disk, say)."""
    def write_files(folder):
        write_weights(folder / WEIGHTS_FILE, weights, check)
        for name in BUNDLED_FILES:
            if name in files:
                shutil.copyfile(files[name], folder / name)
        (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")

    write_staged(out_dir, write_files, owned=(WEIGHTS_FILE, CONFIG_FILE, *BUNDLED_FILES), marker=CONFIG_FILE)
