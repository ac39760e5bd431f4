"""The tensors of a kvx model directory and their shapes (docs/model-format.md, model.safetensors)."""


def expected_tensor_shapes(config):
    """{name: shape} for every tensor model.safetensors may hold, given config.json's values. Linear biases
    (NAME_bias) are optional: a gpt2 graph may have none on some layer, a llama graph on any."""
    c = config
    gpt2 = c["architecture"] == "gpt2"
    neox = c["architecture"] == "gpt-neox"  # LayerNorm with bias, rotary (possibly partial), no gate
    dim, hidden, hd = c["dim"], c["hidden_dim"], c["head_dim"]
    q_dim, kv_dim = c["n_heads"] * hd, c["n_kv_heads"] * hd
    shapes = {"tok_embeddings": (c["vocab_size"], dim), "final_norm": (dim,)}
    if neox:
        shapes["final_norm_bias"] = (dim,)
    if gpt2:
        shapes.update({"pos_embeddings": (c["max_seq_len"], dim), "final_norm_bias": (dim,)})
    else:
        shapes["rope_inv_freq"] = ((c.get("rotary_dim") or hd) // 2,)
        if c.get("rope_local_layers"):
            shapes["rope_inv_freq_local"] = ((c.get("rotary_dim") or hd) // 2,)
    for i in range(c["n_layers"]):
        p = f"layers.{i}."
        shapes.update({p + "attn_norm": (dim,), p + "ffn_norm": (dim,)})
        if c.get("norm_placement") == "sandwich":
            shapes.update({p + "post_attn_norm": (dim,), p + "post_ffn_norm": (dim,)})
        if c.get("qk_norm"):
            shapes.update({p + "q_norm": (hd,), p + "k_norm": (hd,)})
        if gpt2 or neox:
            shapes.update({p + "attn_norm_bias": (dim,), p + "ffn_norm_bias": (dim,)})
        linears = {"wq": (q_dim, dim), "wk": (kv_dim, dim), "wv": (kv_dim, dim), "wo": (dim, q_dim),
                   "w_up": (hidden, dim), "w_down": (dim, hidden)}
        if not gpt2 and not neox:
            linears["w_gate"] = (hidden, dim)
        for name, shape in linears.items():
            shapes[p + name] = shape
    if not c["tied_embeddings"]:
        shapes["classifier"] = (c["vocab_size"], dim)
    return shapes


def linear_bias_shapes(config):
    """{NAME_bias: [out]} for every linear layer, the optional tensors of expected_tensor_shapes."""
    return {f"{name}_bias": (shape[0],) for name, shape in expected_tensor_shapes(config).items()
            if name.split(".")[-1] in ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")}
