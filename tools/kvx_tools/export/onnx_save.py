"""Writes an exported model, with its weights inline or as ONNX external data."""

from pathlib import Path

import os

import onnx


def save_onnx(model, path, external_data):
    """external_data: every initializer goes to PATH.data (one file, next to the model). The
    threshold is 0 so that even small norm weights go out and readers of external data get tested
    on every tensor; Constant nodes stay inline, as torch leaves them."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
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
