"""TFLite integer operators -> codegen/ops/quantized.py's primitives, doing what TFLite Micro's
Prepare does once per node: explicit pads from SAME/VALID, fused activations as clamps of the
output, and per-channel requantization multipliers (tinsmith.quant.fixed_point) as int32 constants.
Tensors keep TFLite's NHWC layout. Each function converts one operator (see tflite_operators.py)."""
from __future__ import annotations

import numpy as np

from tinsmith.load import tflite_tables as tables
from tinsmith.load.tflite_reader import Reader, Unsupported, options
from tinsmith.quant import activations
from tinsmith.quant import fixed_point as fp
from tinsmith.quant import fixed_point_functions as ff


def requant_constants(r: Reader, x: int, w: int, y: int, hint: str) -> list[str]:
    x_scale, _ = r.scale_zp(x)
    y_scale, _ = r.scale_zp(y)
    mult, shift = fp.conv_multipliers(x_scale, r.required_quant(w).scale, y_scale)
    return [r.add_constant(f"{hint}_multiplier", mult), r.add_constant(f"{hint}_shift", shift)]


def _bias(r: Reader, inputs) -> str:
    return r.value(inputs[2]) if len(inputs) > 2 and inputs[2] >= 0 else ""


# TFLite Micro's 16x8 kernels (int16 activations, int8 weights) sum in the bias's type: int64 with an
# int64 bias, int32 with an int32 one, int64 without a bias. Its depthwise convolution has only the
# int64 path (an int32 bias would be read as int64, so it is refused).
BIAS_TYPES_16X8 = {"QConv2D": ("int32", "int64"), "QFullyConnected": ("int32", "int64"), "QDepthwise": ("int64",)}


def _accumulator(r: Reader, kind: str, x: int, y: int, inputs) -> dict:
    """The accumulator attribute of a convolution or fully connected node: int32 for int8 data; for
    16x8 data TFLite Micro's choice by the bias's type, after checking the zero points it requires."""
    if r.dtype(x) != "int16":
        return {}
    if r.scale_zp(x)[1] != 0 or r.scale_zp(y)[1] != 0:
        raise Unsupported(f"16x8 data with input and output zero points {r.scale_zp(x)[1]} and "
                          f"{r.scale_zp(y)[1]} (TFLite requires 0 for int16 data)")
    if r.dtype(y) != "int16":
        raise Unsupported(f"16x8 data with a {r.dtype(y)} output (TFLite's is int16)")
    if len(inputs) <= 2 or inputs[2] < 0:
        return {"accumulator": "int64"}
    bias = r.dtype(int(inputs[2]))
    if bias not in BIAS_TYPES_16X8[kind]:
        raise Unsupported(f"16x8 data with a {bias} bias (TFLite Micro takes "
                          f"{' or '.join(BIAS_TYPES_16X8[kind])})")
    return {"accumulator": bias}


def conv(r: Reader, op, inputs, outputs, depthwise: bool = False) -> None:
    x, w, y = int(inputs[0]), int(inputs[1]), int(outputs[0])
    opts = options(op, "DepthwiseConv2DOptions" if depthwise else "Conv2DOptions")
    _, kh, kw, _ = r.shape(w)
    dil = (opts.DilationHFactor() or 1, opts.DilationWFactor() or 1)
    y_scale, y_zp = r.scale_zp(y)
    attrs = {"strides": [opts.StrideH(), opts.StrideW()], "dilations": list(dil),
             "pads": r.pads(x, kh, kw, opts, dil), "x_zero_point": r.scale_zp(x)[1], "y_scale": y_scale,
             "y_zero_point": y_zp, **r.act(y, opts.FusedActivationFunction())}
    if depthwise:
        attrs["depth_multiplier"] = r.shape(w)[3] // r.shape(x)[3]
    kind = "QDepthwise" if depthwise else "QConv2D"
    attrs.update(_accumulator(r, kind, x, y, inputs))
    name = r.names[y]
    r.emit(kind,
           [r.value(x), r.value(w), _bias(r, inputs), *requant_constants(r, x, w, y, name)], [name], attrs)


def depthwise(r: Reader, op, inputs, outputs) -> None:
    conv(r, op, inputs, outputs, depthwise=True)


def fully_connected(r: Reader, op, inputs, outputs) -> None:
    x, w, y = int(inputs[0]), int(inputs[1]), int(outputs[0])
    opts = options(op, "FullyConnectedOptions")
    y_scale, y_zp = r.scale_zp(y)
    name = r.names[y]
    attrs = {"x_zero_point": r.scale_zp(x)[1], "y_scale": y_scale, "y_zero_point": y_zp,
             **r.act(y, opts.FusedActivationFunction()), **_accumulator(r, "QFullyConnected", x, y, inputs)}
    rows = int(np.prod(r.shape(x))) // r.shape(w)[1]
    out_shape = r.shape(y)
    target = name if out_shape == (rows, r.shape(w)[0]) else r.fresh(f"{name}_rows")
    r.emit("QFullyConnected", [r.value(x), r.value(w), _bias(r, inputs), *requant_constants(r, x, w, y, name)],
           [target], attrs)
    if target != name:  # keep_num_dims: the rows take the input's leading dimensions back
        r.emit("Reshape", [target, r.int64(f"{name}_shape", out_shape)], [name], {})


# TFLite's quantized binary operators: the primitive and the options table holding the fused activation
BINARY_PRIMITIVES = {"add": ("QAdd", "AddOptions"), "sub": ("QSub", "SubOptions"), "mul": ("QMul", "MulOptions"),
                     "squared_difference": ("QSquaredDifference", None)}


def binary(kind: str):
    primitive, options_table = BINARY_PRIMITIVES[kind]

    def read(r: Reader, op, inputs, outputs) -> None:
        a, b, y = int(inputs[0]), int(inputs[1]), int(outputs[0])
        (_, a_zp), (_, b_zp), (_, y_zp) = r.scale_zp(a), r.scale_zp(b), r.scale_zp(y)
        if r.dtype(a) == "int16" and (a_zp, b_zp, y_zp) != (0, 0, 0):
            raise Unsupported(f"int16 data with zero points {a_zp}, {b_zp} and {y_zp} (TFLite requires 0)")
        activation = options(op, options_table).FusedActivationFunction() if options_table else 0
        _emit_binary(r, primitive, a, b, y, activation)
    return read


def _emit_binary(r: Reader, primitive: str, a: int, b: int, y: int, activation: int) -> None:
    (a_s, a_zp), (b_s, b_zp), (y_s, y_zp) = r.scale_zp(a), r.scale_zp(b), r.scale_zp(y)
    r.emit(primitive, [r.value(a), r.value(b)], [r.names[y]],
           {"a_scale": a_s, "a_zero_point": a_zp, "b_scale": b_s, "b_zero_point": b_zp, "y_scale": y_s,
            "y_zero_point": y_zp, **r.act(y, activation)})


def div_int8(r: Reader, op, inputs, outputs) -> None:
    """int8 DIV as TFLite Micro computes it: a `QDiv`, per element at run time (the offset dividend
    times the offset divisor's fixed-point reciprocal, rescaled; codegen/quant/fixed_point_functions.py),
    the inputs broadcast as DIV's do. The fused activation is its clamp."""
    a, b, y = int(inputs[0]), int(inputs[1]), int(outputs[0])
    if r.dtype(y) != "int8" or r.dtype(b) != "int8":
        raise Unsupported(f"int8 DIV by {r.dtype(b)} to {r.dtype(y)} (TFLite Micro takes int8 throughout)")
    _, shift, real = ff.div_multiplier(r.scale_zp(a)[0], r.scale_zp(b)[0], r.scale_zp(y)[0])
    if shift > ff.DIV_MAX_SHIFT:
        raise Unsupported(f"int8 DIV with a scale ratio a_scale / (b_scale y_scale) of {real:g} (TFLite's kernel "
                          f"shifts its quotient right only, which needs a ratio below 2^{ff.DIV_MAX_SHIFT})")
    _emit_binary(r, "QDiv", a, b, y, options(op, "DivOptions").FusedActivationFunction())


def pool(kind: str):
    def read(r: Reader, op, inputs, outputs) -> None:
        y = int(outputs[0])
        attrs, code = r.pool_window(int(inputs[0]), op)
        r.emit(kind, [r.value(inputs[0])], [r.names[y]], {**attrs, **r.act(y, code)})
    return read


def mean(r: Reader, op, inputs, outputs) -> None:
    x, y = int(inputs[0]), int(outputs[0])
    axes = sorted(int(a) % 4 for a in np.atleast_1d(r.constant_data(inputs[1], "MEAN's axes")))
    if len(r.shape(x)) != 4 or axes != [1, 2]:
        raise Unsupported(f"{r.dtype(x)} MEAN over axes {axes} (only over H and W of NHWC data)")
    (x_s, x_zp), (y_s, y_zp) = r.scale_zp(x), r.scale_zp(y)
    attrs = {"x_scale": x_s, "x_zero_point": x_zp, "y_scale": y_s, "y_zero_point": y_zp, **r.act(y, 0)}
    if len(r.shape(y)) == 4:
        r.emit("QMean", [r.value(x)], [r.names[y]], attrs)
    else:
        pooled = r.fresh(r.names[y] + "_pooled")
        r.emit("QMean", [r.value(x)], [pooled], attrs)
        r.emit("Reshape", [pooled, r.int64(f"{r.names[y]}_shape", r.shape(y))], [r.names[y]], {})


def softmax(r: Reader, op, inputs, outputs) -> None:
    x, y = int(inputs[0]), int(outputs[0])
    opts = options(op, "SoftmaxOptions")
    (x_s, _), (y_s, y_zp) = r.scale_zp(x), r.scale_zp(y)
    r.emit("QSoftmax", [r.value(x)], [r.names[y]], {"beta": float(opts.Beta()), "x_scale": x_s,
                                                    "y_scale": y_s, "y_zero_point": y_zp})


def quantize(r: Reader, op, inputs, outputs) -> None:
    x, y = int(inputs[0]), int(outputs[0])
    y_s, y_zp = r.scale_zp(y)
    if r.dtype(x) == "float32":
        r.emit("Quantize", [r.value(x)], [r.names[y]], {"y_scale": y_s, "y_zero_point": y_zp, "dtype": r.dtype(y)})
    else:
        x_s, x_zp = r.scale_zp(x)
        r.emit("Requantize", [r.value(x)], [r.names[y]], {"x_scale": x_s, "x_zero_point": x_zp, "y_scale": y_s,
                                                          "y_zero_point": y_zp, "dtype": r.dtype(y)})


def relu(activation: str):
    def read(r: Reader, op, inputs, outputs) -> None:
        """TFLite's int8 RELU: the input rescaled to the output and clamped to the activation's
        range (TFLite Micro's ReluQuantized)."""
        x, y = int(inputs[0]), int(outputs[0])
        (x_s, x_zp), (y_s, y_zp) = r.scale_zp(x), r.scale_zp(y)
        lo, hi = fp.activation_range(activation, y_s, y_zp, r.integer_dtype(y))
        r.emit("Requantize", [r.value(x)], [r.names[y]], {"x_scale": x_s, "x_zero_point": x_zp, "y_scale": y_s,
                                                          "y_zero_point": y_zp, "dtype": r.dtype(y),
                                                          "act_min": lo, "act_max": hi})
    return read


def dequantize(r: Reader, op, inputs, outputs) -> None:
    x, y = int(inputs[0]), int(outputs[0])
    x_s, x_zp = r.scale_zp(x)
    r.emit("Dequantize", [r.value(x)], [r.names[y]], {"x_scale": x_s, "x_zero_point": x_zp})


def pad(r: Reader, op, inputs, outputs) -> None:
    x, y = int(inputs[0]), int(outputs[0])
    widths = np.asarray(r.constant_data(inputs[1], "PAD's paddings")).reshape(-1, 2)
    r.emit("QPad", [r.value(x)], [r.names[y]],
           {"pads": [int(v) for v in widths[:, 0]] + [int(v) for v in widths[:, 1]], "x_zero_point": r.scale_zp(x)[1]})


def concat(r: Reader, op, inputs, outputs) -> None:
    opts = options(op, "ConcatenationOptions")
    if opts.FusedActivationFunction():
        raise Unsupported("int8 CONCATENATION with a fused activation")
    r.emit("QConcat", [r.value(i) for i in inputs], [r.names[int(outputs[0])]], {"axis": int(opts.Axis())})


def table_function(function: str):
    def read(r: Reader, op, inputs, outputs) -> None:
        """TFLite's int8 LOGISTIC / TANH: TFLite Micro's fixed-point function of every int8 input,
        tabulated at import (codegen/quant/activations.py) and looked up per element."""
        x, y = int(inputs[0]), int(outputs[0])
        (x_s, x_zp), (y_s, y_zp) = r.scale_zp(x), r.scale_zp(y)
        want = activations.OUTPUT_QUANT[function]
        if (np.float32(y_s), y_zp) != (np.float32(want[0]), want[1]):
            raise Unsupported(f"{function.upper()} with output scale {y_s} and zero point {y_zp} (TFLite "
                              f"requires {want[0]} and {want[1]})")
        table = r.add_constant(f"{r.names[y]}_table", activations.int8_table(function, x_s, x_zp))
        r.emit("QLookup", [r.value(x), table], [r.names[y]], {"y_scale": y_s, "y_zero_point": y_zp})
    return read


def relu6(r: Reader, op, inputs, outputs) -> None:
    """TFLite Micro's int8 RELU6: the input's integers clamped to its zero point and to 6 in its
    quantization (zero point + round(6 / scale), saturated), not rescaled to the output's."""
    x, y = int(inputs[0]), int(outputs[0])
    scale, zp = r.scale_zp(x)
    lo_limit, hi_limit = fp.DTYPE_RANGES[r.integer_dtype(x)]
    six = min(max(zp + int(np.floor(6.0 / scale + 0.5)), lo_limit), hi_limit)
    r.emit("Clip", [r.value(x)], [r.names[y]], {"min": float(zp), "max": float(six)})


def table(function):
    def read(r: Reader, op, inputs, outputs) -> None:
        """An int8 function of one input as a QLookup of its table (tflite_tables.py)."""
        x, y = int(inputs[0]), int(outputs[0])
        if r.integer_dtype(y) != "int8":
            raise Unsupported(f"an int8 input with a {r.dtype(y)} output")
        (x_s, x_zp), (y_s, y_zp) = r.scale_zp(x), r.scale_zp(y)
        values = function(r, op, x_s, x_zp, y_s, y_zp)
        r.emit("QLookup", [r.value(x), r.add_constant(f"{r.names[y]}_table", values)], [r.names[y]],
               {"y_scale": y_s, "y_zero_point": y_zp})
    return read


leaky_relu = table(lambda r, op, *quant: tables.leaky_relu(*quant, options(op, "LeakyReluOptions").Alpha()))


def leaky_relu_int16(r: Reader, op, inputs, outputs) -> None:
    """TFLite's int16 LEAKY_RELU, per element (QLeakyRelu; int8 takes its table instead)."""
    x, y = int(inputs[0]), int(outputs[0])
    (x_s, x_zp), (y_s, y_zp) = r.scale_zp(x), r.scale_zp(y)
    if r.dtype(y) != "int16":
        raise Unsupported(f"an int16 input with a {r.dtype(y)} output")
    r.emit("QLeakyRelu", [r.value(x)], [r.names[y]], {"x_scale": x_s, "x_zero_point": x_zp, "y_scale": y_s,
                                                      "y_zero_point": y_zp,
                                                      "alpha": float(options(op, "LeakyReluOptions").Alpha())})
hard_swish = table(lambda r, op, *quant: tables.hard_swish(*quant))
abs_ = table(lambda r, op, *quant: tables.abs_(*quant))
rsqrt_int8 = table(lambda r, op, *quant: tables.rsqrt(*quant))
elu = table(lambda r, op, *quant: tables.elu(*quant))
gelu = table(lambda r, op, *quant: tables.gelu(*quant, bool(options(op, "GeluOptions").Approximate())))


def rsqrt_int16(r: Reader, op, inputs, outputs) -> None:
    """TFLite's int16 RSQRT, per element (QRsqrt; int8 takes its table, tflite_tables.rsqrt)."""
    x, y = int(inputs[0]), int(outputs[0])
    (x_s, x_zp), (y_s, y_zp) = r.scale_zp(x), r.scale_zp(y)
    if r.dtype(y) != "int16":
        raise Unsupported(f"an int16 input with a {r.dtype(y)} output")
    if (x_zp, y_zp) != (0, 0):
        raise Unsupported(f"int16 data with zero points {x_zp} and {y_zp} (TFLite Micro requires 0)")
    r.emit("QRsqrt", [r.value(x)], [r.names[y]], {"x_scale": x_s, "x_zero_point": x_zp, "y_scale": y_s,
                                                  "y_zero_point": y_zp})


def l2_normalization(r: Reader, op, inputs, outputs) -> None:
    """TFLite's int8 L2_NORMALIZATION over the last axis (QL2Normalization): the outputs are Q0.7
    whatever the output tensor's quantization, as TFLite Micro computes them."""
    x, y = int(inputs[0]), int(outputs[0])
    if r.dtype(y) != "int8":
        raise Unsupported(f"an int8 input with a {r.dtype(y)} output")
    if options(op, "L2NormOptions").FusedActivationFunction():
        raise Unsupported("a fused activation (TFLite Micro takes none)")
    if len(r.shape(x)) > 4:
        raise Unsupported(f"int8 data of rank {len(r.shape(x))} (TFLite Micro takes rank 4 at most)")
    y_s, y_zp = r.scale_zp(y)
    r.emit("QL2Normalization", [r.value(x)], [r.names[y]],
           {"x_zero_point": r.scale_zp(x)[1], "y_scale": y_s, "y_zero_point": y_zp})


def log_softmax(r: Reader, op, inputs, outputs) -> None:
    """TFLite's int8 LOG_SOFTMAX over the last axis (QLogSoftmax); its output is quantized at 16/256
    with zero point 127, which TFLite Micro requires."""
    x, y = int(inputs[0]), int(outputs[0])
    if r.dtype(y) != "int8":
        raise Unsupported(f"an int8 input with a {r.dtype(y)} output")
    y_s, y_zp = r.scale_zp(y)
    want_scale, want_zp = ff.LOG_SOFTMAX_OUTPUT_QUANT
    if (np.float32(y_s), y_zp) != (np.float32(want_scale), want_zp):
        raise Unsupported(f"int8 LOG_SOFTMAX with output scale {y_s} and zero point {y_zp} (TFLite requires "
                          f"{want_scale} and {want_zp})")
    x_s = r.scale_zp(x)[0]
    if not ff.log_softmax_scale_fits(x_s):
        raise Unsupported(f"int8 LOG_SOFTMAX with input scale {x_s} (TFLite Micro's Prepare stops on scales up to "
                          f"2^-26: its reverse multiplier would not be below 1)")
    r.emit("QLogSoftmax", [r.value(x)], [r.names[y]], {"x_scale": x_s})
