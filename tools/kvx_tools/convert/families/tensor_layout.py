"""The tensors of a kvx model directory and their shapes (docs/model-format.md, model.safetensors), from a
config.json dict and the family table (families/traits.py): what the engine's loader (engine/model/model.cpp)
will ask the weights file for."""

from .traits import is_gated, kinds_of, norm_has_bias

LINEARS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")


def tensor_shapes(config):
    """({name: shape} of the tensors the model needs, {name: shape} of those it may have: the Linear biases,
    LayerNorm biases, classifier_bias)."""
    c = config
    kinds = kinds_of(c)
    dim, hidden, hd = c["dim"], c["hidden_dim"], c["head_dim"]
    q_dim, kv_dim = c["n_heads"] * hd, c["n_kv_heads"] * hd
    placement = c.get("norm_placement", "pre")
    required = {"tok_embeddings": (c["vocab_size"], dim), "final_norm": (dim,)}
    optional = {"classifier_bias": (c["vocab_size"],)}
    norms = ["final_norm"]
    if kinds["positions"] == "learned":
        required["pos_embeddings"] = (c["max_seq_len"], dim)
    else:
        half = (c.get("rotary_dim") or hd) // 2
        required["rope_inv_freq"] = (half,)
        if c.get("rope_local_layers"):
            required["rope_inv_freq_local"] = (half,)
    qk = c.get("qk_norm")
    qk_shapes = {"projection": ((q_dim,), (kv_dim,))}.get(qk, ((hd,), (hd,))) if qk else None
    for i in range(c["n_layers"]):
        p = f"layers.{i}."
        layer_norms = ([] if placement == "post" else ["attn_norm", "ffn_norm"]) + \
            (["post_attn_norm", "post_ffn_norm"] if placement in ("sandwich", "post") else [])
        for name in layer_norms:
            required[p + name] = (dim,)
            norms.append(p + name)
        if qk_shapes:
            required[p + "q_norm"], required[p + "k_norm"] = qk_shapes
        linears = {"wq": (q_dim, dim), "wk": (kv_dim, dim), "wv": (kv_dim, dim), "wo": (dim, q_dim),
                   "w_up": (hidden, dim), "w_down": (dim, hidden)}
        if is_gated(kinds["mlp"]):
            linears["w_gate"] = (hidden, dim)
        for name, shape in linears.items():
            required[p + name] = shape
            optional[f"{p}{name}_bias"] = (shape[0],)
    if norm_has_bias(kinds["norm"]):
        optional.update({f"{name}_bias": (dim,) for name in norms})
    if not c["tied_embeddings"]:
        required["classifier"] = (c["vocab_size"], dim)
    return required, optional


def expected_tensor_shapes(config):
    """{name: shape} of every tensor the model needs."""
    return tensor_shapes(config)[0]
