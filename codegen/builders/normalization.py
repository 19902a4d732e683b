"""Normalisation composites."""
from __future__ import annotations

from codegen.builders.registry import builder
from codegen.ops.common import normalize_axis
from codegen.ops.registry import Attr, OpError


@builder("LayerNormalization", inputs=(2, 3), outputs=3,
         attrs=[Attr("axis", "int", -1), Attr("epsilon", "float", 1e-5),
                Attr("stash_type", "int", 1, (1,))])
def layer_normalization(g, inputs, attrs):
    """ONNX LayerNormalization over axes [axis, rank): outputs Y, Mean, InvStdDev."""
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 and inputs[2] else None
    shape = g.type_of(x).shape
    rank = len(shape)
    axes = list(range(normalize_axis(attrs["axis"], rank), rank))
    for i, what in ((1, "scale"), (2, "bias")):
        # Y has X's shape: a scale or bias that would widen it by broadcasting is a mistake.
        if i < len(inputs) and inputs[i]:
            other = g.type_of(inputs[i]).shape
            if len(other) > rank or any(d not in (1, e) for d, e in zip(reversed(other), reversed(shape))):
                raise OpError(f"LayerNormalization {what} of shape {list(other)} does not broadcast "
                              f"to the input's shape {list(shape)}", input=i)
    mean = g.add("ReduceMean", [x], {"axes": axes, "keepdims": 1})[0]
    centered = g.add("Sub", [x, mean])[0]
    variance = g.add("ReduceMean", [g.add("Mul", [centered, centered])[0]],
                     {"axes": axes, "keepdims": 1})[0]
    std = g.add("Sqrt", [g.add("Add", [variance, g.scalar(attrs["epsilon"])])[0]])[0]
    y = g.add("Mul", [g.add("Div", [centered, std])[0], scale])[0]
    if bias:
        y = g.add("Add", [y, bias])[0]
    return [y, mean, g.add("Div", [g.scalar(1.0), std])[0]]
