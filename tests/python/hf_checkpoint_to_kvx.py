"""HF state dict -> kvx model directory, for the engine's own test against HF's logits
(test_engine_families.py). Test-side only: the converter (tools/kvx_tools/convert) reads ONNX graphs; this
reads the fp32 parameters that testdata/exporters/regenerate.py --hf-weights-only saved from the very HF
model that wrote hf_logits.npy, plus the config dict in fixture.json, and writes what `kvx logits` loads:
config.json (docs/model-format.md, with the layer options) and model.safetensors in kvx's names.

Every fact of the family goes into config.json as a field (norm weight offset, q/k norm, norm placement,
residual, rotary_dim, rope_local_layers, embedding scale, attention scale, soft-caps, windows); nothing here
computes a forward pass. The rotary inverse frequencies are HF's own buffers (saved beside the weights), so
rope scaling (llama3) needs no re-derivation. Fused weights are split: Phi-3's qkv_proj and gate_up_proj,
GPT-2's c_attn (Conv1D, stored [in, out]), GPT-NeoX's query_key_value (interleaved per head).
"""

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

EXPORTERS = Path(__file__).resolve().parents[2] / "testdata" / "exporters"


def hf_config(family):
    """The HF config dict of the family's fixture (every exporter folder holds the same one)."""
    fixture = next((EXPORTERS / family).glob("*/fixture.json"))
    return json.loads(fixture.read_text())["hf_config"]


def _f32(x):
    return float(np.float32(x))


def _window_layers(cfg, n_layers):
    """(window, [layers]) from HF's sliding_window and layer_types; (0, []) for none."""
    window = cfg.get("sliding_window")
    if not window or cfg.get("use_sliding_window") is False:
        return 0, []
    types = cfg.get("layer_types")
    if types is None:
        return window, list(range(n_layers))
    return window, [i for i, t in enumerate(types) if t == "sliding_attention"]


def _llama_like(family, cfg, w):
    """Llama, Mistral, Qwen 2/3, Phi-3, Gemma 1/2/3: the names under model.layers.{i}."""
    n_layers = cfg["num_hidden_layers"]
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or heads
    dim = cfg["hidden_size"]
    head_dim = cfg.get("head_dim") or dim // heads
    gemma = family.startswith("gemma")
    config = {
        "architecture": "gemma" if gemma else "llama",
        "dim": dim, "hidden_dim": cfg["intermediate_size"], "n_layers": n_layers, "n_heads": heads,
        "n_kv_heads": kv_heads, "head_dim": head_dim, "norm_eps": cfg["rms_norm_eps"],
        "tied_embeddings": bool(cfg.get("tie_word_embeddings")),
    }
    t = {"tok_embeddings": w["model.embed_tokens.weight"], "final_norm": w["model.norm.weight"],
         "rope_inv_freq": w["model.rotary_emb.inv_freq"]}
    if "model.rotary_emb_local.inv_freq" in w:  # Gemma 3: the sliding layers' own base
        t["rope_inv_freq_local"] = w["model.rotary_emb_local.inv_freq"]
        config["rope_local_layers"] = [i for i, kind in enumerate(cfg["layer_types"]) if kind == "sliding_attention"]
    if not config["tied_embeddings"]:
        t["classifier"] = w["lm_head.weight"]
    q_dim, kv_dim, hidden = heads * head_dim, kv_heads * head_dim, cfg["intermediate_size"]
    sandwich = f"model.layers.0.pre_feedforward_layernorm.weight" in w
    for i in range(n_layers):
        p, k = f"model.layers.{i}.", f"layers.{i}."
        a = p + "self_attn."
        t[k + "attn_norm"] = w[p + "input_layernorm.weight"]
        if a + "qkv_proj.weight" in w:  # Phi-3: rows q, then k, then v
            qkv = w[a + "qkv_proj.weight"]
            t[k + "wq"], t[k + "wk"], t[k + "wv"] = np.split(qkv, [q_dim, q_dim + kv_dim])
        else:
            for hf, kvx in (("q_proj", "wq"), ("k_proj", "wk"), ("v_proj", "wv")):
                t[k + kvx] = w[a + hf + ".weight"]
                if a + hf + ".bias" in w:  # Qwen 2
                    t[k + kvx + "_bias"] = w[a + hf + ".bias"]
        if a + "q_norm.weight" in w:  # Qwen 3, Gemma 3
            t[k + "q_norm"], t[k + "k_norm"] = w[a + "q_norm.weight"], w[a + "k_norm.weight"]
        t[k + "wo"] = w[a + "o_proj.weight"]
        if sandwich:  # Gemma 2/3: post_attention_layernorm is the sandwich's, pre_feedforward the MLP's
            t[k + "post_attn_norm"] = w[p + "post_attention_layernorm.weight"]
            t[k + "ffn_norm"] = w[p + "pre_feedforward_layernorm.weight"]
            t[k + "post_ffn_norm"] = w[p + "post_feedforward_layernorm.weight"]
        else:
            t[k + "ffn_norm"] = w[p + "post_attention_layernorm.weight"]
        if p + "mlp.gate_up_proj.weight" in w:  # Phi-3: gate rows, then up rows
            t[k + "w_gate"], t[k + "w_up"] = np.split(w[p + "mlp.gate_up_proj.weight"], [hidden])
        else:
            t[k + "w_gate"], t[k + "w_up"] = w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]
        t[k + "w_down"] = w[p + "mlp.down_proj.weight"]
    if "model.layers.0.self_attn.q_norm.weight" in w:
        config["qk_norm"] = True
    if gemma:
        config["norm_weight_offset"] = 1  # (1 + w), folded by the loader in fp32 as HF computes it
        config["embedding_scale"] = _f32(dim ** 0.5)  # HF's normalizer, a tensor of the activations' dtype
        if sandwich:
            config["norm_placement"] = "sandwich"
        if cfg.get("query_pre_attn_scalar"):
            config["attention_scale"] = cfg["query_pre_attn_scalar"] ** -0.5
        for hf, kvx in (("attn_logit_softcapping", "attn_logit_softcap"), ("final_logit_softcapping", "final_logit_softcap")):
            if cfg.get(hf):
                config[kvx] = cfg[hf]
    return config, t


def _gpt2(cfg, w):
    dim, n_layers = cfg["n_embd"], cfg["n_layer"]
    config = {"architecture": "gpt2", "dim": dim, "hidden_dim": cfg.get("n_inner") or 4 * dim, "n_layers": n_layers,
              "n_heads": cfg["n_head"], "n_kv_heads": cfg["n_head"], "head_dim": dim // cfg["n_head"],
              "norm_eps": cfg["layer_norm_epsilon"], "tied_embeddings": True, "max_seq_len": cfg["n_positions"]}
    t = {"tok_embeddings": w["transformer.wte.weight"], "pos_embeddings": w["transformer.wpe.weight"],
         "final_norm": w["transformer.ln_f.weight"], "final_norm_bias": w["transformer.ln_f.bias"]}
    for i in range(n_layers):
        p, k = f"transformer.h.{i}.", f"layers.{i}."
        for hf, kvx in (("ln_1", "attn_norm"), ("ln_2", "ffn_norm")):
            t[k + kvx], t[k + kvx + "_bias"] = w[p + hf + ".weight"], w[p + hf + ".bias"]
        qkv, qkv_bias = w[p + "attn.c_attn.weight"].T, w[p + "attn.c_attn.bias"]  # Conv1D: [in, out]
        for part, name in zip(np.split(qkv, 3), ("wq", "wk", "wv")):
            t[k + name] = part
        for part, name in zip(np.split(qkv_bias, 3), ("wq", "wk", "wv")):
            t[k + name + "_bias"] = part
        for hf, kvx in (("attn.c_proj", "wo"), ("mlp.c_fc", "w_up"), ("mlp.c_proj", "w_down")):
            t[k + kvx], t[k + kvx + "_bias"] = w[p + hf + ".weight"].T, w[p + hf + ".bias"]
    return config, t


def _gpt_neox(cfg, w):
    dim, heads, n_layers = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    head_dim = dim // heads
    inv_freq = w["gpt_neox.rotary_emb.inv_freq"]
    config = {"architecture": "gpt-neox", "dim": dim, "hidden_dim": cfg["intermediate_size"], "n_layers": n_layers,
              "n_heads": heads, "n_kv_heads": heads, "head_dim": head_dim, "norm_eps": cfg["layer_norm_eps"],
              "tied_embeddings": bool(cfg.get("tie_word_embeddings")), "rotary_dim": 2 * len(inv_freq),
              "residual": "parallel" if cfg["use_parallel_residual"] else "sequential"}
    t = {"tok_embeddings": w["gpt_neox.embed_in.weight"], "rope_inv_freq": inv_freq,
         "final_norm": w["gpt_neox.final_layer_norm.weight"], "final_norm_bias": w["gpt_neox.final_layer_norm.bias"]}
    if not config["tied_embeddings"]:
        t["classifier"] = w["embed_out.weight"]
    for i in range(n_layers):
        p, k = f"gpt_neox.layers.{i}.", f"layers.{i}."
        for hf, kvx in (("input_layernorm", "attn_norm"), ("post_attention_layernorm", "ffn_norm")):
            t[k + kvx], t[k + kvx + "_bias"] = w[p + hf + ".weight"], w[p + hf + ".bias"]
        # query_key_value rows are [head][q | k | v][head_dim]
        qkv = w[p + "attention.query_key_value.weight"].reshape(heads, 3, head_dim, dim)
        qkv_bias = w[p + "attention.query_key_value.bias"].reshape(heads, 3, head_dim)
        for j, name in enumerate(("wq", "wk", "wv")):
            t[k + name] = qkv[:, j].reshape(heads * head_dim, dim)
            t[k + name + "_bias"] = qkv_bias[:, j].reshape(heads * head_dim)
        for hf, kvx in (("attention.dense", "wo"), ("mlp.dense_h_to_4h", "w_up"), ("mlp.dense_4h_to_h", "w_down")):
            t[k + kvx], t[k + kvx + "_bias"] = w[p + hf + ".weight"], w[p + hf + ".bias"]
    return config, t


def write_kvx_model(family, out_dir):
    """Writes out_dir/config.json and out_dir/model.safetensors for the family's HF weights; returns out_dir."""
    cfg = hf_config(family)
    w = load_file(str(EXPORTERS / family / "hf_weights.safetensors"))
    if family == "gpt2":
        config, tensors = _gpt2(cfg, w)
    elif family == "gpt-neox":
        config, tensors = _gpt_neox(cfg, w)
    else:
        config, tensors = _llama_like(family, cfg, w)
    config.setdefault("max_seq_len", cfg.get("max_position_embeddings"))
    if config["architecture"] != "gpt2":
        config["rope_style"] = "half"
    window, layers = _window_layers(cfg, config["n_layers"])
    if window:
        config["sliding_window"] = {"window": window, "layers": layers}
    config.update({"format": "kvx-model", "format_version": 1, "vocab_size": cfg["vocab_size"],
                   "bos_token_id": -1, "eos_token_ids": [], "tokenizer": None,
                   "weights": {"file": "model.safetensors", "dtype": "f32"},
                   "source": {"hf": family, "converter": "tests/python/hf_checkpoint_to_kvx.py"}})
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file({name: np.ascontiguousarray(v, dtype=np.float32) for name, v in tensors.items()},
              str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return out
