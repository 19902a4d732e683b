"""Storage types: element types whose buffers hold other bits than the C++ type kernels compute with.

float16 and bfloat16 are stored as uint16_t; the float8 formats, float4_e2m1fn and the 4- and 2-bit
integers one element per byte (uint8_t), as NumPy (ml_dtypes) holds them. A kernel's Load converts
the bits to float (to int for the narrow integers), a Store converts back, and a Cast to one of
them rounds the value the way the store will (`round_<name>`). The conversions follow ml_dtypes,
which is what the ONNX reference and NumPy compute: floats round to nearest, ties to even; values
past the largest overflow to infinity where the format has one, else to NaN (float4_e2m1fn, which
has neither, saturates); the narrow integers keep their low bits (wrap around).

The helpers are C++ text emitted once into a generated file whose kernels use the type. The float8
tables are made here from ml_dtypes, exactly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from tinsmith.ir.graph import DTYPES


@dataclass(frozen=True)
class StorageType:
    """How kernels read and write one storage type: the buffer's C++ element type, the C++ type
    values are computed in, and the names of the conversion helpers."""

    storage: str  # C++ element type of buffers
    compute: str  # C++ type of values in kernels
    load: str     # bits -> value
    store: str    # value -> bits
    round: str    # value -> value as stored ("" where only the store converts)
    helpers: tuple[str, ...]


_HALF_HELPERS = (
    "inline float f16_to_f32(std::uint16_t h) noexcept {",
    "  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;",
    "  const std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;",
    "  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float",
    "    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;",
    "    return sign ? -magnitude : magnitude;",
    "  }",
    "  const std::uint32_t bits = sign | (exponent == 0x1fu ? 0x7f800000u | (mantissa << 13)",
    "                                                        : ((exponent + 112u) << 23) | (mantissa << 13));",
    "  float f; std::memcpy(&f, &bits, sizeof f); return f;",
    "}",
    "inline std::uint16_t f32_to_f16(float f) noexcept {",
    "  std::uint32_t x; std::memcpy(&x, &f, sizeof x);",
    "  const std::uint32_t sign = (x >> 16) & 0x8000u;",
    "  x &= 0x7fffffffu;",
    "  if (x > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));  // NaN stays NaN",
    "  if (x >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // 65520 and above round to infinity",
    "  if (x < 0x38800000u) {  // below 2^-14: a subnormal, in units of 2^-24 (scaling by 2^24 is exact)",
    "    float magnitude; std::memcpy(&magnitude, &x, sizeof magnitude);",
    "    return static_cast<std::uint16_t>(",
    "        sign | static_cast<std::uint32_t>(tinsmith::math::nearbyint(magnitude * 16777216.0f)));",
    "  }",
    "  // drop 13 mantissa bits, rounding to nearest even; a carry moves into the exponent",
    "  const std::uint32_t rounded = x + 0xfffu + ((x >> 13) & 1u) - (112u << 23);",
    "  return static_cast<std::uint16_t>(sign | (rounded >> 13));",
    "}",
    "inline float round_f16(float f) noexcept { return f16_to_f32(f32_to_f16(f)); }",
)
_BF16_HELPERS = (
    "inline float bf16_to_f32(std::uint16_t h) noexcept {",
    "  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;",
    "  float f; std::memcpy(&f, &bits, sizeof f); return f;",
    "}",
    "inline std::uint16_t f32_to_bf16(float f) noexcept {",
    "  std::uint32_t x; std::memcpy(&x, &f, sizeof x);",
    "  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN",
    "  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);  // nearest, ties to even",
    "}",
    "inline float round_bf16(float f) noexcept { return bf16_to_f32(f32_to_bf16(f)); }",
)


def _float_literal(v: float) -> str:
    if np.isnan(v):
        return f"{'-' if np.signbit(v) else ''}tinsmith::math::kNaN"  # the sign of a NaN survives a round trip
    if np.isinf(v):
        return f"{'-' if v < 0 else ''}tinsmith::math::kInfinity"
    return repr(float(v)) + "f"  # every value of these formats is exact in float


def _rows(items: list[str], per_row: int = 12) -> str:
    return ",\n".join("  " + ", ".join(items[i:i + per_row]) for i in range(0, len(items), per_row))


def _small_float_helpers(name: str, dtype: np.dtype) -> tuple[str, ...]:
    """Decode by a table of the 2^bits codes; encode by a binary search over the positive codes'
    magnitudes (increasing with the code), ties to the even code."""
    bits = 4 if dtype.name.startswith("float4") else 8
    values = np.arange(2 ** bits, dtype=np.uint8).view(dtype).astype(np.float32)
    sign = 1 << (bits - 1)
    positive = values[:sign]
    finite = [c for c in range(sign) if np.isfinite(positive[c])]
    top = max(finite)  # the largest finite code; codes 0..top increase
    with np.errstate(over="ignore"):
        big = np.array([1e30], np.float32).astype(dtype)
    big_code = int(big.view(np.uint8)[0])
    overflow = big_code if big_code != top else None  # infinity or NaN past the largest; None: saturate
    spacing = float(positive[top] - positive[top - 1])
    magnitudes = [float(positive[c]) for c in range(top + 1)] + [float(positive[top]) + spacing]
    nan = np.array([np.nan], np.float32).astype(dtype).view(np.uint8)[0]
    negative_nan = np.array([-np.nan], np.float32).astype(dtype).view(np.uint8)[0]
    negative_zero = int(np.array([-0.0], np.float32).astype(dtype).view(np.uint8)[0])
    signed_zero = negative_zero != 0
    table = _rows([_float_literal(v) for v in values])
    mags = _rows([_float_literal(v) for v in magnitudes])
    past = (f"return static_cast<std::uint8_t>({overflow}u{' | sign' if overflow < sign else ''});"
            if overflow is not None else f"i = {top};")
    set_sign = "sign" if signed_zero else "(i != 0 ? sign : 0u)"
    return (
        f"// {dtype.name}: the value of every code; the magnitudes of codes 0..{top} (increasing), then one step",
        "// past the largest, where rounding overflows",
        f"const float {name}_values[{2 ** bits}] = {{\n{table}}};",
        f"const float {name}_magnitudes[{top + 2}] = {{\n{mags}}};",
        f"inline float {name}_to_f32(std::uint8_t b) noexcept {{ return {name}_values[b & {2 ** bits - 1}u]; }}",
        f"inline std::uint8_t f32_to_{name}(float f) noexcept {{",
        f"  if (tinsmith::math::isnan(f)) return static_cast<std::uint8_t>(tinsmith::math::signbit(f) ? "
        f"{negative_nan}u : {nan}u);",
        f"  const unsigned sign = tinsmith::math::signbit(f) ? {sign}u : 0u;",
        "  const float a = tinsmith::math::fabs(f);",
        f"  int lo = 0, hi = {top + 1};  // magnitudes[lo] <= a < magnitudes[hi], or a past the last",
        f"  if (a >= {name}_magnitudes[hi]) {{ lo = hi; }} else {{",
        "    while (hi - lo > 1) {",
        "      const int mid = (lo + hi) / 2;",
        f"      if ({name}_magnitudes[mid] <= a) lo = mid; else hi = mid;",
        "    }",
        f"    const float below = a - {name}_magnitudes[lo], above = {name}_magnitudes[hi] - a;",
        "    if (above < below || (above == below && hi % 2 == 0)) lo = hi;",
        "  }",
        "  int i = lo;",
        f"  if (i > {top}) {{ {past} }}",
        f"  return static_cast<std::uint8_t>(static_cast<unsigned>(i) | {set_sign});",
        "}",
        f"inline float round_{name}(float f) noexcept {{ return {name}_to_f32(f32_to_{name}(f)); }}",
    )


# float8_e8m0fnu: a power of two 2^(code - 127), or NaN (0xff). ONNX converts by the float32 exponent
# bits, rounding up any fraction (round_mode "up", the default) and saturating at 0xfe; an infinity
# or NaN is 0xff. The value of code 0, 2^-127, is a float32 subnormal that this rule maps to 1, so
# a Cast to the type does not round the value: the store alone converts it, once.
_E8M0_HELPERS = (
    "inline float f8e8m0_to_f32(std::uint8_t b) noexcept {",
    "  if (b == 0xffu) return tinsmith::math::kNaN;",
    "  if (b == 0) return 5.877471754111438e-39f;  // 2^-127, a float32 subnormal",
    "  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 23;",
    "  float f; std::memcpy(&f, &bits, sizeof f); return f;",
    "}",
    "inline std::uint8_t f32_to_f8e8m0(float f) noexcept {",
    "  std::uint32_t x; std::memcpy(&x, &f, sizeof x);",
    "  const std::uint32_t exponent = (x >> 23) & 0xffu;",
    "  if (exponent == 0xffu) return 0xffu;  // NaN and the infinities",
    "  const bool fraction = (x & 0x7fffffu) != 0;",
    "  return static_cast<std::uint8_t>(exponent + (fraction && exponent != 0xfeu ? 1u : 0u));",
    "}",
)


def _narrow_int_helpers(name: str, bits: int, signed: bool) -> tuple[str, ...]:
    mask, half = 2 ** bits - 1, 2 ** (bits - 1)
    load = f"(static_cast<int>(b & {mask}u) ^ {half}) - {half}" if signed else f"static_cast<int>(b & {mask}u)"
    return (
        f"inline int {name}_to_int(std::uint8_t b) noexcept {{ return {load}; }}",
        f"inline std::uint8_t int_to_{name}(int v) noexcept {{ return static_cast<std::uint8_t>("
        f"static_cast<unsigned>(v) & {mask}u); }}",
        f"inline int round_{name}(int v) noexcept {{ return {name}_to_int(int_to_{name}(v)); }}",
    )


def _storage_types() -> dict[str, StorageType]:
    types = {"float16": StorageType("std::uint16_t", "float", "f16_to_f32", "f32_to_f16", "round_f16", _HALF_HELPERS)}
    if "bfloat16" in DTYPES:
        types["bfloat16"] = StorageType("std::uint16_t", "float", "bf16_to_f32", "f32_to_bf16", "round_bf16",
                                        _BF16_HELPERS)
    for dtype, short in (("float8_e4m3fn", "f8e4m3fn"), ("float8_e4m3fnuz", "f8e4m3fnuz"),
                         ("float8_e5m2", "f8e5m2"), ("float8_e5m2fnuz", "f8e5m2fnuz"), ("float4_e2m1fn", "f4e2m1")):
        if dtype in DTYPES:
            types[dtype] = StorageType("std::uint8_t", "float", f"{short}_to_f32", f"f32_to_{short}",
                                       f"round_{short}", _small_float_helpers(short, DTYPES[dtype][0]))
    if "float8_e8m0fnu" in DTYPES:
        types["float8_e8m0fnu"] = StorageType("std::uint8_t", "float", "f8e8m0_to_f32", "f32_to_f8e8m0", "",
                                              _E8M0_HELPERS)
    for dtype, bits, signed in (("int4", 4, True), ("uint4", 4, False), ("int2", 2, True), ("uint2", 2, False)):
        if dtype in DTYPES:
            types[dtype] = StorageType("std::uint8_t", "int", f"{dtype}_to_int", f"int_to_{dtype}",
                                       f"round_{dtype}", _narrow_int_helpers(dtype, bits, signed))
    return types


STORAGE_TYPES: Mapping[str, StorageType] = _storage_types()

