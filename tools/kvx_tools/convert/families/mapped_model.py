"""What a mapper hands to the writer, and the checks every mapper makes on it before."""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import ConvertError
from ..graph.lazy_tensor import LazyTensor, same_values
from .tensor_layout import tensor_shapes


@dataclass
class MappedModel:
    architecture: str  # config.json's "architecture"
    hyperparameters: dict  # config.json's model fields: dim ... tied_embeddings
    tensors: dict  # kvx name -> fp32 or fp16 array or LazyTensor (the graph's precision) in kvx layout ([out, in])
    max_positions: Optional[int] = None  # rows of the RoPE tables the graph looks positions up in, if any
    # Per layer, the window a fused attention op declares (None: whole sequence); None where the graph's
    # attention carries no such attribute (blocks/sliding_window.py then reads metadata or the mask).
    graph_windows: Optional[list] = None


def float_weight(array, what):
    """array in its own precision (write/weight_dtype.py picks the stored one): fp32 or fp16; contiguous, or a
    LazyTensor left unread (the writer reads it)."""
    if array.dtype not in (np.float32, np.float16):
        raise ConvertError(f"{what} is {array.dtype}; kvx model directories hold fp32 or fp16 weights only")
    return array if isinstance(array, LazyTensor) else np.ascontiguousarray(array)


def the_one_eps(values, norm_kind):
    """The eps every norm of the graph uses; kvx has one norm_eps per model, a finite number (JSON has no other)."""
    if len(values) != 1:
        raise ConvertError(f"cannot map graph: {norm_kind}s use different eps values {sorted(values)}")
    eps = next(iter(values))
    if not np.isfinite(eps):
        raise ConvertError(f"cannot map graph: the {norm_kind} eps is {eps}")
    return eps


def add_classifier(tensors, classifier, embedding):
    """Stores the classifier [vocab, dim] unless it holds the embedding's data (tied, whatever the graph
    did to share it: a Transpose of the same initializer, found without reading either, or a stored copy,
    compared a block of rows at a time). Returns whether it is tied."""
    tied = classifier.shape == embedding.shape and same_values(classifier, embedding)
    if not tied:
        tensors["classifier"] = float_weight(classifier, "the classifier")
    return bool(tied)


def check_shapes(architecture, hyper, tensors):
    """Every weight found must agree with the hyperparameters read elsewhere in the graph; a tensor that
    the architecture has no place for is a mapper bug, caught here rather than by the engine."""
    config = {"architecture": architecture, **hyper}
    expected, optional = tensor_shapes(config)
    allowed = {**expected, **optional}
    for name in expected:
        if name not in tensors:
            raise ConvertError(f"cannot map graph: no {name} found")
    for name, tensor in tensors.items():
        if name not in allowed:
            raise ConvertError(f"internal: the {architecture} mapper produced an unknown tensor {name}")
        if tuple(tensor.shape) != allowed[name]:
            raise ConvertError(f"cannot map graph: {name} has shape {list(tensor.shape)}, "
                               f"the graph's other dimensions imply {list(allowed[name])}")
