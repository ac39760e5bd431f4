"""The operators the converter knows how to read. A node outside this set stops the conversion before
any pattern matching, naming the node, so that a new kind of graph fails at its first unknown piece.

Extending: add the op here, and teach a matcher in blocks/ or exporters/ what it means.
"""

from ..domains import DEFAULT_DOMAINS, MS_DOMAIN
from ..errors import ConvertError, node_label
from ..exporters.ortgenai.gpt2 import ORTGENAI_GPT2_OPS
from ..exporters.ortgenai.gqa import GQA_OP
from ..exporters.ortgenai.llama_patterns import ORTGENAI_LLAMA_OPS
from ..quantized.ops import QUANTIZED_FUSED_OPS

# Standard ops that torch.onnx.export emits for HF Llama and GPT-2: the computation proper plus the shape and
# mask arithmetic around it, which the engine does itself and the converter therefore only walks past.
SUPPORTED_DEFAULT_OPS = frozenset({
    # computation that maps onto kvx weights and kernels
    "Gather", "MatMul", "Pow", "ReduceMean", "Add", "Sqrt", "Reciprocal", "Div", "Mul", "Neg",
    "Cos", "Sin", "Softmax", "Sigmoid", "LayerNormalization", "Tanh",
    "Gelu", "Erf",  # Gelu: opset 20; the MLP patterns read approximate='tanh' (Gemma) and 'none' (GPT-NeoX)
    # tensor plumbing
    "Reshape", "Transpose", "Slice", "Split", "Concat", "Unsqueeze", "Squeeze", "Expand", "Identity", "Cast",
    # shape and mask arithmetic
    "Shape", "Constant", "ConstantOfShape", "Range", "Sub", "Where", "Equal", "Less", "LessOrEqual",
    "Greater", "GreaterOrEqual", "And", "Or", "Not", "Trilu", "Min", "Max", "Tile",
    # what torch.onnx.export (TorchScript and dynamo) and optimum add around the same computation; graph/normalise.py
    # rewrites Gemm and drops Dropout, the rest builds masks and positions
    "Flatten", "GatherND", "IsNaN", "Gemm", "Dropout", "ReduceSum", "CumSum", "ScatterND",
    # blockwise quantized weights (opset 21), dequantized into MatMul weights by quantized/ops.py
    "DequantizeLinear",
    # dynamo without its optimizer: type_as of the normed activations, the scale cast to their type, torch.split
    # as a sequence (graph/rewrites.py makes it a Split)
    "CastLike", "SplitToSequence", "SequenceAt",
    # opset 23, what dynamo's optimizer fuses sdpa, RoPE and RMSNorm into (blocks/attention_core.py,
    # blocks/rotary.py, blocks/norms.py)
    "Attention", "RotaryEmbedding", "RMSNormalization",
    # OLMo's clip_qkv (clamp); RoPE's angles looked up by position (GPT-J's GatherElements of its sin/cos table,
    # the max position Cohere's dynamic rotary reads), which blocks/rotary.py computes rather than matches
    "Clip", "GatherElements", "ReduceMax", "NonZero",
})

# Fused operators, (domain, op type): ONNX Runtime's that a pattern module maps. Most are in its com.microsoft
# domain; the default domain ("") holds the few ONNX Runtime registers there (SimplifiedLayerNormalization).
SUPPORTED_FUSED_OPS = frozenset((MS_DOMAIN, op) for op in ORTGENAI_GPT2_OPS | QUANTIZED_FUSED_OPS) | \
    ORTGENAI_LLAMA_OPS | {GQA_OP}
# The fewest inputs and outputs of each in ONNX Runtime's contrib operator schemas (an optional one in between
# may be ""). The matchers index them, and onnx.checker, which does not know these operators, cannot check.
FUSED_MIN_ARITY = {
    (MS_DOMAIN, "EmbedLayerNormalization"): (7, 2),
    (MS_DOMAIN, "Attention"): (2, 1),
    (MS_DOMAIN, "SkipLayerNormalization"): (3, 1),
    (MS_DOMAIN, "FastGelu"): (1, 1),
    ("", "SimplifiedLayerNormalization"): (2, 1),
    (MS_DOMAIN, "SkipSimplifiedLayerNormalization"): (3, 1),
    (MS_DOMAIN, "RotaryEmbedding"): (4, 1),
    (MS_DOMAIN, "MultiHeadAttention"): (1, 1),
    GQA_OP: (7, 3),
    (MS_DOMAIN, "MatMulNBits"): (3, 1),
    (MS_DOMAIN, "GatherBlockQuantized"): (3, 1),
}
assert set(FUSED_MIN_ARITY) == SUPPORTED_FUSED_OPS


def check_supported_ops(graph):
    """Raises for the first unsupported node, looking at non-standard domains first: in graphs with
    fused operators those are what needs support, not the plumbing around them."""
    for node in graph.node:
        if node.domain not in DEFAULT_DOMAINS and (node.domain, node.op_type) not in SUPPORTED_FUSED_OPS:
            raise ConvertError(f"unsupported operator '{node.op_type}' at node '{node_label(node)}' "
                               f"(op type {node.op_type}, domain {node.domain})")
    for node in graph.node:
        if node.domain in DEFAULT_DOMAINS and node.op_type not in SUPPORTED_DEFAULT_OPS \
                and ("", node.op_type) not in SUPPORTED_FUSED_OPS:
            raise ConvertError(f"unsupported operator '{node.op_type}' at node '{node_label(node)}' "
                               f"(op type {node.op_type})")
    for node in graph.node:
        domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
        arity = FUSED_MIN_ARITY.get((domain, node.op_type))
        if arity is not None and (len(node.input) < arity[0] or len(node.output) < arity[1]):
            raise ConvertError(f"node '{node_label(node)}' ({node.op_type}) has {len(node.input)} inputs and "
                               f"{len(node.output)} outputs; ONNX Runtime's {node.op_type} has at least "
                               f"{arity[0]} and {arity[1]}")
