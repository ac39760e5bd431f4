"""Writes the kvx model directory of docs/model-format.md."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

FORMAT_VERSION = 1
CONVERTER_ID = "kvx-convert 1"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.bin"


def _json_float32(value):
    """The shortest decimal that reads back as the same float32 (1e-05, not 9.999999747378752e-06)."""
    return float(str(np.float32(value)))


def kvx_config(architecture, hyperparameters, max_seq_len, token_ids, has_tokenizer, onnx_name):
    """config.json's content, keys in the documented order. token_ids: (bos id, [eos ids])."""
    h = hyperparameters
    return {
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
        "rope_style": h["rope_style"],
        "tied_embeddings": bool(h["tied_embeddings"]),
        "bos_token_id": int(token_ids[0]),
        "eos_token_ids": [int(t) for t in token_ids[1]],
        "weights": {"file": WEIGHTS_FILE, "dtype": "f32"},
        "tokenizer": {"type": "llama2c", "file": TOKENIZER_FILE} if has_tokenizer else None,
        "source": {"onnx": onnx_name, "converter": CONVERTER_ID},
    }


def write_model_dir(out_dir, config, tensors, tokenizer_path):
    """tensors: kvx name -> fp32 array in kvx layout. tokenizer_path: copied verbatim, or None."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / WEIGHTS_FILE))
    tokenizer_target = out_dir / TOKENIZER_FILE
    if tokenizer_path is not None:
        shutil.copyfile(tokenizer_path, tokenizer_target)
    else:
        tokenizer_target.unlink(missing_ok=True)  # a stale one would contradict "tokenizer": null
    config_path = out_dir / "config.json"
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    # safetensors creates its file 0600; give it the permissions a plain write got under this umask.
    os.chmod(out_dir / WEIGHTS_FILE, config_path.stat().st_mode & 0o777)
