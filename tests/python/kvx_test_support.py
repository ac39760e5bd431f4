"""Paths and helpers shared by the Python tests: running the tools as their users do (subprocesses
with command lines) and building ONNX files to convert."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

from kvx_tools.fixtures.ort_reference import open_session, reference_logits

REPO = Path(os.environ.get("KVX_SOURCE_DIR") or Path(__file__).resolve().parents[2])
STORIES_CHECKPOINT = REPO / "testdata" / "models" / "stories260K" / "stories260K.bin"
STORIES_TOKENIZER = REPO / "testdata" / "models" / "stories260K" / "tok512.bin"
SHARED = Path(os.environ.get("KVX_SHARED_DIR") or REPO / "testdata")  # the repository's testdata/ by default
GPT2_ENCODER = SHARED / "models" / "gpt2-tokenizer" / "encoder.json"
GPT2_MERGES = SHARED / "models" / "gpt2-tokenizer" / "vocab.bpe"
ORTGENAI_GPT2_TOKENIZER = SHARED / "models" / "ortgenai-tiny-random-gpt2-fp32" / "tokenizer.json"
ORTGENAI_LLAMA = SHARED / "models" / "ortgenai-tiny-random-llama-fp16" / "model.onnx"


def run_tool(module, *args, timeout=None):
    """Runs `python -m MODULE` (a kvx_tools command) with args; returns the CompletedProcess (text output
    captured). timeout: seconds, past which subprocess.TimeoutExpired fails the test (for inputs that used
    to hang)."""
    return subprocess.run([sys.executable, "-m", module, *map(str, args)],
                          capture_output=True, text=True, check=False, timeout=timeout)


def run_ok(testcase, module, *args):
    result = run_tool(module, *args)
    testcase.assertEqual(result.returncode, 0, f"{module} failed:\n{result.stderr}")
    return result


def export_stories(onnx_path, *extra):
    result = run_tool("kvx_tools.export.export_llama2c", STORIES_CHECKPOINT, "-o", onnx_path, *extra)
    assert result.returncode == 0, result.stderr
    return onnx_path


def export_random(onnx_path, *, dim, hidden, layers, heads, kv_heads, head_dim, vocab, seed=0, extra=()):
    result = run_tool("kvx_tools.export.export_random_llama", "--dim", dim, "--hidden", hidden, "--layers", layers,
                      "--heads", heads, "--kv-heads", kv_heads, "--head-dim", head_dim, "--vocab", vocab,
                      "--seed", seed, "-o", onnx_path, *extra)
    assert result.returncode == 0, result.stderr
    return onnx_path


def convert(onnx_path, out_dir, *extra, timeout=None):
    """Runs the converter CLI; returns the CompletedProcess."""
    return run_tool("kvx_tools.convert", onnx_path, "-o", out_dir, *extra, timeout=timeout)


def assert_one_line_failure(testcase, result, *fragments):
    """The converter's contract for bad input: exit 1, one line on stderr, no traceback."""
    testcase.assertEqual(result.returncode, 1, f"stdout: {result.stdout}\nstderr: {result.stderr}")
    lines = result.stderr.strip().splitlines()
    testcase.assertEqual(len(lines), 1, f"expected one line on stderr, got:\n{result.stderr}")
    testcase.assertNotIn("Traceback", result.stderr)
    testcase.assertTrue(lines[0].startswith("kvx convert: "), lines[0])
    for fragment in fragments:
        testcase.assertIn(fragment, lines[0])
    return lines[0]


def rename_initializers(model, new_name_of):
    """Renames initializers (and every node input that reads them) by the dict new_name_of."""
    for tensor in model.graph.initializer:
        tensor.name = new_name_of.get(tensor.name, tensor.name)
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            if name in new_name_of:
                node.input[k] = new_name_of[name]


def give_initializers_lying_names(model, seed=0):
    """Gives every initializer another initializer's name (a random cycle, so none keeps its own) and
    shuffles their order: a converter that trusts names or order then picks wrong tensors."""
    names = [t.name for t in model.graph.initializer]
    order = np.random.default_rng(seed).permutation(len(names))
    rename_initializers(model, {names[a]: names[b] for a, b in zip(order, np.roll(order, 1))})
    tensors = [onnx.TensorProto() for _ in names]
    for copy, k in zip(tensors, np.random.default_rng(seed + 1).permutation(len(names))):
        copy.CopyFrom(model.graph.initializer[int(k)])
    del model.graph.initializer[:]
    model.graph.initializer.extend(tensors)


def graph_io_dims(model):
    """({input name: dims}, {output name: dims}) of an ONNX model, symbolic dims by their names."""
    def dims(value_info):
        return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]
    return {i.name: dims(i) for i in model.graph.input}, {o.name: dims(o) for o in model.graph.output}


def assert_left_padding_is_masked(testcase, onnx_path, n_kv_heads, head_dim):
    """A left-padded row of a batch gives the logits of the same tokens run alone (HF/optimum interface)."""
    session = open_session(onnx_path)
    tokens, pad = np.array([11, 22, 33, 44, 55], dtype=np.int64), 2
    empty = {i.name: np.zeros((2, n_kv_heads, 0, head_dim), np.float32) for i in session.get_inputs()
             if i.name.startswith("past_key_values.")}
    batch = {
        "input_ids": np.stack([np.r_[[0] * pad, tokens], np.r_[tokens, [7, 8]]]),
        "attention_mask": np.array([[0] * pad + [1] * 5, [1] * 7], dtype=np.int64),
        "position_ids": np.stack([np.r_[[0] * pad, np.arange(5)], np.arange(7)]),
        **empty,
    }
    padded = session.run(["logits"], batch)[0][0, pad:]
    alone = reference_logits(onnx_path, tokens, n_prefill=5, session=session)
    np.testing.assert_allclose(padded, alone, atol=1e-5, rtol=0)
