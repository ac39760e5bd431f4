"""An independent reading of docs/model-format.md's "Quantized matrices": turns a model directory's X.q4 / X.q8
(+ X.scales, X.zero_points or X.mins) back into the float matrix X, so that numpy_llama.py can run a quantized
directory and tests can check the converter's packing without kvx's own loader. Written from the document,
not from the converter's code."""

import numpy as np

SUFFIXES = (".q4", ".q8", ".scales", ".zero_points", ".mins")


def _unpack_q4(packed):
    """[rows, L / 2] bytes -> [rows, L]: byte t of each 16-byte group holds element t (low nibble) and t + 16."""
    rows = packed.shape[0]
    groups = packed.reshape(rows, -1, 16)
    return np.concatenate([groups & 0x0F, groups >> 4], axis=2).reshape(rows, -1).astype(np.float64)


def dequantize(tensors, name, cols):
    """The float64 [rows, cols] matrix name stored quantized in tensors (safetensors name -> array)."""
    if f"{name}.q4" in tensors:
        q, implied_zero = _unpack_q4(tensors[f"{name}.q4"]), 8.0
    else:
        q, implied_zero = tensors[f"{name}.q8"].astype(np.float64), 0.0
    scales = tensors[f"{name}.scales"].astype(np.float64)
    block = q.shape[1] // scales.shape[1]
    s = np.repeat(scales, block, axis=1)
    if f"{name}.mins" in tensors:
        w = s * q + np.repeat(tensors[f"{name}.mins"].astype(np.float64), block, axis=1)
    else:
        z = np.repeat(tensors[f"{name}.zero_points"].astype(np.float64), block, axis=1) \
            if f"{name}.zero_points" in tensors else implied_zero
        w = s * (q - z)
    return w[:, :cols]


def dequantized_tensors(tensors, cols_of):
    """tensors with every quantized matrix replaced by its float64 reading; cols_of(name) gives its columns."""
    out = {k: v.astype(np.float64) for k, v in tensors.items() if not k.endswith(SUFFIXES)}
    for name in {k.rsplit(".", 1)[0] for k in tensors if k.endswith((".q4", ".q8"))}:
        out[name] = dequantize(tensors, name, cols_of(name))
    return out


def llama_cols(config):
    """The input width of each llama matrix name (kvx's [out, in] layout)."""
    def cols(name):
        if name.endswith("w_down"):
            return config["hidden_dim"]
        if name.endswith("wo"):
            return config["n_heads"] * config["head_dim"]
        return config["dim"]
    return cols
