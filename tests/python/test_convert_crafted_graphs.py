#!/usr/bin/env python3
"""Graphs crafted against the converter's graph walks: chains deeper than Python's stack, a tensor reused at
every level of a nesting (exponential for a naive recursion), a shape with billions of dims, a tensor with two
writers. Each either converts (when the graph means something ordinary) or stops with one line, quickly:
never a RecursionError traceback, never a hang."""

import json
import tempfile
import unittest
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from kvx_test_support import ORTGENAI_LLAMA, REPO, assert_one_line_failure, convert, export_stories

DEPTH = 5000  # Python's default recursion limit is 1000
NESTING = 80  # 2^80 visits for a recursion that does not remember what it folded
Q_SHAPE_CONCAT = "/model/layers.0/self_attn/Concat"  # builds the target of layer 0's Q Reshape
Q_SHAPE_CONSTANT = "/model/layers.0/self_attn/Constant_4_output_0"  # its constant part [heads, head_dim]
TIMEOUT = 120  # seconds; each conversion here takes a few
ORTGENAI_GPT2 = REPO / "testdata" / "models" / "ortgenai-tiny-random-gpt2-fp32" / "past.onnx"


def node_named(model, name):
    return next(n for n in model.graph.node if n.name == name)


def insert_chain(model, tensor, reader, op_type, **attrs):
    """Puts DEPTH op_type nodes between tensor and the node reader, which reads the chain's end instead."""
    nodes, current = [], tensor
    for k in range(DEPTH):
        output = f"{op_type.lower()}_chain_{k}"
        nodes.append(helper.make_node(op_type, [current], [output], name=f"/chain/{op_type}_{k}", **attrs))
        current = output
    reader.input[:] = [current if name == tensor else name for name in reader.input]
    at = list(model.graph.node).index(reader)
    for k, node in enumerate(nodes):
        model.graph.node.insert(at + k, node)


def nest_concats(model, leaf, reader):
    """Gives reader's Q_SHAPE_CONSTANT input the dims of Concat(Q_SHAPE_CONSTANT, e_NESTING), where
    e_0 = leaf (an int64 vector) and e_k+1 = Concat(e_k, e_k): a DAG of NESTING nodes."""
    model.graph.initializer.append(numpy_helper.from_array(np.asarray(leaf, np.int64), "nest_0"))
    nodes = [helper.make_node("Concat", [f"nest_{k}", f"nest_{k}"], [f"nest_{k + 1}"], name=f"/nest/{k}", axis=0)
             for k in range(NESTING)]
    nodes.append(helper.make_node("Concat", [Q_SHAPE_CONSTANT, f"nest_{NESTING}"], ["nested_shape"],
                                  name="/nest/top", axis=0))
    reader.input[:] = ["nested_shape" if name == Q_SHAPE_CONSTANT else name for name in reader.input]
    at = list(model.graph.node).index(reader)
    for k, node in enumerate(nodes):
        model.graph.node.insert(at + k, node)


class CraftedGraphs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)
        cls.stories = export_stories(cls.tmp / "stories260K.onnx")
        cls.plain = cls.tmp / "plain"
        result = convert(cls.stories, cls.plain)
        assert result.returncode == 0, result.stderr

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def _variant(self, name, edit, source=None):
        model = onnx.load(str(source or self.stories))
        edit(model)
        path = self.tmp / f"{name}.onnx"
        onnx.save(model, str(path))
        return path

    def _converts_like_the_plain_graph(self, path):
        out = self.tmp / f"out_{path.stem}"
        result = convert(path, out, timeout=TIMEOUT)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual((out / "model.safetensors").read_bytes(), (self.plain / "model.safetensors").read_bytes())
        config, plain = (json.loads((d / "config.json").read_text()) for d in (out, self.plain))
        self.assertEqual({**config, "source": None}, {**plain, "source": None})

    def test_deep_identity_chain_to_the_embedding(self):
        def chain(model):
            gather = node_named(model, "/model/embed_tokens/Gather")
            insert_chain(model, gather.input[0], gather, "Identity")
        self._converts_like_the_plain_graph(self._variant("deep_identity", chain))

    def test_deep_cast_chain_in_a_reshape_target(self):
        def chain(model):
            insert_chain(model, Q_SHAPE_CONSTANT, node_named(model, Q_SHAPE_CONCAT), "Cast", to=TensorProto.INT64)
        self._converts_like_the_plain_graph(self._variant("deep_cast", chain))

    def test_shared_nesting_in_a_reshape_target_is_folded_once_per_tensor(self):
        def nest(model):
            nest_concats(model, [], node_named(model, Q_SHAPE_CONCAT))  # empty leaves: the same shape
        self._converts_like_the_plain_graph(self._variant("shared_nesting", nest))

    def test_shape_with_billions_of_dims_is_refused(self):
        def nest(model):
            nest_concats(model, [1], node_named(model, Q_SHAPE_CONCAT))
        path = self._variant("rank_bomb", nest)
        assert_one_line_failure(self, convert(path, self.tmp / "out_rank_bomb", timeout=TIMEOUT),
                                "/model/layers.0/self_attn/Reshape", "at most 64 dims")

    def test_slice_step_that_is_a_scalar_or_computed(self):
        """Found by fuzz_convert_onnx.py: a Slice whose steps input is a 0-d constant, or no constant at all,
        made the whole-slice rewrite index it as a vector (IndexError, AttributeError tracebacks). A 0-d step
        of 1 slices as [1] does."""
        def scalar_step(model):
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(1, np.int64), "scalar_step"))
            next(n for n in model.graph.node if n.op_type == "Slice").input.append("scalar_step")

        def computed_step(model):
            node = next(n for n in model.graph.node if n.op_type == "Slice")
            model.graph.node.insert(list(model.graph.node).index(node), helper.make_node(
                "Shape", [node.input[1]], ["computed_step"], name="/computed/step"))
            node.input.append("computed_step")
        self._converts_like_the_plain_graph(self._variant("scalar_step", scalar_step))
        result = convert(self._variant("computed_step", computed_step), self.tmp / "out_computed_step", timeout=TIMEOUT)
        self.assertNotIn("Traceback", result.stderr)

    def test_tensor_written_twice_is_refused(self):
        """onnx.checker refuses this in standard graphs; graphs of fused operators are beyond it."""
        def second_writer(model):
            first = next(n for n in model.graph.node if n.op_type == "MatMul")
            model.graph.node.append(helper.make_node("Identity", [first.input[0]], [first.output[0]],
                                                     name="/second/writer"))
        path = self._variant("written_twice", second_writer, ORTGENAI_LLAMA)
        assert_one_line_failure(self, convert(path, self.tmp / "out_written_twice", timeout=TIMEOUT),
                                "is written twice", "/second/writer")

    def test_standard_nodes_in_fused_graphs_are_checked_against_their_schema(self):
        """Found by fuzz_convert_onnx.py: onnx.checker is skipped for graphs of fused operators, and the
        matchers index the inputs of the standard nodes there (IndexError tracebacks)."""
        def drop_weight(model):
            del next(n for n in model.graph.node if n.op_type == "MatMul").input[1:]

        def drop_cast_input(model):
            del next(n for n in model.graph.node if n.op_type == "Cast").input[:]

        def drop_cast_input_in_ai_onnx(model):  # the default domain's other name, unknown to onnx.defs
            cast = next(n for n in model.graph.node if n.op_type == "Cast")
            cast.domain = "ai.onnx"
            del cast.input[:]
        for name, edit, source, fragment in (("matmul_one_input", drop_weight, ORTGENAI_GPT2, "MatMul"),
                                             ("matmul_one_input_llama", drop_weight, ORTGENAI_LLAMA, "MatMul"),
                                             ("cast_no_input", drop_cast_input, ORTGENAI_GPT2, "Cast"),
                                             ("ai_onnx_cast_no_input", drop_cast_input_in_ai_onnx, ORTGENAI_GPT2,
                                              "Cast")):
            with self.subTest(name):
                path = self._variant(name, edit, source)
                assert_one_line_failure(self, convert(path, self.tmp / f"out_{name}", timeout=TIMEOUT),
                                        "invalid ONNX model (node", fragment, "input size")

    def test_fused_nodes_need_the_inputs_and_outputs_of_their_schema(self):
        """onnx.checker knows nothing of ONNX Runtime's fused operators; the matchers index their inputs."""
        def truncate(op_type, inputs=None, outputs=None):
            def edit(model):
                node = next(n for n in model.graph.node if n.op_type == op_type)
                if inputs is not None:
                    del node.input[inputs:]
                if outputs is not None:
                    del node.output[outputs:]
            return edit

        def skip_only(op_type):  # the skip (residual) input alone: an IndexError where the matcher pairs it
            def edit(model):
                node = next(n for n in model.graph.node if n.op_type == op_type)
                node.input[:] = [node.input[1]]
            return edit
        for name, edit, source, fragment in (
                ("skip_norm_one_input", skip_only("SkipSimplifiedLayerNormalization"), ORTGENAI_LLAMA,
                 "(SkipSimplifiedLayerNormalization) has 1 inputs"),
                ("gpt2_skip_norm_one_input", skip_only("SkipLayerNormalization"), ORTGENAI_GPT2,
                 "(SkipLayerNormalization) has 1 inputs"),
                ("rotary_no_output", truncate("RotaryEmbedding", outputs=0), ORTGENAI_LLAMA, "0 outputs"),
                ("fast_gelu_no_output", truncate("FastGelu", outputs=0), ORTGENAI_GPT2, "0 outputs"),
                ("embed_norm_one_input", truncate("EmbedLayerNormalization", inputs=1), ORTGENAI_GPT2,
                 "has at least 7 and 2")):
            with self.subTest(name):
                path = self._variant(name, edit, source)
                assert_one_line_failure(self, convert(path, self.tmp / f"out_{name}", timeout=TIMEOUT), fragment)

    def test_default_domain_spelled_ai_onnx_still_converts(self):
        def respell(model):
            for node in model.graph.node:
                node.domain = "ai.onnx"
        self._converts_like_the_plain_graph(self._variant("ai_onnx", respell))


if __name__ == "__main__":
    unittest.main()
