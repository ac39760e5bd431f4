"""An independent reading of a kvx gpt2 model directory: the forward pass in plain numpy (float64),
written from docs/model-format.md alone, like numpy_llama.py for llama."""

import numpy as np

from numpy_llama import load_model_dir  # noqa: F401  (re-exported: tests load either kind the same way)


def _layer_norm(x, weight, bias, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _linear(t, name, x):
    """x [T, in] through Linear `name` ([out, in]) and its bias, which a gpt2 layer may lack."""
    y = x @ t[name].T
    return y + t[name + "_bias"] if name + "_bias" in t else y


def forward(config, t, tokens):
    """tokens: int [T] at positions 0..T-1. Returns float64 [T, vocab] logits, causal attention."""
    c = config
    hd, nh, nkv, eps = c["head_dim"], c["n_heads"], c["n_kv_heads"], c["norm_eps"]
    n = len(tokens)
    x = t["tok_embeddings"][np.asarray(tokens)] + t["pos_embeddings"][:n]  # [T, dim]
    causal = np.tril(np.ones((n, n), dtype=bool))
    for i in range(c["n_layers"]):
        p = f"layers.{i}."
        h = _layer_norm(x, t[p + "attn_norm"], t[p + "attn_norm_bias"], eps)
        q = _linear(t, p + "wq", h).reshape(n, nh, hd).transpose(1, 0, 2)  # [nh, T, hd]
        k = _linear(t, p + "wk", h).reshape(n, nkv, hd).transpose(1, 0, 2)  # [nkv, T, hd]
        v = _linear(t, p + "wv", h).reshape(n, nkv, hd).transpose(1, 0, 2)
        k, v = np.repeat(k, nh // nkv, axis=0), np.repeat(v, nh // nkv, axis=0)
        scores = np.where(causal, q @ k.transpose(0, 2, 1) / np.sqrt(hd), -np.inf)
        probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        x = x + _linear(t, p + "wo", (probs @ v).transpose(1, 0, 2).reshape(n, nh * hd))
        h = _layer_norm(x, t[p + "ffn_norm"], t[p + "ffn_norm_bias"], eps)
        x = x + _linear(t, p + "w_down", _gelu_tanh(_linear(t, p + "w_up", h)))
    x = _layer_norm(x, t["final_norm"], t["final_norm_bias"], eps)
    classifier = t["tok_embeddings"] if c["tied_embeddings"] else t["classifier"]
    return x @ classifier.T
