"""HF state dict -> kvx model directory, for the engine's own test against HF's logits
(test_engine_families.py). Test-side only: the converter (tools/kvx_tools/convert) reads ONNX graphs; this
reads the fp32 parameters that testdata/exporters/regenerate.py --hf-weights-only saved from the very HF
model that wrote hf_logits.npy, plus the config dict in fixture.json, and writes what `kvx logits` loads:
config.json (docs/model-format.md, with the layer options) and model.safetensors in kvx's names.

Every fact of the family goes into config.json as a field (the norm, positions and MLP kinds where they are
not the architecture row's, norm weight offset, q/k norm, norm placement, residual and its scale, clip_qkv,
rotary_dim, rope_local_layers, embedding, attention and logit scales, soft-caps, windows); nothing here
computes a forward pass. The rotary inverse frequencies are HF's own buffers (saved beside the weights), so
rope scaling (llama3) needs no re-derivation; GPT-J, which keeps none, gets them as its
create_sinusoidal_positions computes them. Fused weights are split: Phi-3's qkv_proj and gate_up_proj, GPT-2's
c_attn (Conv1D, stored [in, out]), GPT-NeoX's query_key_value (interleaved per head), Falcon's and GPT-BigCode's
multi-query projections ([q heads, k, v]). Interleaved rotary (Cohere, GPT-J: pairs (2i, 2i + 1)) becomes
kvx's rotate-half pairing (i, i + rotary_dim / 2) by permuting the rows of wq and wk within each head's rotated
part: q.k is unchanged when q and k are permuted alike.
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


def _interleaved_to_half(m, heads, head_dim, rotary_dim):
    """The rows of m ([heads * head_dim, ...]) reordered within each head so that the interleaved rotary pair
    (2i, 2i + 1) lands on rotate-half's (i, i + rotary_dim / 2); the unrotated tail stays in place."""
    within = np.concatenate([np.arange(0, rotary_dim, 2), np.arange(1, rotary_dim, 2), np.arange(rotary_dim, head_dim)])
    return m[(np.arange(heads)[:, None] * head_dim + within[None, :]).reshape(-1)]


def _linear(t, w, hf, kvx):
    """kvx's kvx (+ kvx_bias) from HF's nn.Linear hf ([out, in], as kvx stores it)."""
    t[kvx] = w[hf + ".weight"]
    if hf + ".bias" in w:
        t[kvx + "_bias"] = w[hf + ".bias"]


def _norm(t, w, hf, kvx, width):
    """A norm's weight (ones where HF's has none: OLMo's non-parametric LayerNorm) and its bias where it has one."""
    t[kvx] = w.get(hf + ".weight", np.ones(width, dtype=np.float32))
    if hf + ".bias" in w:
        t[kvx + "_bias"] = w[hf + ".bias"]


# family -> the config.json fields of its layer beyond a Llama's (HF config dict in, fields out).
_LLAMA_LIKE_FIELDS = {
    # LayerNorm without weight or bias at eps 1e-5 (OlmoLayerNorm's constant), q/k/v clamped.
    "olmo": lambda cfg: {"norm": "layer", "norm_eps": 1e-5, "clip_qkv": cfg["clip_qkv"]},
    "olmo2": lambda cfg: {"norm_placement": "post", "qk_norm": "projection"},
    "granite": lambda cfg: {"embedding_scale": cfg["embedding_multiplier"], "attention_scale": cfg["attention_multiplier"],
                            "residual_scale": cfg["residual_multiplier"], "logit_scale": 1.0 / cfg["logits_scaling"]},
    "stablelm": lambda cfg: {"norm": "layer", "norm_eps": cfg["layer_norm_eps"]},
    "phi": lambda cfg: {"norm": "layer", "norm_eps": cfg["layer_norm_eps"], "mlp": "gelu_tanh", "residual": "parallel"},
    "starcoder2": lambda cfg: {"norm": "layer", "norm_eps": cfg["norm_epsilon"], "mlp": "gelu_tanh"},
    "cohere": lambda cfg: {"norm": "layer", "norm_eps": cfg["layer_norm_eps"], "residual": "parallel",
                           "logit_scale": cfg["logit_scale"]},
}


def _llama_like(family, cfg, w):
    """Llama, Mistral, Qwen 2/3, Phi-3, Gemma 1/2/3, and the model.layers.{i} families of other layer traits
    (OLMo 1/2, Granite, StableLM, Phi, StarCoder 2, Cohere), whose fields _LLAMA_LIKE_FIELDS states."""
    n_layers = cfg["num_hidden_layers"]
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or heads
    dim = cfg["hidden_size"]
    head_dim = cfg.get("head_dim") or dim // heads
    gemma = family.startswith("gemma")
    config = {
        "architecture": "gemma" if gemma else "llama",
        "dim": dim, "hidden_dim": cfg["intermediate_size"], "n_layers": n_layers, "n_heads": heads,
        "n_kv_heads": kv_heads, "head_dim": head_dim, "norm_eps": cfg.get("rms_norm_eps"),
        "tied_embeddings": bool(cfg.get("tie_word_embeddings")),
    }
    config.update(_LLAMA_LIKE_FIELDS.get(family, lambda cfg: {})(cfg))
    inv_freq = w["model.rotary_emb.inv_freq"]
    if 2 * len(inv_freq) < head_dim:  # partial rotary (StableLM, Phi): the first 2 x len(inv_freq) of each head
        config["rotary_dim"] = 2 * len(inv_freq)
    rotary_dim = 2 * len(inv_freq)
    final_norm = "model.final_layernorm" if "model.final_layernorm.weight" in w else "model.norm"  # Phi's name
    t = {"tok_embeddings": w["model.embed_tokens.weight"], "rope_inv_freq": inv_freq}
    _norm(t, w, final_norm, "final_norm", dim)
    if "model.rotary_emb_local.inv_freq" in w:  # Gemma 3: the sliding layers' own base
        t["rope_inv_freq_local"] = w["model.rotary_emb_local.inv_freq"]
        config["rope_local_layers"] = [i for i, kind in enumerate(cfg["layer_types"]) if kind == "sliding_attention"]
    if not config["tied_embeddings"]:
        t["classifier"] = w["lm_head.weight"]
    if "lm_head.bias" in w:  # Phi
        t["classifier_bias"] = w["lm_head.bias"]
    q_dim, kv_dim, hidden = heads * head_dim, kv_heads * head_dim, cfg["intermediate_size"]
    sandwich = "model.layers.0.pre_feedforward_layernorm.weight" in w
    post_only = config.get("norm_placement") == "post"  # OLMo 2: no input_layernorm
    one_norm = config.get("residual") == "parallel"     # Phi, Cohere: input_layernorm feeds both blocks
    for i in range(n_layers):
        p, k = f"model.layers.{i}.", f"layers.{i}."
        a = p + "self_attn."
        if not post_only:
            _norm(t, w, p + "input_layernorm", k + "attn_norm", dim)
        if a + "qkv_proj.weight" in w:  # Phi-3: rows q, then k, then v
            qkv = w[a + "qkv_proj.weight"]
            t[k + "wq"], t[k + "wk"], t[k + "wv"] = np.split(qkv, [q_dim, q_dim + kv_dim])
        else:
            for hf, kvx in (("q_proj", "wq"), ("k_proj", "wk"), ("v_proj", "wv")):
                _linear(t, w, a + hf, k + kvx)  # Qwen 2, StableLM, Phi, StarCoder 2: with biases
        if family == "cohere":  # interleaved rotary pairs -> rotate-half's
            for name in ("wq", "wq_bias", "wk", "wk_bias"):
                if k + name in t:
                    n_heads = heads if name.startswith("wq") else kv_heads
                    t[k + name] = _interleaved_to_half(t[k + name], n_heads, head_dim, rotary_dim)
        if a + "q_norm.weight" in w:  # Qwen 3, Gemma 3 (per head); OLMo 2 (over the projection, "projection")
            t[k + "q_norm"], t[k + "k_norm"] = w[a + "q_norm.weight"], w[a + "k_norm.weight"]
        _linear(t, w, a + ("dense" if a + "dense.weight" in w else "o_proj"), k + "wo")  # Phi: dense
        if sandwich:  # Gemma 2/3: post_attention_layernorm is the sandwich's, pre_feedforward the MLP's
            t[k + "post_attn_norm"] = w[p + "post_attention_layernorm.weight"]
            t[k + "ffn_norm"] = w[p + "pre_feedforward_layernorm.weight"]
            t[k + "post_ffn_norm"] = w[p + "post_feedforward_layernorm.weight"]
        elif post_only:  # OLMo 2: post_attention_layernorm on the attention's output
            t[k + "post_attn_norm"] = w[p + "post_attention_layernorm.weight"]
            t[k + "post_ffn_norm"] = w[p + "post_feedforward_layernorm.weight"]
        elif one_norm:
            _norm(t, w, p + "input_layernorm", k + "ffn_norm", dim)
        else:
            _norm(t, w, p + "post_attention_layernorm", k + "ffn_norm", dim)
        m = p + "mlp."
        if m + "gate_up_proj.weight" in w:  # Phi-3: gate rows, then up rows
            t[k + "w_gate"], t[k + "w_up"] = np.split(w[m + "gate_up_proj.weight"], [hidden])
            t[k + "w_down"] = w[m + "down_proj.weight"]
        elif m + "gate_proj.weight" in w:
            for hf, kvx in (("gate_proj", "w_gate"), ("up_proj", "w_up"), ("down_proj", "w_down")):
                _linear(t, w, m + hf, k + kvx)
        else:  # ungated: Phi's fc1 / fc2, StarCoder 2's c_fc / c_proj
            up, down = ("fc1", "fc2") if m + "fc1.weight" in w else ("c_fc", "c_proj")
            _linear(t, w, m + up, k + "w_up")
            _linear(t, w, m + down, k + "w_down")
    if "model.layers.0.self_attn.q_norm.weight" in w and "qk_norm" not in config:
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


def _gptj(cfg, w):
    """GPT-J: one LayerNorm before attention and MLP side by side, interleaved partial rotary without a stored
    inv_freq, biased MLP and LM head."""
    dim, heads, n_layers, rotary_dim = cfg["n_embd"], cfg["n_head"], cfg["n_layer"], cfg["rotary_dim"]
    head_dim = dim // heads
    # create_sinusoidal_positions: 1 / 10000^(arange(0, r, 2) / r) in fp32
    inv_freq = (1.0 / np.float32(10000) ** (np.arange(0, rotary_dim, 2) / rotary_dim).astype(np.float32)).astype(np.float32)
    config = {"architecture": "llama", "norm": "layer", "mlp": "gelu_tanh", "residual": "parallel",
              "dim": dim, "hidden_dim": cfg.get("n_inner") or 4 * dim, "n_layers": n_layers, "n_heads": heads,
              "n_kv_heads": heads, "head_dim": head_dim, "norm_eps": cfg["layer_norm_epsilon"],
              "tied_embeddings": False, "max_seq_len": cfg["n_positions"], "rotary_dim": rotary_dim}
    t = {"tok_embeddings": w["transformer.wte.weight"], "rope_inv_freq": inv_freq}
    _norm(t, w, "transformer.ln_f", "final_norm", dim)
    _linear(t, w, "lm_head", "classifier")
    for i in range(n_layers):
        p, k = f"transformer.h.{i}.", f"layers.{i}."
        for kvx in ("attn_norm", "ffn_norm"):
            _norm(t, w, p + "ln_1", k + kvx, dim)
        for hf, kvx in (("attn.q_proj", "wq"), ("attn.k_proj", "wk"), ("attn.v_proj", "wv"), ("attn.out_proj", "wo"),
                        ("mlp.fc_in", "w_up"), ("mlp.fc_out", "w_down")):
            _linear(t, w, p + hf, k + kvx)
        for name in ("wq", "wk"):
            t[k + name] = _interleaved_to_half(t[k + name], heads, head_dim, rotary_dim)
    return config, t


def _falcon(cfg, w):
    """Falcon (multi_query, parallel_attn, the old decoder architecture): GPT-NeoX's kinds with one KV head and one
    LayerNorm feeding both blocks."""
    dim, heads, n_layers = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    head_dim = dim // heads
    inv_freq = w["transformer.rotary_emb.inv_freq"]
    config = {"architecture": "gpt-neox", "residual": "parallel", "dim": dim, "hidden_dim": cfg["ffn_hidden_size"],
              "n_layers": n_layers, "n_heads": heads, "n_kv_heads": 1, "head_dim": head_dim,
              "norm_eps": cfg["layer_norm_epsilon"], "tied_embeddings": bool(cfg.get("tie_word_embeddings", True))}
    if 2 * len(inv_freq) < head_dim:
        config["rotary_dim"] = 2 * len(inv_freq)
    t = {"tok_embeddings": w["transformer.word_embeddings.weight"], "rope_inv_freq": inv_freq}
    _norm(t, w, "transformer.ln_f", "final_norm", dim)
    if not config["tied_embeddings"]:
        t["classifier"] = w["lm_head.weight"]
    for i in range(n_layers):
        p, k = f"transformer.h.{i}.", f"layers.{i}."
        for kvx in ("attn_norm", "ffn_norm"):
            _norm(t, w, p + "input_layernorm", k + kvx, dim)
        qkv = w[p + "self_attention.query_key_value.weight"]  # multi_query: rows [q heads..., k, v]
        t[k + "wq"], t[k + "wk"], t[k + "wv"] = np.split(qkv, [dim, dim + head_dim])
        _linear(t, w, p + "self_attention.dense", k + "wo")
        _linear(t, w, p + "mlp.dense_h_to_4h", k + "w_up")
        _linear(t, w, p + "mlp.dense_4h_to_h", k + "w_down")
    return config, t


def _gpt_bigcode(cfg, w):
    """GPT-BigCode: GPT-2's layer in nn.Linear ([out, in]) with multi-query attention (c_attn rows [q, k, v])."""
    dim, n_layers, heads = cfg["n_embd"], cfg["n_layer"], cfg["n_head"]
    head_dim = dim // heads
    kv_heads = 1 if cfg.get("multi_query", True) else heads
    config = {"architecture": "gpt2", "dim": dim, "hidden_dim": cfg.get("n_inner") or 4 * dim, "n_layers": n_layers,
              "n_heads": heads, "n_kv_heads": kv_heads, "head_dim": head_dim, "norm_eps": cfg["layer_norm_epsilon"],
              "tied_embeddings": True, "max_seq_len": cfg["n_positions"]}
    t = {"tok_embeddings": w["transformer.wte.weight"], "pos_embeddings": w["transformer.wpe.weight"]}
    _norm(t, w, "transformer.ln_f", "final_norm", dim)
    for i in range(n_layers):
        p, k = f"transformer.h.{i}.", f"layers.{i}."
        _norm(t, w, p + "ln_1", k + "attn_norm", dim)
        _norm(t, w, p + "ln_2", k + "ffn_norm", dim)
        cut = [dim, dim + kv_heads * head_dim]
        for name, part in zip(("wq", "wk", "wv"), np.split(w[p + "attn.c_attn.weight"], cut)):
            t[k + name] = part
        for name, part in zip(("wq", "wk", "wv"), np.split(w[p + "attn.c_attn.bias"], cut)):
            t[k + name + "_bias"] = part
        for hf, kvx in (("attn.c_proj", "wo"), ("mlp.c_fc", "w_up"), ("mlp.c_proj", "w_down")):
            _linear(t, w, p + hf, k + kvx)
    return config, t


_OTHER_LAYOUTS = {"gptj": _gptj, "falcon": _falcon, "gpt-bigcode": _gpt_bigcode}


def write_kvx_model(family, out_dir):
    """Writes out_dir/config.json and out_dir/model.safetensors for the family's HF weights; returns out_dir."""
    cfg = hf_config(family)
    w = load_file(str(EXPORTERS / family / "hf_weights.safetensors"))
    if family == "gpt2":
        config, tensors = _gpt2(cfg, w)
    elif family == "gpt-neox":
        config, tensors = _gpt_neox(cfg, w)
    elif family in _OTHER_LAYOUTS:
        config, tensors = _OTHER_LAYOUTS[family](cfg, w)
    else:
        config, tensors = _llama_like(family, cfg, w)
    config.setdefault("max_seq_len", cfg.get("max_position_embeddings"))
    if config["architecture"] != "gpt2":  # every other family here is rotary
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
