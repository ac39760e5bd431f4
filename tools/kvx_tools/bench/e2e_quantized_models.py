"""The quantized SmolLM2 models of e2e_speed (--models smollm2-quantized): llama.cpp's own Q8_0 and Q4_0
re-quantizations of the Q4_1 GGUF (llamacpp_f32.llamacpp_copy_gguf), and kvx's model directories made from
those very files, so that both engines read the same integers and scales:

    GGUF --export_gguf_llama --keep-quantized--> model.onnx (MatMulNBits, GatherBlockQuantized)
         --kvx convert--> model directory (q8 / q4 matrices, docs/model-format.md "Quantized matrices")

and ONNX Runtime's own int4 graph of the fp32 SmolLM2 ONNX (ort_int4_model), which ONNX Runtime GenAI and
kvx both run:

    fixture model.onnx --MatMulNBitsQuantizer (4 bits, block 32, symmetric, RTN, accuracy_level 4)-->
         model.onnx (MatMulNBits) --kvx convert--> model directory (q4 matrices)

The export lives beside the GGUF in NAME.quantized-export/, where tests/python/test_quantized_gguf.py puts its
own, and the directory in its model/; each is made once. Delete the folder to remake it after the exporter or
converter changes.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

FTYPES = ("q8_0", "q4_0")
SOURCE_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _made_once(folder, write):
    """folder, with write(scratch) run into a scratch folder beside it and moved into place, unless folder's
    model.onnx is already there: an interrupted run leaves no half-written folder to be taken for a whole one."""
    if (folder / "model.onnx").is_file():
        return folder
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    write(partial)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(partial, folder)
    return folder


def _export(gguf):
    from ..export.export_gguf_llama import export_gguf
    folder = gguf.with_name(gguf.stem + ".quantized-export")
    # requantize "none": blocks kept
    return _made_once(folder, lambda out: export_gguf(gguf, out / "model.onnx", external_data=True, requantize="none"))


def _convert(kvx, export):
    model = export / "model"
    if (model / "config.json").is_file():
        return model
    command = [str(kvx), "convert", str(export / "model.onnx"), "-o", str(model), "--tokenizer",
               str(export / "tokenizer.json")]
    if (export / "chat_template.jinja").is_file():
        command += ["--chat-template", str(export / "chat_template.jinja")]
    # kvx convert runs $KVX_PYTHON: this Python, which has the converter's packages.
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "KVX_PYTHON": sys.executable})
    if result.returncode != 0:
        shutil.rmtree(model, ignore_errors=True)
        sys.exit(f"e2e_speed: kvx convert failed on {export / 'model.onnx'}:\n{(result.stderr or result.stdout)[-2000:]}")
    return model


def smollm2_quantized_models(kvx, cache):
    """{ftype: {"gguf": llama.cpp's file, "kvx": kvx's model directory of it}} for q8_0 and q4_0; cache is the
    SmolLM2 model folder (KVX_MODEL_CACHE/smollm2-135m-instruct). Needs llama-cpp-python to write a missing GGUF."""
    from .llamacpp_f32 import llamacpp_copy_gguf
    source = Path(cache) / SOURCE_GGUF
    models = {}
    for ftype in FTYPES:
        gguf = source.with_name(f"{source.stem}.llama-cpp-{ftype}.gguf")
        if not gguf.is_file():
            if not source.is_file():
                sys.exit(f"e2e_speed: neither {gguf} nor {source} exists: fetch SmolLM2 (docs/smollm2.md)")
            gguf = llamacpp_copy_gguf(source, ftype)
        models[ftype] = {"gguf": gguf, "kvx": _convert(kvx, _export(gguf))}
    return models


def _untied(model):
    """The graph with every Transpose of an initializer folded into a transposed copy of it. The fixture's
    classifier is MatMul(x, Transpose(embedding)) (tied weights), which the quantizer skips as not constant;
    untied, it is quantized like the other matrices, as GenAI's builder quantizes lm_head."""
    from onnx import numpy_helper
    initializers = {i.name: i for i in model.graph.initializer}
    for node in [n for n in model.graph.node if n.op_type == "Transpose" and n.input[0] in initializers]:
        perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
        value = numpy_helper.to_array(initializers[node.input[0]]).transpose(perm)
        model.graph.initializer.append(numpy_helper.from_array(value.copy(), node.output[0]))
        model.graph.node.remove(node)
    return model


def ort_int4_model(kvx, cache):
    """{"onnx": the int4 graph, "kvx": kvx's directory of it}: every MatMul of the fp32 fixture (the classifier
    too, untied; the embedding stays an fp32 Gather) quantized by ONNX Runtime's MatMulNBitsQuantizer at 4 bits, block 32,
    symmetric, round to nearest, accuracy_level 4 (int8 activations: what GenAI's builder writes for CPU).
    Made once, in cache/ort-int4/. Needs onnxruntime and onnx_ir."""
    fixture = Path(cache) / "fixture"

    def write(out):
        import onnx
        from onnxruntime.quantization import matmul_nbits_quantizer as mnq
        config = mnq.DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True, bits=4, accuracy_level=4)
        quantizer = mnq.MatMulNBitsQuantizer(_untied(onnx.load(fixture / "model.onnx")), algo_config=config)
        quantizer.process()
        onnx.save(quantizer.model.model, out / "model.onnx", save_as_external_data=True, location="model.onnx.data")
        for name in ("tokenizer.json", "chat_template.jinja"):
            shutil.copy(fixture / name, out / name)

    folder = _made_once(Path(cache) / "ort-int4", write)
    return {"onnx": folder / "model.onnx", "kvx": _convert(kvx, folder)}
