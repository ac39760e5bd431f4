#!/usr/bin/env python3
"""The exporters: standard-operator graphs with the HF/optimum interface that ONNX Runtime runs with
and without a KV cache, and that compute what llama2.c's run.c computes."""

import tempfile
import unittest
from pathlib import Path

import numpy as np
import onnx

from kvx_tools.fixtures.ort_reference import greedy_tokens, reference_logits

from kvx_test_support import (STORIES_TOKENIZER, assert_left_padding_is_masked, export_random, export_stories,
                              graph_io_dims)

# What llama2.c's run.c prints for stories260K at temperature 0 with 256 steps from BOS: the 256 tokens
# after BOS. (Copied from models' golden_greedy_n256_runc.txt; MIT, A. Karpathy.)
RUN_C_GREEDY_256 = (
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, "
    "she saw a big, red ball. She wanted to play with it, but it was too high.\n"
    "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. She said, "
    "\"I want to play with your ball, but I can't find it.\"\n"
    "Lily was sad and didn't know what to do. She said, \"I'm sorry, Lily. I didn't know what to do.\"\n"
    "Lily didn't want to help her mom, so she said, \"I'm sorry, mom. I didn't know what to do.\" Her mom "
    "said, \"Don't worry, Lily. We can help you."
)

HF_STYLE_OPS = {
    "Gather", "MatMul", "Pow", "ReduceMean", "Add", "Sqrt", "Reciprocal", "Mul", "Reshape", "Transpose",
    "Slice", "Neg", "Concat", "Cos", "Sin", "Unsqueeze", "Expand", "Softmax", "Sigmoid", "Where", "Range",
    "Shape", "Cast", "Constant", "Sub", "LessOrEqual", "And",
}


def decode_llama2c(tokens, tokenizer_path):
    """Text of tokens[1:] as run.c prints it (leading space dropped after BOS, <0xXX> byte tokens)."""
    data = Path(tokenizer_path).read_bytes()
    pieces, offset = [], 4
    while offset < len(data):
        length = int(np.frombuffer(data, "<i4", 1, offset + 4)[0])
        pieces.append(data[offset + 8:offset + 8 + length])
        offset += 8 + length
    text = b""
    for prev, token in zip(tokens, tokens[1:]):
        piece = pieces[token]
        if prev == 1 and piece.startswith(b" "):
            piece = piece[1:]
        if len(piece) == 6 and piece.startswith(b"<0x") and piece.endswith(b">"):
            piece = bytes([int(piece[3:5], 16)])
        text += piece
    return text.decode("utf-8")


class ExportedGraphs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)
        cls.stories = export_stories(cls.tmp / "stories.onnx")
        cls.gqa = export_random(cls.tmp / "gqa.onnx", dim=40, hidden=72, layers=2, heads=6, kv_heads=2,
                                head_dim=12, vocab=203, seed=5, extra=["--untied"])

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_standard_operators_and_interface(self):
        model = onnx.load(str(self.stories))
        onnx.checker.check_model(model, full_check=True)
        self.assertEqual({n.domain for n in model.graph.node}, {""})
        self.assertLessEqual({n.op_type for n in model.graph.node}, HF_STYLE_OPS)
        self.assertEqual({p.key: p.value for p in model.metadata_props}, {"max_position_embeddings": "512"})
        inputs, outputs = graph_io_dims(model)
        self.assertEqual(inputs["input_ids"], ["batch_size", "sequence_length"])
        self.assertEqual(inputs["attention_mask"], ["batch_size", "total_sequence_length"])
        self.assertEqual(inputs["position_ids"], ["batch_size", "sequence_length"])
        self.assertEqual(inputs["past_key_values.4.value"], ["batch_size", 4, "past_sequence_length", 8])
        self.assertEqual(outputs["logits"], ["batch_size", "sequence_length", 512])
        self.assertEqual(outputs["present.0.key"], ["batch_size", 4, "total_sequence_length", 8])
        self.assertEqual(len(inputs), 3 + 2 * 5)

    def test_stories_greedy_matches_run_c(self):
        tokens = greedy_tokens(self.stories, [1], 257)
        self.assertEqual(decode_llama2c(tokens, STORIES_TOKENIZER), RUN_C_GREEDY_256)

    def test_decoding_with_past_matches_one_pass(self):
        tokens = np.random.default_rng(1).integers(0, 203, 24)
        one_pass = reference_logits(self.gqa, tokens, n_prefill=24)
        with_cache = reference_logits(self.gqa, tokens, n_prefill=5)
        np.testing.assert_allclose(with_cache, one_pass, atol=1e-5, rtol=0)

    def test_padding_is_masked(self):
        assert_left_padding_is_masked(self, self.gqa, n_kv_heads=2, head_dim=12)

    def test_external_data_holds_the_weights(self):
        external = export_stories(self.tmp / "ext" / "stories.onnx", "--external-data")
        graph_only = onnx.load(str(external), load_external_data=False)
        self.assertTrue(all(onnx.external_data_helper.uses_external_data(t)
                            for t in graph_only.graph.initializer))
        self.assertGreater((external.parent / "stories.onnx.data").stat().st_size, 1_000_000)
        tokens = [1, 403, 407, 261]
        np.testing.assert_array_equal(reference_logits(external, tokens, 2),
                                      reference_logits(self.stories, tokens, 2))


if __name__ == "__main__":
    unittest.main()
