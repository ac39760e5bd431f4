"""What the Llama and GPT-2 graph builders share: the torch-style shape plumbing around attention heads and
the additive attention mask that HF builds from attention_mask.

A subclass sets self.c (its config dict: n_layers, n_heads, n_kv_heads, head_dim, vocab_size) and self.g
(an OnnxGraphBuilder).
"""

import json

import numpy as np

from .onnx_graph_builder import BOOL, FLOAT, INT64

MASKED_SCORE = np.finfo(np.float32).min  # what HF adds to masked scores; finite, so no NaN from -inf - -inf


def graph_metadata(config):
    """metadata_props of the exported model: the context length, the special token ids when known, and
    the sliding window when there is one (kvx convert reads them; the keys are HF config.json's, which
    spells the EOS key in the singular and names each layer's attention in layer_types), and whether a
    SentencePiece tokenizer puts a space before the text (add_dummy_prefix, SentencePiece's name) and which of
    its pieces it cuts out of the text whole (user_defined_token_ids, control_token_ids) when the exporter
    read them from the source, and x_rounding: how the engine the quantized weights came from rounds
    activations to int8 ("ggml" for blocks kept from a GGUF file; config.json's weights.x_rounding)."""
    metadata = {"max_position_embeddings": config["max_seq_len"]}
    if config.get("sliding_window"):
        windowed = set(config["window_layers"])
        metadata["sliding_window"] = json.dumps(int(config["sliding_window"]))
        metadata["layer_types"] = json.dumps(["sliding_attention" if i in windowed else "full_attention"
                                              for i in range(config["n_layers"])])
    if "bos_token_id" in config:
        metadata["bos_token_id"] = json.dumps(int(config["bos_token_id"]))
    if "eos_token_ids" in config:
        metadata["eos_token_id"] = json.dumps([int(t) for t in config["eos_token_ids"]])
    if "add_dummy_prefix" in config:
        metadata["add_dummy_prefix"] = json.dumps(bool(config["add_dummy_prefix"]))
    if "x_rounding" in config:
        metadata["x_rounding"] = config["x_rounding"]
    for key in ("user_defined_token_ids", "control_token_ids"):
        if key in config:
            metadata[key] = json.dumps([int(t) for t in config[key]])
    return metadata


class DecoderGraph:
    def _declare_interface(self, position_ids_input=True):
        """The HF/optimum inputs and outputs that llama_graph's docstring lists; without position_ids_input
        the graph computes positions itself and has no position_ids input."""
        c, g = self.c, self.g
        kv_shape = ["batch_size", c["n_kv_heads"], "past_sequence_length", c["head_dim"]]
        present_shape = ["batch_size", c["n_kv_heads"], "total_sequence_length", c["head_dim"]]
        g.add_input("input_ids", INT64, ["batch_size", "sequence_length"])
        g.add_input("attention_mask", INT64, ["batch_size", "total_sequence_length"])
        if position_ids_input:
            g.add_input("position_ids", INT64, ["batch_size", "sequence_length"])
        g.add_output("logits", FLOAT, ["batch_size", "sequence_length", c["vocab_size"]])
        for i in range(c["n_layers"]):
            for kind in ("key", "value"):
                g.add_input(f"past_key_values.{i}.{kind}", FLOAT, kv_shape)
                g.add_output(f"present.{i}.{kind}", FLOAT, present_shape)

    def _batch_seq_shape(self, x, tail_dims, scope):
        """Reshape target [batch, seq, *tail_dims] with batch and seq read from x at run time, the
        Concat(Unsqueeze(Gather(Shape))) chain that torch emits for `view(*input_shape, ...)`."""
        g = self.g
        shape = g.op("Shape", [x], scope)
        dims = []
        for axis in (0, 1):
            dim = g.op("Gather", [shape, g.const(axis, scope)], scope, axis=0)
            dims.append(g.op("Unsqueeze", [dim, g.const([0], scope)], scope))
        return g.op("Concat", dims + [g.const(list(tail_dims), scope)], scope, axis=0)

    def _split_heads(self, x, n_heads, scope):
        """[b, s, n_heads*head_dim] -> [b, n_heads, s, head_dim]."""
        shape = self._batch_seq_shape(x, [n_heads, self.c["head_dim"]], scope)
        per_head = self.g.op("Reshape", [x, shape], scope)
        return self.g.op("Transpose", [per_head], scope, perm=[0, 2, 1, 3])

    def _merge_heads(self, x, scope):
        """[b, n_heads, s, head_dim] -> [b, s, n_heads*head_dim]."""
        x = self.g.op("Transpose", [x], scope, perm=[0, 2, 1, 3])
        return self.g.op("Reshape", [x, self._batch_seq_shape(
            x, [self.c["n_heads"] * self.c["head_dim"]], scope)], scope)

    def _attention_bias(self, input_ids, attention_mask, window=0):
        """[b, 1, s, t] fp32: 0 where query i (absolute position past + i) may see key j, that is
        j <= past + i and attention_mask[b, j] == 1, and with a window W also j > past + i - W (HF's
        sliding-window mask: the W most recent positions, the query's own included); MASKED_SCORE elsewhere.
        Positions are absolute, so the band is right with a past cache and for several new tokens."""
        g = self.g
        scope = "/model/sliding_window_mask" if window else "/model/attention_mask"
        seq_len = g.op("Gather", [g.op("Shape", [input_ids], scope), g.const(1, scope)], scope, axis=0)
        total_len = g.op("Gather", [g.op("Shape", [attention_mask], scope), g.const(1, scope)], scope, axis=0)
        past_len = g.op("Sub", [total_len, seq_len], scope)
        one = g.const(1, scope)
        query_pos = g.op("Range", [past_len, total_len, one], scope)  # [s]
        key_pos = g.op("Range", [g.const(0, scope), total_len, one], scope)  # [t]
        causal = g.op("LessOrEqual", [g.op("Unsqueeze", [key_pos, g.const([0], scope)], scope),
                                      g.op("Unsqueeze", [query_pos, g.const([1], scope)], scope)], scope)
        key_present = g.op("Unsqueeze", [g.op("Cast", [attention_mask], scope, to=BOOL),
                                         g.const([1, 2], scope)], scope)  # [b, 1, 1, t]
        allowed = g.op("And", [causal, key_present], scope)  # [b, 1, s, t]
        if window:
            # key > query - W, HF's spelling, which kvx convert reads a layer's window from (blocks/sliding_window.py)
            lowest_excluded = g.op("Sub", [g.op("Unsqueeze", [query_pos, g.const([1], scope)], scope),
                                           g.const(window, scope)], scope)  # [s, 1]
            in_window = g.op("Greater", [g.op("Unsqueeze", [key_pos, g.const([0], scope)], scope), lowest_excluded],
                             scope)  # [s, t]
            allowed = g.op("And", [allowed, in_window], scope)
        return g.op("Where", [allowed, g.const(0.0, scope, np.float32),
                              g.const(MASKED_SCORE, scope, np.float32)], scope)
