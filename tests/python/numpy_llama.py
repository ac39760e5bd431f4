"""An independent reading of a kvx model directory: the forward pass in plain numpy (float64), written
from docs/model-format.md alone. Tests compare it with ONNX Runtime on the source graph, which checks
that the converter put every weight in the right place and layout."""

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file


def load_model_dir(model_dir):
    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    tensors = load_file(str(model_dir / config["weights"]["file"]))
    return config, {name: t.astype(np.float64) for name, t in tensors.items()}


def _rms_norm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _rope_half(x, inv_freq):
    """x [heads, T, hd] at positions 0..T-1; pairs (j, j + hd/2) rotate by angle pos * inv_freq[j]."""
    angles = np.arange(x.shape[1])[:, None] * inv_freq[None, :]  # [T, hd/2]
    cos, sin = np.cos(angles), np.sin(angles)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def forward(config, t, tokens):
    """tokens: int [T] at positions 0..T-1. Returns float64 [T, vocab] logits, causal attention; on the
    layers config["sliding_window"] lists, a query at p sees keys p - W + 1 .. p only."""
    c = config
    hd, nh, nkv = c["head_dim"], c["n_heads"], c["n_kv_heads"]
    n = len(tokens)
    x = t["tok_embeddings"][np.asarray(tokens)]  # [T, dim]
    causal = np.tril(np.ones((n, n), dtype=bool))
    window = c.get("sliding_window") or {"window": 0, "layers": []}
    distance = np.arange(n)[:, None] - np.arange(n)[None, :]  # [query, key]
    banded = causal & (distance < window["window"])
    for i in range(c["n_layers"]):
        p = f"layers.{i}."
        h = _rms_norm(x, t[p + "attn_norm"], c["norm_eps"])
        q = (h @ t[p + "wq"].T).reshape(n, nh, hd).transpose(1, 0, 2)  # [nh, T, hd]
        k = (h @ t[p + "wk"].T).reshape(n, nkv, hd).transpose(1, 0, 2)  # [nkv, T, hd]
        v = (h @ t[p + "wv"].T).reshape(n, nkv, hd).transpose(1, 0, 2)
        q, k = _rope_half(q, t["rope_inv_freq"]), _rope_half(k, t["rope_inv_freq"])
        # query head j reads KV head j // (nh / nkv)
        k, v = np.repeat(k, nh // nkv, axis=0), np.repeat(v, nh // nkv, axis=0)
        mask = banded if i in window["layers"] else causal
        scale = c.get("attention_scale") or 1 / np.sqrt(hd)
        scores = np.where(mask, q @ k.transpose(0, 2, 1) * scale, -np.inf)
        probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        x = x + (probs @ v).transpose(1, 0, 2).reshape(n, nh * hd) @ t[p + "wo"].T
        h = _rms_norm(x, t[p + "ffn_norm"], c["norm_eps"])
        gate = h @ t[p + "w_gate"].T
        x = x + ((gate / (1 + np.exp(-gate))) * (h @ t[p + "w_up"].T)) @ t[p + "w_down"].T
    x = _rms_norm(x, t["final_norm"], c["norm_eps"])
    classifier = t["tok_embeddings"] if c["tied_embeddings"] else t["classifier"]
    return x @ classifier.T
