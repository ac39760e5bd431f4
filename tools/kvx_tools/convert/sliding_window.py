"""The sliding window an ONNX model declares, carried into config.json's "sliding_window" so that kvx masks
what the graph masks (docs/model-format.md). A window the converter cannot carry stops it: dropping one
silently would give a model that attends to keys its graph never sees.

Metadata (HF config.json's keys, written by kvx_tools.export): sliding_window, a JSON int W (a query at p sees
keys p-W+1..p) or null; layer_types, a JSON list with "sliding_attention" or "full_attention" per layer
(absent: every layer is windowed, as Mistral's config says it).
"""

import json

from .convert_errors import ConvertError

WINDOW_METADATA = "sliding_window"
LAYER_TYPES_METADATA = "layer_types"
LAYER_TYPES = ("sliding_attention", "full_attention")


def _json_metadata(props, key):
    try:
        return json.loads(props[key])
    except ValueError:
        raise ConvertError(f"metadata '{key}' is not JSON: {props[key]!r}") from None


def _windowed_layers(props, n_layers):
    """The layers layer_types marks sliding, or every layer without layer_types."""
    if LAYER_TYPES_METADATA not in props:
        return list(range(n_layers))
    types = _json_metadata(props, LAYER_TYPES_METADATA)
    if not isinstance(types, list) or len(types) != n_layers or any(t not in LAYER_TYPES for t in types):
        raise ConvertError(f"metadata '{LAYER_TYPES_METADATA}' must list {' or '.join(LAYER_TYPES)} for each of the "
                           f"{n_layers} layers, got {props[LAYER_TYPES_METADATA]!r}")
    return [i for i, t in enumerate(types) if t == "sliding_attention"]


def _check_fused_attention(graph):
    """ONNX Runtime's GroupQueryAttention holds its window in local_window_size (-1: none), per node; the
    fused-graph mappers do not carry it yet, so a windowed one is refused rather than run full."""
    for node in graph.node:
        if node.op_type != "GroupQueryAttention":
            continue
        for attribute in node.attribute:
            if attribute.name == "local_window_size" and attribute.i != -1:
                raise ConvertError(f"node '{node.name}' (GroupQueryAttention) has a sliding window "
                                   f"(local_window_size {attribute.i}) that kvx convert cannot carry yet")


def mask_window(ix):
    """The window W of a sliding mask the graph builds at run time, as HF writes it for Mistral:
    Greater(key_position, query_position - W) (or Less(query_position - W, key_position)), W a constant;
    None when the graph has no such comparison. Different windows in one graph are refused: the mask is
    not traced to the layers that use it."""
    windows = set()
    for node in ix.graph.node:
        if node.op_type == "Greater":
            bound = node.input[1]
        elif node.op_type == "Less":
            bound = node.input[0]
        else:
            continue
        sub = ix.producer_op(ix.trace_back(bound), "Sub")
        width = ix.scalar(sub.input[1]) if sub is not None else None
        if width is not None and width >= 1 and float(width).is_integer():
            windows.add(int(width))
    if len(windows) > 1:
        raise ConvertError(f"the graph masks with several sliding windows {sorted(windows)}; kvx convert cannot "
                           "tell which layers use which")
    return windows.pop() if windows else None


def sliding_window_of(model, n_layers, ix=None):
    """config.json's {"window": W, "layers": [...]} from the model's metadata, else from a sliding mask the
    graph builds (mask_window, every layer), or None without a window."""
    _check_fused_attention(model.graph)
    props = {p.key: p.value for p in model.metadata_props}
    window = _json_metadata(props, WINDOW_METADATA) if WINDOW_METADATA in props else None
    if window is None and ix is not None and LAYER_TYPES_METADATA not in props:
        window = mask_window(ix)
        if window is not None:
            return {"window": window, "layers": list(range(n_layers))}
    if window is None:
        if LAYER_TYPES_METADATA in props and "sliding_attention" in props[LAYER_TYPES_METADATA]:
            raise ConvertError(f"metadata '{LAYER_TYPES_METADATA}' has sliding layers but '{WINDOW_METADATA}' "
                               "gives no window")
        return None
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ConvertError(f"metadata '{WINDOW_METADATA}' must be a positive token count, got {props[WINDOW_METADATA]!r}")
    layers = _windowed_layers(props, n_layers)
    return {"window": window, "layers": layers} if layers else None
