"""Fixed-point requantization exactly as TensorFlow Lite's reference kernels do it.

A real multiplier M (an output scale over an input scale) becomes a 32-bit fixed-point fraction
q in [2^30, 2^31) and a power-of-two exponent: M = q / 2^31 * 2^shift. An int32 accumulator
`acc` is then scaled in two roundings (the quantization paper, Jacob et al. 2018, section 2.2):

  1. the saturating rounding doubling high multiply: the high 32 bits of 2 * acc * q, rounded
     to nearest with ties up (TFLite's nudge: -1/2 rounds to 0);
  2. a rounding arithmetic right shift by -shift (ties away from zero).

A left shift (shift > 0) is applied to acc before step 1. Everything here works on NumPy arrays
of int64 holding int32 values, so references and kernels share one definition; the generated
code spells the same steps in the loop IR (codegen/generate/functors/quantized_math.py).

Scales are float32 in TFLite files; multipliers are computed from their float32 values
widened to double, as TFLite does, so a scale written as 0.1 in YAML means float32(0.1).
"""
from __future__ import annotations

import math

import numpy as np

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1
DTYPE_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767),
                "int32": (INT32_MIN, INT32_MAX)}


def as_float32(scale: float) -> float:
    """A scale as TFLite stores it: a float32, widened to double for the multiplier arithmetic."""
    return float(np.float32(scale))


def round_half_away(x: float) -> int:
    """C's std::round: to nearest, ties away from zero."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def quantize_multiplier(real: float) -> tuple[int, int]:
    """(q, shift) with real ~= q / 2^31 * 2^shift and q in [2^30, 2^31), or (0, 0) for zero."""
    if real == 0.0:
        return 0, 0
    fraction, shift = math.frexp(real)  # real = fraction * 2^shift, fraction in [0.5, 1)
    q = round_half_away(fraction * (1 << 31))
    if q == 1 << 31:  # the fraction rounded up to 1.0
        q //= 2
        shift += 1
    if shift < -31:  # too small to represent: the product is zero
        return 0, 0
    if shift > 30:
        return INT32_MAX, 30
    return q, shift


def quantize_multipliers(reals) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (q, shift) arrays as int32."""
    pairs = [quantize_multiplier(float(r)) for r in np.atleast_1d(reals)]
    return (np.array([p[0] for p in pairs], np.int32), np.array([p[1] for p in pairs], np.int32))


def _as_int64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def saturating_rounding_doubling_high_mul(a, b) -> np.ndarray:
    """High 32 bits of 2*a*b rounded to nearest, ties up (TFLite's nudge of 2^30, or 1 - 2^30
    below zero, before a division that truncates: -1/2 gives 0); INT32_MIN^2 saturates."""
    a, b = _as_int64(a), _as_int64(b)
    overflow = (a == INT32_MIN) & (b == INT32_MIN)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    # C++ divides toward zero; NumPy's // floors, so divide magnitudes
    total = ab + nudge
    high = np.sign(total) * (np.abs(total) // (1 << 31))
    return np.where(overflow, INT32_MAX, high)


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    """x / 2^exponent rounded to nearest, ties away from zero (an arithmetic shift that rounds)."""
    x, exponent = _as_int64(x), _as_int64(exponent)
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def wrap_int32(x) -> np.ndarray:
    """Two's-complement wrap to int32, as C++ int32 arithmetic behaves on every target we build for."""
    return ((_as_int64(x) + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def multiply_by_quantized_multiplier(x, multiplier, shift) -> np.ndarray:
    """acc * M with M = (multiplier, shift) from quantize_multiplier; both roundings as TFLite."""
    shift = _as_int64(shift)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    shifted = wrap_int32(_as_int64(x) << left)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(shifted, multiplier), right)


def reduced_multiplier(multiplier) -> np.ndarray:
    """A Q31 multiplier rounded to Q15 (0x7FFF at the top), as TFLite's 64-bit
    MultiplyByQuantizedMultiplier uses it for 16x8 kernels."""
    m = _as_int64(multiplier)
    return np.where(m < 0x7FFF0000, (m + (1 << 15)) >> 16, 0x7FFF)


def multiply_by_quantized_multiplier_int64(x, multiplier, shift) -> np.ndarray:
    """An int64 accumulator times M = (multiplier, shift), as TFLite's 16x8 kernels with an int64
    bias compute it: x times the Q15 reduced multiplier, plus half, shifted right by 15 - shift
    (one rounding, half up). |x| < 2^47 keeps the product inside int64."""
    total = 15 - _as_int64(shift)
    return (_as_int64(x) * reduced_multiplier(multiplier) + (np.int64(1) << (total - 1))) >> total


def saturate(x, dtype: str, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    """Clamp to [lo, hi] (default: the range of `dtype`) and convert to `dtype`."""
    dlo, dhi = DTYPE_RANGES[dtype]
    return np.clip(_as_int64(x), dlo if lo is None else lo, dhi if hi is None else hi).astype(dtype)


def activation_range(activation: str, scale: float, zero_point: int, dtype: str = "int8") -> tuple[int, int]:
    """The output clamp of a fused activation (TFLite's CalculateActivationRangeQuantized)."""
    lo, hi = DTYPE_RANGES[dtype]

    def q(real: float) -> int:  # real / scale in float32, as TFLite divides
        return zero_point + round_half_away(float(np.float32(real) / np.float32(scale)))
    if activation in ("", "none", "NONE"):
        return lo, hi
    if activation in ("relu", "Relu", "RELU"):
        return max(lo, q(0.0)), hi
    if activation in ("relu6", "Relu6", "RELU6"):
        return max(lo, q(0.0)), min(hi, q(6.0))
    if activation in ("relu_n1_to_1", "ReluN1To1", "RELU_N1_TO_1"):
        return max(lo, q(-1.0)), min(hi, q(1.0))
    raise ValueError(f"unknown fused activation {activation!r}")


def conv_multipliers(x_scale: float, w_scales, y_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (multiplier, shift) of a convolution or fully connected layer: x_s * w_s / y_s."""
    reals = [as_float32(x_scale) * as_float32(w) / as_float32(y_scale) for w in np.atleast_1d(w_scales)]
    return quantize_multipliers(reals)


ADD_LEFT_SHIFT = 20  # TFLite's int8 ADD works on inputs scaled up by 2^20 for headroom
ADD_LEFT_SHIFTS = {"int8": ADD_LEFT_SHIFT, "int16": 15}  # and its int16 ADD and SUB by 2^15


def add_multipliers(a_scale: float, b_scale: float, y_scale: float,
                    left_shift: int = ADD_LEFT_SHIFT) -> dict[str, int]:
    """The fixed-point parameters of TFLite's int8 ADD: both inputs rescaled to twice the larger
    input scale, summed, and the sum rescaled to the output scale."""
    a, b, y = as_float32(a_scale), as_float32(b_scale), as_float32(y_scale)
    twice_max = 2 * max(a, b)
    a_mult, a_shift = quantize_multiplier(a / twice_max)
    b_mult, b_shift = quantize_multiplier(b / twice_max)
    y_mult, y_shift = quantize_multiplier(twice_max / ((1 << left_shift) * y))
    return {"a_multiplier": a_mult, "a_shift": a_shift, "b_multiplier": b_mult, "b_shift": b_shift,
            "y_multiplier": y_mult, "y_shift": y_shift, "left_shift": left_shift}


def rounded_divide(acc, count) -> np.ndarray:
    """acc / count rounded to nearest, ties away from zero, as TFLite's average pool and mean
    do it in integers: (acc +- count/2) / count with C's truncating division."""
    acc, count = _as_int64(acc), _as_int64(count)
    num = np.where(acc > 0, acc + count // 2, acc - count // 2)
    return np.sign(num) * (np.abs(num) // count)


def quantize_float(x, scale: float, zero_point: int, dtype: str) -> np.ndarray:
    """TFLite's QUANTIZE of float32 data: round(x / scale) in float32, ties away from zero."""
    q = np.asarray(x, np.float32) / np.float32(scale)
    rounded = np.sign(q) * np.floor(np.abs(q).astype(np.float64) + 0.5)
    with np.errstate(invalid="ignore"):
        big = np.clip(rounded, -2.0 ** 40, 2.0 ** 40)  # the conversion of huge values saturates below
    return saturate(big.astype(np.int64) + zero_point, dtype)


def dequantize(x, scale: float, zero_point: int) -> np.ndarray:
    """TFLite's DEQUANTIZE: scale (as double) * (x - zero_point), rounded once to float32."""
    return (as_float32(scale) * (_as_int64(x) - zero_point).astype(np.float64)).astype(np.float32)


# --- int8 softmax (TFLite's reference algorithm, on gemmlowp-style fixed-point numbers) ---------
# A fixed-point number with I integer bits is an int32 raw value r standing for r / 2^(31 - I).
# Products of two such numbers are saturating rounding doubling high multiplies; sums are plain
# int32 sums. exp(x) for x <= 0 is computed on Q5.26 differences (input - row max, scaled by
# beta), the sum of exps accumulates in Q12.19, and its reciprocal comes from Newton-Raphson.
SOFTMAX_DIFF_INTEGER_BITS = 5
SOFTMAX_ACCUM_INTEGER_BITS = 12


def _q31(real: float) -> int:
    """A real in (-1, 1) as a Q0.31 raw value, rounded to nearest."""
    return int(round_half_away(real * 2 ** 31))


# exp(-2^k) for k = -2..4 in Q0.31: the factors for each set bit of the whole quarters of -x
EXP_BARREL = [(k, _q31(math.exp(-(2.0 ** k)))) for k in range(-2, 5)]
EXP_MINUS_ONE_EIGHTH = _q31(math.exp(-1.0 / 8.0))
ONE_THIRD = _q31(1.0 / 3.0)
Q2_48_OVER_17 = round_half_away(48.0 / 17.0 * 2 ** 29)
Q2_NEG_32_OVER_17 = -round_half_away(32.0 / 17.0 * 2 ** 29)


def srdhm(a, b) -> np.ndarray:
    return saturating_rounding_doubling_high_mul(a, b)


def saturating_shift_left(x, exponent: int) -> np.ndarray:
    """x * 2^exponent, saturated to int32 (gemmlowp's SaturatingRoundingMultiplyByPOT, exponent > 0)."""
    x = _as_int64(x)
    threshold = (1 << (31 - exponent)) - 1
    return np.where(x > threshold, INT32_MAX, np.where(x < -threshold, INT32_MIN, x << exponent))


def exp_on_interval_between_negative_one_quarter_and_0_excl(a) -> np.ndarray:
    """exp(a) for a Q0.31 a in [-1/4, 0): a Taylor polynomial around -1/8."""
    x = _as_int64(a) + (1 << 28)  # a + 1/8
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    poly = rounding_divide_by_pot(srdhm(x4_over_4 + x3, ONE_THIRD) + x2, 1)
    return wrap_int32(EXP_MINUS_ONE_EIGHTH + srdhm(EXP_MINUS_ONE_EIGHTH, wrap_int32(x + poly)))


def exp_on_negative_values(a, integer_bits: int = SOFTMAX_DIFF_INTEGER_BITS) -> np.ndarray:
    """exp(a) in Q0.31 for a fixed-point a <= 0 with `integer_bits` integer bits."""
    a = _as_int64(a)
    frac = 31 - integer_bits
    quarter = 1 << (frac - 2)
    a_mod_quarter_minus_quarter = (a & (quarter - 1)) - quarter
    result = exp_on_interval_between_negative_one_quarter_and_0_excl(
        saturating_shift_left(a_mod_quarter_minus_quarter, integer_bits))
    remainder = a_mod_quarter_minus_quarter - a
    for k, factor in EXP_BARREL:
        if integer_bits > k:
            bit = 1 << (frac + k)
            result = np.where(remainder & bit, srdhm(result, factor), result)
    if integer_bits > 5:
        clamp = -(1 << (36 - integer_bits))
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, INT32_MAX, result)


def one_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    """1 / (1 + a) for a Q0.31 a in [0, 1), by three Newton-Raphson steps on Q2.29 numbers."""
    a = _as_int64(a)
    total = a + INT32_MAX
    half_denominator = (total + np.where(total >= 0, 1, -1)) // 2  # (rounding half sum; total > 0 here)
    x = Q2_48_OVER_17 + srdhm(half_denominator, Q2_NEG_32_OVER_17)
    for _ in range(3):
        half_denominator_times_x = srdhm(half_denominator, x)
        one_minus = (1 << 29) - half_denominator_times_x
        x = wrap_int32(x + saturating_shift_left(srdhm(x, one_minus), 2))
    return saturating_shift_left(x, 1)


def count_leading_zeros(x) -> np.ndarray:
    """Leading zero bits of x as a uint32 (32 for 0)."""
    x = _as_int64(x) & 0xFFFFFFFF
    bits = np.zeros_like(x)
    for k in range(32):
        bits += (x >> k) > 0
    return 32 - bits


def _softmax_input_multiplier(beta: float, x_scale: float) -> tuple[int, int]:
    real = min(float(beta) * as_float32(x_scale) * (1 << (31 - SOFTMAX_DIFF_INTEGER_BITS)), (1 << 31) - 1.0)
    return quantize_multiplier(real)


def softmax_scale_fits(beta: float, x_scale: float) -> bool:
    """Whether the softmax's input differences are scaled up (beta * x_scale at least 2^-27), as
    its steps take them: a left shift of 0 to 30 before the doubling high multiply."""
    if not float(beta) * as_float32(x_scale) > 0:  # (NaN included)
        return False
    mult, shift = _softmax_input_multiplier(beta, x_scale)
    return mult > 0 and shift >= 0


def softmax_params(beta: float, x_scale: float) -> dict[str, int]:
    """TFLite's int8 SOFTMAX Prepare: the input multiplier, its left shift and diff_min."""
    mult, shift = _softmax_input_multiplier(beta, x_scale)
    radius = ((1 << SOFTMAX_DIFF_INTEGER_BITS) - 1) * (1 << (31 - SOFTMAX_DIFF_INTEGER_BITS)) / (1 << shift)
    return {"multiplier": mult, "left_shift": shift, "diff_min": -int(math.floor(radius))}


def softmax_int8(x, beta: float, x_scale: float, out_dtype: str = "int8") -> np.ndarray:
    """TFLite's int8 softmax over the last axis (output scale 1/256, zero point -128 for int8)."""
    p = softmax_params(beta, x_scale)
    x = _as_int64(x)
    diff = x - x.max(axis=-1, keepdims=True)
    valid = diff >= p["diff_min"]
    scaled = srdhm(wrap_int32(diff << p["left_shift"]), p["multiplier"])
    exps = exp_on_negative_values(scaled)
    sum_of_exps = np.where(valid, rounding_divide_by_pot(exps, SOFTMAX_ACCUM_INTEGER_BITS), 0).sum(axis=-1, keepdims=True)
    sum_of_exps = wrap_int32(sum_of_exps)
    headroom = count_leading_zeros(sum_of_exps)
    bits_over_unit = SOFTMAX_ACCUM_INTEGER_BITS - headroom
    shifted_minus_one = wrap_int32(((sum_of_exps << headroom) & 0xFFFFFFFF) - (1 << 31))
    reciprocal = one_over_one_plus_x_for_x_in_0_1(shifted_minus_one)
    lo, hi = DTYPE_RANGES[out_dtype]
    bits = np.iinfo(out_dtype).bits
    out = rounding_divide_by_pot(srdhm(reciprocal, exps), bits_over_unit + 31 - bits) + lo
    return np.where(valid, np.clip(out, lo, hi), lo).astype(out_dtype)
