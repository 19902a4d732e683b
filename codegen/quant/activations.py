"""TensorFlow Lite's int8 LOGISTIC and TANH as 256-entry tables.

TFLite Micro computes both per element in fixed point (the reference integer kernels): the input
minus its zero point is rescaled to a Q4.27 number (4 integer bits) by a multiplier Prepare takes
from the input scale, inputs beyond a radius saturate, and gemmlowp's fixed-point logistic or
tanh (exp on negative values, then a Newton-Raphson reciprocal) gives a Q0.31 result that is
rounded to the output's 8 bits. The output quantization is fixed: scale 1/256 with zero point
-128 for LOGISTIC, 1/128 with zero point 0 for TANH.

An int8 input has 256 values, so the whole function is a table computed here at build time, step
for step as TFLite does it (codegen/quant/fixed_point.py's roundings); the kernel is one load per
element. Functions take NumPy int64 arrays of int32 values, as fixed_point's do.
"""
from __future__ import annotations

import math

import numpy as np

from tinsmith.quant import fixed_point as fp

INPUT_INTEGER_BITS = 4
# the fixed output quantization of each function: (scale, zero point)
OUTPUT_QUANT = {"logistic": (1.0 / 256, -128), "tanh": (1.0 / 128, 0)}


def input_params(x_scale: float) -> dict[str, int]:
    """Prepare's input rescaling to Q4.27: multiplier, left shift and the saturation radius."""
    real = fp.as_float32(x_scale) * (1 << (31 - INPUT_INTEGER_BITS))
    fraction, shift = math.frexp(real)
    multiplier = int(fp.wrap_int32(fp.round_half_away(fraction * (1 << 31))))
    radius = ((1 << INPUT_INTEGER_BITS) - 1) * (1 << (31 - INPUT_INTEGER_BITS)) / 2.0 ** shift
    return {"multiplier": multiplier, "left_shift": shift, "radius": int(math.floor(radius))}


def _rescaled(x, x_zero_point: int, p: dict[str, int]) -> np.ndarray:
    """The input in Q4.27 (valid inside the radius, where no step overflows)."""
    centered = np.asarray(x, np.int64) - x_zero_point
    inside = np.clip(centered, -p["radius"] + 1, p["radius"] - 1)
    return fp.multiply_by_quantized_multiplier(inside, p["multiplier"], p["left_shift"])


def one_minus_x_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    """(1 - a) / (1 + a) in Q0.31 for a Q0.31 a in [0, 1): Newton-Raphson on Q2.29 numbers."""
    a = np.asarray(a, np.int64)
    total = a + fp.INT32_MAX
    half_denominator = (total + 1) // 2  # gemmlowp's rounding half sum (total > 0 here)
    x = fp.Q2_48_OVER_17 + fp.srdhm(half_denominator, fp.Q2_NEG_32_OVER_17)
    for _ in range(3):
        one_minus = (1 << 29) - fp.srdhm(half_denominator, x)
        x = fp.wrap_int32(x + fp.saturating_shift_left(fp.srdhm(x, one_minus), 2))
    return fp.saturating_shift_left(x - (1 << 29), 2)


def logistic_q31(a) -> np.ndarray:
    """gemmlowp's logistic of a Q4.27 number, in Q0.31."""
    a = np.asarray(a, np.int64)
    positive = a > 0
    magnitude = np.where(positive, a, -a)
    exp_neg = fp.exp_on_negative_values(-magnitude, INPUT_INTEGER_BITS)
    if_positive = fp.one_over_one_plus_x_for_x_in_0_1(exp_neg)
    if_negative = fp.INT32_MAX - if_positive
    return np.where(a == 0, 1 << 30, np.where(positive, if_positive, if_negative))


def tanh_q31(a) -> np.ndarray:
    """gemmlowp's tanh of a Q4.27 number, in Q0.31: exp(2x) on the negative magnitude (the same
    raw value read with 5 integer bits), then (1 - e) / (1 + e)."""
    a = np.asarray(a, np.int64)
    negative = a < 0
    n = np.where(negative, a, -a)
    t = one_minus_x_over_one_plus_x_for_x_in_0_1(fp.exp_on_negative_values(n, INPUT_INTEGER_BITS + 1))
    return np.where(a == 0, 0, np.where(negative, -t, t))


def int8_table(function: str, x_scale: float, x_zero_point: int) -> np.ndarray:
    """Output of `function` ("logistic" or "tanh") for every int8 input -128..127, as int8."""
    p = input_params(x_scale)
    x = np.arange(-128, 128, dtype=np.int64)
    centered = x - x_zero_point
    q4 = _rescaled(x, x_zero_point, p)
    if function == "logistic":
        y = fp.rounding_divide_by_pot(logistic_q31(q4), 31 - 8) - 128
    elif function == "tanh":
        y = fp.rounding_divide_by_pot(tanh_q31(q4), 31 - 7)
    else:
        raise ValueError(f"no int8 table for {function!r}")
    y = np.where(centered <= -p["radius"], -128, np.where(centered >= p["radius"], 127, y))
    return fp.saturate(y, "int8")
