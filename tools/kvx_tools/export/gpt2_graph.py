"""Builds the ONNX graph of a GPT-2 decoder the way torch.onnx.export writes HF's GPT2LMHeadModel.

Only default-domain operators (opset 17, for LayerNormalization). The interface is llama_graph's, with
n_heads KV heads:
  inputs   input_ids                  int64 [batch_size, sequence_length]
           attention_mask             int64 [batch_size, total_sequence_length]  (1 = real token)
           position_ids               int64 [batch_size, sequence_length]  (only with position_ids_input)
           past_key_values.{i}.key    f32   [batch_size, n_heads, past_sequence_length, head_dim]
           past_key_values.{i}.value  f32   same
  outputs  logits                     f32   [batch_size, sequence_length, vocab_size]
           present.{i}.key / .value   f32   [batch_size, n_heads, total_sequence_length, head_dim]
Without position_ids_input the positions are computed in the graph, as older HF exports did:
Range(past_sequence_length, past_sequence_length + sequence_length).

The pieces, per layer: LayerNormalization (ln_1) -> one fused QKV MatMul by c_attn [dim, 3*dim] + bias,
Split into q, k, v -> heads -> scores / sqrt(head_dim) + mask -> Softmax -> context -> c_proj (+ bias) ->
residual Add; LayerNormalization (ln_2) -> c_fc (+ bias) -> GELU in its tanh form written out in
elementary ops (HF's gelu_new) -> c_proj (+ bias) -> residual Add. Then ln_f and the classifier, the
transposed token embedding when tied.

config: dict with dim, hidden_dim, n_layers, n_heads, head_dim, vocab_size, max_seq_len, norm_eps.
weights: dict of fp32 numpy arrays named as in kvx's model.safetensors (docs/model-format.md), Linear
weights [out, in]: tok_embeddings [vocab, dim]; pos_embeddings [max_seq_len, dim]; classifier [vocab, dim]
only when untied; final_norm(_bias) [dim]; per layer attn_norm(_bias), ffn_norm(_bias) [dim]; wq, wk, wv
[n_heads*head_dim, dim] and their _bias; wo [dim, n_heads*head_dim] + _bias; w_up [hidden_dim, dim] +
_bias; w_down [dim, hidden_dim] + _bias.
"""

import numpy as np

from .decoder_graph import DecoderGraph, graph_metadata
from .llama_graph import IR_VERSION, OPSET
from .onnx_graph_builder import OnnxGraphBuilder

GELU_TANH_SCALE = np.sqrt(2.0 / np.pi)  # gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
GELU_TANH_CUBIC = 0.044715


def build_gpt2_graph(config, weights, position_ids_input=True):
    return _Gpt2Graph({**config, "n_kv_heads": config["n_heads"]}, weights, position_ids_input).build()


class _Gpt2Graph(DecoderGraph):
    def __init__(self, config, weights, position_ids_input):
        self.c = config
        self.w = weights
        self.position_ids_input = position_ids_input
        self.g = OnnxGraphBuilder()

    # -- small pieces ---------------------------------------------------------------------------

    def _linear(self, x, weight, bias, name, scope):
        """x @ weight + bias: HF's Conv1D keeps its weight [in, out], the layout MatMul reads."""
        g = self.g
        product = g.op("MatMul", [x, g.add_initializer(f"{name}.weight", weight)], scope)
        return g.op("Add", [product, g.add_initializer(f"{name}.bias", bias)], scope)

    def _layer_linear(self, x, key, name, scope):
        """The layer's Linear `key` ([out, in] + key_bias in self.w) as a Conv1D."""
        return self._linear(x, self.w[key].T, self.w[f"{key}_bias"], name, scope)

    def _layer_norm(self, x, key, name, scope):
        g = self.g
        return g.op("LayerNormalization", [x, g.add_initializer(f"{name}.weight", self.w[key]),
                                           g.add_initializer(f"{name}.bias", self.w[f"{key}_bias"])],
                    scope, axis=-1, epsilon=float(self.c["norm_eps"]))

    def _gelu_tanh(self, x, scope):
        """HF's gelu_new as torch exports it: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
        g = self.g

        def const(v):
            return g.const(v, scope, np.float32)

        half_x = g.op("Mul", [x, const(0.5)], scope)
        cubic = g.op("Mul", [const(GELU_TANH_CUBIC), g.op("Pow", [x, const(3.0)], scope)], scope)
        inner = g.op("Mul", [g.op("Add", [x, cubic], scope), const(GELU_TANH_SCALE)], scope)
        return g.op("Mul", [half_x, g.op("Add", [g.op("Tanh", [inner], scope), const(1.0)], scope)], scope)

    # -- model-level subgraphs ------------------------------------------------------------------

    def _positions(self):
        """[b or 1, s] int64 absolute positions: the position_ids input, or computed from the cache length
        as HF's GPT2Model did before position_ids became an input."""
        if self.position_ids_input:
            return "position_ids"
        g, scope = self.g, "/transformer"
        past_len = g.op("Gather", [g.op("Shape", ["past_key_values.0.key"], scope), g.const(2, scope)],
                        scope, axis=0)
        seq_len = g.op("Gather", [g.op("Shape", ["input_ids"], scope), g.const(1, scope)], scope, axis=0)
        positions = g.op("Range", [past_len, g.op("Add", [past_len, seq_len], scope), g.const(1, scope)], scope)
        return g.op("Unsqueeze", [positions, g.const([0], scope)], scope)

    def _attention(self, i, x, bias):
        c, g = self.c, self.g
        scope, name = f"/transformer/h.{i}/attn", f"transformer.h.{i}.attn"
        p = f"layers.{i}."
        # c_attn [dim, 3 * n_heads * head_dim]: the columns of q, then k, then v
        c_attn = np.concatenate([self.w[p + w].T for w in ("wq", "wk", "wv")], axis=1)
        c_attn_bias = np.concatenate([self.w[p + w + "_bias"] for w in ("wq", "wk", "wv")])
        qkv = self._linear(x, c_attn, c_attn_bias, f"{name}.c_attn", f"{scope}/c_attn")
        width = c["n_heads"] * c["head_dim"]
        q, k, v = g.op("Split", [qkv, g.const([width] * 3, scope)], scope, axis=2,
                       outputs=[f"{scope}/Split_output_{j}" for j in range(3)])
        q, k, v = (self._split_heads(t, c["n_heads"], scope) for t in (q, k, v))
        # [b, n_heads, t, head_dim]: the cache, returned to the caller as present.*
        k_all = g.op("Concat", [f"past_key_values.{i}.key", k], scope, outputs=[f"present.{i}.key"], axis=2)
        v_all = g.op("Concat", [f"past_key_values.{i}.value", v], scope, outputs=[f"present.{i}.value"], axis=2)
        scores = g.op("MatMul", [q, g.op("Transpose", [k_all], scope, perm=[0, 1, 3, 2])], scope)
        scaled = g.op("Div", [scores, g.const(np.sqrt(c["head_dim"]), scope, np.float32)], scope)
        probs = g.op("Softmax", [g.op("Add", [scaled, bias], scope)], scope, axis=-1)
        context = self._merge_heads(g.op("MatMul", [probs, v_all], scope), scope)
        return self._layer_linear(context, p + "wo", f"{name}.c_proj", f"{scope}/c_proj")

    def _mlp(self, i, x):
        scope, name, p = f"/transformer/h.{i}/mlp", f"transformer.h.{i}.mlp", f"layers.{i}."
        inner = self._layer_linear(x, p + "w_up", f"{name}.c_fc", f"{scope}/c_fc")
        return self._layer_linear(self._gelu_tanh(inner, f"{scope}/act"), p + "w_down", f"{name}.c_proj",
                                  f"{scope}/c_proj")

    def _lm_head_weight(self):
        """[dim, vocab]. Tied: a Transpose of the token embedding, so the data is stored once."""
        if "classifier" in self.w:
            return self.g.add_initializer("lm_head.weight_in_out", self.w["classifier"].T)
        return self.g.op("Transpose", ["transformer.wte.weight"], "/lm_head", perm=[1, 0])

    def build(self):
        c, g = self.c, self.g
        self._declare_interface(self.position_ids_input)
        wte = g.add_initializer("transformer.wte.weight", self.w["tok_embeddings"])
        wpe = g.add_initializer("transformer.wpe.weight", self.w["pos_embeddings"])
        tokens = g.op("Gather", [wte, "input_ids"], "/transformer/wte")  # [b, s, dim]
        positions = g.op("Gather", [wpe, self._positions()], "/transformer/wpe")  # [b or 1, s, dim]
        hidden = g.op("Add", [tokens, positions], "/transformer")
        bias = self._attention_bias("input_ids", "attention_mask")
        for i in range(c["n_layers"]):
            layer, name = f"/transformer/h.{i}", f"transformer.h.{i}"
            normed = self._layer_norm(hidden, f"layers.{i}.attn_norm", f"{name}.ln_1", f"{layer}/ln_1")
            hidden = g.op("Add", [self._attention(i, normed, bias), hidden], layer)
            normed = self._layer_norm(hidden, f"layers.{i}.ffn_norm", f"{name}.ln_2", f"{layer}/ln_2")
            hidden = g.op("Add", [hidden, self._mlp(i, normed)], layer)
        normed = self._layer_norm(hidden, "final_norm", "transformer.ln_f", "/transformer/ln_f")
        g.op("MatMul", [normed, self._lm_head_weight()], "/lm_head", outputs=["logits"])
        return g.build("main_graph", OPSET, IR_VERSION, graph_metadata(c))
