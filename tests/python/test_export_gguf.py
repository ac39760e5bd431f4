#!/usr/bin/env python3
"""The GGUF exporter on small GGUF files written here the way llama.cpp's converter writes them: Q and K
rows permuted for llama.cpp's RoPE, tensors quantized, a byte-level BPE tokenizer in the metadata.

The references are independent of the exporter: the graph built straight from the unpermuted weights
(llama.cpp's permutation is written out below from its definition), gguf's own dequantization, and
token ids worked out by hand from the merges."""

import json
import tempfile
import unittest
from pathlib import Path

import gguf
import numpy as np
import onnx
from gguf import GGMLQuantizationType
from tokenizers import Tokenizer

from kvx_tools.bench.write_random_gguf import byte_level_alphabet
from kvx_tools.export.export_random_llama import random_llama_weights
from kvx_tools.export.llama_graph import build_llama_graph
from kvx_tools.export.onnx_save import save_onnx
from kvx_tools.fixtures.ort_reference import reference_logits

from kvx_test_support import convert, run_tool

CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d"]
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
CONFIG = dict(dim=64, hidden_dim=96, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, max_seq_len=96,
              norm_eps=1e-6, rope_theta=100000.0)


def tokens_and_types():
    merged = [merge.replace(" ", "") for merge in MERGES]
    tokens = CONTROL + byte_level_alphabet() + merged
    types = [gguf.TokenType.CONTROL] * len(CONTROL) + [gguf.TokenType.NORMAL] * (len(tokens) - len(CONTROL))
    return tokens, types


def llama_cpp_permute(w, n_heads):
    """llama.cpp's convert_hf_to_gguf permute: within each head, row (half s, pair j) moves to 2j + s."""
    return (w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:])
             .swapaxes(1, 2)
             .reshape(w.shape))


def write_gguf(path, weights, config, quantized):
    """A llama GGUF holding weights (HF layout) as llama.cpp stores them; quantized: the tensor names to
    store as Q8_0, or a dict of names to the GGML type (Q8_0, Q4_0, F16, ...) each is stored as."""
    writer = gguf.GGUFWriter(str(path), "llama")
    c = config
    writer.add_block_count(c["n_layers"])
    writer.add_context_length(c["max_seq_len"])
    writer.add_embedding_length(c["dim"])
    writer.add_feed_forward_length(c["hidden_dim"])
    writer.add_head_count(c["n_heads"])
    writer.add_head_count_kv(c["n_kv_heads"])
    writer.add_rope_dimension_count(c["head_dim"])
    writer.add_rope_freq_base(c["rope_theta"])
    writer.add_layer_norm_rms_eps(c["norm_eps"])
    tokens, types = tokens_and_types()
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_chat_template(TEMPLATE)
    names = {"tok_embeddings": "token_embd", "final_norm": "output_norm"}
    for i in range(c["n_layers"]):
        for gguf_name, name in (("attn_norm", "attn_norm"), ("attn_q", "wq"), ("attn_k", "wk"), ("attn_v", "wv"),
                                ("attn_output", "wo"), ("ffn_norm", "ffn_norm"), ("ffn_gate", "w_gate"),
                                ("ffn_up", "w_up"), ("ffn_down", "w_down")):
            names[f"layers.{i}.{name}"] = f"blk.{i}.{gguf_name}"
    for name, gguf_name in names.items():
        w = weights[name]
        if name.endswith(".wq"):
            w = llama_cpp_permute(w, c["n_heads"])
        elif name.endswith(".wk"):
            w = llama_cpp_permute(w, c["n_kv_heads"])
        if name in quantized:
            kind = quantized[name] if isinstance(quantized, dict) else GGMLQuantizationType.Q8_0
            writer.add_tensor(f"{gguf_name}.weight", gguf.quants.quantize(w, kind), raw_dtype=kind)
        else:
            writer.add_tensor(f"{gguf_name}.weight", w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def q8_0_round_trip(w):
    return gguf.quants.dequantize(gguf.quants.quantize(w, GGMLQuantizationType.Q8_0), GGMLQuantizationType.Q8_0)


class GgufExport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)
        cls.config = dict(CONFIG, vocab_size=len(tokens_and_types()[0]))
        cls.weights = random_llama_weights(cls.config, tied=True, seed=11)
        cls.quantized = {"tok_embeddings", "layers.0.wq", "layers.1.wk", "layers.1.w_down"}
        cls.gguf_path = cls.tmp / "tiny.gguf"
        write_gguf(cls.gguf_path, cls.weights, cls.config, cls.quantized)
        cls.onnx_path = cls.tmp / "export" / "model.onnx"
        result = run_tool("kvx_tools.export.export_gguf_llama", cls.gguf_path, "-o", cls.onnx_path, "--external-data")
        assert result.returncode == 0, result.stderr

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_logits_equal_the_graph_of_the_unpermuted_weights(self):
        expected_weights = {name: (q8_0_round_trip(w) if name in self.quantized else w)
                            for name, w in self.weights.items()}
        direct = self.tmp / "direct.onnx"
        save_onnx(build_llama_graph(self.config, expected_weights), direct, external_data=False)
        tokens = np.random.default_rng(4).integers(0, self.config["vocab_size"], 24)
        np.testing.assert_allclose(reference_logits(self.onnx_path, tokens, 12),
                                   reference_logits(direct, tokens, 12), atol=1e-6, rtol=0)

    def test_metadata_reaches_the_converted_config(self):
        props = {p.key: p.value for p in onnx.load(str(self.onnx_path), load_external_data=False).metadata_props}
        self.assertEqual(props, {"max_position_embeddings": "96", "bos_token_id": "1", "eos_token_id": "[2]"})
        result = convert(self.onnx_path, self.tmp / "kvx")
        self.assertEqual(result.returncode, 0, result.stderr)
        config = json.loads((self.tmp / "kvx" / "config.json").read_text())
        self.assertEqual((config["bos_token_id"], config["eos_token_ids"], config["max_seq_len"]), (1, [2], 96))
        self.assertEqual(config["norm_eps"], 1e-6)
        self.assertEqual((config["n_heads"], config["n_kv_heads"], config["head_dim"]), (4, 2, 16))

    def test_tokenizer_json(self):
        tokenizer = Tokenizer.from_file(str(self.onnx_path.parent / "tokenizer.json"))
        vocab = tokenizer.get_vocab()
        self.assertEqual(tokenizer.get_vocab_size(), self.config["vocab_size"])
        ids = tokenizer.encode("hello world 2024<|im_end|>").ids
        # "hello" and "Ġworld" by the merges; digits one by one; the control token whole; no BOS added.
        expected = ["hello", "Ġworld", "Ġ", "2", "0", "2", "4", "<|im_end|>"]
        self.assertEqual(ids, [vocab[t] for t in expected])
        self.assertEqual(vocab["<|im_end|>"], 2)
        for text in ["hello world", "  two spaces\tand a tab\n", "naïve café ☕ 12.5%", "<|im_start|>user\nhi"]:
            encoding = tokenizer.encode(text)
            self.assertEqual(tokenizer.decode(encoding.ids, skip_special_tokens=False), text)
        self.assertEqual(tokenizer.decode(tokenizer.encode("<|im_start|>hello").ids), "hello")  # special skipped

    def test_chat_template(self):
        self.assertEqual((self.onnx_path.parent / "chat_template.jinja").read_text(), TEMPLATE)

    def test_bad_files_are_one_line_errors(self):
        not_gguf = self.tmp / "not.gguf"
        not_gguf.write_bytes(b"GGUF but not really" * 10)
        for path, fragment in ((not_gguf, "not a GGUF file"), (self.tmp / "missing.gguf", "cannot read")):
            result = run_tool("kvx_tools.export.export_gguf_llama", path, "-o", self.tmp / "bad.onnx")
            self.assertEqual(result.returncode, 1, result.stderr)
            self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
            self.assertIn(fragment, result.stderr)
            self.assertTrue(result.stderr.startswith("kvx export: "), result.stderr)


if __name__ == "__main__":
    unittest.main()
