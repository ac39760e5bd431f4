"""Which float matrices `--quantize int8|int4` quantizes, and to how many bits.

As llama.cpp's Q8_0 / Q4_0 files: every linear layer gets the chosen type; the token embedding gets it too;
the classifier, or the embedding when it is also the classifier (tied), is kept at higher precision under int4:
llama.cpp gives output.weight Q6_K there (Q8_0 under Q8_0), and kvx's nearest higher form is int8. With
--no-quantize-embeddings the embedding and the classifier stay float. Position embeddings (GPT-2) stay float:
they are added to the activations, not multiplied with them.
"""

from .rtn import RtnQuantized

QUANTIZE_BITS = {"int8": 8, "int4": 4}
CLASSIFIER_BITS = 8


def bits_for(name, kind, tied, quantize_embeddings):
    """The bits name is quantized to under --quantize kind, or None to keep it float."""
    bits = QUANTIZE_BITS[kind]
    if name.startswith("layers.") and name.split(".")[-1].startswith("w"):
        return bits
    if not quantize_embeddings:
        return None
    if name == "classifier" or (name == "tok_embeddings" and tied):
        return max(bits, CLASSIFIER_BITS)
    if name == "tok_embeddings":
        return bits
    return None


def quantize_floats(floats, kind, block, symmetric, tied, quantize_embeddings):
    """Moves the chosen matrices of floats (kvx name -> array or LazyTensor, the graph's precision) out; returns
    them to be quantized as they are written, {kvx name: RtnQuantized}."""
    quantized = {}
    for name in list(floats):
        tensor = floats[name]
        bits = bits_for(name, kind, tied, quantize_embeddings) if tensor.ndim == 2 else None
        if bits is not None:
            quantized[name] = RtnQuantized(tensor, bits, block, symmetric)
            del floats[name]
    return quantized
