"""Functors with bool data: comparisons, logical ops, IsNaN/IsInf, Where; and Cast."""
from __future__ import annotations

from typing import Any, Mapping

from codegen.generate.backend import CPP
from codegen.generate.functors.elementwise import Formula, elementwise
from codegen.generate.loop_ir import (Binary, Cast, Const, Expr, Load, Select, Store, Unary, const, nest)


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

BITWISE_FORMULAS: dict[str, Formula] = {
    "BitwiseNot": lambda xs, a: Unary("bitnot", xs[0]),
    "BitwiseAnd": lambda xs, a: Binary("&", *xs),
    "BitwiseOr": lambda xs, a: Binary("|", *xs),
    "BitwiseXor": lambda xs, a: Binary("^", *xs),
    "BitShift": lambda xs, a: Binary("<<" if a["direction"] == "LEFT" else ">>", *xs),
}

for _op, _formula in LOGIC_FORMULAS.items():
    CPP.register(_op)(elementwise(_op, _formula))
for _op, _formula in BITWISE_FORMULAS.items():
    CPP.register(_op, epilogue=True)(elementwise(_op, _formula))


@CPP.register("Cast", "CastLike")
def cast(graph, node_id, cluster_id, args, attrs):
    """static_cast element by element (a copy when the types agree). To float16 and bfloat16 the
    value rounds to nearest even, NaN and infinities kept; from a float to an integer it truncates
    toward zero (what ONNX's reference does for values in range)."""
    x, y = args.inputs[0], args.outputs[0]
    same = x.type.dtype == y.type.dtype

    def body(idx):
        load = Load(x.name, idx[0])
        return [Store(y.name, idx[0], load if same else Cast(y.type.dtype, load))]
    return nest((y.type.size,), "i", body)[0]
