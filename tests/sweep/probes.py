"""The sweep's probes as data: for every primitive, one or a few small nodes (input shapes, attributes,
constant operands), each input typed by a dtype *slot* that the sweep fills with candidate element types.

A slot is a name (`T`, `I`, ...) whose candidates are listed in SLOTS (or in the probe's own `slots`),
or a fixed element type (`int64`). Every probe is tried with each uniform assignment (all its free
slots the same type, for every type in DTYPES) and with the product of its slots' candidates; what
shape/type inference refuses is "not accepted" and skipped. An attribute given as Slot("U") is the
type chosen for slot U (Cast's `to`, EyeLike's `dtype`, the quantized ops' `dtype`).

Domains keep runtime data where the op is defined for every element type: `pos` (positive, for Log
and Sqrt), `unit` (inside (-1, 1), for Asin and Atanh), `nonzero` (divisors), `shift` (0..3, shift
counts and exponents), `idxN` (valid indices into an axis of size N), `grid` (normalized coordinates).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from tinsmith.ir.graph import DTYPES

ALL = tuple(DTYPES)
INDICES = ("int32", "int64")
QUANTIZED = ("int8", "uint8", "int16")
SLOTS: Mapping[str, tuple[str, ...]] = {
    "T": ALL,                          # the data type: every element type Tinsmith knows
    "U": ALL,                          # a second data type (Cast's target, CastLike's model)
    "I": INDICES,                      # indices, axes, counts given at run time
    "B": ("bool",),                    # conditions
    "X": QUANTIZED,                    # quantized activations
    "W": QUANTIZED,                    # quantized weights
    "Z": ("int32", "int64"),           # quantized biases and accumulators
}


@dataclass(frozen=True)
class Slot:
    """An attribute whose value is the element type chosen for a slot."""

    name: str


@dataclass(frozen=True)
class In:
    """One input: its dtype slot (or fixed type), shape, constant data (a build-time operand) or the
    domain its runtime data is drawn from."""

    slot: str
    shape: tuple[int, ...]
    const: Any = None
    domain: str = "any"


@dataclass(frozen=True)
class Probe:
    op: str
    inputs: tuple[In | None, ...]      # None: an omitted optional input ("")
    attrs: Mapping[str, Any] = field(default_factory=dict)
    outputs: int = 1
    tag: str = ""                      # tells several probes of one op apart
    slots: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # overrides SLOTS

    @property
    def key(self) -> str:
        return self.op + (f"/{self.tag}" if self.tag else "")

    def candidates(self, slot: str) -> tuple[str, ...]:
        if slot in DTYPES:
            return (slot,)
        return tuple(self.slots.get(slot, SLOTS[slot]))


def t(shape=(3, 7), slot="T", domain="any") -> In:
    return In(slot, tuple(shape), None, domain)


def c(value, slot="int64") -> In:
    """A constant input holding `value` (a number or nested list)."""
    import numpy as np
    return In(slot, tuple(np.shape(value)), value)


E = (3, 7)  # elementwise shape: 21 elements, a vector body and a tail on every SIMD width
NCHW = (1, 2, 5, 5)
NHWC = (1, 5, 5, 2)


def unary(op, domain="any", **attrs) -> Probe:
    return Probe(op, (t(E, domain=domain),), attrs)


def binary(op, domain_b="any", **attrs) -> Probe:
    return Probe(op, (t(E), t((7,), domain=domain_b)), attrs)


def reduce(op, domain="any") -> Probe:
    return Probe(op, (t((2, 3, 5), domain=domain), c([1])), {"keepdims": 1})


UNARY = {"Abs": "any", "Acos": "unit", "Acosh": "pos1", "Asin": "unit", "Asinh": "any", "Atan": "any",
         "Atanh": "unit", "Ceil": "any", "Cos": "any", "Cosh": "any", "Erf": "any", "Exp": "any",
         "Floor": "any", "HardSwish": "any", "Identity": "any", "IsInf": "any", "IsNaN": "any", "Log": "pos",
         "Mish": "any", "Neg": "any", "Not": "any", "Reciprocal": "pos", "Relu": "any", "Round": "any",
         "Sigmoid": "any", "Sign": "any", "Sin": "any", "Sinh": "any", "Softplus": "any", "Softsign": "any",
         "Sqrt": "pos", "Tan": "unit", "Tanh": "any", "BitwiseNot": "any"}
ATTR_UNARY = {"Celu": {"alpha": 1.5}, "Elu": {"alpha": 0.7}, "HardSigmoid": {"alpha": 0.3, "beta": 0.4},
              "LeakyRelu": {"alpha": 0.1}, "Selu": {}, "Shrink": {"bias": 0.25, "lambd": 0.5},
              "Swish": {"alpha": 1.25}, "ThresholdedRelu": {"alpha": 0.5}}
BINARY = {"Add": "any", "Sub": "any", "Mul": "any", "Div": "nonzero", "Pow": "shift", "Mod": "nonzero",
          "And": "any", "Or": "any", "Xor": "any", "Equal": "any", "Greater": "any", "GreaterOrEqual": "any",
          "Less": "any", "LessOrEqual": "any", "BitwiseAnd": "any", "BitwiseOr": "any", "BitwiseXor": "any",
          "PRelu": "any"}
REDUCE = {"ReduceL1": "any", "ReduceL2": "any", "ReduceLogSum": "pos", "ReduceLogSumExp": "any", "ReduceMax": "any",
          "ReduceMean": "any", "ReduceMin": "any", "ReduceProd": "any", "ReduceSum": "any", "ReduceSumSquare": "any"}

# Requantization constants for TFLite-style ops: multiplier 0.75 * 2^31 and shift -6 per channel,
# i.e. an effective scale of 0.75 / 64 on the int32 accumulator.
MULT, SHIFT = 1610612736, -6
Q_OUT = {"y_scale": 0.05, "y_zero_point": 3}


def _requant(channels: int) -> tuple[In, In, In]:
    return (In("Z", (channels,), [7 * (k - 1) for k in range(channels)]),
            c([MULT] * channels, "int32"), c([SHIFT] * channels, "int32"))


def weights(shape, slot="W") -> In:
    """Constant weights: small whole numbers (exact in every type), as a trained model holds them."""
    import numpy as np
    n = int(np.prod(shape))
    return In(slot, tuple(shape), (((np.arange(n) * 7) % 11) - 5).reshape(shape).tolist())


def _pool(op, shape=NCHW, **extra) -> Probe:
    return Probe(op, (t(shape),), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], **extra})


PROBES: tuple[Probe, ...] = (
    *(unary(op, d) for op, d in UNARY.items()),
    *(Probe(op, (t(E),), a) for op, a in ATTR_UNARY.items()),
    *(binary(op, d) for op, d in BINARY.items()),
    Probe("BitShift", (t(E), t((7,), domain="shift")), {"direction": "LEFT"}, tag="left"),
    Probe("BitShift", (t(E), t((7,), domain="shift")), {"direction": "RIGHT"}, tag="right"),
    Probe("Mod", (t(E), t((7,), domain="nonzero")), {"fmod": 1}, tag="fmod"),
    *(reduce(op, d) for op, d in REDUCE.items()),
    Probe("ArgMax", (t((2, 3, 5)),), {"axis": 1}),
    Probe("ArgMin", (t((2, 3, 5)),), {"axis": 2, "keepdims": 0}),
    Probe("Hardmax", (t((2, 3, 5)),), {"axis": -1}),
    Probe("Softmax", (t((2, 3, 5)),), {"axis": -1}),
    Probe("LogSoftmax", (t((2, 3, 5)),), {"axis": 1}),
    Probe("CumSum", (t((2, 3, 5)), c(1)), {}),
    Probe("CumSum", (t((2, 3, 5)), In("I", (), 2)), {"exclusive": 1, "reverse": 1}, tag="I"),
    Probe("Cast", (t(E),), {"to": Slot("U")}),
    Probe("CastLike", (t(E), t((1,), "U")), {}),
    Probe("Clip", (t(E),), {"min": -0.5, "max": 1.5}, tag="attrs"),
    Probe("Clip", (t(E), In("T", (), 0), In("T", (), 2)), {}, tag="inputs"),
    Probe("Max", (t(E), t((7,)), t((3, 1))), {}),
    Probe("Min", (t(E), t((7,))), {}),
    Probe("Mean", (t(E), t((7,))), {}),
    Probe("Sum", (t(E), t((7,)), t(E)), {}),
    Probe("Where", (t(E, "B"), t(E), t((7,))), {}),
    Probe("Concat", (t((2, 3)), t((2, 4))), {"axis": 1}),
    Probe("Constant", (), {"value_floats": [1.0, 2.0]}),
    Probe("ConstantOfShape", (c([2, 3]),), {"value": {"value": [5], "dtype": "int32"}}),
    Probe("Range", (In("T", (), 1), In("T", (), 9), In("T", (), 2)), {}),
    Probe("EyeLike", (t((3, 4)),), {"dtype": Slot("U"), "k": 1}),
    Probe("EyeLike", (t((3, 4)),), {}, tag="same"),
    Probe("Expand", (t((3, 1)), c([2, 3, 4])), {}),
    Probe("Flatten", (t((2, 3, 4)),), {"axis": 2}),
    Probe("Reshape", (t((2, 3, 4)), c([4, -1])), {}),
    Probe("Squeeze", (t((2, 1, 4)), c([1])), {}),
    Probe("Unsqueeze", (t((2, 4)), c([0, 3])), {}),
    Probe("Transpose", (t((2, 3, 4)),), {"perm": [2, 0, 1]}),
    Probe("Tile", (t((2, 3)), c([2, 2])), {}),
    Probe("Trilu", (t((4, 5)), c(1)), {"upper": 0}),
    Probe("Shape", (t((2, 3, 4)),), {}),
    Probe("Size", (t((2, 3, 4)),), {}),
    Probe("Slice", (t((4, 6)), c([1, 0]), c([3, 6]), c([0, 1]), c([1, 2])), {}),
    Probe("Split", (t((4, 6)),), {"axis": 1, "num_outputs": 2}, outputs=2),
    Probe("Split", (t((4, 6)), c([2, 4])), {"axis": 1}, outputs=2, tag="sizes"),
    Probe("Pad", (t((2, 3)), c([0, 1, 1, 2]), In("T", (), 1)), {"mode": "constant"}),
    Probe("Pad", (t((2, 3)), c([1, 1, 1, 1])), {"mode": "reflect"}, tag="reflect"),
    Probe("DepthToSpace", (t((1, 8, 2, 3)),), {"blocksize": 2}),
    Probe("SpaceToDepth", (t((1, 2, 4, 6)),), {"blocksize": 2}),
    Probe("Gather", (t((5, 4)), t((2, 3), "I", "idx5")), {"axis": 0}),
    Probe("GatherElements", (t((3, 4)), t((3, 2), "I", "idx4")), {"axis": 1}),
    Probe("GatherND", (t((3, 4, 2)), t((2, 2), "I", "idx3")), {}),
    Probe("ScatterElements", (t((3, 4)), t((3, 1), "I", "idx4"), t((3, 1))), {"axis": 1}),
    Probe("ScatterND", (t((4, 3)), In("int64", (2, 1), [[1], [3]]), t((2, 3))), {}),
    Probe("OneHot", (t((2, 3), "I", "idx4"), c([4]), t((2,))), {"axis": -1}),
    Probe("TopK", (t((3, 6)), c([2])), {"axis": 1}, outputs=2),
    Probe("Dropout", (t(E),), {}, outputs=2),
    Probe("MatMul", (t((3, 5)), t((5, 4))), {}),
    Probe("MatMul", (t((2, 3, 5)), t((5, 4))), {}, tag="batched"),
    Probe("MatMul", (t((3, 5)), weights((5, 4), "T")), {}, tag="const"),
    Probe("Gemm", (t((3, 5)), weights((4, 5), "T"), weights((4,), "T")), {"transB": 1}, tag="const"),
    Probe("Gemm", (t((3, 5)), t((4, 5)), t((4,))), {"transB": 1, "alpha": 0.5, "beta": 2.0}),
    Probe("Conv", (t(NCHW), t((3, 2, 3, 3)), t((3,))), {"pads": [1, 1, 1, 1]}),
    Probe("Conv", (t(NCHW), weights((3, 2, 3, 3), "T"), weights((3,), "T")), {"pads": [1, 1, 1, 1]}, tag="const"),
    Probe("Conv", (t(NCHW), t((2, 1, 3, 3))), {"group": 2, "strides": [2, 2]}, tag="depthwise"),
    Probe("Conv", (t(NCHW), weights((2, 1, 3, 3), "T")), {"group": 2}, tag="depthwise-const"),
    Probe("Conv", (t(NCHW), t((4, 2, 1, 1))), {}, tag="pointwise"),
    Probe("Conv", (t((1, 2, 9)), t((3, 2, 3)), t((3,))), {"dilations": [2]}, tag="1d"),
    Probe("ConvNHWC", (t(NHWC), t((3, 3, 2, 4)), t((4,))), {"pads": [1, 1, 1, 1]}),
    Probe("ConvNHWC", (t(NHWC), t((3, 3, 1, 2))), {"group": 2}, tag="depthwise"),
    Probe("ConvTranspose", (t((1, 2, 3, 3)), t((2, 3, 3, 3)), t((3,))), {"strides": [2, 2]}),
    Probe("AveragePool", (t(NCHW),), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    _pool("MaxPool"),
    _pool("LpPool", p=2),
    _pool("MaxPoolIndices"),
    _pool("AveragePoolNHWC", NHWC),
    _pool("MaxPoolNHWC", NHWC),
    Probe("GlobalAveragePool", (t(NCHW),), {}),
    Probe("GlobalMaxPool", (t(NCHW),), {}),
    Probe("GlobalLpPool", (t(NCHW),), {"p": 2}),
    Probe("BatchNormalization", (t(NCHW), t((2,)), t((2,)), t((2,)), t((2,), domain="pos")), {}),
    Probe("InstanceNormalization", (t(NCHW), t((2,)), t((2,))), {}),
    Probe("LRN", (t((1, 4, 3, 3)),), {"size": 3}),
    Probe("Resize", (t((1, 2, 3, 4)), None, c([1.0, 1.0, 2.0, 1.5], "float32")), {"mode": "linear"}),
    Probe("Resize", (t((1, 2, 3, 4)), None, None, c([1, 2, 5, 6])), {"mode": "nearest"}, tag="nearest"),
    Probe("GridSample", (t((1, 2, 4, 5)), t((1, 3, 2, 2), domain="grid")), {}),
    Probe("GridSamplePixels", (t((1, 2, 4, 5)), t((1, 3, 2, 2), domain="pixel")), {}),
    Probe("RoiAlign", (t((1, 2, 6, 6)), In("T", (2, 4), [[0, 0, 3, 3], [1, 2, 5, 4.5]]),
                       In("I", (2,), [0, 0])), {"output_height": 2, "output_width": 2, "sampling_ratio": 2}),
    Probe("BlackmanWindow", (c(8),), {}),
    Probe("HammingWindow", (c(8),), {}),
    Probe("HannWindow", (c(8),), {}),
    Probe("MelWeightMatrix", (c(4), c(16), c(8000), c(0.0, "float32"), c(4000.0, "float32")), {}),
    # ONNX quantization
    Probe("QuantizeLinear", (t(E, "float32"), c(0.05, "float32"), In("X", (), 3)), {}),
    Probe("QuantizeLinear", (t(E), c(0.05, "float32"), In("X", (), 3)), {}, tag="T"),
    Probe("DequantizeLinear", (t(E, "X"), c(0.05, "float32"), In("X", (), 3)), {}),
    Probe("DequantizeLinear", (t(E), c(0.05, "float32")), {}, tag="T"),
    Probe("DynamicQuantizeLinear", (t(E),), {}, outputs=3),
    Probe("ConvInteger", (t(NCHW, "X"), t((3, 2, 3, 3), "W"), In("X", (), 2), In("W", (), 1)), {}),
    Probe("MatMulInteger", (t((3, 5), "X"), t((5, 4), "W"), In("X", (), 2), In("W", (), 1)), {}),
    Probe("QLinearConv", (t(NCHW, "X"), c(0.05, "float32"), In("X", (), 2), t((3, 2, 3, 3), "W"),
                          c(0.02, "float32"), In("W", (), 0), c(0.1, "float32"), In("X", (), 1), t((3,), "Z")),
          {"pads": [1, 1, 1, 1]}),
    Probe("QLinearConv", (t(NCHW, "X"), c(0.05, "float32"), In("X", (), 2), weights((3, 2, 3, 3)),
                          c(0.02, "float32"), In("W", (), 0), c(0.1, "float32"), In("X", (), 1),
                          weights((3,), "Z")), {"pads": [1, 1, 1, 1]}, tag="const"),
    Probe("QLinearMatMul", (t((3, 5), "X"), c(0.05, "float32"), In("X", (), 2), t((5, 4), "W"),
                            c(0.02, "float32"), In("W", (), 0), c(0.1, "float32"), In("X", (), 1)), {}),
    Probe("QLinearAdd", (t(E, "X"), t((7,), "X")),
          {"a_scale": 0.05, "a_zero_point": 1, "b_scale": 0.1, "b_zero_point": 2, "y_scale": 0.2,
           "y_zero_point": 3, "dtype": Slot("X")}),
    Probe("QLinearAveragePool", (t(NCHW, "X"),),
          {"x_scale": 0.05, "x_zero_point": 1, "y_scale": 0.04, "y_zero_point": 2, "dtype": Slot("X"),
           "kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    Probe("QLinearGlobalAveragePool", (t(NCHW, "X"),),
          {"x_scale": 0.05, "x_zero_point": 1, "y_scale": 0.04, "y_zero_point": 2, "dtype": Slot("X")}),
    # TFLite-style quantization (NHWC, per-channel requantization as constant inputs)
    Probe("QConv2D", (t(NHWC, "X"), t((3, 3, 3, 2), "W"), *_requant(3)),
          {"pads": [1, 1, 1, 1], "x_zero_point": 1, **Q_OUT}),
    Probe("QConv2D", (t(NHWC, "X"), weights((3, 3, 3, 2)), *_requant(3)),
          {"pads": [1, 1, 1, 1], "x_zero_point": 1, **Q_OUT}, tag="const"),
    Probe("QDepthwise", (t(NHWC, "X"), weights((1, 3, 3, 2)), *_requant(2)), {"x_zero_point": 1, **Q_OUT},
          tag="const"),
    Probe("QFullyConnected", (t((2, 8), "X"), weights((3, 8)), *_requant(3)), {"x_zero_point": -2, **Q_OUT},
          tag="const"),
    Probe("QDepthwise", (t(NHWC, "X"), t((1, 3, 3, 2), "W"), *_requant(2)),
          {"x_zero_point": 1, **Q_OUT}),
    Probe("QFullyConnected", (t((2, 8), "X"), t((3, 8), "W"), *_requant(3)), {"x_zero_point": -2, **Q_OUT}),
    Probe("QAdd", (t(E, "X"), t((7,), "X")),
          {"a_scale": 0.05, "a_zero_point": 1, "b_scale": 0.1, "b_zero_point": 2, **Q_OUT}),
    Probe("QMul", (t(E, "X"), t((7,), "X")),
          {"a_scale": 0.05, "a_zero_point": 1, "b_scale": 0.1, "b_zero_point": 2, **Q_OUT}),
    Probe("QSub", (t(E, "X"), t((7,), "X")),
          {"a_scale": 0.05, "a_zero_point": 1, "b_scale": 0.1, "b_zero_point": 2, **Q_OUT}),
    Probe("QLeakyRelu", (t(E, "X"),), {"x_scale": 0.05, "x_zero_point": 3, "y_scale": 0.04, "y_zero_point": -1,
                                       "alpha": 0.2}),
    Probe("QAvgPool", (t(NHWC, "X"),), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    Probe("QMaxPool", (t(NHWC, "X"),), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    Probe("QMean", (t(NHWC, "X"),), {"x_scale": 0.05, "x_zero_point": 1, **Q_OUT}),
    Probe("Quantize", (t(E),), {"y_scale": 0.05, "y_zero_point": 3, "dtype": Slot("X")}),
    Probe("Dequantize", (t(E, "X"),), {"x_scale": 0.05, "x_zero_point": 3}),
    Probe("Requantize", (t(E, "X"),), {"x_scale": 0.05, "x_zero_point": 3, "y_scale": 0.08, "y_zero_point": -1,
                                       "dtype": Slot("W")}),
    Probe("QPad", (t(NHWC, "X"),), {"pads": [0, 1, 0, 0, 0, 2, 1, 0], "x_zero_point": 2}),
    Probe("QConcat", (t((2, 3), "X"), t((2, 4), "X")), {"axis": 1}),
    Probe("QSoftmax", (t((2, 10), "X"),), {"x_scale": 0.1}),
    Probe("QLookup", (t(E, "X"), In("W", (256,), [((k * 37) % 256) - 128 for k in range(256)])),
          {"y_scale": 0.02, "y_zero_point": 0}),
    Probe("QSquaredDifference", (t(E, "X"), t((7,), "X")),
          {"a_scale": 0.05, "a_zero_point": 0, "b_scale": 0.1, "b_zero_point": 0, "y_scale": 0.3, "y_zero_point": 0}),
    Probe("QDiv", (t(E, "X"), t((7,), "X")),
          {"a_scale": 0.05, "a_zero_point": 2, "b_scale": 0.1, "b_zero_point": -3, "y_scale": 0.3, "y_zero_point": 1}),
    Probe("QRsqrt", (t(E, "X"),), {"x_scale": 0.05, "x_zero_point": 0, "y_scale": 0.02, "y_zero_point": 0}),
    Probe("QL2Normalization", (t((2, 10), "X"),), {"x_zero_point": 1}),
    Probe("QLogSoftmax", (t((2, 10), "X"),), {"x_scale": 0.1}),
)
