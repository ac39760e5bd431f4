"""Builds the ONNX graph of a Llama decoder the way torch.onnx.export writes HF's LlamaForCausalLM.

Only default-domain operators. The interface is the one HF/optimum exports use:
  inputs   input_ids                  int64 [batch_size, sequence_length]
           attention_mask             int64 [batch_size, total_sequence_length]  (1 = real token)
           position_ids               int64 [batch_size, sequence_length]
           past_key_values.{i}.key    f32   [batch_size, n_kv_heads, past_sequence_length, head_dim]
           past_key_values.{i}.value  f32   same
  outputs  logits                     f32   [batch_size, sequence_length, vocab_size]
           present.{i}.key / .value   f32   [batch_size, n_kv_heads, total_sequence_length, head_dim]
where total_sequence_length = past_sequence_length + sequence_length. Keys are cached after RoPE.

config: dict with dim, hidden_dim, n_layers, n_heads, n_kv_heads, head_dim, vocab_size, max_seq_len,
norm_eps, rope_theta; optionally sliding_window W with window_layers (the layers whose mask is HF's
sliding-window band: a query at p sees keys p-W+1..p), written to the metadata as well.
weights: a mapping of fp32 numpy arrays named as in kvx's model.safetensors, Linear weights [out, in]
(PyTorch's layout), Q and K rows already in rotate-half order within each head (each is read once, when its
initializer is added: a mapping that makes them on demand keeps one in memory at a time; a matrix may be an
fp16 array or StreamedWeight too, read through a Cast to fp32, as mixed-precision exports store weights):
  tok_embeddings [vocab, dim]; final_norm [dim]; classifier [vocab, dim] only when untied;
  layers.{i}.attn_norm / ffn_norm [dim]; wq [n_heads*head_dim, dim]; wk, wv [n_kv_heads*head_dim, dim];
  wo [dim, n_heads*head_dim]; w_gate, w_up [hidden_dim, dim]; w_down [dim, hidden_dim].
"""

import numpy as np

from .decoder_graph import DecoderGraph, graph_metadata
from .gguf_blocks import QuantizedMatrix
from .onnx_graph_builder import FLOAT, OnnxGraphBuilder
from .quantized_ops import gather_block_quantized, matmul_nbits, nbits_attributes, quantized_operands

OPSET = 17
IR_VERSION = 8  # the IR of opset 17; keeps the files loadable by older ONNX Runtime builds
INT64_MAX = np.iinfo(np.int64).max


def rope_inv_freq(head_dim, theta):
    """[head_dim / 2] fp32: 1 / theta^(2j / head_dim), the frequency of rotary pair j."""
    exponents = np.arange(0, head_dim, 2, dtype=np.float64) / head_dim
    return (1.0 / theta**exponents).astype(np.float32)


def interleaved_to_rotate_half(w, n_heads):
    """w [n_heads*head_dim, ...] -> same shape with rows reordered inside each head (any trailing dims:
    the rows of a quantized matrix's blocks and scales move the same way).

    llama2.c and llama.cpp's GGUF files rotate neighbours (2j, 2j+1) by frequency j; HF's rotate_half
    rotates (j, j + head_dim/2) by frequency j. Putting row 2j at j and row 2j+1 at j + head_dim/2 makes
    the two compute the same thing; q.k is unchanged because Q and K get the same permutation. (HF's
    conversion script does it; llama.cpp's GGUF converter does the inverse.)
    """
    head_dim = w.shape[0] // n_heads
    return (w.reshape(n_heads, head_dim // 2, 2, *w.shape[1:])
             .swapaxes(1, 2)
             .reshape(w.shape))


def build_llama_graph(config, weights, external_data=None):
    """external_data: an ExternalDataFile (external_data_file.py) the weights are written to as they are added."""
    return _LlamaGraph(config, weights, external_data).build()


class _LlamaGraph(DecoderGraph):
    def __init__(self, config, weights, external_data=None):
        self.c = config
        self.w = weights
        self.g = OnnxGraphBuilder(external_data)
        self.embedding = "model.embed_tokens.weight"  # the fp32 table the Gather reads, for a tied classifier
        self.embedding_operands = None  # a quantized embedding's (MatMulNBits operands, attributes), for the tied classifier

    # -- small pieces ---------------------------------------------------------------------------

    def _weight(self, name, value, scope):
        """The fp32 tensor of a weight: its initializer, or, for one stored fp16, a Cast of it to fp32."""
        initializer = self.g.add_initializer(name, value)
        if np.dtype(value.dtype) == np.float32:
            return initializer
        return self.g.op("Cast", [initializer], scope, to=FLOAT)

    def _linear(self, x, weight_key, scope):
        """x @ W^T with W stored as an [in, out] initializer, as torch exports nn.Linear without bias; a quantized
        W (gguf_blocks.QuantizedMatrix) as ONNX Runtime's MatMulNBits instead."""
        name = f"{scope[1:].replace('/', '.')}.weight"
        w = self.w[weight_key]
        if isinstance(w, QuantizedMatrix):
            return matmul_nbits(self.g, x, nbits_attributes(w), quantized_operands(self.g, w, name), scope)
        w_in_out = self._weight(f"{name}_in_out", w.T, scope)
        return self.g.op("MatMul", [x, w_in_out], scope)

    def _rms_norm(self, x, weight_key, weight_name, scope):
        g = self.g
        weight = self._weight(weight_name, self.w[weight_key], scope)
        squared = g.op("Pow", [x, g.const(2.0, scope, np.float32)], scope)
        mean_square = g.op("ReduceMean", [squared], scope, axes=[-1], keepdims=1)
        variance_eps = g.op("Add", [mean_square, g.const(self.c["norm_eps"], scope, np.float32)], scope)
        inv_rms = g.op("Reciprocal", [g.op("Sqrt", [variance_eps], scope)], scope)
        return g.op("Mul", [weight, g.op("Mul", [x, inv_rms], scope)], scope)

    def _rotate_half(self, x, scope):
        """[.., head_dim] -> concat(-x[.., half:], x[.., :half])."""
        g = self.g
        half = self.c["head_dim"] // 2
        axis = g.const([3], scope)
        first = g.op("Slice", [x, g.const([0], scope), g.const([half], scope), axis], scope)
        second = g.op("Slice", [x, g.const([half], scope), g.const([INT64_MAX], scope), axis], scope)
        return g.op("Concat", [g.op("Neg", [second], scope), first], scope, axis=-1)

    def _apply_rope(self, x, cos, sin, scope):
        """x [b, heads, s, head_dim]; cos, sin [b, s, head_dim], broadcast over heads."""
        g = self.g
        cos_b = g.op("Unsqueeze", [cos, g.const([1], scope)], scope)
        sin_b = g.op("Unsqueeze", [sin, g.const([1], scope)], scope)
        return g.op("Add", [g.op("Mul", [x, cos_b], scope),
                            g.op("Mul", [self._rotate_half(x, scope), sin_b], scope)], scope)

    def _repeat_kv(self, x, scope):
        """[b, n_kv_heads, t, head_dim] -> [b, n_heads, t, head_dim]: each KV head serves
        n_heads / n_kv_heads consecutive query heads."""
        c, g = self.c, self.g
        n_rep = c["n_heads"] // c["n_kv_heads"]
        if n_rep == 1:
            return x
        with_rep_axis = g.op("Unsqueeze", [x, g.const([2], scope)], scope)
        repeated = g.op("Expand", [with_rep_axis, g.const([1, 1, n_rep, 1, 1], scope)], scope)
        return g.op("Reshape", [repeated, g.const([0, c["n_heads"], -1, c["head_dim"]], scope)], scope)

    # -- model-level subgraphs ------------------------------------------------------------------

    def _rotary_cos_sin(self, position_ids):
        """cos, sin [b, s, head_dim] from position_ids, HF's LlamaRotaryEmbedding.forward."""
        g, scope = self.g, "/model/rotary_emb"
        inv_freq = g.add_initializer("model.rotary_emb.inv_freq",
                                     rope_inv_freq(self.c["head_dim"], self.c["rope_theta"]))
        inv_freq_col = g.op("Unsqueeze", [inv_freq, g.const([0, 2], scope)], scope)  # [1, hd/2, 1]
        positions = g.op("Cast", [position_ids], scope, to=FLOAT)
        positions_row = g.op("Unsqueeze", [positions, g.const([1], scope)], scope)  # [b, 1, s]
        freqs_t = g.op("MatMul", [inv_freq_col, positions_row], scope)  # [b, hd/2, s]
        freqs = g.op("Transpose", [freqs_t], scope, perm=[0, 2, 1])  # [b, s, hd/2]
        angles = g.op("Concat", [freqs, freqs], scope, axis=-1)  # [b, s, hd]: pair j is (j, j + hd/2)
        return g.op("Cos", [angles], scope), g.op("Sin", [angles], scope)

    def _attention(self, i, x, cos, sin, bias):
        c, g = self.c, self.g
        scope = f"/model/layers.{i}/self_attn"
        q = self._split_heads(self._linear(x, f"layers.{i}.wq", f"{scope}/q_proj"), c["n_heads"], scope)
        k = self._split_heads(self._linear(x, f"layers.{i}.wk", f"{scope}/k_proj"), c["n_kv_heads"], scope)
        v = self._split_heads(self._linear(x, f"layers.{i}.wv", f"{scope}/v_proj"), c["n_kv_heads"], scope)
        q = self._apply_rope(q, cos, sin, scope)
        k = self._apply_rope(k, cos, sin, scope)
        # [b, n_kv_heads, t, head_dim]: the cache, returned to the caller as present.*
        k_all = g.op("Concat", [f"past_key_values.{i}.key", k], scope,
                     outputs=[f"present.{i}.key"], axis=2)
        v_all = g.op("Concat", [f"past_key_values.{i}.value", v], scope,
                     outputs=[f"present.{i}.value"], axis=2)
        k_t = g.op("Transpose", [self._repeat_kv(k_all, scope)], scope, perm=[0, 1, 3, 2])
        scores = g.op("MatMul", [q, k_t], scope)  # [b, n_heads, s, t]
        scaled = g.op("Mul", [scores, g.const(1.0 / np.sqrt(c["head_dim"]), scope, np.float32)], scope)
        probs = g.op("Softmax", [g.op("Add", [scaled, bias], scope)], scope, axis=-1)
        context = g.op("MatMul", [probs, self._repeat_kv(v_all, scope)], scope)  # [b, n_heads, s, hd]
        return self._linear(self._merge_heads(context, scope), f"layers.{i}.wo", f"{scope}/o_proj")

    def _mlp(self, i, x):
        g, scope = self.g, f"/model/layers.{i}/mlp"
        gate = self._linear(x, f"layers.{i}.w_gate", f"{scope}/gate_proj")
        silu = g.op("Mul", [gate, g.op("Sigmoid", [gate], f"{scope}/act_fn")], f"{scope}/act_fn")
        up = self._linear(x, f"layers.{i}.w_up", f"{scope}/up_proj")
        return self._linear(g.op("Mul", [silu, up], scope), f"layers.{i}.w_down", f"{scope}/down_proj")

    def _lm_head_weight(self, classifier):
        """[dim, vocab] of classifier [vocab, dim]. Tied (None): a Transpose of the embedding, so the data is
        stored once."""
        if classifier is not None:
            return self._weight("lm_head.weight_in_out", classifier.T, "/lm_head")
        return self.g.op("Transpose", [self.embedding], "/lm_head", perm=[1, 0])

    def _embedding(self):
        """[b, s, dim] rows of the embedding. A quantized one (default zero points) is GatherBlockQuantized over the
        initializers that the tied classifier's MatMulNBits reads too (_logits), stored once; one with float zero
        points (GGUF Q4_1) is dequantized, since GatherBlockQuantized takes integer zero points only."""
        table = self.w["tok_embeddings"]
        if isinstance(table, QuantizedMatrix) and table.zero_points is None:
            operands = quantized_operands(self.g, table, "model.embed_tokens.weight")
            self.embedding_operands = operands, nbits_attributes(table)
            return gather_block_quantized(self.g, "input_ids", nbits_attributes(table), operands, "/model/embed_tokens")
        if isinstance(table, QuantizedMatrix):
            table = table.dequantized()
        self.embedding = self._weight("model.embed_tokens.weight", table, "/model/embed_tokens")
        return self.g.op("Gather", [self.embedding, "input_ids"], "/model/embed_tokens")  # [b, s, dim]

    def _logits(self, normed):
        """logits [b, s, vocab]: MatMulNBits where the classifier, or the embedding it is tied to, is quantized."""
        scope = "/lm_head"
        classifier = self.w.get("classifier")
        if isinstance(classifier, QuantizedMatrix):
            operands = quantized_operands(self.g, classifier, "lm_head.weight")
            return matmul_nbits(self.g, normed, nbits_attributes(classifier), operands, scope, outputs=["logits"])
        if classifier is None and self.embedding_operands is not None:
            operands, attributes = self.embedding_operands
            return matmul_nbits(self.g, normed, attributes, operands, scope, outputs=["logits"])
        return self.g.op("MatMul", [normed, self._lm_head_weight(classifier)], scope, outputs=["logits"])

    def build(self):
        c, g = self.c, self.g
        self._declare_interface()
        hidden = self._embedding()
        cos, sin = self._rotary_cos_sin("position_ids")
        bias = self._attention_bias("input_ids", "attention_mask")
        window = c.get("sliding_window") or 0
        window_bias = self._attention_bias("input_ids", "attention_mask", window) if window else None
        for i in range(c["n_layers"]):
            layer = f"/model/layers.{i}"
            normed = self._rms_norm(hidden, f"layers.{i}.attn_norm",
                                    f"model.layers.{i}.input_layernorm.weight", f"{layer}/input_layernorm")
            layer_bias = window_bias if window and i in c["window_layers"] else bias
            hidden = g.op("Add", [hidden, self._attention(i, normed, cos, sin, layer_bias)], layer)
            normed = self._rms_norm(hidden, f"layers.{i}.ffn_norm",
                                    f"model.layers.{i}.post_attention_layernorm.weight",
                                    f"{layer}/post_attention_layernorm")
            hidden = g.op("Add", [hidden, self._mlp(i, normed)], layer)
        normed = self._rms_norm(hidden, "final_norm", "model.norm.weight", "/model/norm")
        self._logits(normed)
        return g.build("main_graph", OPSET, IR_VERSION, graph_metadata(c))
