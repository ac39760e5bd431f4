"""The operator domains an ONNX decoder's nodes come from, named once for every module that reads them."""

# ONNX's own operators: "" and its long name are the same domain.
DEFAULT_DOMAINS = ("", "ai.onnx")
# ONNX Runtime's contrib operators (GroupQueryAttention, MatMulNBits, SkipSimplifiedLayerNormalization, ...).
MS_DOMAIN = "com.microsoft"


def is_default_domain(node):
    return node.domain in DEFAULT_DOMAINS
