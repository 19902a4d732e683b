"""Operators of the ai.onnx.ml domain that are plain arithmetic."""
from __future__ import annotations

from codegen.builders.registry import builder
from codegen.ops.registry import Attr


@builder("ai.onnx.ml.Binarizer", inputs=1, attrs=[Attr("threshold", "float", 0.0)])
def binarizer(g, inputs, attrs):
    """1 where x > threshold, else 0, in x's element type."""
    (x,) = inputs
    above = g.add("Greater", [x, g.scalar(attrs["threshold"])])[0]
    return g.add("Where", [above, g.scalar(1.0), g.scalar(0.0)])
