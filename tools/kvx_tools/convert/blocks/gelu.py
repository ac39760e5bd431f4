"""GELU in the spellings exporters write: ONNX Gelu (opset 20, approximate "tanh" or "none"), or written out in
elementary operators, in its tanh form (GPT-2's gelu_new, Gemma's gelu_pytorch_tanh)
    0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * Pow(x, 3))))    (Gemma's cube as x * (x * x))
or its exact form (GPT-NeoX, Falcon)
    0.5 * x * (1 + Erf(x / sqrt(2)))
Constants are checked against those values; operands of Add and Mul may come in either order, and the
0.5 may multiply x first or the product last."""

import numpy as np

from ..errors import ConvertError, cannot_map
from ..graph.index import node_attr

GELU_TANH_SCALE = np.sqrt(2.0 / np.pi)
GELU_TANH_CUBIC = 0.044715
GELU_FORM = "GELU in its tanh form: 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))"


def _by_constant(ix, tensor, op_type, value):
    """The consumer of tensor that is op_type(tensor, c) with the scalar constant c == value (fp32
    rounding allowed), in either operand order; None if there is none."""
    for node in ix.consumers(tensor, op_type):
        c = ix.scalar(ix.other_input(node, tensor))
        if c is not None and np.isclose(c, value, rtol=1e-6, atol=0):
            return node
    return None


def _pairing(ix, a, b, op_type):
    """The op_type node combining tensors a and b, in either order; None if there is none."""
    for node in ix.consumers(a, op_type):
        if ix.other_input(node, a) == b:
            return node
    return None


def _next_step(ix, tensor, op_type, operand):
    """The consumer of tensor that is op_type with operand: a scalar constant (float), another tensor
    (str), or nothing (None, a unary op)."""
    if operand is None:
        nodes = ix.consumers(tensor, op_type)
        return nodes[0] if len(nodes) == 1 else None
    if isinstance(operand, str):
        return _pairing(ix, tensor, operand, op_type)
    return _by_constant(ix, tensor, op_type, operand)


def _cubes(ix, x):
    """The nodes computing x^3: Pow(x, 3), or x * (x * x) as torch traces Gemma's tanh GELU."""
    cubes = [n for n in ix.consumers(x, "Pow") if n.input[0] == x and ix.scalar(n.input[1]) == 3.0]
    for square in ix.consumers(x, "Mul"):
        if list(square.input) == [x, x]:
            cubes += [m for m in ix.consumers(square.output[0], "Mul") if ix.other_input(m, square.output[0]) == x]
    return list({id(n): n for n in cubes}.values())  # a Mul(x, x) is listed once per operand


def gelu_op_output(ix, x, approximate):
    """The output of ONNX Gelu(x) (opset 20) with that approximate attribute ("tanh" or "none"), or None."""
    for node in ix.consumers(x, "Gelu"):
        value = node_attr(node, "approximate", b"none")
        value = value.decode() if isinstance(value, bytes) else value
        if node.domain in ("", "ai.onnx") and value == approximate:
            return node.output[0]
    return None


def gelu_tanh_output(ix, x):
    """The tensor holding GELU-tanh(x) (ONNX Gelu approximate='tanh' or written out), or None."""
    found = gelu_op_output(ix, x, "tanh")
    if found is not None:
        return found
    if len(_cubes(ix, x)) != 1:
        return None
    try:
        return match_gelu_tanh(ix, x, ix.producer(x))
    except ConvertError:
        return None


def written_out_gelu_tanh(ix, x):
    """Whether x is cubed, the first step of GELU's tanh form written out."""
    return len(_cubes(ix, x)) == 1


def match_gelu_tanh(ix, x, after):
    """The tensor holding gelu_new(x); after: the node to blame when x does not go through it."""
    found = gelu_op_output(ix, x, "tanh")
    if found is not None:
        return found
    cubes = _cubes(ix, x)
    if len(cubes) != 1:
        raise cannot_map(after, f"{GELU_FORM}, reading '{x}' (found no Pow(x, 3))")
    node = cubes[0]
    for op_type, operand, what in (("Mul", GELU_TANH_CUBIC, "0.044715 * x^3"), ("Add", x, "x + 0.044715 * x^3"),
                                   ("Mul", GELU_TANH_SCALE, "sqrt(2/pi) * (...)"), ("Tanh", None, "Tanh(...)"),
                                   ("Add", 1.0, "1 + Tanh(...)")):
        step = _next_step(ix, node.output[0], op_type, operand)
        if step is None:
            raise cannot_map(node, f"{what}, a step of {GELU_FORM}")
        node = step
    one_plus_tanh = node.output[0]
    half_x = _by_constant(ix, x, "Mul", 0.5)
    if half_x is not None:  # (0.5 * x) * (1 + tanh(...)), as torch traces gelu_new
        product = _pairing(ix, half_x.output[0], one_plus_tanh, "Mul")
        if product is not None:
            return product.output[0]
    product = _pairing(ix, x, one_plus_tanh, "Mul")  # 0.5 * (x * (1 + tanh(...)))
    halved = _by_constant(ix, product.output[0], "Mul", 0.5) if product is not None else None
    if halved is None:
        raise cannot_map(node, f"the product of 0.5, x and 1 + Tanh(...), the end of {GELU_FORM}")
    return halved.output[0]


def gelu_erf_output(ix, x):
    """The tensor holding exact GELU(x): ONNX Gelu (approximate "none") or 0.5 * x * (1 + Erf(x / sqrt(2))) in
    either association; None where x goes through none."""
    found = gelu_op_output(ix, x, "none")
    if found is not None:
        return found
    for div in ix.consumers(x, "Div"):
        c = ix.scalar(div.input[1]) if div.input[0] == x else None
        if c is None or not np.isclose(c, np.sqrt(2.0), rtol=1e-6):
            continue
        erf = ix.consumers(div.output[0], "Erf")
        add = ix.consumers(erf[0].output[0], "Add") if len(erf) == 1 else []
        if len(add) != 1 or ix.scalar(ix.other_input(add[0], erf[0].output[0])) != 1.0:
            continue
        one_plus = add[0].output[0]
        half_x = _by_constant(ix, x, "Mul", 0.5)
        if half_x is not None:  # (0.5 * x) * (1 + erf)
            product = _pairing(ix, half_x.output[0], one_plus, "Mul")
            if product is not None:
                return product.output[0]
        product = _pairing(ix, x, one_plus, "Mul")  # (x * (1 + erf)) * 0.5
        halved = _by_constant(ix, product.output[0], "Mul", 0.5) if product is not None else None
        if halved is not None:
            return halved.output[0]
    return None
