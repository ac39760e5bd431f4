"""Writes an exported model, with its weights inline or as ONNX external data."""

from pathlib import Path

import os

import onnx
from onnx import TensorProto

from .external_data_file import ExternalDataFile


def export_onnx(build, path, external_data):
    """Builds and saves a model: build(data) gives the ModelProto, data being the ExternalDataFile that the graph
    builder writes PATH.data into as it adds the weights (one in memory at a time) when external_data, else None
    (the weights stay in the graph until save_onnx). A build that fails leaves no data file behind."""
    data = ExternalDataFile(path) if external_data else None
    try:
        model = build(data)
    except BaseException:
        if data is not None:
            data.discard()
        raise
    save_onnx(model, path, external_data)


def save_onnx(model, path, external_data):
    """external_data: every initializer goes to PATH.data (one file, next to the model). The
    threshold is 0 so that even small norm weights go out and readers of external data get tested
    on every tensor; Constant nodes stay inline, as torch leaves them. A model whose builder has already
    written them there (export_onnx) is saved as it is, then checked from the files."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer):
        onnx.save_model(model, str(path))
        try:
            onnx.checker.check_model(str(path), full_check=True)
        except Exception:
            path.unlink()
            (path.parent / (path.name + ".data")).unlink(missing_ok=True)
            raise
        return
    onnx.checker.check_model(model, full_check=True)
    if not external_data:
        onnx.save_model(model, str(path))
        return
    data_name = path.name + ".data"
    # onnx appends tensors to an existing data file; a stale one from an earlier export would stay in it.
    (path.parent / data_name).unlink(missing_ok=True)
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data_name, size_threshold=0, convert_attribute=False)
    # onnx creates the data file 0600; give it the permissions of the model file next to it.
    os.chmod(path.parent / data_name, path.stat().st_mode & 0o777)
