"""Activation composites."""
from __future__ import annotations

import math

from tinsmith.builders.registry import builder
from tinsmith.ops.registry import Attr


@builder("Gelu", inputs=1, attrs=[Attr("approximate", "string", "none", ("none", "tanh"))])
def gelu(g, inputs, attrs):
    """ONNX Gelu: 0.5*x*(1+erf(x/sqrt(2))), or the tanh approximation."""
    (x,) = inputs
    if attrs["approximate"] == "tanh":
        cube = g.add("Mul", [g.add("Mul", [x, x])[0], x])[0]
        inner = g.add("Add", [x, g.add("Mul", [cube, g.scalar(0.044715)])[0]])[0]
        t = g.add("Tanh", [g.add("Mul", [inner, g.scalar(math.sqrt(2 / math.pi))])[0]])[0]
    else:
        t = g.add("Erf", [g.add("Div", [x, g.scalar(math.sqrt(2.0))])[0]])[0]
    half_x = g.add("Mul", [x, g.scalar(0.5)])[0]
    return g.add("Mul", [half_x, g.add("Add", [t, g.scalar(1.0)])[0]])


@builder("SwiGLU", inputs=2, attrs=[Attr("alpha", "float", 1.0)])
def swiglu(g, inputs, attrs):
    """ONNX SwiGLU: Swish(A) * B, gate A and value B of the same shape."""
    a, b = inputs
    if tuple(g.type_of(a).shape) != tuple(g.type_of(b).shape):
        from tinsmith.ops.registry import OpError
        raise OpError(f"SwiGLU gate and value have shapes {list(g.type_of(a).shape)} and "
                      f"{list(g.type_of(b).shape)}; they must be the same", input=1)
    return g.add("Mul", [g.add("Swish", [a], {"alpha": attrs["alpha"]})[0], b])
