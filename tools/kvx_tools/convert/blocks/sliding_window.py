"""The sliding window an ONNX model declares, carried into config.json's "sliding_window" so that kvx masks
what the graph masks (docs/model-format.md). A window the converter cannot carry stops it: dropping one
silently would give a model that attends to keys its graph never sees.

Metadata (HF config.json's keys, written by kvx_tools.export): sliding_window, a JSON int W (a query at p sees
keys p-W+1..p) or null; layer_types, a JSON list with "sliding_attention" or "full_attention" per layer
(absent: every layer is windowed, as Mistral's config says it).
"""

import json

import numpy as np

from ..errors import ConvertError

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


def _fused_window(graph_windows, genai, n_layers, warn):
    """The window of a graph whose fused attention ops declare one per layer (graph_windows: W or None per
    layer), reconciled with the genai_config.json beside it (genai: a GenaiConfig or None).

    ONNX Runtime GenAI's builder (0.18.0) writes Mistral's window into genai_config.json but leaves
    GroupQueryAttention's local_window_size at -1 (and its fp16 MultiHeadAttention has no window at all), so
    ONNX Runtime runs that graph without the window the model was trained with and HF applies. Where
    genai_config.json names a window the graph lacks, kvx takes genai_config.json's and says so in one warning
    line: the graph is the one that lost the model's attention span. Where both name windows and they differ,
    nothing tells which is right, so the conversion stops."""
    windows = {w for w in graph_windows if w is not None}
    if len(windows) > 1:
        raise ConvertError(f"the graph's attention layers use several windows {sorted(windows)}; kvx has one "
                           "sliding_window per model")
    graph = {"window": windows.pop(), "layers": [i for i, w in enumerate(graph_windows) if w is not None]} \
        if windows else None
    config = None
    if genai is not None and genai.window is not None:
        layers = sorted(set(genai.window_layers)) or list(range(n_layers))
        if genai.window < 1 or not all(0 <= i < n_layers for i in layers):
            raise ConvertError(f"genai_config.json: sliding_window {genai.window} on layers {genai.window_layers} "
                               f"does not fit a model of {n_layers} layers")
        config = {"window": genai.window, "layers": layers}
    if config is None or graph == config:
        return graph
    if graph is None:
        warn(f"genai_config.json gives a sliding window of {config['window']} tokens on layers {config['layers']} "
             "but the graph's attention has none (as ONNX Runtime GenAI's builder writes Mistral); kvx uses "
             "genai_config.json's window, the model's own, so its logits differ from ONNX Runtime's on this graph "
             f"once a sequence is longer than {config['window']} tokens")
        return config
    raise ConvertError(f"the graph's attention has a sliding window of {graph['window']} on layers {graph['layers']} "
                       f"but genai_config.json says {config['window']} on layers {config['layers']}; kvx convert "
                       "cannot tell which is right")


def _window_comparisons(ix):
    """{comparison output: W} for each Greater(key_position, query_position - W) (or Less(query_position - W,
    key_position)) of the graph, W a positive integer constant."""
    found = {}
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
            found[node.output[0]] = int(width)
    return found


def _value_ancestors(ix, tensor, limit=4096):
    """The tensors whose values tensor depends on: ancestors, not following a Shape's input (a mask may take
    its size from another layer's mask, as TorchScript's Gemma 2 full-attention mask does from the sliding one)."""
    seen, stack = {tensor}, [tensor]
    while stack:
        if len(seen) > limit:
            raise ConvertError(f"the mask '{tensor}' is computed from more than {limit} tensors; kvx convert cannot "
                               "tell whether it is a sliding-window mask")
        node = ix.producer(stack.pop())
        if node is None or node.op_type == "Shape":
            continue
        for inp in node.input:
            if inp and inp not in seen:
                seen.add(inp)
                stack.append(inp)
    return seen


def layer_mask_windows(ix, masks):
    """Per layer, the window W of its mask (the tensor added to its scores), or None for a mask without one; None
    for the whole list when no layer's mask can tell (the graph's one mask then goes through mask_window), or when
    masks built at run time do not differ. A mask built at run time is windowed when it is computed from a sliding
    comparison; a constant mask (an export fixed to one length, whose masks fold) when the keys it keeps form a
    band narrower than the causal triangle. Gemma 2/3 build a windowed mask for their sliding layers and a causal
    one for the others."""
    if not masks or any(m is None for m in masks):
        return None
    if all(ix.constant(m) is not None for m in masks):
        windows = [constant_mask_window(ix.constant(m), m) for m in masks]
        return windows if any(w is not None for w in windows) else None
    comparisons = _window_comparisons(ix)
    if not comparisons:
        return None
    windows = []
    for mask in masks:
        found = {comparisons[t] for t in _value_ancestors(ix, mask) if t in comparisons}
        if len(found) > 1:
            raise ConvertError(f"the mask '{mask}' is built from several sliding windows {sorted(found)}")
        windows.append(found.pop() if found else None)
    return windows if len(set(windows)) > 1 else None


def constant_mask_window(values, name):
    """W where values [.., queries, keys], a constant mask added to the scores (0 where a key is kept, a large
    negative number where not), keeps each query's W most recent keys, itself included; None where it keeps
    the causal triangle. The queries are the last positions of the keys (a run after a cache)."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim < 2 or values.shape[-2] > values.shape[-1]:
        raise ConvertError(f"the mask '{name}' is a constant of shape {list(values.shape)}, not [.., queries, keys]")
    kept = values.reshape(-1, *values.shape[-2:]) > np.finfo(np.float32).min / 2
    if not (kept == kept[:1]).all():
        raise ConvertError(f"the mask '{name}' differs between batch rows or heads; kvx masks every row alike")
    kept = kept[0]
    queries, keys = kept.shape
    positions = np.arange(keys - queries, keys)[:, None]  # each query's own position
    key_positions = np.arange(keys)[None, :]
    causal = key_positions <= positions
    if np.array_equal(kept, causal):
        return None
    width = int(kept[-1].sum())
    if width < 1 or not np.array_equal(kept, causal & (key_positions > positions - width)):
        raise ConvertError(f"the mask '{name}' keeps neither the causal triangle nor a sliding window of it")
    return width


def mask_window(ix):
    """The window W of a sliding mask the graph builds at run time, as HF writes it for Mistral:
    Greater(key_position, query_position - W) (or Less(query_position - W, key_position)), W a constant;
    None when the graph has no such comparison. Different windows in one graph are refused: the mask is
    not traced to the layers that use it."""
    windows = set(_window_comparisons(ix).values())
    if len(windows) > 1:
        raise ConvertError(f"the graph masks with several sliding windows {sorted(windows)}; kvx convert cannot "
                           "tell which layers use which")
    return windows.pop() if windows else None


def sliding_window_of(model, n_layers, ix=None, graph_windows=None, genai=None, warn=None):
    """config.json's {"window": W, "layers": [...]} from the fused attention ops' own windows (graph_windows,
    with genai_config.json: _fused_window), else the model's metadata, else a sliding mask the graph builds
    (mask_window, every layer), or None without a window. warn(line): where a warning goes."""
    if graph_windows is not None:
        return _fused_window(graph_windows, genai, n_layers, warn or (lambda line: None))
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
