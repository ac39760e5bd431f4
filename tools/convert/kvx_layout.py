"""The tensors of a kvx model directory and their shapes (docs/model-format.md, model.safetensors)."""


def expected_tensor_shapes(config):
    """{name: shape} for every tensor model.safetensors must hold, given config.json's values."""
    c = config
    dim, hidden, hd = c["dim"], c["hidden_dim"], c["head_dim"]
    q_dim, kv_dim = c["n_heads"] * hd, c["n_kv_heads"] * hd
    shapes = {"tok_embeddings": (c["vocab_size"], dim), "rope_inv_freq": (hd // 2,), "final_norm": (dim,)}
    for i in range(c["n_layers"]):
        shapes.update({
            f"layers.{i}.attn_norm": (dim,),
            f"layers.{i}.wq": (q_dim, dim),
            f"layers.{i}.wk": (kv_dim, dim),
            f"layers.{i}.wv": (kv_dim, dim),
            f"layers.{i}.wo": (dim, q_dim),
            f"layers.{i}.ffn_norm": (dim,),
            f"layers.{i}.w_gate": (hidden, dim),
            f"layers.{i}.w_up": (hidden, dim),
            f"layers.{i}.w_down": (dim, hidden),
        })
    if not c["tied_embeddings"]:
        shapes["classifier"] = (c["vocab_size"], dim)
    return shapes
