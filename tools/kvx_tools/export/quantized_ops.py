"""The com.microsoft operators ONNX Runtime runs quantized weights with, written the way its own tools write
them (MatMulNBitsQuantizer's initializer names; ORT GenAI's builder's tied int4 embedding, which gathers from
the classifier's MatMulNBits weight through a Reshape), for a gguf_blocks.QuantizedMatrix.

  MatMulNBits           A [..., K], B uint8 [N, K / 32, 32 * bits / 8], scales [N, K / 32], zero_points
                        (optional, fp32 [N, K / 32] here) -> A @ W^T, W [N, K]
  GatherBlockQuantized  data uint8 [N, K * bits / 8], indices, scales [N, K / 32] -> rows of W, fp32
"""

MS_DOMAIN = "com.microsoft"


def quantized_operands(g, matrix, name):
    """Adds matrix's initializers named after the weight `name` it replaces; returns (B, scales, zero_points
    or None), the names MatMulNBits takes."""
    b = g.add_initializer(f"{name}_Q{matrix.bits}", matrix.q)
    scales = g.add_initializer(f"{name}_scales", matrix.scales)
    zero_points = None if matrix.zero_points is None else g.add_initializer(f"{name}_zero_points", matrix.zero_points)
    return b, scales, zero_points


def nbits_attributes(matrix):
    """MatMulNBits' K, N, bits and block_size for a QuantizedMatrix: all a second node over the same initializers
    needs of it (the tied classifier), so the matrix itself need not be kept."""
    return {"K": matrix.cols, "N": matrix.rows, "bits": matrix.bits, "block_size": matrix.q.shape[2] * 8 // matrix.bits}


def matmul_nbits(g, x, attributes, operands, scope, outputs=None):
    """x @ W^T for the QuantizedMatrix W of nbits_attributes attributes whose quantized_operands are operands."""
    b, scales, zero_points = operands
    inputs = [x, b, scales] + ([zero_points] if zero_points is not None else [])
    return g.op("MatMulNBits", inputs, scope, outputs=outputs, domain=MS_DOMAIN, **attributes, accuracy_level=0)


def gather_block_quantized(g, ids, attributes, operands, scope):
    """Rows ids of W (an embedding) from the same initializers a tied classifier's MatMulNBits reads: B seen as
    [N, K * bits / 8] through a Reshape. Default zero points only: GatherBlockQuantized's zero points are integers
    of the data's type, and gguf_blocks makes float ones (Q4_1), which the caller dequantizes instead."""
    b, scales, zero_points = operands
    assert zero_points is None, "GatherBlockQuantized takes no float zero points"
    data = g.op("Reshape", [b, g.const([attributes["N"], -1], scope)], scope)
    return g.op("GatherBlockQuantized", [data, ids, scales], scope, domain=MS_DOMAIN, gather_axis=0, quantize_axis=1,
                block_size=attributes["block_size"], bits=attributes["bits"])
