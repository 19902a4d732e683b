"""Functors with bool data: comparisons, logical ops, IsNaN/IsInf, Where; and Cast."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tinsmith.generate.backend import ANY_TYPES, CPP, FLOATS, INTEGERS, NUMBERS, same, takes
from tinsmith.generate.functors import elementwise_nest as nest_
from tinsmith.generate.functors.elementwise import Formula, elementwise
from tinsmith.generate.functors.elementwise_nest import ElementwiseNest, flat
from tinsmith.generate.loop_ir import Binary, Cast, Const, Expr, Select, Unary, const
from tinsmith.ir.graph import DTYPES, largest_finite


def _isinf(x: Expr, a: Mapping[str, Any]) -> Expr:
    if a["detect_positive"] and a["detect_negative"]:
        return Unary("isinf", x)
    if a["detect_positive"]:
        return Binary("==", x, const(float("inf")))
    if a["detect_negative"]:
        return Binary("==", x, const(float("-inf")))
    return Const(0, False)


LOGIC_FORMULAS: dict[str, Formula] = {
    "Not": lambda xs, a: Unary("not", xs[0]),
    "IsNaN": lambda xs, a: Unary("isnan", xs[0]),
    "IsInf": lambda xs, a: _isinf(xs[0], a),
    "Equal": lambda xs, a: Binary("==", *xs),
    "Less": lambda xs, a: Binary("<", *xs),
    "LessOrEqual": lambda xs, a: Binary("<=", *xs),
    "Greater": lambda xs, a: Binary(">", *xs),
    "GreaterOrEqual": lambda xs, a: Binary(">=", *xs),
    "And": lambda xs, a: Binary("&&", *xs),
    "Or": lambda xs, a: Binary("||", *xs),
    "Xor": lambda xs, a: Binary("!=", *xs),
    "Where": lambda xs, a: Select(*xs),
}

def _bit_shift(x: Expr, count: Expr, direction: str) -> Expr:
    """ONNX's BitShift without C++'s undefined cases: a left shift runs on an unsigned type of at
    least int's width (bits shifted out are lost, the store keeps the low bits), and a count that is
    negative or not below the width gives 0, or -1 for a right shift of a negative value."""
    dtype, count_dtype = x.dtype, count.dtype
    bits = 8 * DTYPES[dtype][0].itemsize
    out_of_range = Binary(">=", count, Const(bits, count_dtype))
    if not count_dtype.startswith("u"):  # an unsigned count is never negative (-Wtype-limits)
        out_of_range = Binary("||", Binary("<", count, Const(0, count_dtype)), out_of_range)
    signed = not dtype.startswith("u")
    if direction == "LEFT":
        wide = "uint64" if bits == 64 else "uint32"
        return Select(out_of_range, Const(0, dtype), Cast(dtype, Binary("<<", Cast(wide, x), count)))
    beyond = Select(Binary("<", x, Const(0, dtype)), Const(-1, dtype), Const(0, dtype)) if signed else Const(0, dtype)
    return Select(out_of_range, beyond, Binary(">>", x, count))


BITWISE_FORMULAS: dict[str, Formula] = {
    "BitwiseNot": lambda xs, a: Unary("bitnot", xs[0]),
    "BitwiseAnd": lambda xs, a: Binary("&", *xs),
    "BitwiseOr": lambda xs, a: Binary("|", *xs),
    "BitwiseXor": lambda xs, a: Binary("^", *xs),
    "BitShift": lambda xs, a: _bit_shift(*xs, a["direction"]),
}

# The element types each logic kernel is written for.
_COMPARED = NUMBERS | {"bool"}
LOGIC_TYPES = {
    "Not": same("bool"), "And": same("bool", 2), "Or": same("bool", 2), "Xor": same("bool", 2),
    "IsNaN": takes(FLOATS, out="bool"), "IsInf": takes(FLOATS, out="bool"),
    **{op: takes(_COMPARED, _COMPARED, out="bool") for op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual")},
    "Where": takes("bool", None, None),
}

for _op, _formula in LOGIC_FORMULAS.items():
    CPP.register(_op, types=LOGIC_TYPES[_op])(elementwise(_op, _formula))
for _op, _formula in BITWISE_FORMULAS.items():
    CPP.register(_op, types=same(INTEGERS, 2), epilogue=True)(elementwise(_op, _formula))


@dataclass(frozen=True)
class Convert:
    """Cast's micro-kernel: the element converted (as it is where the types agree), clamped into a
    float8 format's range first with saturate."""

    to: str
    limit: float | None  # the largest finite value of the saturated format

    def __call__(self, xs: Sequence[Expr | None], idx: Sequence[Expr]) -> tuple[list, Expr]:
        value = xs[0]
        if value.dtype == self.to:
            return [], value
        if self.limit is not None:  # saturate: clamp into the float8 range (NaN compares false)
            value = Select(Binary(">", value, const(self.limit)), const(self.limit),
                           Select(Binary("<", value, const(-self.limit)), const(-self.limit), value))
        return [], Cast(self.to, value)


@CPP.register("Cast", "CastLike", types=ANY_TYPES)
def cast(graph, node_id, cluster_id, args, attrs):
    """static_cast element by element (a copy when the types agree). To float16 and bfloat16 the
    value rounds to nearest even, NaN and infinities kept; from a float to an integer it truncates
    toward zero (what ONNX's reference does for values in range); to a float8 format with saturate
    (the default) values past its range clamp to the largest finite value."""
    y = args.outputs[0].type.dtype
    limit = largest_finite(y) if attrs["saturate"] else None
    return nest_.elementwise(ElementwiseNest.of(args), flat(), Convert(y, limit))
