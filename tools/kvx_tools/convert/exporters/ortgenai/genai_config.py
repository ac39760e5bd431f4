"""The genai_config.json that ONNX Runtime GenAI's model builder writes beside its model.onnx: what the
graph does not hold but the converter needs (model.context_length for max_seq_len, bos_token_id and
eos_token_id, and decoder.sliding_window, which the builder may leave out of the graph: it writes
Mistral's window here but GroupQueryAttention local_window_size=-1, see blocks/sliding_window.py).

Only model.context_length (else search.max_length), model.bos_token_id, model.eos_token_id and
model.decoder.sliding_window.{window_size, layers} are read; anything else in the file is ignored. An empty
"layers" list is read as every layer, as the builder writes it for Mistral, whose layers are all windowed
(it lists layers only for models that mix windowed and full ones, such as Gemma 2)."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ...errors import ConvertError

FILE_NAME = "genai_config.json"


@dataclass
class GenaiConfig:
    context_length: Optional[int]
    bos_token_id: Optional[int]
    eos_token_ids: Optional[list]
    window: Optional[int]  # sliding_window.window_size
    window_layers: Optional[list]  # sliding_window.layers; [] = every layer


def _int(value, what):
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConvertError(f"{FILE_NAME}: {what} is not an integer: {value!r}")
    return value


def read_genai_config(onnx_path):
    """The GenaiConfig of the genai_config.json in onnx_path's folder, or None where there is none."""
    path = Path(onnx_path).parent / FILE_NAME
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
        model = config.get("model", {})
        search = config.get("search", {})
        window = model.get("decoder", {}).get("sliding_window") or {}
    except (OSError, ValueError, AttributeError) as e:
        raise ConvertError(f"cannot read {path}: {e}") from None
    eos = model.get("eos_token_id")
    eos = [eos] if isinstance(eos, int) and not isinstance(eos, bool) else eos
    if eos is not None and (not isinstance(eos, list) or not all(_int(t, "eos_token_id") is not None for t in eos)):
        raise ConvertError(f"{FILE_NAME}: eos_token_id is not a token id or a list of them: {eos!r}")
    layers = window.get("layers", []) if window else None
    if layers is not None and (not isinstance(layers, list) or not all(_int(i, "sliding_window.layers") is not None
                                                                        for i in layers)):
        raise ConvertError(f"{FILE_NAME}: sliding_window.layers is not a list of layer indices: {layers!r}")
    return GenaiConfig(
        context_length=_int(model.get("context_length", search.get("max_length")), "context_length"),
        bos_token_id=_int(model.get("bos_token_id"), "bos_token_id"),
        eos_token_ids=eos,
        window=_int(window.get("window_size"), "sliding_window.window_size") if window else None,
        window_layers=layers)
