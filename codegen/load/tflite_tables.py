"""int8 functions of one int8 input, computed for every input value exactly as TFLite Micro's
reference integer kernels compute each element (from the specifications of their Prepare and Eval),
so that a QLookup of 256 bytes replaces per-element fixed-point arithmetic bit-exactly."""
from __future__ import annotations

import math

import numpy as np

from tinsmith.ops.quantized import leaky_relu_values
from tinsmith.ops.quantized_fixed_point import rsqrt_values
from tinsmith.quant import fixed_point as fp

INPUTS = np.arange(-128, 128, dtype=np.int64)  # the table's index order
INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
INT32_MAX = (1 << 31) - 1


def _f32(x: float) -> np.float32:
    return np.float32(x)


def leaky_relu(x_scale: float, x_zp: int, y_scale: float, y_zp: int, alpha: float) -> np.ndarray:
    """LEAKY_RELU: x - zp requantized by the identity multiplier (x >= 0) or the alpha one (x < 0),
    both derived from float32 arithmetic as its Prepare derives them (the QLeakyRelu primitive's
    arithmetic, which int16 data runs per element)."""
    attrs = {"x_scale": x_scale, "x_zero_point": x_zp, "y_scale": y_scale, "y_zero_point": y_zp, "alpha": alpha}
    return leaky_relu_values(INPUTS, attrs, "int8").astype(np.int8)


def _int16_multiplier(real: np.float32) -> tuple[int, int]:
    """QuantizeMultiplier, then the Q31 multiplier rounded to Q15 (DownScaleInt32ToInt16Multiplier)."""
    q, exponent = fp.quantize_multiplier(float(real))
    if q >= INT32_MAX - (1 << 15):
        return INT16_MAX, exponent
    return (q + (1 << 15)) >> 16, exponent



def _srdhm16(a, b) -> np.ndarray:
    """gemmlowp's SaturatingRoundingDoublingHighMul on int16 (the product's nudge, truncating division)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    high = np.trunc((ab + nudge) / (1 << 15)).astype(np.int64)
    return np.where((a == b) & (a == INT16_MIN), INT16_MAX, high)


def _sdhm16(a, b) -> np.ndarray:
    """TFLite's SaturatingDoublingHighMul on int16: the product halved to 16 bits, truncated."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    high = np.trunc((a * b) / (1 << 15)).astype(np.int64)
    return np.where((a == b) & (a == INT16_MIN), INT16_MAX, high)


def _shift_left16(x, exponent: int) -> np.ndarray:
    return np.clip(np.asarray(x, np.int64) * (1 << exponent), INT16_MIN, INT16_MAX)


def _rounding_divide16(x, exponent: int) -> np.ndarray:
    x = np.asarray(x, np.int64)
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + ((x & mask) > threshold)


def hard_swish(x_scale: float, x_zp: int, y_scale: float, y_zp: int) -> np.ndarray:
    """HARD_SWISH: x * relu6(x + 3) / 6 in TFLite's 16-bit fixed point: the input on a 2^7 finer
    scale, a 'reluish' factor in [0, 1] on the scale 3 / 2^15, their product rescaled to the output."""
    hires = _f32(1.0 / 128.0) * _f32(x_scale)
    out_mult, out_exp = _int16_multiplier(hires / _f32(y_scale))
    relu_mult, relu_exp = _int16_multiplier(hires / _f32(3.0 / 32768.0))
    value = (INPUTS - x_zp) * 128
    preshift = _srdhm16(value, out_mult)
    reluish = value
    if relu_exp > 0:
        reluish = _shift_left16(reluish, relu_exp - 1)
    reluish = _srdhm16(reluish, relu_mult)
    if relu_exp > 0:
        reluish = _shift_left16(reluish, 1)
    if relu_exp < 0:
        reluish = _rounding_divide16(reluish, -relu_exp)
    reluish = (reluish + (1 << 15)) >> 1
    out = _rounding_divide16(_sdhm16(reluish, preshift), -out_exp) + y_zp
    return np.clip(out, -128, 127).astype(np.int8)


def abs_(x_scale: float, x_zp: int, y_scale: float, y_zp: int) -> np.ndarray:
    """ABS: |x - zp|, requantized to the output when the scales differ (float32 ratio)."""
    value = np.abs(INPUTS - x_zp)
    if _f32(x_scale) != _f32(y_scale):
        value = fp.multiply_by_quantized_multiplier(value, *fp.quantize_multiplier(float(_f32(x_scale) / _f32(y_scale))))
    return np.clip(value + y_zp, -128, 127).astype(np.int8)


def elu(x_scale: float, x_zp: int, y_scale: float, y_zp: int) -> np.ndarray:
    """ELU: its Prepare's table of exp(x) - 1 below zero, x above (float_function)."""
    return float_function(x_scale, x_zp, y_scale, y_zp, lambda v: np.where(v < 0, np.exp(v) - _f32(1.0), v))


SQRT_2_OVER_PI = np.float32(math.sqrt(2.0 / math.pi))
SQRT_HALF = np.float32(math.sqrt(0.5))
_erfc = np.vectorize(lambda v: np.float32(math.erfc(float(v))), otypes=[np.float32])  # (erfcf, rounded once)
_tanh = np.vectorize(lambda v: np.float32(math.tanh(float(v))), otypes=[np.float32])


def gelu_float32(x, approximate: bool) -> np.ndarray:
    """TFLite's float GELU as its table generators evaluate it, in float32: 0.5 x erfc(-x / sqrt 2),
    or with `approximate` 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
    x = np.asarray(x, np.float32)
    if approximate:
        inner = (SQRT_2_OVER_PI * (x + np.float32(0.044715) * x * x * x)).astype(np.float32)
        return (np.float32(0.5) * x * (np.float32(1.0) + _tanh(inner))).astype(np.float32)
    return (np.float32(0.5) * x * _erfc((-x * SQRT_HALF).astype(np.float32))).astype(np.float32)


def float_function(x_scale: float, x_zp: int, y_scale: float, y_zp: int, function) -> np.ndarray:
    """TFLite's int8 table of a float function (its LUTPopulate): each input dequantized in float32,
    the function applied, times 1 / output scale, rounded half away from zero, plus the zero point."""
    real = (_f32(x_scale) * (INPUTS - x_zp).astype(np.float32)).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = (function(real) * (_f32(1.0) / _f32(y_scale))).astype(np.float32).astype(np.float64)
    rounded = np.nan_to_num(np.sign(scaled) * np.floor(np.abs(scaled) + 0.5), posinf=INT32_MAX, neginf=-INT32_MAX)
    return np.clip(rounded + y_zp, -128, 127).astype(np.int8)


def gelu(x_scale: float, x_zp: int, y_scale: float, y_zp: int, approximate: bool) -> np.ndarray:
    """GELU: TFLite's table of its float function (TFLite Micro does not register GELU; LiteRT's is
    the reference)."""
    return float_function(x_scale, x_zp, y_scale, y_zp, lambda v: gelu_float32(v, approximate))


def rsqrt(x_scale: float, x_zp: int, y_scale: float, y_zp: int) -> np.ndarray:
    """RSQRT: 1 / sqrt(x - zp) in TFLite's fixed point (the QRsqrt primitive's arithmetic, which
    int16 data runs per element); inputs at or below the zero point give 127."""
    attrs = {"x_scale": x_scale, "x_zero_point": x_zp, "y_scale": y_scale, "y_zero_point": y_zp}
    return rsqrt_values(INPUTS, attrs, "int8")
