"""The quantized SmolLM2 models of e2e_speed (--models smollm2-quantized): llama.cpp's own Q8_0 and Q4_0
re-quantizations of the Q4_1 GGUF (llamacpp_f32.llamacpp_copy_gguf), and kvx's model directories made from
those very files, so that both engines read the same integers and scales:

    GGUF --export_gguf_llama --keep-quantized--> model.onnx (MatMulNBits, GatherBlockQuantized)
         --kvx convert--> model directory (q8 / q4 matrices, docs/model-format.md "Quantized matrices")

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


def _export(gguf):
    from ..export.export_gguf_llama import export_gguf
    folder = gguf.with_name(gguf.stem + ".quantized-export")
    if (folder / "model.onnx").is_file():
        return folder
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    export_gguf(gguf, partial / "model.onnx", external_data=True, requantize="none")  # "none": blocks kept
    os.replace(partial, folder)
    return folder


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
