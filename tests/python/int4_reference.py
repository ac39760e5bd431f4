"""What an int4 graph of ONNX Runtime GenAI's builder should compute, without trusting it: the builder's fp32
graph of the same model (itself checked against HF) with every weight replaced by the int4 graph's integers
times their scales. The int4 graph run exactly (MatMulNBits' accuracy_level 0) must then give the same logits,
which proves it is the fp32 graph with quantized weights, not some other wiring.

Read from the operator specs (onnxruntime's ContribOperators.md), not from kvx's converter:
  MatMulNBits(A, B, scales[, zero_points]): B uint8 [N, k_blocks, block_size * bits / 8], the first value of a
    byte in its low nibble; W[n, k] = (q - zero point) * scale, zero point 8 (4 bits) where none is given;
    Y = A . W^T, so the fp32 graph's MatMul weight is W^T [K, N].
  GatherBlockQuantized(data, indices, scales[, zero_points]), gather_axis 0, quantize_axis 1: data packed as
    MatMulNBits' B (uint8 [vocab, dim * bits / 8]) or as int4/uint4 elements, blocks along dim.
"""

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _nibbles(packed, count):
    """[rows, count] unsigned 4-bit values from packed bytes [rows, ...], low nibble first."""
    flat = packed.reshape(packed.shape[0], -1)
    q = np.stack([flat & 15, flat >> 4], axis=-1).reshape(flat.shape[0], -1)
    return q[:, :count].astype(np.float32)


def _dequantized(q, scales, zero_points, block):
    """q [rows, cols] unsigned, scales [rows, blocks], zero_points [rows, blocks] or None -> fp32 [rows, cols]."""
    rows, cols = q.shape
    index = np.arange(cols) // block
    zero = 8.0 if zero_points is None else zero_points[:, index]
    return ((q - zero) * scales.reshape(rows, -1)[:, index]).astype(np.float32)


def _zero_points(values, node, k, rows, blocks):
    if len(node.input) <= k or not node.input[k]:
        return None
    z = values[node.input[k]]
    return _nibbles(z, blocks) if z.dtype == np.uint8 and z.size < rows * blocks else z.reshape(rows, blocks)


def dequantized_weights(int4_model):
    """{fp32 graph initializer name: fp32 array in the fp32 graph's layout} from the int4 graph's nodes."""
    values = {t.name: numpy_helper.to_array(t) for t in int4_model.graph.initializer}
    producers = {o: n for n in int4_model.graph.node for o in n.output}
    found = {}
    for node in int4_model.graph.node:
        attrs = _attrs(node)
        if node.op_type == "MatMulNBits":
            n, k, block = attrs["N"], attrs["K"], attrs["block_size"]
            if attrs["bits"] != 4:
                raise ValueError(f"{node.name}: {attrs['bits']} bits, only 4 are read here")
            blocks = -(-k // block)
            w = _dequantized(_nibbles(values[node.input[1]], blocks * block)[:, :k].reshape(n, k),
                             values[node.input[2]], _zero_points(values, node, 3, n, blocks), block)
            found[node.input[1].removesuffix("_Q4")] = w.T  # MatMul's [K, N]
        elif node.op_type == "GatherBlockQuantized":
            if attrs.get("gather_axis", 0) != 0 or attrs.get("quantize_axis", 1) != 1:
                raise ValueError(f"{node.name}: only gather_axis 0, quantize_axis 1 are read here")
            data_name = node.input[0]
            while data_name not in values and data_name in producers:  # the builder reshapes lm_head's B
                data_name = producers[data_name].input[0]
            scales = values[node.input[2]]
            rows, blocks = scales.shape[0], scales.reshape(scales.shape[0], -1).shape[1]
            block = attrs["block_size"]
            data = values[data_name]
            q = _nibbles(data.reshape(rows, -1), blocks * block) if data.dtype == np.uint8 else \
                data.reshape(rows, -1).astype(np.float32) + (8 if data.dtype == np.int8 else 0)
            found[("embedding", data_name)] = _dequantized(q, scales, _zero_points(values, node, 3, rows, blocks),
                                                            block)
    return found


def fp32_with_weights(fp32_model, weights):
    """fp32_model (modified) with each named MatMul weight replaced, and the token embedding Gather's table
    set to the dequantized embedding (through the Transpose the builder puts before it, if any)."""
    initializers = {t.name: t for t in fp32_model.graph.initializer}
    producers = {o: n for n in fp32_model.graph.node for o in n.output}
    for name, value in weights.items():
        if isinstance(name, tuple):
            gather = next(n for n in fp32_model.graph.node if n.op_type == "Gather" and n.input[1] == "input_ids")
            table, transposed = gather.input[0], False
            while table not in initializers:
                node = producers[table]
                transposed ^= node.op_type == "Transpose"
                table = node.input[0]
            name, value = table, value.T if transposed else value
        if name not in initializers:
            raise KeyError(f"the fp32 graph has no weight '{name}'")
        initializers[name].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(value).astype(np.float32), name))
    return fp32_model


def write_reference(int4_folder, fp32_folder, out_folder):
    """out_folder/model.onnx: the fp32 graph with the int4 graph's weights; out_folder/exact/model.onnx: the int4
    graph told accuracy_level 0. Both with genai_config.json."""
    import shutil
    int4 = onnx.load(str(int4_folder / "model.onnx"))
    reference = fp32_with_weights(onnx.load(str(fp32_folder / "model.onnx")), dequantized_weights(int4))
    (out_folder / "exact").mkdir(parents=True)
    onnx.save(reference, str(out_folder / "model.onnx"))
    for node in int4.graph.node:
        for attribute in node.attribute:
            if node.op_type == "MatMulNBits" and attribute.name == "accuracy_level":
                attribute.i = 0
    onnx.save(int4, str(out_folder / "exact" / "model.onnx"))
    for folder in (out_folder, out_folder / "exact"):
        shutil.copy(fp32_folder / "genai_config.json", folder / "genai_config.json")
