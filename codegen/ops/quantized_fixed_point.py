"""Quantized primitives whose arithmetic is TFLite's fixed-point 1/sqrt, log or reciprocal
(codegen/quant/fixed_point_functions.py, which is also their NumPy reference):

- QRsqrt: TFLite's int8 and int16 RSQRT, per element (the importer makes int8 a QLookup table);
- QL2Normalization: TFLite's int8 L2_NORMALIZATION over the last axis, output in Q0.7;
- QLogSoftmax: TFLite's int8 LOG_SOFTMAX over the last axis, output scale 16/256, zero point 127;
- QDiv: TFLite's int8 DIV, a / b per element (broadcasting) by b's fixed-point reciprocal.

Their `prepare` computes the multipliers (QDiv: of the scale ratio) once from the attributes' scales, as TFLite Micro's
Prepare does; the kernels read them from the facts."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ir.graph import Quant
from tinsmith.ops.quantized import BINARY_ATTRS, ELEMENTWISE_INTS, _out_type, _quantized_input, output_clamp, rows_facts
from tinsmith.ops.common import broadcast_shapes
from tinsmith.ops.registry import Attr, InferArgs, OpError, Pattern, define, elementwise_facts
from tinsmith.quant import fixed_point_functions as ff
from tinsmith.quant.fixed_point import DTYPE_RANGES


def _check_quantization(args: InferArgs, scales: Sequence[str] = (),
                        zero_points: Sequence[tuple[str, str]] = ()) -> None:
    """Scales positive and finite, zero points inside their tensor's type (TFLite's own bounds):
    the fixed-point steps' ranges (the int8 DIV's headroom, L2's sums of squares) assume both."""
    for attr in scales:
        value = args.attrs[attr]
        if not (value > 0 and math.isfinite(value)):
            raise OpError(f"{attr} must be positive and finite, got {value}", attr=attr)
    for attr, dtype in zero_points:
        lo, hi = DTYPE_RANGES[dtype]
        if not lo <= args.attrs[attr] <= hi:
            raise OpError(f"{attr} must lie in {lo}..{hi} ({dtype} data), got {args.attrs[attr]}", attr=attr)


# --- QRsqrt -----------------------------------------------------------------------------------
def _infer_rsqrt(args: InferArgs) -> list[TensorType]:
    x = _quantized_input(args, 0, "x_zero_point", "x_scale", ELEMENTWISE_INTS)
    if x.dtype == "int16" and (args.attrs["x_zero_point"], args.attrs["y_zero_point"]) != (0, 0):
        raise OpError("x_zero_point and y_zero_point must be 0 for int16 data (TFLite's int16 RSQRT)",
                      attr="x_zero_point")
    _check_quantization(args, ("x_scale", "y_scale"), [("x_zero_point", x.dtype)])
    return [_out_type(args, x.shape, x.dtype)]


def _rsqrt_facts(args: InferArgs, outputs) -> dict:
    multiplier, shift = ff.rsqrt_multiplier(args.attrs["x_scale"], args.attrs["y_scale"])
    return {**elementwise_facts()(args, outputs), "multiplier": multiplier, "shift": shift}


def rsqrt_values(x, attrs, dtype: str) -> np.ndarray:
    """QRsqrt of integers x (also the int8 table the importer makes)."""
    multiplier, shift = ff.rsqrt_multiplier(attrs["x_scale"], attrs["y_scale"])
    return ff.rsqrt(x, attrs["x_zero_point"], multiplier, shift, attrs["y_zero_point"], dtype)


define("QRsqrt", inputs=1, infer=_infer_rsqrt, pattern=Pattern.ELEMENTWISE, prepare=_rsqrt_facts,
       reference=lambda xs, a: [rsqrt_values(xs[0], a, xs[0].dtype.name)],
       attrs=[Attr("x_scale", "float"), Attr("x_zero_point", "int", 0), Attr("y_scale", "float"),
              Attr("y_zero_point", "int", 0)])


# --- QL2Normalization -------------------------------------------------------------------------
def _infer_l2(args: InferArgs) -> list[TensorType]:
    x = _quantized_input(args, 0, "x_zero_point", None, ("int8",))
    _check_quantization(args, zero_points=[("x_zero_point", "int8")])
    if x.rank < 1:
        raise OpError(f"input 0 must have rank 1 or more, got {x}", input=0)
    return [_out_type(args, x.shape)]


# the output's integers are Q0.7 whatever y_scale and y_zero_point say (TFLite Micro does not check
# them): they only type the output as the model declares it
define("QL2Normalization", inputs=1, infer=_infer_l2, pattern=Pattern.REDUCTION, prepare=rows_facts,
       reference=lambda xs, a: [ff.l2_normalization_int8(xs[0], a["x_zero_point"])],
       attrs=[Attr("x_zero_point", "int", 0), Attr("y_scale", "float", 1.0 / 128), Attr("y_zero_point", "int", 0)])


# --- QLogSoftmax ------------------------------------------------------------------------------
def _infer_log_softmax(args: InferArgs) -> list[TensorType]:
    x = _quantized_input(args, 0, None, "x_scale", ("int8",))
    if x.rank < 1:
        raise OpError(f"input 0 must have rank 1 or more, got {x}", input=0)
    if not ff.log_softmax_scale_fits(args.attrs["x_scale"]):
        raise OpError(f"x_scale must be above 2^-26 (TFLite's reverse multiplier), got {args.attrs['x_scale']}",
                      attr="x_scale")
    scale, zero_point = ff.LOG_SOFTMAX_OUTPUT_QUANT
    return [TensorType("int8", x.shape, Quant((scale,), (zero_point,)))]


def _log_softmax_facts(args: InferArgs, outputs) -> dict:
    return {**rows_facts(args, outputs), **ff.log_softmax_params(args.attrs["x_scale"])}


define("QLogSoftmax", inputs=1, infer=_infer_log_softmax, pattern=Pattern.REDUCTION, prepare=_log_softmax_facts,
       reference=lambda xs, a: [ff.log_softmax_int8(xs[0], a["x_scale"])], attrs=[Attr("x_scale", "float")])


# --- QDiv -------------------------------------------------------------------------------------
def _infer_div(args: InferArgs) -> list[TensorType]:
    a = _quantized_input(args, 0, "a_zero_point", "a_scale", ("int8",))
    b = _quantized_input(args, 1, "b_zero_point", "b_scale", ("int8",))
    _check_quantization(args, ("a_scale", "b_scale", "y_scale"), [("a_zero_point", "int8"), ("b_zero_point", "int8")])
    multiplier, shift, real = ff.div_multiplier(args.attrs["a_scale"], args.attrs["b_scale"], args.attrs["y_scale"])
    if shift > ff.DIV_MAX_SHIFT:
        raise OpError(f"the scale ratio a_scale / (b_scale y_scale) is {real:g}; TFLite's int8 DIV shifts its "
                      f"quotient right only, which needs a ratio below 2^{ff.DIV_MAX_SHIFT}", attr="a_scale")
    return [_out_type(args, broadcast_shapes([a.shape, b.shape]), "int8")]


def _div_facts(args: InferArgs, outputs) -> dict:
    multiplier, shift, _ = ff.div_multiplier(args.attrs["a_scale"], args.attrs["b_scale"], args.attrs["y_scale"])
    return {**elementwise_facts()(args, outputs), "multiplier": multiplier, "shift": shift}


def div_values(a, b, attrs) -> np.ndarray:
    """QDiv of int8 values a and b (broadcast), as TFLite Micro's int8 DIV computes them; a divisor
    at b's zero point gives the clamp bound of a's sign (the zero point for 0 / 0)."""
    multiplier, shift, _ = ff.div_multiplier(attrs["a_scale"], attrs["b_scale"], attrs["y_scale"])
    lo, hi = output_clamp(attrs, "int8")
    return ff.divide_int8_or_by_zero(np.asarray(a, np.int64) - attrs["a_zero_point"],
                                     np.asarray(b, np.int64) - attrs["b_zero_point"],
                                     multiplier, shift, attrs["y_zero_point"], lo, hi).astype(np.int8)


# a / b: TFLite's int8 DIV, the offset dividend times the offset divisor's fixed-point reciprocal,
# rescaled by a_scale / (b_scale y_scale) and clamped (the fused activation)
define("QDiv", inputs=2, infer=_infer_div, pattern=Pattern.BROADCAST, prepare=_div_facts,
       reference=lambda xs, a: [div_values(xs[0], xs[1], a)], attrs=BINARY_ATTRS)
