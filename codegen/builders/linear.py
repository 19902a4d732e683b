"""Fully connected layer."""
from __future__ import annotations

from codegen.builders.registry import builder
from codegen.ops.registry import Attr


@builder("Linear", inputs=(2, 3),
         attrs=[Attr("transB", "int", 0, (0, 1)),
                Attr("activation", "string", "none", ("none", "relu", "gelu"))])
def linear(g, inputs, attrs):
    """x @ W (+ bias), W given as [in, out] or, with transB=1, as [out, in]; optional activation."""
    x, weight = inputs[0], inputs[1]
    if attrs["transB"]:
        weight = g.add("Transpose", [weight], {"perm": [1, 0]})[0]
    y = g.add("MatMul", [x, weight])[0]
    if len(inputs) > 2 and inputs[2]:
        y = g.add("Add", [y, inputs[2]])[0]
    if attrs["activation"] == "relu":
        return g.add("Relu", [y])
    if attrs["activation"] == "gelu":
        return g.add("Gelu", [y])  # a builder calling a builder
    return [y]
