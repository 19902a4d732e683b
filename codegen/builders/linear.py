"""Fully connected layer."""
from __future__ import annotations

from tinsmith.builders.registry import builder
from tinsmith.ops.registry import Attr


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


@builder("CausalConvWithState", inputs=(2, 4), outputs=2,
         attrs=[Attr("activation", "string", "none", ("none", "silu", "swish"))])
def causal_conv_with_state(g, inputs, attrs):
    """ONNX CausalConvWithState: the past state (zeros if absent) and the input side by side
    along the length, a depthwise Conv1d over them (valid padding), optionally SiLU; the
    present state is the last k-1 positions of that padded input."""
    import numpy as np

    from tinsmith.ops.registry import OpError
    x, weight = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 and inputs[2] else None
    past = inputs[3] if len(inputs) > 3 and inputs[3] else None
    shape, kernel = list(g.type_of(x).shape), list(g.type_of(weight).shape)
    if len(shape) != 3 or len(kernel) != 3 or kernel[0] != shape[1] or kernel[1] != 1:
        raise OpError(f"CausalConvWithState takes input [batch, channels, length] and weight [channels, 1, k]; "
                      f"got {shape} and {kernel}", input=1)
    batch, channels, length = shape
    k = kernel[2]
    if past is None:
        past = g.constant(np.zeros((batch, channels, k - 1), np.float32), "past") if k > 1 else None
    padded = g.add("Concat", [past, x], {"axis": 2})[0] if past is not None else x
    conv_inputs = [padded, weight] + ([bias] if bias else [])
    y = g.add("Conv", conv_inputs, {"group": channels, "kernel_shape": [k]})[0]
    if attrs["activation"] != "none":
        y = g.add("Mul", [y, g.add("Sigmoid", [y])[0]])[0]
    total = length + k - 1
    state = g.add("Slice", [padded, g.constant(np.array([total - (k - 1)], np.int64), "starts"),
                            g.constant(np.array([total], np.int64), "ends"),
                            g.constant(np.array([2], np.int64), "axes")])[0]
    return [y, state]
