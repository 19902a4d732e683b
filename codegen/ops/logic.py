"""Primitives with bool data: comparisons, logical ops, IsNaN/IsInf, Where, and Cast between types."""
from __future__ import annotations

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ir.graph import DTYPES, largest_finite
from tinsmith.ops.common import ANY, CASTABLE, FLOAT, INTEGER, NUMERIC, broadcast_shapes, require_dtypes
from tinsmith.ops.elementwise import Rule, define_table
from tinsmith.ops.registry import Attr, InferArgs, OpError, Pattern, define


def _isinf(x, a):
    return (np.isposinf(x) & bool(a["detect_positive"])) | (np.isneginf(x) & bool(a["detect_negative"]))


LOGIC_UNARY: dict[str, Rule] = {
    "Not": Rule(lambda x, a: np.logical_not(x), ("bool",)),
    "IsNaN": Rule(lambda x, a: np.isnan(x), FLOAT, out="bool"),
    "IsInf": Rule(_isinf, FLOAT, out="bool", attrs=(Attr("detect_negative", "int", 1, (0, 1)),
                                                     Attr("detect_positive", "int", 1, (0, 1)))),
}

LOGIC_BINARY: dict[str, Rule] = {
    "Equal": Rule(lambda a, b, at: a == b, ANY, out="bool"),
    "Less": Rule(lambda a, b, at: a < b, NUMERIC, out="bool"),
    "LessOrEqual": Rule(lambda a, b, at: a <= b, NUMERIC, out="bool"),
    "Greater": Rule(lambda a, b, at: a > b, NUMERIC, out="bool"),
    "GreaterOrEqual": Rule(lambda a, b, at: a >= b, NUMERIC, out="bool"),
    "And": Rule(lambda a, b, at: np.logical_and(a, b), ("bool",)),
    "Or": Rule(lambda a, b, at: np.logical_or(a, b), ("bool",)),
    "Xor": Rule(lambda a, b, at: np.logical_xor(a, b), ("bool",)),
}

def _bit_shift(a, b, attrs):
    """ONNX's BitShift: bits shifted out are lost (a left shift wraps), a right shift of a signed
    value is arithmetic, and a shift by a negative count or the width or more gives 0 (-1 for a
    right shift of a negative value), as NumPy's shifts do."""
    a, b = np.broadcast_arrays(a, b)
    bits = np.iinfo(a.dtype).bits
    valid = (b >= 0) & (b < bits)
    count = np.where(valid, b, 0).astype(np.uint64)
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    if attrs["direction"] == "LEFT":
        shifted = np.left_shift(a.view(unsigned).astype(np.uint64), count).astype(unsigned).view(a.dtype)
        return np.where(valid, shifted, 0).astype(a.dtype)
    shifted = np.right_shift(a, count.astype(a.dtype))
    return np.where(valid, shifted, np.where(a < 0, -1, 0)).astype(a.dtype)


# Bitwise ops on integers: C++'s &, |, ^, ~ and shifts, results wrapped to the type's width.
BITWISE_UNARY: dict[str, Rule] = {
    "BitwiseNot": Rule(lambda x, a: np.invert(x), INTEGER),
}
BITWISE_BINARY: dict[str, Rule] = {
    "BitwiseAnd": Rule(lambda a, b, at: np.bitwise_and(a, b), INTEGER),
    "BitwiseOr": Rule(lambda a, b, at: np.bitwise_or(a, b), INTEGER),
    "BitwiseXor": Rule(lambda a, b, at: np.bitwise_xor(a, b), INTEGER),
    "BitShift": Rule(_bit_shift, INTEGER, attrs=(Attr("direction", "string", choices=("LEFT", "RIGHT")),)),
}

define_table(LOGIC_UNARY, 1)
define_table(LOGIC_BINARY, 2)
define_table(BITWISE_UNARY, 1)
define_table(BITWISE_BINARY, 2)


def _infer_where(args: InferArgs) -> list[TensorType]:
    require_dtypes(args, ("bool",), [0])
    dtype = require_dtypes(args, ANY, [1, 2])
    return [TensorType(dtype, broadcast_shapes([t.shape for t in args.types]))]


define("Where", pattern=Pattern.BROADCAST, inputs=3, infer=_infer_where,
       reference=lambda xs, attrs: [np.where(xs[0], xs[1], xs[2]).astype(xs[1].dtype)])


# --- Cast, CastLike: C++'s static_cast (float to integer truncates toward zero) ------------------
def _cast(x: np.ndarray, dtype: str, saturate: int) -> np.ndarray:
    """ml_dtypes' conversions (what ONNX's reference does); to a float8 format with saturate, values
    past the largest (infinities too) clamp to it first, NaN stays NaN."""
    if dtype == "float8_e8m0fnu":
        return _to_e8m0(x, saturate)
    limit = largest_finite(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        if limit is not None and saturate:
            x = np.clip(x.astype(np.float32), -limit, limit)
        return x.astype(TensorType(dtype, ()).numpy_dtype)


def _to_e8m0(x: np.ndarray, saturate: int) -> np.ndarray:
    """ONNX's conversion to float8_e8m0fnu (round_mode "up"): the float32 exponent bits, plus one
    where there is a fraction (not past 0xfe with saturate); NaN and infinities are 0xff."""
    bits = x.astype(np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    up = ((bits & 0x7FFFFF) != 0) & (exponent != 0xFF) & ~((exponent == 0xFE) & bool(saturate))
    return np.where(exponent == 0xFF, 0xFF, exponent + up).astype(np.uint8).view(DTYPES["float8_e8m0fnu"][0])


def _check_e8m0(args: InferArgs, dtype: str) -> None:
    if dtype == "float8_e8m0fnu" and args.attrs["round_mode"] != "up":
        raise OpError(f"a cast to float8_e8m0fnu rounds up only, not {args.attrs['round_mode']!r}",
                      attr="round_mode")


def _infer_cast(args: InferArgs) -> list[TensorType]:
    require_dtypes(args, CASTABLE)
    _check_e8m0(args, args.attrs["to"])
    return [TensorType(args.attrs["to"], args.types[0].shape)]


def _infer_cast_like(args: InferArgs) -> list[TensorType]:
    require_dtypes(args, CASTABLE)
    require_dtypes(args, CASTABLE, [1])
    _check_e8m0(args, args.types[1].dtype)
    return [TensorType(args.types[1].dtype, args.types[0].shape)]


# saturate concerns the float8 formats; round_mode float8_e8m0fnu, where Tinsmith rounds up only.
_FLOAT8_ATTRS = [Attr("saturate", "int", 1, (0, 1)), Attr("round_mode", "string", "up")]
define("Cast", pattern=Pattern.ELEMENTWISE, inputs=1, attrs=[Attr("to", "dtype"), *_FLOAT8_ATTRS], infer=_infer_cast,
       reference=lambda xs, attrs: [_cast(xs[0], attrs["to"], attrs["saturate"])])
define("CastLike", pattern=Pattern.ELEMENTWISE, inputs=2, attrs=_FLOAT8_ATTRS, infer=_infer_cast_like,
       reference=lambda xs, attrs: [_cast(xs[0], xs[1].dtype.name, attrs["saturate"])])
