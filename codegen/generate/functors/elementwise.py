"""Elementwise functors: one scalar formula per op, with NumPy broadcasting of inputs.

A formula maps the loaded operands (and the node's attributes) to the output element. Integer
and bool data use the INTEGER_FORMULAS row where there is one: the float functions (fmax, fabs,
fmod) would round int64 through double.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tinsmith.generate.backend import CPP, FLOATS, NUMBERS, same, takes
from tinsmith.generate.functors import elementwise_nest as nest_
from tinsmith.generate.functors.elementwise_nest import AXES, ElementwiseNest
from tinsmith.ir.graph import DTYPES
from tinsmith.generate.loop_ir import FLOAT_DTYPES, Binary, Cast, Const, Expr, Load, Select, Unary, const, in_double, index

Formula = Callable[[Sequence[Expr], Mapping[str, Any]], Expr]


def _select_negative(x: Expr, negative: Expr) -> Expr:
    return Select(Binary("<", x, const(0)), negative, x)


def _softplus(x: Expr) -> Expr:
    # log(1 + e^x) without overflow: x + log1p(e^-x) for positive x
    return Select(Binary(">", x, const(0)), Binary("+", x, Unary("log1p", Unary("exp", Unary("neg", x)))),
                  Unary("log1p", Unary("exp", x)))


def _clamp01(e: Expr) -> Expr:
    return Binary("max", const(0), Binary("min", const(1), e))


def _mod(a: Expr, b: Expr, fmod: bool, rem: str) -> Expr:
    """fmod (the sign of the dividend), or the remainder with the sign of the divisor."""
    r = Binary(rem, a, b)
    if fmod or (a.dtype or "").startswith("u"):  # unsigned: both signs agree (-Wtype-limits)
        return r
    zero = Const(0, rem == "fmod")
    wrong_sign = Binary("&&", Binary("!=", r, zero), Binary("!=", Binary("<", r, zero), Binary("<", b, zero)))
    return Select(wrong_sign, Binary("+", r, b), r)


def _integer_sign(x: Expr) -> Expr:
    positive = Select(Binary(">", x, index(0)), index(1), index(0))
    if _unsigned(x):  # never below 0 (and `x < 0` is a -Wtype-limits warning)
        return positive
    return Select(Binary(">", x, index(0)), index(1), Select(Binary("<", x, index(0)), index(-1), index(0)))


def _unsigned(e: Expr) -> bool:
    return (e.dtype or "").startswith("u")


def _select_max(a: Expr, b: Expr) -> Expr:
    return Select(Binary(">", b, a), b, a)


def _select_min(a: Expr, b: Expr) -> Expr:
    return Select(Binary("<", b, a), b, a)


def _math(fn: str) -> Formula:
    return lambda xs, a: Unary(fn, xs[0])


def _fold(fn: Callable[[Expr, Expr], Expr]) -> Formula:
    def formula(xs, a):
        result = xs[0]
        for x in xs[1:]:
            result = fn(result, x)
        return result
    return formula


UNARY_FORMULAS: dict[str, Formula] = {
    "Relu": lambda xs, a: Binary("max", xs[0], const(0)),
    "Sigmoid": lambda xs, a: Binary("/", const(1), Binary("+", const(1), Unary("exp", Unary("neg", xs[0])))),
    "Tanh": lambda xs, a: Unary("tanh", xs[0]),
    "Exp": lambda xs, a: Unary("exp", xs[0]),
    "Erf": lambda xs, a: Unary("erf", xs[0]),
    "Sqrt": lambda xs, a: Unary("sqrt", xs[0]),
    "Identity": lambda xs, a: xs[0],
    "Abs": lambda xs, a: Unary("abs", xs[0]),
    "Neg": lambda xs, a: Unary("neg", xs[0]),
    "Sign": lambda xs, a: Select(Binary(">", xs[0], const(0)), const(1),
                                 Select(Binary("<", xs[0], const(0)), const(-1), xs[0])),
    "Reciprocal": lambda xs, a: Binary("/", const(1), xs[0]),
    "Floor": lambda xs, a: Unary("floor", xs[0]),
    "Ceil": lambda xs, a: Unary("ceil", xs[0]),
    "Round": lambda xs, a: Unary("round", xs[0]),
    "Log": lambda xs, a: Unary("log", xs[0]),
    **{op: _math(op.lower())
       for op in ("Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh")},
    "Softplus": lambda xs, a: _softplus(xs[0]),
    "Softsign": lambda xs, a: Binary("/", xs[0], Binary("+", const(1), Unary("abs", xs[0]))),
    "Mish": lambda xs, a: Binary("*", xs[0], Unary("tanh", _softplus(xs[0]))),
    "LeakyRelu": lambda xs, a: _select_negative(xs[0], Binary("*", const(a["alpha"]), xs[0])),
    "Elu": lambda xs, a: _select_negative(xs[0], Binary("*", const(a["alpha"]),
                                                        Binary("-", Unary("exp", xs[0]), const(1)))),
    "Selu": lambda xs, a: Select(Binary(">", xs[0], const(0)), Binary("*", const(a["gamma"]), xs[0]),
                                 Binary("*", const(a["gamma"]), Binary("-", Binary("*", const(a["alpha"]),
                                                                                   Unary("exp", xs[0])),
                                                                       const(a["alpha"])))),
    "Celu": lambda xs, a: Binary("+", Binary("max", const(0), xs[0]), Binary(
        "min", const(0), Binary("*", const(a["alpha"]), Binary(
            "-", Unary("exp", Binary("/", xs[0], const(a["alpha"]))), const(1))))),
    "HardSigmoid": lambda xs, a: _clamp01(Binary("+", Binary("*", const(a["alpha"]), xs[0]), const(a["beta"]))),
    "HardSwish": lambda xs, a: Binary("*", xs[0], _clamp01(Binary("+", Binary("*", const(1 / 6), xs[0]),
                                                                  const(0.5)))),
    "ThresholdedRelu": lambda xs, a: Select(Binary(">", xs[0], const(a["alpha"])), xs[0], const(0)),
    "Shrink": lambda xs, a: Select(Binary("<", xs[0], const(-a["lambd"])), Binary("+", xs[0], const(a["bias"])),
                                   Select(Binary(">", xs[0], const(a["lambd"])),
                                          Binary("-", xs[0], const(a["bias"])), const(0))),
    "Swish": lambda xs, a: Binary("/", xs[0], Binary("+", const(1), Unary("exp", Binary(
        "*", const(-a["alpha"]), xs[0])))),
}

BINARY_FORMULAS: dict[str, Formula] = {
    "Add": lambda xs, a: Binary("+", *xs),
    "Sub": lambda xs, a: Binary("-", *xs),
    "Mul": lambda xs, a: Binary("*", *xs),
    "Div": lambda xs, a: Binary("/", *xs),
    "Pow": lambda xs, a: Binary("pow", *xs),
    "Mod": lambda xs, a: _mod(*xs, a["fmod"], "fmod"),
    "PRelu": lambda xs, a: _select_negative(xs[0], Binary("*", xs[1], xs[0])),
}

# Ops of any number of inputs; like the others, output element i reads only element i (broadcast)
# of each input.
NARY_FORMULAS: dict[str, Formula] = {
    "Max": _fold(lambda p, q: Binary("max", p, q)),
    "Min": _fold(lambda p, q: Binary("min", p, q)),
    "Sum": _fold(lambda p, q: Binary("+", p, q)),
    "Mean": lambda xs, a: Binary("/", _fold(lambda p, q: Binary("+", p, q))(xs, a), const(len(xs))),
}

INTEGER_FORMULAS: dict[str, Formula] = {
    "Relu": lambda xs, a: _select_max(xs[0], index(0)),
    "Abs": lambda xs, a: _select_negative(xs[0], Unary("neg", xs[0])),
    "Sign": lambda xs, a: _integer_sign(xs[0]),
    "Mod": lambda xs, a: _mod(*xs, a["fmod"], "%"),
    "Max": _fold(_select_max),
    "Min": _fold(_select_min),
}


# Integer arithmetic wraps around on overflow (ONNX follows NumPy): C++ promotes int8, uint8 and int16
# to int, where nothing overflows, and stores the low bits; wider types (and uint16, whose product
# overflows int) compute in the unsigned type of their width, where overflow is defined to wrap.
_WRAPPING = {"uint16": "uint32", "int32": "uint32", "int64": "uint64"}
_WRAPPED_OPS = frozenset({"+", "-", "*"})


def wrapping(e: Expr, dtype: str) -> Expr:
    """`e` with its +, - and * on `dtype` data computed modulo 2^bits (no signed overflow)."""
    if dtype not in _WRAPPING:
        return e
    unsigned = _WRAPPING[dtype]

    def wrap(x: Expr) -> Expr:
        if isinstance(x, Binary) and x.op in _WRAPPED_OPS:
            return Cast(dtype, Binary(x.op, Cast(unsigned, wrap(x.a)), Cast(unsigned, wrap(x.b))))
        if isinstance(x, Unary) and x.op == "neg":
            return Cast(dtype, Binary("-", Const(0, unsigned), Cast(unsigned, wrap(x.a))))
        return x
    return wrap(e)


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def at_input_precision(functor):
    """The functor, computing a float64 input's node in float64 throughout: its float32 literals
    and locals (the formulas are written in float32 terms) widened."""
    def wrapped(graph, node_id, cluster_id, args, attrs):
        body = functor(graph, node_id, cluster_id, args, attrs)
        return in_double(body) if args.inputs[0].type.dtype == "float64" else body
    wrapped.__name__, wrapped.__doc__ = functor.__name__, functor.__doc__
    return wrapped


@dataclass(frozen=True)
class ScalarFormula:
    """The micro-kernel of a formula: its value at one element, integer +, - and * wrapping where
    the output keeps the inputs' integer type."""

    formula: Formula
    attrs: Mapping[str, Any]
    wraps: str | None = None  # the integer type whose arithmetic wraps around

    def __call__(self, xs: Sequence[Expr | None], idx: Sequence[Expr]) -> tuple[list, Expr]:
        value = self.formula([x for x in xs if x is not None], self.attrs)
        return [], wrapping(value, self.wraps) if self.wraps else value


def elementwise(op: str, formula: Formula):
    """A functor applying `formula` (or op's INTEGER_FORMULAS row, for integer or bool data) to the
    inputs at every output element: the elementwise nest with a ScalarFormula micro-kernel."""
    @at_input_precision
    def functor(graph, node_id, cluster_id, args, attrs):
        dtype = args.inputs[0].type.dtype
        chosen = formula if is_float(dtype) else INTEGER_FORMULAS.get(op, formula)
        wraps = dtype if args.outputs[0].type.dtype == dtype and not is_float(dtype) else None
        return nest_.elementwise(ElementwiseNest.of(args), AXES, ScalarFormula(chosen, attrs, wraps))
    return functor


# The element types each formula kernel is written for: float math unless listed here (the integer
# rows of INTEGER_FORMULAS, and the operators C++ spells alike for every number type).
ARITY = {**{op: 1 for op in UNARY_FORMULAS}, **{op: 2 for op in BINARY_FORMULAS}, **{op: 1 for op in NARY_FORMULAS}}
ELEMENTWISE_TYPES = {
    "Identity": same(NUMBERS | {"bool"}),
    **{op: same(NUMBERS, ARITY[op]) for op in ("Relu", "Abs", "Neg", "Sign", "Add", "Sub", "Mul", "Div", "Mod",
                                                "Max", "Min", "Sum")},
    "Pow": takes(NUMBERS, NUMBERS, out=NUMBERS),
}

for _op, _formula in {**UNARY_FORMULAS, **BINARY_FORMULAS, **NARY_FORMULAS}.items():
    CPP.register(_op, types=ELEMENTWISE_TYPES.get(_op, same(FLOATS, ARITY[_op])), epilogue=True)(elementwise(_op, _formula))


@dataclass(frozen=True)
class Clamp:
    """Clip's micro-kernel: min(max(x, lo), hi), a bound None where it clamps nothing."""

    lo: Expr | None
    hi: Expr | None
    floating: bool

    def __call__(self, xs: Sequence[Expr | None], idx: Sequence[Expr]) -> tuple[list, Expr]:
        y = xs[0]
        if self.lo is not None:
            y = Binary("max", y, self.lo) if self.floating else _select_max(y, self.lo)
        if self.hi is not None:
            y = Binary("min", y, self.hi) if self.floating else _select_min(y, self.hi)
        return [], y


@CPP.register("Clip", types=same(NUMBERS, 3), epilogue=True)
def clip(graph, node_id, cluster_id, args, attrs):
    """min(max(x, lo), hi): each bound a scalar input, an attribute, or absent."""
    x = args.inputs[0]
    floating = is_float(x.type.dtype)
    bounds = []
    for i, name in ((1, "min"), (2, "max")):
        if i < len(args.inputs) and args.inputs[i] is not None:
            bounds.append(Load(args.inputs[i].name, index(0)))
        elif attrs[name] is not None:
            bounds.append(Const(attrs[name] if floating else int(attrs[name]), floating))
        else:
            bounds.append(None)
    lo, hi = bounds
    if not floating:  # a constant bound at or past the type's limit clamps nothing (-Wtype-limits)
        info = np.iinfo(DTYPES[x.type.dtype][0])
        lo = None if isinstance(lo, Const) and lo.value <= info.min else lo
        hi = None if isinstance(hi, Const) and hi.value >= info.max else hi
    return nest_.elementwise(ElementwiseNest.of(args), AXES, Clamp(lo, hi, floating))


__all__ = ["BINARY_FORMULAS", "INTEGER_FORMULAS", "NARY_FORMULAS", "UNARY_FORMULAS", "elementwise"]
