"""The Hugging Face config.json beside an exported graph (optimum writes it into its output folder; a
torch.onnx.export user saves the graph beside the model's own folder): the context length the graph does not
hold. torch's exporters write no max_position_embeddings metadata, so without this every such graph needed
--max-seq-len. Only max_position_embeddings (GPT-2's n_positions) is read; a kvx model directory's config.json
(format kvx-model) is not HF's and is ignored."""

import json
from pathlib import Path

from ..errors import ConvertError

FILE_NAME = "config.json"
CONTEXT_KEYS = ("max_position_embeddings", "n_positions")
MAX_BYTES = 16 << 20  # a real one is a few KB


def hf_context_length(onnx_path):
    """(length, where it was read) from the config.json in onnx_path's folder, or (None, None)."""
    path = Path(onnx_path).parent / FILE_NAME
    if not path.is_file():
        return None, None
    if path.stat().st_size > MAX_BYTES:
        raise ConvertError(f"{path}: larger than {MAX_BYTES} bytes; not a Hugging Face config")
    try:
        config = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ConvertError(f"{path}: not JSON ({e})") from None
    if not isinstance(config, dict) or config.get("format") == "kvx-model":
        return None, None
    for key in CONTEXT_KEYS:
        if key in config and config[key] is not None:
            return config[key], f"{path.name}'s {key} (beside the graph)"
    return None, None
