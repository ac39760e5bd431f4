"""How each operand of the attention core (blocks/attention_core.py) is computed from its projection, walked
back from the operand:

  projection MatMul(x, W [dim, N]) [+ bias] [clip] [RMSNorm over all N columns (OLMo 2's q/k norm)]
    -> data movement (head split, transposes, Split or Slices of a fused projection)
    -> [a norm of each head (Qwen 3, Gemma 3)] -> data movement -> [RoPE] -> data movement
    -> [Concat with the cached keys or values] -> data movement (repeated KV heads, K^T) -> the operand

Data movement is anything graph/layout.py traces (it is never matched by shape); the blocks in between are
recognised by what reads their input (blocks/norms.py, blocks/rotary.py) and must end exactly where the walk
came from. Then the walk is run forwards on indices: ids_at(path, tensor) tells, for each element of the
operand (or of a block's input), which element (batch, position, column) of the projection's output it is.
"""

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..domains import DEFAULT_DOMAINS
from ..errors import ConvertError, cannot_map
from ..graph.layout import MOVING_OPS, PASSING_OPS, SCALING_OPS
from .linear import BiasedLinear, linear_weight
from .norms import Norm, norm_reading
from .rotary import rope_block_reading

MAX_WALK_STEPS = 96
BLOCK_SEARCH_TENSORS = 24  # upstream tensors tried as the input of a block that ends where the walk stands


@dataclass
class ProjectionPath:
    matmul: object  # the projection's MatMul node, reading the block's input
    linear: BiasedLinear  # the projection: weight [dim, N] (ONNX's MatMul layout), bias [N] or None
    start: str  # its output after bias, clip and whole-projection norm: [batch, seq, N], ids start here
    clip: Optional[float] = None  # |values| clamped to clip right after the projection (and its bias)
    whole_norm: Optional[Norm] = None  # a norm over all N columns after the projection (OLMo 2)
    blocks: list = field(default_factory=list)  # Norm / RopeBlock on the way, in the order data flows
    operand: str = ""  # where the walk began


def trace_to_projection(ix, operand, blame):
    """The ProjectionPath from a projection to operand; blame: the node to name when there is none."""
    blocks, tensor = [], operand
    rope_error = None
    for _ in range(MAX_WALK_STEPS):
        node = ix.producer(tensor)
        if node is None:
            raise cannot_map(blame, f"'{operand}' computed from a projection of the normed activations (it comes "
                                    f"from '{tensor}')")
        if linear_weight(ix, node) is not None:
            break
        step = _moved_from(ix, node, tensor)
        if step is not None:
            tensor = step
            continue
        try:
            block = _block_ending_at(ix, tensor)
        except ConvertError as error:
            block, rope_error = None, rope_error or error
        if block is not None:
            blocks.insert(0, block)
            tensor = block.input
            continue
        tail = _projection_tail(ix, tensor)
        if tail is not None:
            matmul, linear, clip = tail
            return _with_whole_norm(ProjectionPath(matmul, linear, tensor, clip, None, blocks, operand))
        _refuse_unknown_shape(ix, tensor)
        if rope_error is not None:
            raise rope_error
        if node.op_type == "Add" and all(ix.producer_op(i, "Mul") is not None for i in node.input):
            raise cannot_map(node, "RoPE: x * cos + R(x) * sin, R a rotation pairing each head's elements (kvx "
                                   "computes rotate-half pairs and converts interleaved ones to them)")
        raise cannot_map(node, f"data movement, RoPE, a norm or a projection on the way to '{operand}'")
    else:
        raise cannot_map(blame, f"a projection within {MAX_WALK_STEPS} nodes of '{operand}'")
    linear = BiasedLinear(linear_weight(ix, node), None, tensor, node)
    return _with_whole_norm(ProjectionPath(node, linear, tensor, None, None, blocks, operand))


def _refuse_unknown_shape(ix, tensor):
    """Where tensor's concrete shape is unknown, the reason names the node that loses it, walking back along
    the data (not the shape arithmetic) to the first node whose inputs' shapes are known and its output's not:
    the walk cannot follow what it cannot shape."""
    concrete = ix.concrete
    if concrete is None:
        return
    for _ in range(MAX_WALK_STEPS):
        node = ix.producer(tensor)
        if node is None or concrete.shape(tensor) is not None:
            return
        unknown = [i for i in _data_inputs(ix, node) if concrete.shape(i) is None]
        if not unknown:
            if node.op_type == "Reshape":
                ix.fold_dims(node.input[1], node)  # raises the precise reason for a malformed target
            raise cannot_map(node, f"an output whose shape kvx can compute from its inputs' ('{tensor}')")
        tensor = unknown[0]


def _data_inputs(ix, node):
    """The inputs a node computes from, not those giving shapes, axes or bounds."""
    if node.op_type in MOVING_OPS and node.op_type != "Concat":
        return node.input[:1]
    return [i for i in node.input if i and ix.constant(i) is None]


def _with_whole_norm(path):
    """The path with a norm that reads the projection's output itself (all its columns) moved out of the
    blocks: OLMo 2's q_norm / k_norm over the whole projection."""
    if path.blocks and isinstance(path.blocks[0], Norm) and path.blocks[0].input == path.start:
        path.whole_norm = path.blocks.pop(0)
        path.start = path.whole_norm.output
    return path


def _moved_from(ix, node, tensor):
    """The tensor node moves data from (the walk's next step back), or None when node is not data movement.
    A Concat with a graph input is the KV cache: the walk follows the new part."""
    if node.domain not in DEFAULT_DOMAINS:
        return None
    op = node.op_type
    if op in SCALING_OPS:
        others = [i for i in node.input if ix.scalar(i) is None]
        return others[0] if len(others) == 1 and len(node.input) == 2 else None
    if op == "Concat":
        new = [i for i in node.input if i not in ix.input_names and ix.constant(i) is None]
        if len(new) == 1 and any(i in ix.input_names for i in node.input):
            return new[0]
        return None
    if op in MOVING_OPS or op in PASSING_OPS:
        if op in ("Gather", "GatherND") and ix.constant(node.input[1]) is None:
            return None
        return node.input[0]
    return None


def _block_ending_at(ix, tensor):
    """The Norm or RopeBlock whose output is tensor, reading one of the nearest upstream activations."""
    first_error = None
    for x in ix.ancestors(tensor, limit=12)[:BLOCK_SEARCH_TENSORS * 4]:
        if ix.constant(x) is not None:
            continue
        for read in (norm_reading, rope_block_reading):
            try:
                block = read(ix, x)
            except ConvertError as error:
                first_error = first_error or error
                continue
            if block is not None and block.output == tensor:
                return block
    if first_error is not None and ix.producer(tensor) is not None and \
            ix.producer(tensor).op_type in ("Add", "Concat", "RotaryEmbedding"):
        raise first_error
    return None


def _projection_tail(ix, tensor):
    """(MatMul, BiasedLinear, clip) when tensor is MatMul(x, W) [+ bias] [clipped]; else None."""
    clip, node = None, ix.producer(tensor)
    clipped = _clip_of(ix, node)
    if clipped is not None:
        clip, tensor = clipped
        node = ix.producer(tensor)
    if node is not None and node.op_type == "Add":
        for t in node.input:
            matmul = ix.producer(t)
            bias = ix.constant(ix.other_input(node, t))
            weight = linear_weight(ix, matmul) if matmul is not None else None
            if weight is not None and bias is not None and bias.shape == (weight.shape[1],):
                return matmul, BiasedLinear(weight, bias, node.output[0], node), clip
        return None
    weight = linear_weight(ix, node) if node is not None else None
    if weight is None:
        return None
    return node, BiasedLinear(weight, None, tensor, node), clip


def _clip_of(ix, node):
    """(c, the clipped tensor) for Clip(x, -c, c) or Min(Max(x, -c), c) / Max(Min(x, c), -c); else None."""
    if node is None:
        return None
    if node.op_type == "Clip" and len(node.input) >= 3:
        low, high = ix.scalar(node.input[1]), ix.scalar(node.input[2])
        if low is not None and high is not None and low == -high and high > 0:
            return float(high), node.input[0]
        return None
    if node.op_type in ("Min", "Max") and len(node.input) == 2:
        outer = [ix.scalar(i) for i in node.input]
        inner_name = node.input[0] if outer[1] is not None else node.input[1]
        bound = outer[1] if outer[1] is not None else outer[0]
        inner = ix.producer(inner_name)
        if bound is None or inner is None or inner.op_type not in ("Min", "Max") or inner.op_type == node.op_type:
            return None
        inner_bounds = [ix.scalar(i) for i in inner.input]
        inner_bound = inner_bounds[1] if inner_bounds[1] is not None else inner_bounds[0]
        x = inner.input[0] if inner_bounds[1] is not None else inner.input[1]
        high, low = (bound, inner_bound) if node.op_type == "Min" else (inner_bound, bound)
        if inner_bound is not None and low == -high and high > 0:
            return float(high), x
    return None


# -- indices along a path ----------------------------------------------------------------------------

@dataclass
class PathIds:
    """Element origins along a path, each an int array of the concrete shape of its tensor holding the flat
    index into the projection's output [batch, seq, N] (or -1 for elements from elsewhere, the cache)."""
    operand: np.ndarray
    block_inputs: dict  # id(block) -> the ids at that block's input
    scale: float  # the product of the constant factors the data movement applied
    start_shape: tuple  # [batch, seq, N] of the projection's output


def ids_along(ix, path, blame):
    concrete = ix.concrete
    if concrete is None:
        raise cannot_map(blame, "inputs whose dimensions kvx can make concrete (input_ids, attention_mask, "
                                "position_ids, past key/value) to follow the heads through the graph")
    shape = rows_as_batch_seq(concrete, concrete.shape(path.start))
    if shape is None:
        raise cannot_map(blame, f"the projection's output '{path.start}' of shape [batch, seq, width], found "
                                f"{list(shape) if shape else 'no shape'}")
    ids = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    scale, current, block_inputs = 1.0, path.start, {}
    for block in path.blocks:
        ids, factor = _moved(concrete, ids, current, block.input, blame)
        scale *= factor
        block_inputs[id(block)] = ids
        current = block.output
    ids, factor = _moved(concrete, ids, current, path.operand, blame)
    return PathIds(ids, block_inputs, scale * factor, tuple(shape))


def rows_as_batch_seq(concrete, shape):
    """[batch, seq, N] for a tensor of rows [batch, seq, N], or [batch * seq, N] as a Linear flattened them
    (GPT-2's Conv1D); None for any other shape."""
    if shape is None:
        return None
    if len(shape) == 3:
        return tuple(shape)
    if len(shape) == 2 and shape[0] == concrete.batch * concrete.seq:
        return (concrete.batch, concrete.seq, shape[1])
    return None


def _moved(concrete, ids, source, destination, blame):
    trace = concrete.trace(source, destination)
    if trace is None:
        raise cannot_map(blame, f"'{destination}' a rearrangement of '{source}' (head split, transpose, repeat, "
                                "cache Concat) that kvx can follow")
    if (trace.ids < 0).any():
        raise cannot_map(blame, f"'{destination}' a rearrangement of '{source}' without negation")
    index = trace.source_index()
    return np.where(index >= 0, ids.reshape(-1)[np.maximum(index, 0)], -1), trace.scale

