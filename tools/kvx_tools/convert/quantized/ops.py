"""Quantized weights in the graph: ONNX Runtime's MatMulNBits and GatherBlockQuantized (com.microsoft), and the
standard blockwise DequantizeLinear feeding a MatMul (opset 21).

Each such node is rewritten into the plain form the matchers know, a MatMul (+ Add of its bias) or a Gather
by a constant float matrix holding the dequantized weights, and the integers are kept aside
(quantized/sources.py) to replace those float matrices in the model directory. So every mapper reads
quantized graphs unchanged, and what they compute with is what the graph computes.

Semantics read here (ONNX Runtime's contrib operator docs; ONNX's DequantizeLinear):
  MatMulNBits(A, B, scales, zero_points?, g_idx?, bias?), attributes K, N, bits, block_size: B uint8
    [N, n_blocks, block * bits / 8], elements 2t and 2t + 1 of a block in byte t (low nibble first) for
    4 bits; scales [N, n_blocks] (or flat); zero_points packed like B ([N, ceil(n_blocks * bits / 8)],
    default 2^(bits-1)) or of the scales' float type ([N, n_blocks]); w[n][k] = s * (q - z); bias [N].
  GatherBlockQuantized(data, indices, scales, zero_points?), attributes gather_axis, quantize_axis,
    block_size, bits: data uint8 packed as MatMulNBits' B rows (default zero point 2^(bits-1)), or int4 /
    uint4 elements (zero point 0); scales [rows, n_blocks].
  DequantizeLinear(x, scale, zero_point?), attributes axis, block_size: y = (x - z) * s with x int4 /
    uint4 / int8 / uint8 [K, N] blocked along axis 0 (K), scale [ceil(K / block), N], z default 0.
"""

import numpy as np
from onnx import TensorProto, helper

from ..errors import ConvertError, node_label
from ..graph.index import GraphIndex, node_attr
from ..domains import MS_DOMAIN
from .lazy_matrix import LazyQuantizedMatrix
from .matrix import QuantizedLayout, check_block_size, from_unsigned_blocks
from .sources import QuantizedSources

QUANTIZED_FUSED_OPS = frozenset({"MatMulNBits", "GatherBlockQuantized"})
BITS = (4, 8)


def rewrite_quantized_ops(model, weights):
    """Rewrites model's quantized nodes in place (see above); returns the QuantizedSources found. weights: the
    model's GraphWeights, which receives the dequantized matrices (LazyTensors: nothing is read here)."""
    graph = model.graph
    ix = GraphIndex(graph, weights)
    sources = QuantizedSources()
    kept, added_inits, replaced_inputs = [], [], set()
    for node in graph.node:
        if node.domain == MS_DOMAIN and node.op_type == "MatMulNBits":
            nodes, init = _matmul_nbits(ix, node, sources)
        elif node.domain == MS_DOMAIN and node.op_type == "GatherBlockQuantized":
            nodes, init = _gather_block_quantized(ix, node, sources)
        elif node.domain in ("", "ai.onnx") and node.op_type == "DequantizeLinear":
            nodes, init = _dequantize_linear(ix, node, sources)
        else:
            kept.append(node)
            continue
        kept.extend(nodes)
        added_inits.append(weights.initializer(*init))
        replaced_inputs.update(node.input)
    if not sources.matrices:
        return sources
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(added_inits)
    _drop_unread_initializers(graph, replaced_inputs)
    return sources


def _drop_unread_initializers(graph, candidates):
    """The replaced nodes' integers, scales and zero points that no node reads any more: the QuantizedSources
    read them from here on, and no rewrite or shape inference needs to see them."""
    read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    for tensor in [t for t in graph.initializer if t.name in candidates and t.name not in read]:
        graph.initializer.remove(tensor)


def _fail(node, problem):
    return ConvertError(f"node '{node_label(node)}' ({node.op_type}): {problem}")


def _constant(ix, node, index, what):
    """Input index of node as a numpy array: an initializer or Constant, or a Reshape of one (GenAI's builder
    feeds GatherBlockQuantized a Reshape of the lm_head's MatMulNBits weight when the two are tied)."""
    name = node.input[index] if len(node.input) > index else ""
    if not name:
        return None
    value = ix.constant(name)
    reshape = ix.producer_op(name, "Reshape")
    if value is None and reshape is not None:
        source, shape = ix.constant(reshape.input[0]), ix.constant(reshape.input[1])
        if source is not None and shape is not None:
            try:
                value = source.reshape([int(d) for d in shape])
            except ValueError:
                value = None
    if value is None:
        raise _fail(node, f"its {what} is not a constant")
    return value


def _optional(ix, node, index, what):
    return _constant(ix, node, index, what) if len(node.input) > index and node.input[index] else None


def _bits(node, default=None):
    bits = node_attr(node, "bits", default)
    if bits not in BITS:
        raise _fail(node, f"bits={bits}; kvx reads 4- and 8-bit weights")
    return bits


def _block(node, default=None):
    block = node_attr(node, "block_size", default)
    check_block_size(block, f"node '{node_label(node)}' ({node.op_type})")
    return block


def _unpack(packed, bits, count):
    """uint8 bytes [..., m] -> unsigned integers [..., count], low bits first (ONNX Runtime's order)."""
    packed = packed.astype(np.uint8)
    if bits == 8:
        return packed[..., :count].astype(np.int16)
    values = np.empty((*packed.shape[:-1], 2 * packed.shape[-1]), np.uint8)
    values[..., 0::2], values[..., 1::2] = packed & 0x0F, packed >> 4
    return values[..., :count].astype(np.int16)


def _expect_shape(node, what, array, *shapes):
    """array reshaped to shapes[0] when its shape is one of shapes or their flattening (exporters write
    MatMulNBits' B 3-D or 2-D, its scales 2-D or flat); else a one-line error naming the shape expected."""
    for shape in shapes:
        if tuple(array.shape) in (tuple(shape), (int(np.prod(shape)),)):
            return array.reshape(shapes[0])
    raise _fail(node, f"{what} has shape {list(array.shape)}, expected {list(shapes[0])}")


def _zero_points(node, zp, bits, rows, blocks, scales):
    """(packed integer zero points [rows, ceil(blocks * bits / 8)] or None, float zero points [rows, blocks] or
    None), checked; _unpack gives the integers of rows of the first."""
    if zp is None:
        return None, None
    if zp.dtype in (np.float32, np.float16):
        if zp.dtype != scales.dtype:
            raise _fail(node, f"its zero points are {zp.dtype}, its scales {scales.dtype}")
        return None, _expect_shape(node, "zero_points", zp, (rows, blocks))
    if zp.dtype != np.uint8:
        raise _fail(node, f"its zero points are {zp.dtype}; expected uint8 or the scales' float type")
    per_byte = 8 // bits
    return _expect_shape(node, "zero_points", zp, (rows, -(-blocks // per_byte))), None


def _rows(array, start, stop):
    """Rows start:stop of an optional constant, read."""
    return None if array is None else np.asarray(array[start:stop])


def _layout(bits, block, cols, rows, scales, zero_points, mins):
    return QuantizedLayout(bits, block, cols, rows, scales.dtype, zero_points, mins)


def _scales(node, scales, rows, blocks):
    if scales.dtype not in (np.float32, np.float16):
        raise _fail(node, f"its scales are {scales.dtype}; kvx reads fp32 or fp16 scales")
    return _expect_shape(node, "scales", scales, (rows, blocks))


def _matmul_nbits(ix, node, sources):
    bits, block = _bits(node), _block(node)
    k, n = node_attr(node, "K"), node_attr(node, "N")
    if not isinstance(k, int) or not isinstance(n, int) or k <= 0 or n <= 0:
        raise _fail(node, f"K={k}, N={n}: expected positive sizes")
    if len(node.input) > 4 and node.input[4]:
        raise _fail(node, "it has a g_idx input (act-order GPTQ); kvx reads blocks of consecutive inputs only")
    blocks, blob = -(-k // block), block * bits // 8
    packed = _constant(ix, node, 1, "weight B")
    if packed.dtype != np.uint8:
        raise _fail(node, f"its weight B is {packed.dtype}; expected uint8")
    packed = _expect_shape(node, "weight B", packed, (n, blocks, blob), (n, blocks * blob))
    scales = _scales(node, _constant(ix, node, 2, "scales"), n, blocks)
    zp, float_zp = _zero_points(node, _optional(ix, node, 3, "zero_points"), bits, n, blocks, scales)
    bias = _optional(ix, node, 5, "bias")
    if bias is not None and tuple(bias.shape) != (n,):
        raise _fail(node, f"bias has shape {list(bias.shape)}, expected [{n}]")

    def read_rows(start, stop):
        q = _unpack(_rows(packed, start, stop), bits, block)  # [rows, blocks, block]
        zero_points = None if zp is None else _unpack(_rows(zp, start, stop), bits, blocks)
        return from_unsigned_blocks(bits, block, k, q, _rows(scales, start, stop), zero_points,
                                    _rows(float_zp, start, stop))
    layout = _layout(bits, block, k, n, scales, zp is not None, float_zp is not None)
    weight = sources.add(LazyQuantizedMatrix(layout, read_rows))  # [N, K] as the graph computes it
    name = f"{node.output[0]}.kvx_dequantized"
    init = name, weight.T
    if bias is None:
        return [helper.make_node("MatMul", [node.input[0], name], [node.output[0]], name=node.name)], init
    product = f"{node.output[0]}.kvx_product"
    bias_name = node.input[5]
    return [helper.make_node("MatMul", [node.input[0], name], [product], name=node.name),
            helper.make_node("Add", [product, bias_name], [node.output[0]], name=f"{node.name}.bias")], init


def _as_unsigned(values, bits, tensor_type):
    """Integers of an int4 / int8 tensor shifted to the unsigned range (q + 2^(bits-1)), uint ones as they are."""
    signed = tensor_type in (TensorProto.INT4, TensorProto.INT8)
    return values.astype(np.int16) + (1 << (bits - 1) if signed else 0), signed


def _gather_block_quantized(ix, node, sources):
    if node_attr(node, "gather_axis", 0) != 0 or node_attr(node, "quantize_axis", 1) not in (1, -1):
        raise _fail(node, "expected gather_axis 0 and quantize_axis 1 (an embedding table quantized along its rows)")
    bits, block = _bits(node, 4), _block(node, 128)
    data = _constant(ix, node, 0, "data")
    if data.ndim != 2:
        raise _fail(node, f"its data has shape {list(data.shape)}, expected a 2-D table")
    data_type = ix.initializer_type(node.input[0])
    typed = data.dtype != np.uint8 or data_type in (TensorProto.INT4, TensorProto.UINT4)
    rows = data.shape[0]
    # typed: int4 / uint4 elements, one per entry, zero point 0 (signed) unless given; else uint8 bytes,
    # 8 / bits elements each, zero point 2^(bits-1) unless given
    cols = data.shape[1] if typed else data.shape[1] * 8 // bits
    signed = typed and data_type in (TensorProto.INT4, TensorProto.INT8)
    blocks = -(-cols // block)
    scales = _scales(node, _constant(ix, node, 2, "scales"), rows, blocks)
    zp_raw = _optional(ix, node, 3, "zero_points")
    typed_zp = typed and zp_raw is not None and zp_raw.dtype != np.uint8 and zp_raw.dtype not in (np.float16, np.float32)
    if typed_zp:  # integers of the data's type, one per block
        zp, float_zp = _expect_shape(node, "zero_points", zp_raw, (rows, blocks)), None
        zp_type = ix.initializer_type(node.input[3])
    else:
        zp, float_zp = _zero_points(node, zp_raw, bits, rows, blocks, scales)
    zero_zp = typed and zp is None and float_zp is None and not signed  # uint4 without zero points: z = 0

    def read_rows(start, stop):
        part = _rows(data, start, stop)
        q = _as_unsigned(part, bits, data_type)[0] if typed else _unpack(part, bits, cols)
        if typed_zp:
            zero_points = _as_unsigned(_rows(zp, start, stop), bits, zp_type)[0]
        elif zero_zp:
            zero_points = np.zeros((stop - start, blocks), np.int16)  # not the implied 2^(bits-1)
        else:
            zero_points = None if zp is None else _unpack(_rows(zp, start, stop), bits, blocks)
        padded = np.zeros((stop - start, blocks * block), np.int16)
        padded[:, :cols] = q
        return from_unsigned_blocks(bits, block, cols, padded.reshape(stop - start, blocks, block),
                                    _rows(scales, start, stop), zero_points, _rows(float_zp, start, stop))
    layout = _layout(bits, block, cols, rows, scales, zp is not None or zero_zp, float_zp is not None)
    table = sources.add(LazyQuantizedMatrix(layout, read_rows))
    name = f"{node.output[0]}.kvx_dequantized"
    gather = helper.make_node("Gather", [name, node.input[1]], [node.output[0]], name=node.name, axis=0)
    return [gather], (name, table)


def _dequantize_linear(ix, node, sources):
    """A blockwise DequantizeLinear of a constant [K, N] weight read by MatMuls as their right operand."""
    readers = ix.consumers(node.output[0])
    block = node_attr(node, "block_size", 0)
    if not block or not readers or any(r.op_type != "MatMul" or r.input[1] != node.output[0] for r in readers):
        raise _fail(node, "kvx reads DequantizeLinear only blockwise (block_size) and as the weight of a MatMul")
    check_block_size(block, f"node '{node_label(node)}' ({node.op_type})")
    x = _constant(ix, node, 0, "input x")
    x_type = ix.initializer_type(node.input[0])
    bits = {TensorProto.INT4: 4, TensorProto.UINT4: 4, TensorProto.INT8: 8, TensorProto.UINT8: 8}.get(x_type)
    if bits is None or x.ndim != 2:
        raise _fail(node, "expected an int4, uint4, int8 or uint8 [K, N] initializer as input x")
    if node_attr(node, "axis", 1) not in (0, -2):
        raise _fail(node, "blocks along axis 1 (the MatMul's output dimension); kvx's blocks run along K (axis 0)")
    k, n = x.shape
    blocks = -(-k // block)
    scale = _constant(ix, node, 1, "scale")
    scales = _scales(node, _expect_shape(node, "scale", scale, (blocks, n)).T, n, blocks)
    signed = x_type in (TensorProto.INT4, TensorProto.INT8)
    zp_raw = _optional(ix, node, 2, "zero point")
    zp = None if zp_raw is None else _expect_shape(node, "zero point", zp_raw, (blocks, n))
    zp_type = ix.initializer_type(node.input[2]) if zp_raw is not None else None

    def read_rows(start, stop):  # kvx's rows are the graph's columns: x is read whole
        q = _as_unsigned(np.asarray(x[:, start:stop]), bits, x_type)[0]
        if zp is not None:
            zero_points = np.ascontiguousarray(_as_unsigned(np.asarray(zp[:, start:stop]), bits, zp_type)[0].T)
        else:  # DequantizeLinear's default is 0 in the input's own type: 2^(bits-1) once shifted, if signed
            zero_points = None if signed else np.zeros((stop - start, blocks), np.int16)
        padded = np.zeros((stop - start, blocks * block), np.int16)
        padded[:, :k] = q.T
        return from_unsigned_blocks(bits, block, k, padded.reshape(stop - start, blocks, block),
                                    np.ascontiguousarray(_rows(scales, start, stop)), zero_points)
    layout = _layout(bits, block, k, n, scales, zp is not None or not signed, False)
    weight = sources.add(LazyQuantizedMatrix(layout, read_rows, rows_apart=False))
    return [], (node.output[0], weight.T)
