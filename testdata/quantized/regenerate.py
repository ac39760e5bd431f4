#!/usr/bin/env python3
"""Regenerates testdata/quantized/: quantized forms of a tiny random-weight Llama, each with ONNX Runtime's
own logits, for the converter's quantized-matrix tests (tests/python/test_convert_quantized.py).

Needs onnx_ir (ORT's MatMulNBitsQuantizer imports it) and, for the builder fixture, torch, transformers and
onnxruntime-genai, which kvx's CI does not have; run it with the Python of the exporter fixtures' environment
(testdata/exporters/README.md, requirements.txt), naming the Python of the builder's environment
(requirements-builder.txt) with --builder-python or $KVX_BUILDER_PYTHON:

    python testdata/quantized/regenerate.py --builder-python PY

Writes, per fixture, testdata/quantized/<name>/: model.onnx (+ model.onnx.data for the builder's),
prompt.json, fixture.json (how it was made, tool versions, the context length) and two logits files, each
fp32 [prompt_len, vocab], the rows before the last from one run of the whole prompt and the last row from
a prefill of all but the last token plus one cached step:
    ort_acc0.npy  every MatMulNBits node run with accuracy_level 0 (fp32 activations: the exact product)
    ort_acc4.npy  every MatMulNBits node run with accuracy_level 4 (ORT quantizes the activations to int8
                  blocks first); the test takes |acc4 - acc0| as the error a kernel that quantizes
                  activations may have. ORT turns DequantizeLinear -> MatMul into MatMulNBits itself, at
                  the level session.qdq_matmulnbits_accuracy_level says (4 by default): it is set to match.

Fixtures:
    nbits-{4,8}-b{16,32,128}-{sym,asym}  MatMulNBitsQuantizer (default RTN, accuracy_level unset = 0) on
                                         testdata/exporters/llama3-untied/torchscript-past (fp32, untied
                                         classifier: it is quantized too, the embedding stays fp32)
    qdq-4-b32-asym                       the same quantizer's QDQ format: DequantizeLinear (opset 21,
                                         block_size 32, uint4 with zero points) feeding MatMul
    builder-int4-llama-tied              ORT GenAI's builder -p int4 -e cpu of the llama-tied model
                                         (MatMulNBits, GatherBlockQuantized, GroupQueryAttention)
and rtn_fp16.npz: a random fp16 [K 200, N 48] weight (one block all zeros, a partial last block) and what
ORT's quantizer makes of it in each of NBITS' configurations (packed B, scales, zero points, as ORT lays
them out), for the fp16 path of kvx's --quantize, which the fp32 graphs above do not reach.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnx.version_converter
import onnxruntime as ort

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EXPORTERS = REPO / "testdata" / "exporters"
sys.path.insert(0, str(REPO / "tests" / "python"))
import exporter_feeds  # noqa: E402  (the tests' own feed builder, so regenerate and test agree)

SOURCE = REPO / "testdata" / "quantized" / "source"  # llama3-untied's TorchScript graph, full-precision weights
BUILDER_FAMILY = "llama-tied"
BUILDER_PYTHON = os.environ.get("KVX_BUILDER_PYTHON")  # main() sets it from --builder-python, else this
NBITS = [(bits, block, symmetric) for bits in (4, 8) for block in (16, 32, 128) for symmetric in (True, False)]


def nbits_name(bits, block, symmetric):
    return f"nbits-{bits}-b{block}-{'sym' if symmetric else 'asym'}"


def quantize(bits, block, symmetric, qdq=False):
    from onnxruntime.quantization import QuantFormat, matmul_nbits_quantizer as mnq
    model = onnx.load(SOURCE / "model.onnx")
    if qdq:  # blockwise DequantizeLinear is opset 21; the quantizer raises the opset without converting the rest
        model = onnx.version_converter.convert_version(model, 21)
    config = mnq.DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=symmetric, bits=bits,
                                              quant_format=QuantFormat.QDQ if qdq else QuantFormat.QOperator)
    quantizer = mnq.MatMulNBitsQuantizer(model, algo_config=config)
    quantizer.process()
    return quantizer.model.model


def with_accuracy_level(model, level):
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        if node.op_type == "MatMulNBits":
            for attribute in [a for a in node.attribute if a.name == "accuracy_level"]:
                node.attribute.remove(attribute)
            node.attribute.append(onnx.helper.make_attribute("accuracy_level", level))
    return copy


def ort_logits(folder, model, prompt, accuracy_level):
    """The rows before the last from the whole prompt, the last from a cached step (fp32 [n, vocab]).
    accuracy_level also goes to the session: ORT fuses DequantizeLinear -> MatMul into MatMulNBits, at the
    level session.qdq_matmulnbits_accuracy_level gives (4 unless set)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for extra in folder.glob("*"):
            if extra.name != "model.onnx":
                (tmp / extra.name).symlink_to(extra.resolve())
        onnx.save(with_accuracy_level(model, accuracy_level), tmp / "model.onnx")
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", str(accuracy_level))
        session = ort.InferenceSession(str(tmp / "model.onnx"), options, providers=["CPUExecutionProvider"])
        interface = exporter_feeds.GraphInterface.of(session, **exporter_feeds.genai_config_hints(tmp))
        whole, _ = exporter_feeds.run(session, prompt, interface=interface)
        _, cache = exporter_feeds.run(session, prompt[:-1], interface=interface)
        last, _ = exporter_feeds.run(session, prompt[-1:], cache, interface)
        whole[-1] = last[-1]
        return whole.astype(np.float32)


def write_logits(folder, model, prompt):
    np.save(folder / "ort_acc0.npy", ort_logits(folder, model, prompt, 0))
    np.save(folder / "ort_acc4.npy", ort_logits(folder, model, prompt, 4))
    return sum(node.op_type == "MatMulNBits" for node in model.graph.node)


def versions(python):
    script = ("import json, importlib.metadata as m\n"
              "print(json.dumps({t: m.version(t) for t in ('onnx', 'onnxruntime', 'onnx-ir', 'onnxruntime-genai', "
              "'torch', 'transformers') if __import__('importlib').util.find_spec(t.replace('-', '_'))}))")
    return json.loads(subprocess.run([python, "-c", script], capture_output=True, text=True, check=True).stdout)


def hf_context_length(family):
    config = json.loads((EXPORTERS / family / "genai-fp32" / "fixture.json").read_text())["hf_config"]
    return config["max_position_embeddings"]


def fresh(name):
    folder = HERE / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def make_nbits_fixtures(prompt):
    for bits, block, symmetric in NBITS:
        folder = fresh(nbits_name(bits, block, symmetric))
        model = quantize(bits, block, symmetric)
        onnx.save(model, folder / "model.onnx")
        count = write_logits(folder, model, prompt)
        describe(folder, prompt, {"made_by": "MatMulNBitsQuantizer (DefaultWeightOnlyQuantConfig, RTN)",
                                  "source": str(SOURCE.relative_to(REPO)), "bits": bits, "block_size": block,
                                  "is_symmetric": symmetric, "matmulnbits_nodes": count,
                                  "context_length": hf_context_length("llama3-untied")}, sys.executable)


def make_qdq_fixture(prompt):
    folder = fresh("qdq-4-b32-asym")
    model = quantize(4, 32, False, qdq=True)
    onnx.save(model, folder / "model.onnx")
    write_logits(folder, model, prompt)
    describe(folder, prompt, {"made_by": "MatMulNBitsQuantizer, QuantFormat.QDQ", "source": str(SOURCE.relative_to(REPO)),
                              "bits": 4, "block_size": 32, "is_symmetric": False,
                              "context_length": hf_context_length("llama3-untied")}, sys.executable)


def make_builder_fixture(prompt):
    sys.path.insert(0, str(EXPORTERS))
    import regenerate as exporters  # the family's random-weight model, as the exporter fixtures build it
    name = f"builder-int4-{BUILDER_FAMILY}"
    folder = fresh(name)
    with tempfile.TemporaryDirectory() as tmp:
        hf, out, cache = Path(tmp) / "hf", Path(tmp) / "out", Path(tmp) / "cache"
        exporters.save_hf_folder(exporters.build_model(BUILDER_FAMILY, mantissa_bits=None), hf)
        subprocess.run([BUILDER_PYTHON, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(out),
                        "-p", "int4", "-e", "cpu", "-c", str(cache)], check=True, capture_output=True)
        for kept in ("model.onnx", "model.onnx.data", "genai_config.json"):
            if (out / kept).exists():
                shutil.copy(out / kept, folder / kept)
    model = onnx.load(folder / "model.onnx")
    count = write_logits(folder, model, prompt)
    ops = sorted({f"{n.domain}:{n.op_type}" if n.domain else n.op_type for n in model.graph.node
                  if n.domain not in ("", "ai.onnx") or n.op_type in ("DequantizeLinear",)})
    describe(folder, prompt, {"made_by": "onnxruntime_genai.models.builder -p int4 -e cpu", "family": BUILDER_FAMILY,
                              "matmulnbits_nodes": count, "fused_ops": ops,
                              "context_length": hf_context_length(BUILDER_FAMILY)}, BUILDER_PYTHON)


def describe(folder, prompt, facts, python):
    (folder / "prompt.json").write_text(json.dumps(prompt) + "\n")
    (folder / "fixture.json").write_text(json.dumps({**facts, "versions": versions(python)}, indent=1) + "\n")
    print(f"{folder.name}: {', '.join(f'{k}={v}' for k, v in facts.items() if k != 'source')}")


def make_fp16_rtn_cases():
    from onnxruntime.quantization import matmul_nbits_quantizer as mnq
    weight = (np.random.default_rng(1234).standard_normal((200, 48)) * 0.1).astype(np.float16)
    weight[:16, 0] = 0
    arrays = {"weight": weight}
    for bits, block, symmetric in NBITS:
        config = mnq.DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=symmetric, bits=bits)
        packed, scales, zero_points = mnq.DefaultWeightOnlyQuantizer(config).qbits_block_quant(weight)
        name = nbits_name(bits, block, symmetric)
        arrays.update({f"{name}.packed": packed, f"{name}.scales": scales})
        if not symmetric:
            arrays[f"{name}.zero_points"] = zero_points
    np.savez_compressed(HERE / "rtn_fp16.npz", **arrays)


def main():
    global BUILDER_PYTHON
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builder-python", default=BUILDER_PYTHON,
                        help="the Python of onnxruntime-genai's builder environment (testdata/exporters/"
                             "requirements-builder.txt); default: $KVX_BUILDER_PYTHON")
    BUILDER_PYTHON = parser.parse_args().builder_python
    if not BUILDER_PYTHON:
        parser.error("the builder fixture runs in the builder's environment: name its Python with --builder-python "
                     "or $KVX_BUILDER_PYTHON")
    prompt = json.loads((SOURCE / "prompt.json").read_text())
    make_fp16_rtn_cases()
    make_nbits_fixtures(prompt)
    make_qdq_fixture(prompt)
    make_builder_fixture(prompt)


if __name__ == "__main__":
    main()
