"""Builds the ONNX graph of a Gemma 3 text decoder the way torch.onnx.export writes HF's Gemma3ForCausalLM,
with the interface of llama_graph (same inputs and outputs, keys cached after RoPE).

What differs from Llama, each written the way kvx convert recognises it (docs/model-format.md, Layer options):
  - the token embedding times sqrt(dim) (a Mul by a scalar constant): embedding_scale;
  - per-head RMSNorm of Q and K after the head transpose, before RoPE: qk_norm;
  - RMSNorm of each block's output before its residual add: the sandwich norms;
  - GeGLU: GELU in its tanh form, written out, on the gate: the gemma architecture;
  - sliding-window layers (mask key > query - W) rotating with their own RoPE base: sliding_window,
    rope_local_layers and rope_inv_freq_local;
  - Q K^T scaled by query_pre_attn_scalar^-0.5 (config "attention_scale"; 1/sqrt(head_dim) for 270M).
Norm weights are used as given: llama.cpp's GGUF files already hold Gemma's 1 + w.

config: llama_graph's keys plus embedding_scale, attention_scale, rope_theta_local, sliding_window and
window_layers. weights: llama_graph's plus layers.{i}.q_norm / k_norm [head_dim] and post_attn_norm /
post_ffn_norm [dim]; Q and K rows in rotate-half order (llama.cpp keeps HF's order for Gemma).
"""

import numpy as np

from .decoder_graph import graph_metadata
from .llama_graph import IR_VERSION, OPSET, _LlamaGraph, rope_inv_freq
from .onnx_graph_builder import FLOAT

GELU_TANH_SCALE = float(np.sqrt(2.0 / np.pi))


def build_gemma3_graph(config, weights, external_data=None):
    """external_data: an ExternalDataFile (external_data_file.py) the weights are written to as they are added."""
    return _Gemma3Graph(config, weights, external_data).build()


class _Gemma3Graph(_LlamaGraph):
    def _rotary(self, theta, name):
        g, scope = self.g, f"/model/{name}"
        inv_freq = g.add_initializer(f"model.{name}.inv_freq", rope_inv_freq(self.c["head_dim"], theta))
        inv_freq_col = g.op("Unsqueeze", [inv_freq, g.const([0, 2], scope)], scope)
        positions = g.op("Cast", ["position_ids"], scope, to=FLOAT)
        positions_row = g.op("Unsqueeze", [positions, g.const([1], scope)], scope)
        freqs = g.op("Transpose", [g.op("MatMul", [inv_freq_col, positions_row], scope)], scope, perm=[0, 2, 1])
        angles = g.op("Concat", [freqs, freqs], scope, axis=-1)
        return g.op("Cos", [angles], scope), g.op("Sin", [angles], scope)

    def _heads_normed(self, x, i, which, n_heads, scope):
        heads = self._split_heads(x, n_heads, scope)  # [b, heads, s, hd]
        return self._rms_norm(heads, f"layers.{i}.{which}", f"model.layers.{i}.self_attn.{which}.weight",
                              f"{scope}/{which}")

    def _attention(self, i, x, cos, sin, bias):
        c, g = self.c, self.g
        scope = f"/model/layers.{i}/self_attn"
        q = self._heads_normed(self._linear(x, f"layers.{i}.wq", f"{scope}/q_proj"), i, "q_norm", c["n_heads"], scope)
        k = self._heads_normed(self._linear(x, f"layers.{i}.wk", f"{scope}/k_proj"), i, "k_norm", c["n_kv_heads"],
                               scope)
        v = self._split_heads(self._linear(x, f"layers.{i}.wv", f"{scope}/v_proj"), c["n_kv_heads"], scope)
        q = self._apply_rope(q, cos, sin, scope)
        k = self._apply_rope(k, cos, sin, scope)
        k_all = g.op("Concat", [f"past_key_values.{i}.key", k], scope, outputs=[f"present.{i}.key"], axis=2)
        v_all = g.op("Concat", [f"past_key_values.{i}.value", v], scope, outputs=[f"present.{i}.value"], axis=2)
        k_t = g.op("Transpose", [self._repeat_kv(k_all, scope)], scope, perm=[0, 1, 3, 2])
        scores = g.op("MatMul", [q, k_t], scope)
        scaled = g.op("Mul", [scores, g.const(c["attention_scale"], scope, np.float32)], scope)
        probs = g.op("Softmax", [g.op("Add", [scaled, bias], scope)], scope, axis=-1)
        context = g.op("MatMul", [probs, self._repeat_kv(v_all, scope)], scope)
        return self._linear(self._merge_heads(context, scope), f"layers.{i}.wo", f"{scope}/o_proj")

    def _gelu_tanh(self, x, scope):
        """0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), as HF's gelu_pytorch_tanh is traced."""
        g = self.g
        cube = g.op("Pow", [x, g.const(3.0, scope, np.float32)], scope)
        inner = g.op("Add", [x, g.op("Mul", [cube, g.const(0.044715, scope, np.float32)], scope)], scope)
        tanh = g.op("Tanh", [g.op("Mul", [inner, g.const(GELU_TANH_SCALE, scope, np.float32)], scope)], scope)
        one_plus = g.op("Add", [tanh, g.const(1.0, scope, np.float32)], scope)
        half_x = g.op("Mul", [x, g.const(0.5, scope, np.float32)], scope)
        return g.op("Mul", [half_x, one_plus], scope)

    def _mlp(self, i, x):
        g, scope = self.g, f"/model/layers.{i}/mlp"
        gate = self._linear(x, f"layers.{i}.w_gate", f"{scope}/gate_proj")
        up = self._linear(x, f"layers.{i}.w_up", f"{scope}/up_proj")
        activated = self._gelu_tanh(gate, f"{scope}/act_fn")
        return self._linear(g.op("Mul", [activated, up], scope), f"layers.{i}.w_down", f"{scope}/down_proj")

    def build(self):
        c, g = self.c, self.g
        self._declare_interface()
        embedding = g.add_initializer("model.embed_tokens.weight", self.w["tok_embeddings"])
        gathered = g.op("Gather", [embedding, "input_ids"], "/model/embed_tokens")
        hidden = g.op("Mul", [gathered, g.const(c["embedding_scale"], "/model/embed_tokens", np.float32)],
                      "/model/embed_tokens")
        rotary = {False: self._rotary(c["rope_theta"], "rotary_emb"),
                  True: self._rotary(c["rope_theta_local"], "rotary_emb_local")}
        full_bias = self._attention_bias("input_ids", "attention_mask")
        window_bias = self._attention_bias("input_ids", "attention_mask", c["sliding_window"])
        for i in range(c["n_layers"]):
            layer = f"/model/layers.{i}"
            local = i in c["window_layers"]
            cos, sin = rotary[local]
            normed = self._rms_norm(hidden, f"layers.{i}.attn_norm", f"model.layers.{i}.input_layernorm.weight",
                                    f"{layer}/input_layernorm")
            attn = self._attention(i, normed, cos, sin, window_bias if local else full_bias)
            attn = self._rms_norm(attn, f"layers.{i}.post_attn_norm",
                                  f"model.layers.{i}.post_attention_layernorm.weight", f"{layer}/post_attention_layernorm")
            hidden = g.op("Add", [hidden, attn], layer)
            normed = self._rms_norm(hidden, f"layers.{i}.ffn_norm", f"model.layers.{i}.pre_feedforward_layernorm.weight",
                                    f"{layer}/pre_feedforward_layernorm")
            mlp = self._rms_norm(self._mlp(i, normed), f"layers.{i}.post_ffn_norm",
                                 f"model.layers.{i}.post_feedforward_layernorm.weight",
                                 f"{layer}/post_feedforward_layernorm")
            hidden = g.op("Add", [hidden, mlp], layer)
        normed = self._rms_norm(hidden, "final_norm", "model.norm.weight", "/model/norm")
        g.op("MatMul", [normed, self._lm_head_weight(self.w.get("classifier"))], "/lm_head", outputs=["logits"])
        return g.build("main_graph", OPSET, IR_VERSION, graph_metadata(c))
