"""Elementwise primitives: each a row in a table, with its NumPy reference.

References compute float32 data in float64 and round once, so they are the exact answer the
float32 kernels approximate. Integer data stays integer, with C++'s semantics where NumPy's
differ (integer division truncates toward zero).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ops.common import ANY, FLOAT, NUMERIC, broadcast_shapes, require_dtypes
from tinsmith.ops.registry import Attr, InferArgs, OpError, Pattern, define

_erf = np.vectorize(math.erf, otypes=[np.float64])


@dataclass(frozen=True)
class Rule:
    """One elementwise op: its NumPy function of the inputs (and attributes), the element types
    input 0 may have (the others match it unless `mixed`), the output's element type if it is not
    the input's, and the attributes."""

    fn: Callable[..., np.ndarray]
    dtypes: tuple[str, ...] = FLOAT
    out: str | None = None
    attrs: tuple[Attr, ...] = ()
    mixed: bool = False  # inputs may differ in element type (Pow's exponent)


def _where_negative(x, negative):
    return np.where(x < 0, negative, x)


def _selu(x, a):
    return a["gamma"] * np.where(x > 0, x, a["alpha"] * np.exp(x) - a["alpha"])


def _celu(x, a):
    return np.maximum(x, 0) + np.minimum(0, a["alpha"] * (np.exp(x / a["alpha"]) - 1))


UNARY: dict[str, Rule] = {
    "Relu": Rule(lambda x, a: np.maximum(x, 0)),
    "Sigmoid": Rule(lambda x, a: 1 / (1 + np.exp(-x))),
    "Tanh": Rule(lambda x, a: np.tanh(x)),
    "Exp": Rule(lambda x, a: np.exp(x)),
    "Erf": Rule(lambda x, a: _erf(x)),
    "Sqrt": Rule(lambda x, a: np.sqrt(x)),
    "Identity": Rule(lambda x, a: x, ANY),  # a copy (builders copy int64 constants too)
    "Abs": Rule(lambda x, a: np.abs(x), NUMERIC),
    "Neg": Rule(lambda x, a: np.negative(x), NUMERIC),
    "Sign": Rule(lambda x, a: np.sign(x), NUMERIC),
    "Reciprocal": Rule(lambda x, a: 1 / x),
    "Floor": Rule(lambda x, a: np.floor(x)),
    "Ceil": Rule(lambda x, a: np.ceil(x)),
    "Round": Rule(lambda x, a: np.round(x)),  # ties to even, as ONNX says
    "Log": Rule(lambda x, a: np.log(x)),
    "Sin": Rule(lambda x, a: np.sin(x)),
    "Cos": Rule(lambda x, a: np.cos(x)),
    "Tan": Rule(lambda x, a: np.tan(x)),
    "Asin": Rule(lambda x, a: np.arcsin(x)),
    "Acos": Rule(lambda x, a: np.arccos(x)),
    "Atan": Rule(lambda x, a: np.arctan(x)),
    "Sinh": Rule(lambda x, a: np.sinh(x)),
    "Cosh": Rule(lambda x, a: np.cosh(x)),
    "Asinh": Rule(lambda x, a: np.arcsinh(x)),
    "Acosh": Rule(lambda x, a: np.arccosh(x)),
    "Atanh": Rule(lambda x, a: np.arctanh(x)),
    "Softplus": Rule(lambda x, a: np.logaddexp(x, 0)),
    "Softsign": Rule(lambda x, a: x / (1 + np.abs(x))),
    "Mish": Rule(lambda x, a: x * np.tanh(np.logaddexp(x, 0))),
    "LeakyRelu": Rule(lambda x, a: _where_negative(x, a["alpha"] * x), attrs=(Attr("alpha", "float", 0.01),)),
    "Elu": Rule(lambda x, a: _where_negative(x, a["alpha"] * (np.exp(x) - 1)),
                attrs=(Attr("alpha", "float", 1.0),)),
    "Selu": Rule(_selu, attrs=(Attr("alpha", "float", 1.67326319217681884765625),
                               Attr("gamma", "float", 1.05070102214813232421875))),
    "Celu": Rule(_celu, attrs=(Attr("alpha", "float", 1.0),)),
    "HardSigmoid": Rule(lambda x, a: np.clip(a["alpha"] * x + a["beta"], 0, 1),
                        attrs=(Attr("alpha", "float", 0.2), Attr("beta", "float", 0.5))),
    "HardSwish": Rule(lambda x, a: x * np.clip(x / 6 + 0.5, 0, 1)),
    "ThresholdedRelu": Rule(lambda x, a: np.where(x > a["alpha"], x, 0), attrs=(Attr("alpha", "float", 1.0),)),
    "Shrink": Rule(lambda x, a: np.where(x < -a["lambd"], x + a["bias"],
                                         np.where(x > a["lambd"], x - a["bias"], 0)),
                   attrs=(Attr("bias", "float", 0.0), Attr("lambd", "float", 0.5))),
    "Swish": Rule(lambda x, a: x / (1 + np.exp(-a["alpha"] * x)), attrs=(Attr("alpha", "float", 1.0),)),
}


def _truncating_divide(a, b):
    if a.dtype.name in FLOAT:  # ml_dtypes' bfloat16 is a float whose NumPy kind is 'V', not 'f'
        return a / b
    # C++ integer division truncates toward zero; NumPy's // floors
    floor = np.floor_divide(a, b)
    return floor + ((np.mod(a, b) != 0) & ((a < 0) != (b < 0)))


def _mod(a, b, attrs):
    if attrs["fmod"]:
        return np.fmod(a, b)  # the sign of the dividend, as C's fmod and %
    return np.mod(a, b)  # the sign of the divisor, as Python's %


BINARY: dict[str, Rule] = {
    "Add": Rule(lambda a, b, at: a + b, NUMERIC),
    "Sub": Rule(lambda a, b, at: a - b, NUMERIC),
    "Mul": Rule(lambda a, b, at: a * b, NUMERIC),
    "Div": Rule(lambda a, b, at: _truncating_divide(a, b), NUMERIC),
    "Pow": Rule(lambda a, b, at: np.power(a.astype(np.float64), b), NUMERIC, mixed=True),
    "Mod": Rule(_mod, NUMERIC, attrs=(Attr("fmod", "int", 0, (0, 1)),)),
    "PRelu": Rule(lambda x, slope, at: _where_negative(x, slope * x)),
}

# Ops of one or more inputs, all broadcast together.
VARIADIC: dict[str, Rule] = {
    "Max": Rule(lambda xs: functools.reduce(np.maximum, xs), NUMERIC),
    "Min": Rule(lambda xs: functools.reduce(np.minimum, xs), NUMERIC),
    "Sum": Rule(lambda xs: functools.reduce(np.add, xs)),
    "Mean": Rule(lambda xs: functools.reduce(np.add, xs) / len(xs)),
}


def _wide(x: np.ndarray | None) -> np.ndarray | None:
    """float32 data as float64, for a reference computed without intermediate rounding."""
    return x.astype(np.float64) if x is not None and x.dtype == np.float32 else x


def _as(value, dtype: np.dtype) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(value).astype(dtype)


def _infer(rule: Rule):
    def infer(args: InferArgs) -> list[TensorType]:
        present = [i for i, t in enumerate(args.types) if t is not None]
        dtype = require_dtypes(args, rule.dtypes, [present[0]] if rule.mixed else present)
        if rule.mixed:
            for i in present[1:]:
                require_dtypes(args, rule.dtypes, [i])
        shape = broadcast_shapes([args.types[i].shape for i in present])
        return [TensorType(rule.out or dtype, shape)]
    return infer


def _unary_reference(rule: Rule):
    def reference(xs, attrs):
        x = xs[0]
        with np.errstate(all="ignore"):
            return [_as(rule.fn(_wide(x), attrs), np.dtype(rule.out or x.dtype))]
    return reference


def _binary_reference(rule: Rule):
    def reference(xs, attrs):
        a, b = xs
        with np.errstate(all="ignore"):
            return [_as(rule.fn(_wide(a), _wide(b), attrs), np.dtype(rule.out or a.dtype))]
    return reference


def _variadic_reference(rule: Rule):
    def reference(xs, attrs):
        with np.errstate(all="ignore"):
            return [_as(rule.fn([_wide(x) for x in xs]), xs[0].dtype)]
    return reference


def define_table(table: Mapping[str, Rule], inputs: int | tuple[int, int]) -> None:
    """Register every row of a table of elementwise rules taking `inputs` inputs (1, 2 or variadic)."""
    make_reference = {1: _unary_reference, 2: _binary_reference}.get(inputs, _variadic_reference)
    for name, rule in table.items():
        define(name, inputs=inputs, infer=_infer(rule), reference=make_reference(rule), attrs=rule.attrs,
               pattern=Pattern.ELEMENTWISE if inputs == 1 else Pattern.BROADCAST)


define_table(UNARY, 1)
define_table(BINARY, 2)
define_table(VARIADIC, (1, -1))


# --- Clip: bounds from optional scalar inputs (opset 11+) or attributes (opset 6) -------------
def _infer_clip(args: InferArgs) -> list[TensorType]:
    dtype = require_dtypes(args, NUMERIC, [i for i, t in enumerate(args.types) if t is not None])
    for i in (1, 2):
        if i < len(args.types) and args.types[i] is not None and args.types[i].size != 1:
            raise OpError(f"Clip's {('min', 'max')[i - 1]} must hold one value, got {args.types[i]}", input=i)
    given = [i for i in (1, 2) if i < len(args.types) and args.types[i] is not None]
    for i, name in ((1, "min"), (2, "max")):
        if args.attrs[name] is not None and i in given:
            raise OpError(f"give Clip's {name} either as attribute or as input, not both", attr=name)
    return [TensorType(dtype, args.types[0].shape)]


def clip_bounds(xs: Sequence[np.ndarray | None], attrs: Mapping) -> tuple:
    """Clip's (min, max) as numbers or None, from inputs 1 and 2 or the attributes."""
    lo = xs[1] if len(xs) > 1 and xs[1] is not None else attrs["min"]
    hi = xs[2] if len(xs) > 2 and xs[2] is not None else attrs["max"]
    return (None if lo is None else np.asarray(lo).reshape(-1)[0],
            None if hi is None else np.asarray(hi).reshape(-1)[0])


def _clip_reference(xs, attrs):
    lo, hi = clip_bounds(xs, attrs)
    y = xs[0]
    if lo is not None:
        y = np.maximum(y, lo)
    if hi is not None:
        y = np.minimum(y, hi)  # applied last: when min > max, every element becomes max
    return [_as(y, xs[0].dtype)]


define("Clip", inputs=(1, 3), infer=_infer_clip, reference=_clip_reference, pattern=Pattern.BROADCAST,
       attrs=[Attr("min", "float", None), Attr("max", "float", None)])
