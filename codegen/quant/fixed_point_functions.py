"""1 / sqrt(x) and log(x) on gemmlowp-style fixed-point numbers, and the TFLite integer kernels
built on them (RSQRT, L2_NORMALIZATION, LOG_SOFTMAX), as TFLite's reference kernels define them.

Written from TFLite's documented arithmetic (GetInvSqrtQuantizedMultiplierExp,
log_x_for_x_greater_than_or_equal_to_1, the int8 LogSoftmax), step by step on NumPy int64 arrays
holding int32 values, with every rounding and saturation where TFLite has one. A fixed-point
number with I integer bits is an int32 raw value r standing for r / 2^(31 - I); the product of two
is a saturating rounding doubling high multiply (fixed_point.srdhm), sums are int32 sums that wrap.
The generated kernels spell the same steps in the loop IR (functors/fixed_point_steps.py).
"""
from __future__ import annotations

import math

import numpy as np

from tinsmith.quant import fixed_point as fp


def _q31(real: float) -> int:
    return fp.round_half_away(real * 2 ** 31)


# --- 1 / sqrt(x): Newton-Raphson on Q3.28 ---------------------------------------------------------
INV_SQRT_ONE_Q3 = 1 << 28  # 1.0 in Q3.28, the iteration's start
INV_SQRT_HALF_THREE_Q3 = (1 << 28) + (1 << 27)  # 1.5 in Q3.28
INV_SQRT_ITERATIONS = 5
HALF_SQRT_2 = _q31(math.sqrt(2.0) / 2.0)  # the normalised input is x / 2, so 1/sqrt needs sqrt(2)/2
INV_SQRT_START_SHIFT = 11  # the exponent of an input already in [2^27, 2^29)


def shift_left_saturating(x, exponent) -> np.ndarray:
    """x * 2^exponent saturated to int32, for a per-element exponent >= 0 (gemmlowp's
    SaturatingRoundingMultiplyByPOTParam: the product leaves int32 exactly when it saturates). A
    negative exponent counts as 0: log_x passes -1 for an x <= 0 (a LOG_SOFTMAX sum that wrapped),
    which TFLite leaves undefined; the generated steps do the same."""
    exponent = np.maximum(np.asarray(exponent, np.int64), 0)
    return np.clip(np.asarray(x, np.int64) << exponent, fp.INT32_MIN, fp.INT32_MAX)


def leading_zeros(x) -> np.ndarray:
    """Leading zero bits of int32 values read as uint32 (32 for 0)."""
    return fp.count_leading_zeros(x)


def inv_sqrt_multiplier(x) -> tuple[np.ndarray, np.ndarray]:
    """TFLite's GetInvSqrtQuantizedMultiplierExp with reverse_shift -1: (multiplier, shift) with
    1 / sqrt(x) = multiplier / 2^31 * 2^shift, for int32 x >= 0 (0 and 1 give (INT32_MAX, 0)).

    x is normalised into [2^27, 2^29) by a shift of an even number of bits (shrunk by 4 once
    when at or above 2^29), its half read as Q3.28, five Newton steps x <- x (3/2 - a/2 x^2)
    from 1, the result times sqrt(2)/2; a negative exponent is folded into the multiplier."""
    v = np.asarray(x, np.int64)
    big = v >= (1 << 29)
    v = np.where(big, v // 4, v)
    shift = INV_SQRT_START_SHIFT + big.astype(np.int64)
    pairs = np.maximum((leading_zeros(np.maximum(v, 1)) - 1) // 2 - 1, 0)
    shift = shift - pairs
    v = v << (2 * pairs)
    half_input = fp.rounding_divide_by_pot(v >> 1, 1)
    y = np.full_like(v, INV_SQRT_ONE_Q3)
    for _ in range(INV_SQRT_ITERATIONS):
        y3 = fp.saturating_shift_left(fp.srdhm(fp.srdhm(y, y), y), 6)  # Q9 -> Q3
        y = fp.saturating_shift_left(fp.wrap_int32(fp.srdhm(INV_SQRT_HALF_THREE_Q3, y) - fp.srdhm(half_input, y3)), 3)
    y = fp.srdhm(y, HALF_SQRT_2)
    y = np.where(shift < 0, fp.wrap_int32(y << np.maximum(-shift, 0)), y)
    shift = np.maximum(shift, 0)
    tiny = np.asarray(x, np.int64) <= 1
    return np.where(tiny, fp.INT32_MAX, y), np.where(tiny, 0, -shift)


# --- log(x) for x >= 1: a rational approximation about 2^-1/4 -----------------------------------
LOG_2 = _q31(math.log(2.0))
SQRT_SQRT_HALF = _q31(math.sqrt(math.sqrt(0.5)))
SQRT_HALF = _q31(math.sqrt(0.5))
ONE_QUARTER = _q31(0.25)
_FOURTH_ROOT_2 = math.sqrt(math.sqrt(2.0))
LOG_ALPHA_N = _q31(11.0 / 240.0 * _FOURTH_ROOT_2)
LOG_ALPHA_D = _q31(1.0 / 20.0 * _FOURTH_ROOT_2)
LOG_ALPHA_I = _q31(2.0 / _FOURTH_ROOT_2 - _FOURTH_ROOT_2)
LOG_ALPHA_F = _q31(1.0 / 4.0 * _FOURTH_ROOT_2)


def rounding_half_sum(a, b) -> np.ndarray:
    """(a + b) / 2 rounded half away from zero (gemmlowp's RoundingHalfSum, in int64)."""
    total = np.asarray(a, np.int64) + np.asarray(b, np.int64)
    nudged = total + np.where(total >= 0, 1, -1)
    return np.sign(nudged) * (np.abs(nudged) // 2)


def log_x(x, input_integer_bits: int, output_integer_bits: int) -> np.ndarray:
    """TFLite's log_x_for_x_greater_than_or_equal_to_1: log of a positive fixed-point number with
    `input_integer_bits`, as a fixed-point number with `output_integer_bits` (accumulated with one
    more). The input's raw value is normalised twice, as is and times sqrt(1/2), and the closer
    one kept, so that its mantissa r lies about 2^-1/4; log r comes from a rational function of
    q = 2 (r - 2^-1/4), the exponent times log 2 is added."""
    accum_bits = output_integer_bits + 1
    shifted_quarter = fp.rounding_divide_by_pot(ONE_QUARTER, accum_bits)  # Rescale to the accumulator
    z_a = np.asarray(x, np.int64)
    headroom_a_plus_1 = leading_zeros(z_a)
    r_a = shift_left_saturating(fp.srdhm(shift_left_saturating(z_a, headroom_a_plus_1 - 1), SQRT_HALF), 1)
    pow_2_a = np.clip(shift_left_saturating(input_integer_bits - headroom_a_plus_1, 31 - accum_bits)
                      + shifted_quarter, fp.INT32_MIN, fp.INT32_MAX)
    z_b = fp.srdhm(z_a, SQRT_HALF)
    headroom_b = leading_zeros(z_b) - 1
    r_b = shift_left_saturating(z_a, headroom_b)
    pow_2_b = np.clip(shift_left_saturating(input_integer_bits - headroom_b, 31 - accum_bits)
                      - shifted_quarter, fp.INT32_MIN, fp.INT32_MAX)
    r = np.minimum(r_a, r_b)
    pow_2 = np.maximum(pow_2_a, pow_2_b)
    p = rounding_half_sum(r, SQRT_SQRT_HALF)
    q = fp.wrap_int32(2 * fp.wrap_int32(r - SQRT_SQRT_HALF))
    common_sq = fp.srdhm(q, q)
    num = fp.wrap_int32(fp.srdhm(q, r) + fp.srdhm(fp.srdhm(q, common_sq), LOG_ALPHA_N))
    inner = fp.wrap_int32(LOG_ALPHA_I + q + fp.srdhm(LOG_ALPHA_D, common_sq))
    denom_minus_one = fp.wrap_int32(fp.srdhm(p, inner) + fp.srdhm(LOG_ALPHA_F, q))
    recip_denom = fp.one_over_one_plus_x_for_x_in_0_1(denom_minus_one)
    num_scaled = fp.rounding_divide_by_pot(num, accum_bits)
    total = fp.wrap_int32(fp.srdhm(pow_2, LOG_2) + fp.srdhm(num_scaled, recip_denom))
    return fp.saturating_shift_left(total, accum_bits - output_integer_bits)


# --- the operators ----------------------------------------------------------------------------
RSQRT_SHIFT = 20  # TFLite keeps 1/sqrt(v) as an integer scaled by 2^20 between its two rescalings


def rsqrt_multiplier(x_scale: float, y_scale: float) -> tuple[int, int]:
    """RSQRT's output multiplier: 1 / (sqrt(x_scale) * y_scale), in double from the float32 scales."""
    return fp.quantize_multiplier(1.0 / (math.sqrt(fp.as_float32(x_scale)) * fp.as_float32(y_scale)))


def rsqrt(x, x_zero_point: int, multiplier: int, shift: int, y_zero_point: int, dtype: str) -> np.ndarray:
    """TFLite's integer RSQRT of each element: 1/sqrt(x - zero point) as a multiplier and exponent,
    applied to 1 scaled by 2^20, then rescaled to the output; the type's largest value where
    x equals the zero point. (TFLite Micro refuses inputs below the zero point; they give the
    largest value too.)"""
    v = np.asarray(x, np.int64) - x_zero_point
    inv, inv_shift = inv_sqrt_multiplier(np.maximum(v, 0))
    data = fp.multiply_by_quantized_multiplier(np.ones_like(v), inv, inv_shift + RSQRT_SHIFT)
    out = fp.multiply_by_quantized_multiplier(data, multiplier, shift - RSQRT_SHIFT) + y_zero_point
    return np.where(v <= 0, fp.DTYPE_RANGES[dtype][1], fp.saturate(out, dtype)).astype(dtype)


L2_OUTPUT_BITS = 7  # the int8 output in Q0.7 (scale 1/128), whatever the output tensor declares


def l2_normalization_int8(x, x_zero_point: int) -> np.ndarray:
    """TFLite's int8 L2_NORMALIZATION over the last axis: each row's sum of squares (less the zero
    point) to 1/sqrt as a multiplier, each element times it in Q0.7, saturated."""
    v = np.asarray(x, np.int64) - x_zero_point
    sums = fp.wrap_int32((v * v).sum(axis=-1, keepdims=True))
    multiplier, shift = inv_sqrt_multiplier(sums)
    out = fp.multiply_by_quantized_multiplier(v, multiplier, shift + L2_OUTPUT_BITS)
    return fp.saturate(out, "int8")


LOG_SOFTMAX_OUTPUT_INTEGER_BITS = 4
LOG_SOFTMAX_OUTPUT_QUANT = (16.0 / 256, 127)  # TFLite's fixed int8 output: [-16, 0] in 1/16ths


def log_softmax_params(x_scale: float) -> dict[str, int]:
    """TFLite's int8 LOG_SOFTMAX Prepare (beta 1): the softmax's input multiplier, left shift and
    diff_min, and the reverse multiplier that maps a Q5.26 value back to input steps."""
    p = fp.softmax_params(1.0, x_scale)
    reverse, reverse_shift = fp.quantize_multiplier((1 << (31 - p["left_shift"])) / float(p["multiplier"]))
    return {**p, "reverse_multiplier": reverse, "reverse_shift": reverse_shift}


def log_softmax_scale_fits(x_scale: float) -> bool:
    """Whether TFLite's LOG_SOFTMAX Prepare takes this input scale: above 2^-26, so that the input
    multiplier is at least 1 and the reverse one below 1 (TFLite Micro stops on the others)."""
    return fp.as_float32(x_scale) > 2.0 ** -26 and log_softmax_params(x_scale)["reverse_shift"] <= 0


def log_softmax_int8(x, x_scale: float) -> np.ndarray:
    """TFLite's int8 LOG_SOFTMAX over the last axis (output scale 16/256, zero point 127): per row
    the max, the Q12.19 sum of exp(x - max), its log in Q5.26, and each output
    (x - max) - log(sum) rounded to 1/16ths from 127 down; elements too far below the max, -128."""
    p = log_softmax_params(x_scale)
    x = np.asarray(x, np.int64)
    diff = x - x.max(axis=-1, keepdims=True)
    scaled = fp.srdhm(fp.wrap_int32(diff << p["left_shift"]), p["multiplier"])
    exps = fp.rounding_divide_by_pot(fp.exp_on_negative_values(scaled), fp.SOFTMAX_ACCUM_INTEGER_BITS)
    sums = fp.wrap_int32(np.where(diff >= p["diff_min"], exps, 0).sum(axis=-1, keepdims=True))
    log_sum = log_x(sums, fp.SOFTMAX_ACCUM_INTEGER_BITS, fp.SOFTMAX_DIFF_INTEGER_BITS)
    reach = fp.multiply_by_quantized_multiplier(fp.wrap_int32(log_sum + fp.INT32_MIN), p["reverse_multiplier"],
                                                p["reverse_shift"])
    adjusted_diff_min = np.maximum(p["diff_min"] - 1, reach)
    out_shift = 31 - fp.SOFTMAX_DIFF_INTEGER_BITS - LOG_SOFTMAX_OUTPUT_INTEGER_BITS
    out = fp.rounding_divide_by_pot(fp.wrap_int32(scaled - log_sum), out_shift) + 127
    return np.where(diff > adjusted_diff_min, np.clip(out, -128, 127), -128).astype(np.int8)


def squared_difference_multipliers(a_scale: float, b_scale: float, y_scale: float, left_shift: int) -> dict[str, int]:
    """TFLite's SQUARED_DIFFERENCE Prepare: both inputs rescaled to twice the larger scale (raised
    by 2^left_shift: 7 for int8, 0 for int16), and the squared difference's multiplier, that
    scale squared over 2^(2 left_shift) times the output scale (that product in float32)."""
    p = fp.add_multipliers(a_scale, b_scale, y_scale, left_shift)
    twice_max = 2 * max(fp.as_float32(a_scale), fp.as_float32(b_scale))
    denominator = float(np.float32(np.float32(1 << (2 * left_shift)) * np.float32(y_scale)))
    y_multiplier, y_shift = fp.quantize_multiplier(twice_max * twice_max / denominator)
    return {**p, "y_multiplier": y_multiplier, "y_shift": y_shift}


def count_leading_sign_bits(x) -> np.ndarray:
    """The bits after the sign bit that repeat it, of int32 values (31 for 0 and -1, 0 for INT32_MIN)."""
    x = np.asarray(x, np.int64)
    return fp.count_leading_zeros(np.where(x < 0, ~x, x)) - 1


def reciprocal(x) -> tuple[np.ndarray, np.ndarray]:
    """TFLite's GetReciprocal with 31 integer digits, for int32 x > 0: (raw, bits over unit) with
    1 / x = raw / 2^31 / 2^bits, raw from x normalised to [1, 2) by its leading zeros and
    one_over_one_plus_x_for_x_in_0_1 of that less one."""
    x = np.asarray(x, np.int64)
    headroom = fp.count_leading_zeros(x)
    shifted_minus_one = fp.wrap_int32(((x << headroom) & 0xFFFFFFFF) - (1 << 31))
    return fp.one_over_one_plus_x_for_x_in_0_1(shifted_minus_one), 31 - headroom


def rounding_divide_by_pot_as_built(x, exponent) -> np.ndarray:
    """gemmlowp's RoundingDivideByPOT of int32 x as the host's TFLite Micro computes it for any
    exponent: below 32 a rounding shift; from 32 on (outside its contract, undefined in C++) its mask
    (1 << exponent) - 1 truncates to all ones and x86 takes the shift count modulo 32, so the result
    is x >> (exponent - 32), plus one unless x < 0 (held at INT32_MAX: for x = INT32_MAX and 32
    the interpreter's int32 sum overflows; QDiv's quotients stay below 2^31 - 2^24)."""
    x, exponent = np.asarray(x, np.int64), np.asarray(exponent, np.int64)
    wide = np.minimum((x >> np.maximum(exponent - 32, 0)) + (x >= 0), fp.INT32_MAX)
    return np.where(exponent < 32, fp.rounding_divide_by_pot(x, np.minimum(exponent, 31)), wide)


DIV_MAX_SHIFT = 22  # int8 offsets keep 22 leading sign bits: a larger ratio would need a left shift


def div_multiplier(a_scale: float, b_scale: float, y_scale: float) -> tuple[int, int, float]:
    """TFLite's int8 DIV Prepare: (multiplier, shift) of a_scale / (b_scale y_scale) in float32
    scales, and that ratio."""
    real = fp.as_float32(a_scale) / (fp.as_float32(b_scale) * fp.as_float32(y_scale))
    return (*fp.quantize_multiplier(real), real)


def divide_int8(a, b, multiplier: int, shift: int, y_zero_point: int, lo: int, hi: int) -> np.ndarray:
    """TFLite's quantized DIV of offset inputs a / b (int32, b != 0; y = y_zp + M a / b with M =
    a_scale / (b_scale y_scale) as (multiplier, shift)): the signs moved so b > 0; a normalised
    by its leading sign bits times b's fixed-point reciprocal (a rounding doubling high multiply);
    that quotient times M, shifted right by the reciprocal's and a's exponents less M's with one
    rounding; plus the zero point, clamped to [lo, hi]. Where that shift reaches 32 (a quotient
    that rounds to 0 with a large divisor, 0 / b among them) TFLite's arithmetic is undefined in C++
    and this follows the host interpreter (rounding_divide_by_pot_as_built)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    a, b = np.where(b < 0, -a, a), np.abs(b)
    inverse, bits_over_unit = reciprocal(b)
    headroom = count_leading_sign_bits(a)
    quotient = fp.srdhm(fp.wrap_int32(a << headroom), inverse)
    right = bits_over_unit + headroom - shift  # >= 0 for int8 offsets (headroom >= 22) while shift <= 22
    return np.clip(rounding_divide_by_pot_as_built(fp.srdhm(quotient, multiplier), right) + y_zero_point, lo, hi)


def divide_int8_or_by_zero(a, b, multiplier: int, shift: int, y_zero_point: int, lo: int, hi: int) -> np.ndarray:
    """divide_int8 for any offset divisor: one at 0 (division by zero, which TFLite's kernel leaves
    undefined) gives the clamp bound of a's sign, the zero point for 0 / 0."""
    a, b = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(b, np.int64))
    quotient = divide_int8(a, np.where(b == 0, 1, b), multiplier, shift, y_zero_point, lo, hi)
    by_zero = np.where(a > 0, hi, np.where(a < 0, lo, y_zero_point))
    return np.where(b == 0, by_zero, quotient)
