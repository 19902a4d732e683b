"""Quantized primitives with TensorFlow Lite's integer semantics, on NHWC data as TFLite lays it out.

Each node carries every number its arithmetic needs as attributes (zero points, scales,
activation clamps), so it is self-contained like an ONNX QLinear op; the scales and zero points
also type its output (a quantized TensorType), and must agree with its inputs' declared
quantization. Convolutions and fully connected layers take their per-channel requantization
(multiplier, shift) as int32 constant inputs, as TFLite Micro's Prepare stores them: they are
data indexed by output channel. tinsmith.quant.fixed_point computes them and defines every
rounding; these references and the generated kernels follow it step by step.
"""
from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ir.graph import Quant
from tinsmith.ops.common import broadcast_shapes, normalize_axis
from tinsmith.ops.conv import Window
from tinsmith.ops.pooling import pool_facts
from tinsmith.ops.registry import Attr, InferArgs, OpError, Pattern, define, elementwise_facts
from tinsmith.quant import fixed_point as fp
from tinsmith.quant import fixed_point_functions as ff
from tinsmith.quant.fixed_point import DTYPE_RANGES

INTS = ("int8", "uint8", "int16")
# act_min / act_max: the output clamp (a fused activation); left out (None), the output type's
# range, so an int16 node written without them is not clamped to int8's (output_clamp)
Y_ATTRS = [Attr("y_scale", "float"), Attr("y_zero_point", "int", 0), Attr("act_min", "int", None),
           Attr("act_max", "int", None)]
WINDOW_ATTRS = [Attr("strides", "ints", (1, 1)), Attr("dilations", "ints", (1, 1)),
                Attr("pads", "ints", (0, 0, 0, 0))]  # top, left, bottom, right


def _quantized_input(args: InferArgs, i: int, zero_point_attr: str | None, scale_attr: str | None = None,
                     dtypes: Sequence[str] = INTS) -> TensorType:
    """Input `i`, checked to be integer data whose declared quantization (if any) matches the attributes."""
    t = args.types[i]
    if t.dtype not in dtypes:
        raise OpError(f"input {i} has element type {t.dtype}, expected {' or '.join(dtypes)}", input=i)
    q = t.quant
    if q is not None and not q.per_axis:
        if zero_point_attr and q.zero_point[0] != args.attrs[zero_point_attr]:
            raise OpError(f"input {i} has zero point {q.zero_point[0]} but {zero_point_attr} is "
                          f"{args.attrs[zero_point_attr]}", attr=zero_point_attr)
        if scale_attr and np.float32(q.scale[0]) != np.float32(args.attrs[scale_attr]):
            raise OpError(f"input {i} has scale {q.scale[0]} but {scale_attr} is {args.attrs[scale_attr]}",
                          attr=scale_attr)
    return t


def output_clamp(attrs, dtype: str) -> tuple[int, int]:
    """(act_min, act_max) of a node whose output is `dtype`: each one left out is that type's end."""
    lo, hi = DTYPE_RANGES[dtype]
    return (lo if attrs.get("act_min") is None else attrs["act_min"],
            hi if attrs.get("act_max") is None else attrs["act_max"])


def _out_type(args: InferArgs, shape: Sequence[int], dtype: str = "int8") -> TensorType:
    a = args.attrs
    lo, hi = DTYPE_RANGES[dtype]
    act_min, act_max = output_clamp(a, dtype)
    if "act_min" in a and not lo <= act_min <= act_max <= hi:
        raise OpError(f"act_min..act_max ({act_min}..{act_max}) must lie in {lo}..{hi}", attr="act_min")
    if not lo <= a["y_zero_point"] <= hi:
        raise OpError(f"y_zero_point {a['y_zero_point']} is outside {dtype}'s range", attr="y_zero_point")
    if not a["y_scale"] > 0:
        raise OpError(f"y_scale must be positive, got {a['y_scale']}", attr="y_scale")
    return TensorType(dtype, tuple(int(d) for d in shape), Quant((a["y_scale"],), (a["y_zero_point"],)))


ACCUMULATOR = Attr("accumulator", "string", "int32", ("int32", "int64"))
"""What a convolution or fully connected layer sums in: int32 (TFLite's int8 kernels, and its 16x8
ones with an int32 bias) or int64 (TFLite's 16x8 kernels with an int64 bias: the bias is int64 too,
and the sums are requantized by TFLite's 64-bit MultiplyByQuantizedMultiplier, see
fixed_point.multiply_by_quantized_multiplier_int64)."""

REQUANTIZE = Attr("requantize", "string", "fixed_point", ("fixed_point", "float", "none"))
"""How a convolution's or fully connected layer's int32 sums become outputs: "fixed_point" (TFLite:
inputs 3 and 4 are the int32 multipliers and shifts), "float" (ONNX's QLinearConv and
QLinearMatMul: input 3 is the float32 scale (x_scale * w_scale) / y_scale, float32(acc) * scale
is rounded half to even, and input 4 is omitted) or "none" (ONNX's ConvInteger and MatMulInteger:
the int32 sums are the output; inputs 3 and 4 are omitted, the y_ attributes unused)."""


def _requant_inputs(args: InferArgs, first: int, channels: int) -> None:
    """Inputs first..first+2: bias (int32 [C], optional), then multiplier and shift (int32 [C] or
    [1]), or with float requantization the scale (float32 [C] or [1]) and no shift."""
    if len(args.types) != first + 3:  # (positions matter: "" stands for an omitted one)
        raise OpError(f"takes {first + 3} inputs: x, weights, bias, multiplier (or scale), shift; \"\" for "
                      f"one omitted", input=min(len(args.types), first + 2))
    types, values = args.types, args.values
    b = types[first]
    acc = args.attrs["accumulator"]
    if b is not None and (b.dtype != acc or b.shape != (channels,)):
        raise OpError(f"the bias must be {acc}[{channels}] (the accumulator's type), got {b}", input=first)
    if acc == "int64" and (types[0].dtype != "int16" or args.attrs["requantize"] != "fixed_point"):
        raise OpError("an int64 accumulator serves int16 activations with fixed-point requantization (TFLite's "
                      "16x8 kernels)", attr="accumulator")
    wanted = {"float": ((first + 1, "scale", "float32"),), "none": (),
              "fixed_point": ((first + 1, "multiplier", "int32"), (first + 2, "shift", "int32")),
              }[args.attrs["requantize"]]
    for i, what, dtype in wanted:
        t = types[i]
        if t is None or t.dtype != dtype or t.shape not in ((channels,), (1,)):
            raise OpError(f"the {what} must be {dtype}[{channels}] or {dtype}[1], got {t}", input=i)
        if values[i] is None:
            raise OpError(f"the {what} must be a constant", input=i)
    for i in range(first + 1 + len(wanted), first + 3):
        if types[i] is not None:
            raise OpError(f"requantize {args.attrs['requantize']} takes no input {i}", input=i)


def _sums_type(args: InferArgs, shape: Sequence[int]) -> TensorType:
    """The output type of a convolution or fully connected layer: the int32 sums themselves
    (requantize none), else int16 for int16 activations (TFLite's 16x8 scheme) or int8, quantized
    by the y_ attributes."""
    if args.attrs["requantize"] == "none":
        return TensorType("int32", tuple(int(d) for d in shape))
    return _out_type(args, shape, "int16" if args.types[0].dtype == "int16" else "int8")


# --- windows (NHWC, explicit pads) ----------------------------------------------------------
def out_size(in_size: int, kernel: int, stride: int, dilation: int, pad_begin: int, pad_end: int) -> int:
    return (in_size + pad_begin + pad_end - dilation * (kernel - 1) - 1) // stride + 1


def window_shape(args: InferArgs, kh: int, kw: int) -> tuple[int, int]:
    """Output height and width of a window op, after checking its attributes."""
    a = args.attrs
    for name, count in (("strides", 2), ("dilations", 2), ("pads", 4)):
        if len(a[name]) != count:
            raise OpError(f"{name} must have {count} values, got {list(a[name])}", attr=name)
    if min(a["strides"]) < 1 or min(a["dilations"]) < 1 or min(a["pads"]) < 0:
        raise OpError("strides and dilations must be positive and pads not negative", attr="strides")
    _, h, w, _ = args.types[0].shape
    oh = out_size(h, kh, a["strides"][0], a["dilations"][0], a["pads"][0], a["pads"][2])
    ow = out_size(w, kw, a["strides"][1], a["dilations"][1], a["pads"][1], a["pads"][3])
    if oh < 1 or ow < 1:
        raise OpError(f"the window does not fit the input ({h}x{w} with a {kh}x{kw} window)")
    return oh, ow


def _rank4(args: InferArgs, i: int = 0) -> None:
    if args.types[i].rank != 4:
        raise OpError(f"input {i} must be NHWC (rank 4), got {args.types[i]}", input=i)


def window_taps(x: np.ndarray, attrs, kh: int, kw: int, pad_value: int):
    """For each (dy, dx) tap: the NHWC input values under it for every output position, with
    `pad_value` outside the input, and a mask of the real (inside) positions."""
    n, h, w, c = x.shape
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilations"]
    pt, pl, pb, pr = attrs["pads"]
    oh = out_size(h, kh, sh, dh, pt, pb)
    ow = out_size(w, kw, sw, dw, pl, pr)
    for ky, kx in itertools.product(range(kh), range(kw)):
        iy = np.arange(oh) * sh - pt + ky * dh
        ix = np.arange(ow) * sw - pl + kx * dw
        inside = ((iy >= 0) & (iy < h))[:, None] & ((ix >= 0) & (ix < w))[None, :]
        v = x[:, np.clip(iy, 0, h - 1)][:, :, np.clip(ix, 0, w - 1)]
        yield ky, kx, np.where(inside[None, :, :, None], v, pad_value), inside


def _requantize(acc, mult, shift, attrs, dtype="int8") -> np.ndarray:
    if attrs.get("accumulator") == "int64":  # TFLite's 16x8 kernels with an int64 bias
        # (TFLite casts the 64-bit result to int32 before adding the zero point)
        y = fp.wrap_int32(fp.multiply_by_quantized_multiplier_int64(acc, mult, shift)) + attrs["y_zero_point"]
        return fp.saturate(y, dtype, attrs["act_min"], attrs["act_max"])
    if attrs.get("requantize") == "none":
        return fp.wrap_int32(acc).astype(np.int32)
    if attrs.get("requantize") == "float":  # ONNX's: float32(acc) * scale, ties to even
        v = (fp.wrap_int32(acc).astype(np.int32).astype(np.float32) * np.asarray(mult, np.float32)).astype(np.float32)
        return fp.saturate(np.rint(v.astype(np.float64)) + attrs["y_zero_point"], dtype, attrs["act_min"],
                           attrs["act_max"])
    y = fp.multiply_by_quantized_multiplier(fp.wrap_int32(acc), mult, shift) + attrs["y_zero_point"]
    return fp.saturate(y, dtype, attrs["act_min"], attrs["act_max"])


def _out_dtype(x: np.ndarray) -> str:
    """A convolution's or fully connected layer's output type: int16 for int16 activations."""
    return "int16" if x.dtype == np.int16 else "int8"


# --- QConv2D ----------------------------------------------------------------------------------
def _infer_conv(args: InferArgs) -> list[TensorType]:
    _rank4(args)
    _quantized_input(args, 0, "x_zero_point")
    w = args.types[1]
    if w.dtype != "int8" or w.rank != 4 or w.shape[3] != args.types[0].shape[3]:
        raise OpError(f"weights must be int8 [O, KH, KW, {args.types[0].shape[3]}], got {w}", input=1)
    _requant_inputs(args, 2, w.shape[0])
    oh, ow = window_shape(args, w.shape[1], w.shape[2])
    return [_sums_type(args, (args.types[0].shape[0], oh, ow, w.shape[0]))]


def _conv_reference(xs, attrs):
    x, w, b, mult, shift = xs
    acc = np.zeros((x.shape[0],) + _out_hw(x, w.shape[1], w.shape[2], attrs) + (w.shape[0],), np.int64)
    wi = w.astype(np.int64)
    for ky, kx, v, _ in window_taps(x.astype(np.int64) - attrs["x_zero_point"], attrs, w.shape[1], w.shape[2], 0):
        acc += v @ wi[:, ky, kx, :].T
    if b is not None:
        acc += b.astype(np.int64)
    return [_requantize(acc, mult, shift, attrs, _out_dtype(x))]


def _out_hw(x, kh, kw, attrs) -> tuple[int, int]:
    return (out_size(x.shape[1], kh, attrs["strides"][0], attrs["dilations"][0], attrs["pads"][0], attrs["pads"][2]),
            out_size(x.shape[2], kw, attrs["strides"][1], attrs["dilations"][1], attrs["pads"][1], attrs["pads"][3]))


def _conv_macs(args, outs) -> int:
    w = args.types[1]
    return outs[0].size * w.shape[1] * w.shape[2] * w.shape[3]


def _weight_sums(args: InferArgs, outputs) -> dict:
    """Each output channel's sum of its (constant) weights: with it a kernel may fold the input
    zero point into the bias, sum((x - zp) * w) + b = sum(x * w) + (b - zp * sum(w)). And whether
    the sums of int16 inputs fit int32 (int16_sums_fit_int32)."""
    w = args.values[1]
    if w is None:
        return {}
    return {"weight_sums": w.reshape(w.shape[0], -1).astype(np.int64).sum(axis=1),
            "int16_sums_fit_int32": _int16_sums_fit_int32(np.abs(w.reshape(w.shape[0], -1).astype(np.int64)).sum(axis=1)),
            **_int16_requantization(args)}


def _int16_sums_fit_int32(magnitude_sums: np.ndarray) -> bool:
    """Whether every output channel's sum of int16 inputs times its weights stays inside int32
    whatever the inputs: |x| <= 2^15, so sum |w| * 2^15 < 2^31 (from the constant weights'
    per-channel sums of magnitudes). Then a 16x8 kernel with an int64 accumulator may sum in 32-bit
    multiply-accumulates and widen once."""
    return int(magnitude_sums.max(initial=0)) << 15 < 1 << 31


def _depthwise_facts(args: InferArgs, outputs) -> dict:
    """int16_sums_fit_int32 of a depthwise convolution's constant [1, KH, KW, O] weights."""
    w = args.values[1]
    if w is None:
        return {}
    return {"int16_sums_fit_int32": _int16_sums_fit_int32(np.abs(w.reshape(-1, w.shape[-1]).astype(np.int64)).sum(axis=0)),
            **_int16_requantization(args)}


def _int16_requantization(args: InferArgs) -> dict:
    """With an int64 accumulator, a bias and per-channel multipliers: TFLite's 64-bit requantization
    (acc + bias) * q15 + 2^(t - 1) >> t (t = 15 - shift) as sum * q15 + offset, whose per-channel
    offset = bias * q15 + 2^(t - 1) is computed here once (wrapping as int64 arithmetic does, so
    the result is the same bit for bit). The result fits 32 bits, so the 64-bit shift is 32-bit
    ones: of the high word by t - 32 when every t >= 32 (`high`), else of both words by t when
    every t < 32 (fact int16_requantization: offset, q15, shift, high)."""
    a, values = args.attrs, args.values
    if a.get("accumulator") != "int64" or any(v is None for v in values[2:5]) or values[3].size == 1:
        return {}
    q15 = fp.reduced_multiplier(values[3].reshape(-1))
    total = 15 - values[4].reshape(-1).astype(np.int64)
    high = bool(total.min() >= 32)
    if not high and total.max() >= 32:
        return {}
    with np.errstate(over="ignore"):
        offset = values[2].astype(np.int64) * q15 + (np.int64(1) << (total - 1))
    return {"int16_requantization": {"offset": offset, "q15": q15.astype(np.int32), "high": high,
                                     "shift": (total - 32 if high else total).astype(np.int32)}}


define("QConv2D", inputs=(2, 5), infer=_infer_conv, reference=_conv_reference, macs=_conv_macs,
       prepare=_weight_sums, constant_inputs=(3, 4), attrs=WINDOW_ATTRS + [Attr("x_zero_point", "int", 0), REQUANTIZE, ACCUMULATOR] + Y_ATTRS)


# --- QDepthwise -------------------------------------------------------------------------------
def _infer_depthwise(args: InferArgs) -> list[TensorType]:
    _rank4(args)
    _quantized_input(args, 0, "x_zero_point")
    c = args.types[0].shape[3]
    m = args.attrs["depth_multiplier"]
    w = args.types[1]
    if w.dtype != "int8" or w.rank != 4 or w.shape[0] != 1 or w.shape[3] != c * m:
        raise OpError(f"weights must be int8 [1, KH, KW, {c * m}], got {w}", input=1)
    _requant_inputs(args, 2, c * m)
    oh, ow = window_shape(args, w.shape[1], w.shape[2])
    return [_sums_type(args, (args.types[0].shape[0], oh, ow, c * m))]


def _depthwise_reference(xs, attrs):
    x, w, b, mult, shift = xs
    m = attrs["depth_multiplier"]
    xi = np.repeat(x.astype(np.int64) - attrs["x_zero_point"], m, axis=3)  # output channel c*m+j reads c
    acc = np.zeros((x.shape[0],) + _out_hw(x, w.shape[1], w.shape[2], attrs) + (w.shape[3],), np.int64)
    for ky, kx, v, _ in window_taps(xi, attrs, w.shape[1], w.shape[2], 0):
        acc += v * w[0, ky, kx, :].astype(np.int64)
    if b is not None:
        acc += b.astype(np.int64)
    return [_requantize(acc, mult, shift, attrs, _out_dtype(x))]


define("QDepthwise", inputs=(2, 5), infer=_infer_depthwise, reference=_depthwise_reference, prepare=_depthwise_facts,
       macs=lambda args, outs: outs[0].size * args.types[1].shape[1] * args.types[1].shape[2],
       constant_inputs=(3, 4),
       attrs=WINDOW_ATTRS + [Attr("depth_multiplier", "int", 1), Attr("x_zero_point", "int", 0), REQUANTIZE,
                         ACCUMULATOR] + Y_ATTRS)


# --- QFullyConnected --------------------------------------------------------------------------
def _infer_fc(args: InferArgs) -> list[TensorType]:
    x = _quantized_input(args, 0, "x_zero_point")
    w = args.types[1]
    if w.dtype != "int8" or w.rank != 2 or x.size % w.shape[1]:
        raise OpError(f"weights must be int8 [O, K] with K dividing the input's {x.size} elements, got {w}",
                      input=1)
    _requant_inputs(args, 2, w.shape[0])
    return [_sums_type(args, (x.size // w.shape[1], w.shape[0]))]


def _fc_reference(xs, attrs):
    x, w, b, mult, shift = xs
    rows = x.reshape(-1, w.shape[1]).astype(np.int64) - attrs["x_zero_point"]
    acc = rows @ w.astype(np.int64).T
    if b is not None:
        acc += b.astype(np.int64)
    return [_requantize(acc, mult, shift, attrs, _out_dtype(x))]


define("QFullyConnected", inputs=(2, 5), infer=_infer_fc, reference=_fc_reference, prepare=_weight_sums,
       macs=lambda args, outs: outs[0].size * args.types[1].shape[1], constant_inputs=(3, 4),
       attrs=[Attr("x_zero_point", "int", 0), REQUANTIZE, ACCUMULATOR] + Y_ATTRS)


# --- QAdd, QSub, QMul -------------------------------------------------------------------------
BINARY_ATTRS = [Attr("a_scale", "float"), Attr("a_zero_point", "int", 0), Attr("b_scale", "float"),
                Attr("b_zero_point", "int", 0)] + Y_ATTRS
ELEMENTWISE_INTS = ("int8", "int16")  # TFLite's int8 and 16x8 elementwise kernels


def _infer_binary(args: InferArgs) -> list[TensorType]:
    a = _quantized_input(args, 0, "a_zero_point", "a_scale", ELEMENTWISE_INTS)
    b = _quantized_input(args, 1, "b_zero_point", "b_scale", ELEMENTWISE_INTS)
    if b.dtype != a.dtype:
        raise OpError(f"input 1 is {b.dtype} but input 0 is {a.dtype}; both must be one type", input=1)
    if a.dtype == "int16":  # TFLite's int16 arithmetic is symmetric: its int32 intermediates need it
        for name in ("a_zero_point", "b_zero_point", "y_zero_point"):
            if args.attrs[name] != 0:
                raise OpError(f"{name} must be 0 for int16 data, got {args.attrs[name]}", attr=name)
    return [_out_type(args, broadcast_shapes([a.shape, b.shape]), a.dtype)]


def add_params(attrs, dtype: str = "int8") -> dict[str, int]:
    """QAdd's and QSub's fixed-point parameters from their scales (TFLite's ADD and SUB Prepare:
    inputs raised by 2^20 for int8 data, 2^15 for int16)."""
    return fp.add_multipliers(attrs["a_scale"], attrs["b_scale"], attrs["y_scale"], fp.ADD_LEFT_SHIFTS[dtype])


def _add_or_sub_reference(sign: int):
    def reference(xs, attrs):
        p = add_params(attrs, xs[0].dtype.name)
        a = (xs[0].astype(np.int64) - attrs["a_zero_point"]) << p["left_shift"]
        b = (xs[1].astype(np.int64) - attrs["b_zero_point"]) << p["left_shift"]
        a = fp.multiply_by_quantized_multiplier(a, p["a_multiplier"], p["a_shift"])
        b = fp.multiply_by_quantized_multiplier(b, p["b_multiplier"], p["b_shift"])
        return [_requantize(a + sign * b, p["y_multiplier"], p["y_shift"], attrs, xs[0].dtype.name)]
    return reference


def mul_params(attrs) -> tuple[int, int]:
    """QMul's (multiplier, shift): a_scale * b_scale / y_scale."""
    real = fp.as_float32(attrs["a_scale"]) * fp.as_float32(attrs["b_scale"]) / fp.as_float32(attrs["y_scale"])
    return fp.quantize_multiplier(real)


def _mul_reference(xs, attrs):
    mult, shift = mul_params(attrs)
    prod = (xs[0].astype(np.int64) - attrs["a_zero_point"]) * (xs[1].astype(np.int64) - attrs["b_zero_point"])
    return [_requantize(prod, mult, shift, attrs, xs[0].dtype.name)]


define("QAdd", inputs=2, infer=_infer_binary, reference=_add_or_sub_reference(1), attrs=BINARY_ATTRS,
       pattern=Pattern.BROADCAST)
# a - b: TFLite's SUB, QAdd's arithmetic with b's rescaled value subtracted
define("QSub", inputs=2, infer=_infer_binary, reference=_add_or_sub_reference(-1), attrs=BINARY_ATTRS,
       pattern=Pattern.BROADCAST)
define("QMul", inputs=2, infer=_infer_binary, reference=_mul_reference, attrs=BINARY_ATTRS,
       pattern=Pattern.BROADCAST)


SQUARED_DIFFERENCE_LEFT_SHIFTS = {"int8": 7, "int16": 0}  # (255 << 7)^2 and 32767^2 stay below 2^31


def squared_difference_params(attrs, dtype: str = "int8") -> dict[str, int]:
    """QSquaredDifference's fixed-point parameters (TFLite's SQUARED_DIFFERENCE Prepare)."""
    return ff.squared_difference_multipliers(attrs["a_scale"], attrs["b_scale"], attrs["y_scale"],
                                             SQUARED_DIFFERENCE_LEFT_SHIFTS[dtype])


def _squared_difference_reference(xs, attrs):
    p = squared_difference_params(attrs, xs[0].dtype.name)
    a = (xs[0].astype(np.int64) - attrs["a_zero_point"]) << p["left_shift"]
    b = (xs[1].astype(np.int64) - attrs["b_zero_point"]) << p["left_shift"]
    diff = (fp.multiply_by_quantized_multiplier(a, p["a_multiplier"], p["a_shift"])
            - fp.multiply_by_quantized_multiplier(b, p["b_multiplier"], p["b_shift"]))
    return [_requantize(diff * diff, p["y_multiplier"], p["y_shift"], attrs, xs[0].dtype.name)]


# (a - b)^2: TFLite's SQUARED_DIFFERENCE, both inputs rescaled as QAdd's, the difference squared in
# int32 and requantized
define("QSquaredDifference", inputs=2, infer=_infer_binary, reference=_squared_difference_reference,
       attrs=BINARY_ATTRS, pattern=Pattern.BROADCAST)


# --- pools ------------------------------------------------------------------------------------
POOL_ATTRS = [Attr("kernel_shape", "ints"), Attr("strides", "ints", (1, 1)), Attr("pads", "ints", (0, 0, 0, 0)),
              Attr("act_min", "int", None), Attr("act_max", "int", None)]  # (None: the data type's end)


def _infer_pool(args: InferArgs) -> list[TensorType]:
    _rank4(args)
    x = _quantized_input(args, 0, None, dtypes=ELEMENTWISE_INTS)
    k = args.attrs["kernel_shape"]
    if len(k) != 2 or min(k) < 1:
        raise OpError(f"kernel_shape must be two positive sizes, got {list(k)}", attr="kernel_shape")
    lo, hi = DTYPE_RANGES[x.dtype]
    act_min, act_max = output_clamp(args.attrs, x.dtype)
    if not lo <= act_min <= act_max <= hi:
        raise OpError("act_min..act_max must lie in the input type's range", attr="act_min")
    oh, ow = window_shape(_with_dilations(args), *k)
    return [TensorType(x.dtype, (x.shape[0], oh, ow, x.shape[3]), x.quant)]


def _with_dilations(args: InferArgs) -> InferArgs:
    return InferArgs(args.types, {**args.attrs, "dilations": (1, 1)}, args.values)


def _pool_reference(op: str):
    def reference(xs, attrs):
        attrs = {**attrs, "dilations": (1, 1)}
        kh, kw = attrs["kernel_shape"]
        x = xs[0].astype(np.int64)
        if op == "QMaxPool":
            acc = np.full((x.shape[0],) + _out_hw(x, kh, kw, attrs) + (x.shape[3],), -(1 << 40), np.int64)
            for _, _, v, inside in window_taps(x, attrs, kh, kw, -(1 << 40)):
                acc = np.maximum(acc, v)
        else:
            acc = 0
            count = 0
            for _, _, v, inside in window_taps(x, attrs, kh, kw, 0):
                acc = acc + v
                count = count + inside.astype(np.int64)
            acc = fp.rounded_divide(acc, count[None, :, :, None])
        return [fp.saturate(acc, xs[0].dtype.name, attrs["act_min"], attrs["act_max"])]
    return reference


def _prepare_pool(args: InferArgs, outs) -> dict:
    """The two windows (H, W) of an NHWC pool; TFLite's pads are (top, left, bottom, right)."""
    (h, w), (oh, ow) = args.types[0].shape[1:3], outs[0].shape[1:3]
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = args.attrs["kernel_shape"], args.attrs["strides"], args.attrs["pads"]
    return pool_facts((Window(h, oh, kh, sh, 1, pt, pb), Window(w, ow, kw, sw, 1, pl, pr)), channels_last=True)


define("QAvgPool", inputs=1, infer=_infer_pool, reference=_pool_reference("QAvgPool"), attrs=POOL_ATTRS,
       prepare=_prepare_pool)
define("QMaxPool", inputs=1, infer=_infer_pool, reference=_pool_reference("QMaxPool"), attrs=POOL_ATTRS,
       prepare=_prepare_pool)


# --- QMean (over H and W of NHWC, keeping dims, as TFLite's MEAN of a pooled head) -------------
def _infer_mean(args: InferArgs) -> list[TensorType]:
    _rank4(args)
    x = _quantized_input(args, 0, "x_zero_point", "x_scale", ELEMENTWISE_INTS)
    return [_out_type(args, (x.shape[0], 1, 1, x.shape[3]), x.dtype)]


def mean_params(attrs, count: int) -> tuple[int, int]:
    """QMean's (multiplier, shift): x_scale / y_scale with the division by `count` folded into the
    multiplier, keeping as many of the quotient's bits as int64 allows (as TFLite's MEAN)."""
    mult, shift = fp.quantize_multiplier(fp.as_float32(attrs["x_scale"]) / fp.as_float32(attrs["y_scale"]))
    extra = min(count.bit_length() - 1, 32, 31 + shift)
    return (mult << extra) // count, shift - extra


def _mean_reference(xs, attrs):
    x = xs[0].astype(np.int64) - attrs["x_zero_point"]
    count = x.shape[1] * x.shape[2]
    acc = fp.multiply_by_quantized_multiplier(x.sum(axis=(1, 2), keepdims=True), *mean_params(attrs, count))
    return [fp.saturate(acc + attrs["y_zero_point"], xs[0].dtype.name, attrs["act_min"], attrs["act_max"])]


define("QMean", inputs=1, infer=_infer_mean, reference=_mean_reference, pattern=Pattern.REDUCTION,
       prepare=lambda args, outputs: {"shape": args.types[0].shape, "axes": (1, 2)},  # NHWC: H and W reduced
       attrs=[Attr("x_scale", "float"), Attr("x_zero_point", "int", 0)] + Y_ATTRS)


# --- Quantize, Dequantize, Requantize ---------------------------------------------------------
OUT_DTYPE = Attr("dtype", "string", "int8", INTS)


def _infer_quantize(args: InferArgs) -> list[TensorType]:
    x = args.types[0]
    if x.dtype != "float32":
        raise OpError(f"input 0 has element type {x.dtype}, expected float32", input=0)
    dtype = args.attrs["dtype"]
    a = {**args.attrs, "act_min": DTYPE_RANGES[dtype][0], "act_max": DTYPE_RANGES[dtype][1]}
    return [_out_type(InferArgs(args.types, a, args.values), x.shape, dtype)]


define("Quantize", inputs=1, infer=_infer_quantize, pattern=Pattern.ELEMENTWISE,
       reference=lambda xs, a: [fp.quantize_float(xs[0], a["y_scale"], a["y_zero_point"], a["dtype"])],
       attrs=[Attr("y_scale", "float"), Attr("y_zero_point", "int", 0), OUT_DTYPE])


def _infer_dequantize(args: InferArgs) -> list[TensorType]:
    x = _quantized_input(args, 0, "x_zero_point", "x_scale")
    return [TensorType("float32", x.shape)]


define("Dequantize", inputs=1, infer=_infer_dequantize, pattern=Pattern.ELEMENTWISE,
       reference=lambda xs, a: [fp.dequantize(xs[0], a["x_scale"], a["x_zero_point"])],
       attrs=[Attr("x_scale", "float"), Attr("x_zero_point", "int", 0)])


def requantize_params(attrs) -> tuple[int, int]:
    """The multiplier and shift: `multiplier` and `shift` as given where the operator derives them in
    integers (TFLite's MEAN divides its multiplier by the element count), else of `effective_scale`
    where it computes its ratio otherwise (TFLite's SVDF multiplies and divides its scales in
    float32), else of x_scale / y_scale."""
    if attrs.get("multiplier") is not None:
        return int(attrs["multiplier"]), int(attrs.get("shift") or 0)
    if attrs.get("effective_scale") is not None:
        return fp.quantize_multiplier(attrs["effective_scale"])
    return fp.quantize_multiplier(fp.as_float32(attrs["x_scale"]) / fp.as_float32(attrs["y_scale"]))


def requantize_range(a) -> tuple[int, int]:
    """The output clamp: act_min..act_max where given (a ReLU), else the output type's range."""
    return output_clamp(a, a["dtype"])


def _infer_requantize(args: InferArgs) -> list[TensorType]:
    # (int32: the sums of an integer matrix product, rescaled to a narrower state as TFLite's SVDF does;
    # int64: the sums of an int16 one, rescaled by TFLite's 64-bit MultiplyByQuantizedMultiplier)
    x = _quantized_input(args, 0, "x_zero_point", "x_scale", INTS + ("int32", "int64"))
    dtype = args.attrs["dtype"]
    lo, hi = requantize_range(args.attrs)
    a = {**args.attrs, "act_min": lo, "act_max": hi}
    return [_out_type(InferArgs(args.types, a, args.values), x.shape, dtype)]


def _requantize_reference(xs, a):
    x = xs[0].astype(np.int64) - a["x_zero_point"]
    if xs[0].dtype == np.int64:  # TFLite's 16x8 rounding of int64 sums (the multiplier rounded to Q15)
        y = fp.wrap_int32(fp.multiply_by_quantized_multiplier_int64(x, *requantize_params(a)))
    else:
        y = fp.multiply_by_quantized_multiplier(x, *requantize_params(a))
    return [fp.saturate(y + a["y_zero_point"], a["dtype"], *requantize_range(a))]


define("Requantize", inputs=1, infer=_infer_requantize, reference=_requantize_reference,
       pattern=Pattern.ELEMENTWISE,
       attrs=[Attr("x_scale", "float"), Attr("x_zero_point", "int", 0), Attr("y_scale", "float"),
              Attr("y_zero_point", "int", 0), OUT_DTYPE,
              # TFLite's RELU and RELU6 are a requantization clamped to the activation's range
              Attr("act_min", "int", None), Attr("act_max", "int", None),
              Attr("effective_scale", "float", None), Attr("multiplier", "int", None), Attr("shift", "int", None)])


# --- QLeakyRelu (TFLite's quantized LEAKY_RELU: two requantizations, by the input's sign) -------
def leaky_relu_multipliers(attrs) -> tuple[tuple[int, int], tuple[int, int]]:
    """The (multiplier, shift) of the identity (x >= zero point) and of alpha (below), from float32
    arithmetic as TFLite's Prepare derives them: x_scale / y_scale and x_scale * alpha / y_scale."""
    x, y, alpha = np.float32(attrs["x_scale"]), np.float32(attrs["y_scale"]), np.float32(attrs["alpha"])
    return fp.quantize_multiplier(float(x / y)), fp.quantize_multiplier(float(x * alpha / y))


def leaky_relu_values(x, attrs, dtype: str) -> np.ndarray:
    """QLeakyRelu of integers x: x - zero point requantized by the identity or the alpha multiplier,
    plus the output zero point, saturated to `dtype` (also the int8 table of tflite_tables)."""
    centered = np.asarray(x, np.int64) - attrs["x_zero_point"]
    identity, (alpha_multiplier, alpha_shift) = leaky_relu_multipliers(attrs)
    # a negative alpha: TFLite Micro's products round as the negated product of the multiplier's
    # magnitude (they differ only at ties: measured against the interpreter, alpha -0.5 and -0.25)
    sign = -1 if alpha_multiplier < 0 else 1
    y = np.where(centered >= 0, fp.multiply_by_quantized_multiplier(centered, *identity),
                 sign * fp.multiply_by_quantized_multiplier(centered, sign * alpha_multiplier, alpha_shift))
    return fp.saturate(y + attrs["y_zero_point"], dtype)


def _infer_leaky_relu(args: InferArgs) -> list[TensorType]:
    x = _quantized_input(args, 0, "x_zero_point", "x_scale", ELEMENTWISE_INTS)
    return [_out_type(args, x.shape, x.dtype)]


define("QLeakyRelu", inputs=1, infer=_infer_leaky_relu, pattern=Pattern.ELEMENTWISE,
       reference=lambda xs, a: [leaky_relu_values(xs[0], a, xs[0].dtype.name)],
       attrs=[Attr("x_scale", "float"), Attr("x_zero_point", "int", 0), Attr("y_scale", "float"),
              Attr("y_zero_point", "int", 0), Attr("alpha", "float")])


# --- QPad, QConcat ----------------------------------------------------------------------------
def _infer_pad(args: InferArgs) -> list[TensorType]:
    x = _quantized_input(args, 0, "x_zero_point")
    pads = args.attrs["pads"]
    if len(pads) != 2 * x.rank or min(pads) < 0:
        raise OpError(f"pads must be {2 * x.rank} non-negative sizes (begins, then ends), got {list(pads)}",
                      attr="pads")
    shape = tuple(d + pads[i] + pads[i + x.rank] for i, d in enumerate(x.shape))
    return [TensorType(x.dtype, shape, x.quant)]


def _pad_reference(xs, a):
    r = xs[0].ndim
    widths = [(a["pads"][i], a["pads"][i + r]) for i in range(r)]
    return [np.pad(xs[0], widths, constant_values=a["x_zero_point"])]


define("QPad", inputs=1, infer=_infer_pad, reference=_pad_reference, pattern=Pattern.INJECTIVE,
       attrs=[Attr("pads", "ints"), Attr("x_zero_point", "int", 0)])


def _infer_concat(args: InferArgs) -> list[TensorType]:
    first = _quantized_input(args, 0, None)
    axis = normalize_axis(args.attrs["axis"], first.rank)
    for i, t in enumerate(args.types[1:], 1):
        if t.dtype != first.dtype or t.quant != first.quant:
            raise OpError(f"input {i} is {t}, but every input must be {first.dtype} quantized as input 0 "
                          f"({first.quant})", input=i)
        if t.rank != first.rank or any(d != e for k, (d, e) in enumerate(zip(t.shape, first.shape)) if k != axis):
            raise OpError(f"input {i} has shape {list(t.shape)}, which does not match input 0's "
                          f"{list(first.shape)} off axis {axis}", input=i)
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in args.types)
    return [TensorType(first.dtype, tuple(shape), first.quant)]


define("QConcat", inputs=(1, -1), infer=_infer_concat, pattern=Pattern.INJECTIVE,
       reference=lambda xs, a: [np.concatenate(xs, axis=a["axis"])], attrs=[Attr("axis", "int")])


# --- QSoftmax (TFLite's int8 softmax over the last axis) ---------------------------------------
def _infer_softmax(args: InferArgs) -> list[TensorType]:
    x = _quantized_input(args, 0, None, "x_scale", ("int8",))
    if not fp.softmax_scale_fits(args.attrs["beta"], args.attrs["x_scale"]):
        raise OpError(f"beta * x_scale must be at least 2^-27 (the softmax scales the input differences up), got "
                      f"beta {args.attrs['beta']} and x_scale {args.attrs['x_scale']}", attr="x_scale")
    a = {**args.attrs, "act_min": -128, "act_max": 127}
    return [_out_type(InferArgs(args.types, a, args.values), x.shape)]


def rows_facts(args: InferArgs, outputs) -> dict:
    """A softmax over the last axis: the input viewed as rows of it, each row reduced."""
    x = args.types[0]
    depth = x.shape[-1]
    return {"shape": (x.size // depth if depth else 0, depth), "axes": (1,)}


define("QSoftmax", inputs=1, infer=_infer_softmax, pattern=Pattern.REDUCTION,
       prepare=rows_facts,
       reference=lambda xs, a: [fp.softmax_int8(xs[0], a["beta"], a["x_scale"])],
       attrs=[Attr("beta", "float", 1.0), Attr("x_scale", "float"), Attr("y_scale", "float", 1.0 / 256),
              Attr("y_zero_point", "int", -128)])


# --- QLookup (a function of one int8 input as a 256-entry table: TFLite's LOGISTIC and TANH) ---
def _infer_lookup(args: InferArgs) -> list[TensorType]:
    x = _quantized_input(args, 0, None, dtypes=("int8",))
    table = args.types[1]
    if table.dtype != "int8" or table.shape != (256,):
        raise OpError(f"the table must be int8[256] (the output for inputs -128..127), got {table}", input=1)
    if args.values[1] is None:
        raise OpError("the table must be a constant", input=1)
    a = {**args.attrs, "act_min": -128, "act_max": 127}
    return [_out_type(InferArgs(args.types, a, args.values), x.shape)]


define("QLookup", inputs=2, infer=_infer_lookup, constant_inputs=(1,), prepare=elementwise_facts(inputs=(0,)),
       reference=lambda xs, a: [xs[1][xs[0].astype(np.int64) + 128]],
       attrs=[Attr("y_scale", "float"), Attr("y_zero_point", "int", 0)])
