"""Normalisation composites."""
from __future__ import annotations

from tinsmith.builders.registry import builder
from tinsmith.ops.common import normalize_axis
from tinsmith.ops.registry import Attr, OpError


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


@builder("LpNormalization", inputs=1, attrs=[Attr("axis", "int", -1), Attr("p", "int", 2, (1, 2))])
def lp_normalization(g, inputs, attrs):
    """X divided by its L1 or L2 norm along `axis`; where the norm is 0, the result is 0."""
    x = inputs[0]
    axis = normalize_axis(attrs["axis"], len(g.type_of(x).shape))
    norm = g.add("ReduceL1" if attrs["p"] == 1 else "ReduceL2", [x], {"axes": [axis], "keepdims": 1})[0]
    zero = g.scalar(0.0)
    is_zero = g.add("Equal", [norm, zero])[0]
    return g.add("Where", [is_zero, zero, g.add("Div", [x, norm])[0]])
