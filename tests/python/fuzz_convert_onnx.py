#!/usr/bin/env python3
"""Fuzzes the converter's reading of ONNX files with atheris: mutated ONNX models go through the whole of
kvx_convert.convert (loading, external-data and size checks, onnx.checker or the dataflow check, graph
mapping, weight checks, writing), and anything but a ConvertError is a finding.

Not a test: it runs until stopped, and CI does not run it (tests/python/CMakeLists.txt does not list it).
atheris is not among the tools' requirements; install it in a virtual environment of its own that can also
import the tools' packages, e.g.

  python3 -m venv /tmp/fuzzenv && /tmp/fuzzenv/bin/pip install atheris
  echo "$PWD/.venv/lib/python3.11/site-packages" > /tmp/fuzzenv/lib/python3.11/site-packages/tools.pth
  mkdir -p /tmp/fuzz/corpus /tmp/fuzz/findings
  KVX_FUZZ_FINDINGS=/tmp/fuzz/findings PYTHONPATH=tools:tests/python \\
      /tmp/fuzzenv/bin/python tests/python/fuzz_convert_onnx.py /tmp/fuzz/corpus -max_total_time=600 \\
      -timeout=30 -rss_limit_mb=4096 -max_len=4000000

The first run seeds the corpus with small exports (random Llama and GPT-2, standard operators) and the two ONNX
Runtime GenAI models of testdata (fused operators, where onnx.checker does not help). Mutations are
structural most of the time (dims, types, storage and external-data entries of tensors; op types, inputs,
attributes and order of nodes; metadata), since random bytes rarely get past protobuf; libFuzzer's byte
mutations do the rest. With KVX_FUZZ_FINDINGS set, an unexpected exception is saved there (the input and its
traceback, one per distinct place it was raised) and fuzzing goes on; without it, the first one stops the run,
as libFuzzer does.
"""

import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import atheris

with atheris.instrument_imports():
    import onnx
    from onnx import TensorProto

    from kvx_tools.convert import pipeline as kvx_convert
    from kvx_tools.convert.errors import ConvertError

REPO = Path(__file__).resolve().parents[2]
WORK = Path(tempfile.mkdtemp(prefix="kvx-fuzz-"))
FINDINGS = os.environ.get("KVX_FUZZ_FINDINGS")
OPS = ["Gather", "MatMul", "Pow", "ReduceMean", "Add", "Sqrt", "Reciprocal", "Div", "Mul", "Neg", "Cos", "Sin",
       "Softmax", "Sigmoid", "LayerNormalization", "Tanh", "Reshape", "Transpose", "Slice", "Split", "Concat",
       "Unsqueeze", "Squeeze", "Expand", "Identity", "Cast", "Shape", "Constant", "Where", "Range", "Sub",
       "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "RotaryEmbedding", "MultiHeadAttention",
       "GroupQueryAttention", "EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "FastGelu"]
METADATA_KEYS = ["max_position_embeddings", "bos_token_id", "eos_token_id", "sliding_window", "layer_types"]
INTERESTING_INTS = [0, 1, 2, -1, -2, 3, 4, 7, 8, 16, 2 ** 31 - 1, -2 ** 31, 2 ** 62, -2 ** 63, 2 ** 63 - 1]


def seed_corpus(corpus):
    """Small real models, written once into an empty corpus folder."""
    if any(corpus.iterdir()):
        return
    tools = {**os.environ, "PYTHONPATH": str(REPO / "tools")}
    for module, extra in (("export_random_llama", ["--kv-heads", "1", "--head-dim", "4", "--untied"]),
                          ("export_random_gpt2", ["--head-dim", "4"])):
        out = WORK / f"{module}.onnx"
        subprocess.run([sys.executable, "-m", f"kvx_tools.export.{module}", "--dim", "8", "--hidden", "16",
                        "--layers", "1", "--heads", "2", "--vocab", "16", "--max-seq-len", "8", "--seed", "1",
                        "-o", str(out), *extra], check=True, env=tools)
        shutil.copyfile(out, corpus / f"seed_{module}.onnx")
    for name, path in (("ortgenai_llama", "ortgenai-tiny-random-llama-fp16/model.onnx"),
                       ("ortgenai_gpt2", "ortgenai-tiny-random-gpt2-fp32/past.onnx")):
        model = onnx.load(str(REPO / "testdata" / "models" / path))  # external data read in: one file
        (corpus / f"seed_{name}.onnx").write_bytes(model.SerializeToString())


def _tensors(model):
    tensors = list(model.graph.initializer)
    for node in model.graph.node:
        tensors += [a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR]
    return tensors


def _mutate_tensor(rng, t):
    choice = rng.randrange(8)
    if choice == 0 and t.dims:
        t.dims[rng.randrange(len(t.dims))] = rng.choice(INTERESTING_INTS)
    elif choice == 1:
        t.dims.append(rng.choice(INTERESTING_INTS))
    elif choice == 2:
        t.data_type = rng.choice([0, 1, 2, 6, 7, 8, 10, 11, 16, 21, 99])
    elif choice == 3:
        t.raw_data = t.raw_data[:rng.randrange(len(t.raw_data) + 1)]
    elif choice == 4:
        t.ClearField("raw_data")
        t.float_data.extend([rng.choice([0.0, float("nan"), float("inf"), 1e30])] * rng.randrange(4))
    elif choice == 5:
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key=rng.choice(["location", "offset", "length", "checksum", "x"]),
                            value=rng.choice(["model.onnx", "../x", "/etc/passwd", "a\0b", "", "-1", "1e9",
                                              "99999999999999999999", "0", "16"]))
    elif choice == 6:
        t.name = rng.choice(["", "input_ids", t.name + "_"])
    elif t.raw_data:
        data = bytearray(t.raw_data)
        data[rng.randrange(len(data))] = rng.randrange(256)
        t.raw_data = bytes(data)


def _mutate_node(rng, model, node):
    names = [n for other in model.graph.node for n in other.output] + [t.name for t in model.graph.initializer]
    choice = rng.randrange(9)
    if choice == 0:
        node.op_type = rng.choice(OPS)
    elif choice == 1 and node.input:
        node.input[rng.randrange(len(node.input))] = rng.choice(names + [""])
    elif choice == 2 and node.input:
        del node.input[rng.randrange(len(node.input))]
    elif choice == 3:
        node.input.append(rng.choice(names))
    elif choice == 4 and node.attribute:
        attr = node.attribute[rng.randrange(len(node.attribute))]
        if attr.type == onnx.AttributeProto.INT:
            attr.i = rng.choice(INTERESTING_INTS)
        elif attr.type == onnx.AttributeProto.FLOAT:
            attr.f = rng.choice([0.0, -1.0, float("nan"), float("inf"), 1e-5])
        elif attr.type == onnx.AttributeProto.INTS and attr.ints:
            attr.ints[rng.randrange(len(attr.ints))] = rng.choice(INTERESTING_INTS)
        else:
            node.attribute.remove(attr)
    elif choice == 5 and node.output:
        node.output[rng.randrange(len(node.output))] = rng.choice(names + [""])
    elif choice == 6:
        node.domain = rng.choice(["", "com.microsoft", "ai.onnx"])
    elif choice == 7:
        model.graph.node.remove(node)
    else:
        copy = model.graph.node.add()
        copy.CopyFrom(node)


def mutate_model(data, max_size, seed):
    """A structural mutation of an ONNX model's bytes, or libFuzzer's byte mutation when they do not parse."""
    rng = random.Random(seed)
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
        if not model.graph.node or rng.random() < 0.1:
            return atheris.Mutate(data, max_size)
        out = _mutate_structure(rng, model)
    except Exception:  # bytes that parse into names protobuf cannot hand to Python, and the like
        return atheris.Mutate(data, max_size)
    return out if len(out) <= max_size else data


def _mutate_structure(rng, model):
    for _ in range(rng.randrange(1, 4)):
        target = rng.randrange(10)
        tensors = _tensors(model)
        if target < 4 and tensors:
            _mutate_tensor(rng, rng.choice(tensors))
        elif target < 8 and model.graph.node:
            _mutate_node(rng, model, rng.choice(model.graph.node))
        elif target < 9:
            prop = model.metadata_props.add()
            prop.key = rng.choice(METADATA_KEYS)
            prop.value = rng.choice(["0", "-1", "8", "[]", "[1, 2]", "[99999]", "nope", "1e400", '["sliding_attention"]'])
        elif model.graph.node:
            nodes = list(model.graph.node)
            rng.shuffle(nodes)
            del model.graph.node[:]
            model.graph.node.extend(nodes)
    return model.SerializeToString()


def record(data, error):
    """Saves an unexpected exception's input and traceback under FINDINGS, once per place it was raised."""
    frames = traceback.extract_tb(error.__traceback__)
    place = f"{type(error).__name__} at {frames[-1].filename}:{frames[-1].lineno}" if frames else type(error).__name__
    key = hashlib.sha1(place.encode()).hexdigest()[:12]
    folder = Path(FINDINGS)
    if not (folder / f"{key}.txt").exists():
        (folder / f"{key}.onnx").write_bytes(data)
        (folder / f"{key}.txt").write_text(place + "\n\n" + "".join(traceback.format_exception(error)))
        print(f"finding: {place}", file=sys.stderr, flush=True)


def test_one_input(data):
    model_path, out_dir = WORK / "model.onnx", WORK / "out"
    model_path.write_bytes(data)
    try:
        kvx_convert.convert(model_path, out_dir, max_seq_len=None if len(data) % 2 else 8)
    except ConvertError:
        pass
    except Exception as e:  # a finding: anything else reaches the user as a traceback
        if FINDINGS is None:
            raise
        record(data, e)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def main():
    corpus = next((Path(a) for a in sys.argv[1:] if not a.startswith("-")), None)
    if corpus is not None:
        corpus.mkdir(parents=True, exist_ok=True)
        seed_corpus(corpus)
    atheris.Setup(sys.argv, test_one_input, custom_mutator=mutate_model)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
