"""The loop-level IR functors emit: a small C-like language on scalars.

Loops have static bounds; tensors are flat buffers addressed by integer expressions;
locals hold accumulators (float unless they say otherwise), and Cast converts between
element types. One renderer (render.py) turns it into C++, and
simplification (simplify.py) works on it the same way for every op.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union


# --- expressions ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Const:
    """A literal; `is_float` decides between a float and an integer literal."""

    value: float | int
    is_float: bool = True


@dataclass(frozen=True)
class Var:
    """A loop index or a local."""

    name: str


@dataclass(frozen=True)
class Load:
    """Element `index` of tensor `buffer` (a value name)."""

    buffer: str
    index: "Expr"


@dataclass(frozen=True)
class Binary:
    """Arithmetic or comparison; op is one of BINARY_OPS."""

    op: str
    a: "Expr"
    b: "Expr"


@dataclass(frozen=True)
class Unary:
    """A math function of one argument; op is one of UNARY_OPS."""

    op: str
    a: "Expr"


@dataclass(frozen=True)
class Select:
    """cond ? a : b"""

    cond: "Expr"
    a: "Expr"
    b: "Expr"


@dataclass(frozen=True)
class Cast:
    """`a` converted to C++ type `ctype` (as static_cast does: float to integer truncates)."""

    ctype: str
    a: "Expr"


Expr = Union[Const, Var, Load, Binary, Unary, Select, Cast]

# max and min are the float functions (fmax, fmin); integer kernels compare with Select.
BINARY_OPS = frozenset({"+", "-", "*", "/", "%", "<", "<=", ">", ">=", "==", "!=", "&&", "||",
                        "max", "min", "pow", "fmod"})
# round is to nearest, ties to even (the default floating-point rounding mode); not is logical.
UNARY_OPS = frozenset({"neg", "exp", "log", "tanh", "erf", "sqrt", "abs", "floor", "ceil", "round",
                       "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
                       "atanh", "log1p", "not", "isnan", "isinf"})


# --- statements -----------------------------------------------------------------------------
@dataclass(frozen=True)
class For:
    """for (int var = 0; var < extent; ++var) body"""

    var: str
    extent: int
    body: tuple["Stmt", ...]


@dataclass(frozen=True)
class Store:
    """buffer[index] = value"""

    buffer: str
    index: Expr
    value: Expr


@dataclass(frozen=True)
class Local:
    """Declare a local of C++ type `ctype` with an initial value."""

    name: str
    init: Expr
    ctype: str = "float"


@dataclass(frozen=True)
class Assign:
    """Assign a new value to a local."""

    name: str
    value: Expr


@dataclass(frozen=True)
class Comment:
    text: str


Stmt = Union[For, Store, Local, Assign, Comment]


@dataclass(frozen=True)
class Param:
    """A tensor a kernel reads or writes: value name, element C++ type, element count."""

    buffer: str
    ctype: str
    size: int
    writes: bool


@dataclass(frozen=True)
class Kernel:
    """One function of generated code, named after its node."""

    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]
    doc: str = ""


# --- construction helpers -------------------------------------------------------------------
def const(v: float) -> Const:
    return Const(float(v), True)


def index(v: int) -> Const:
    return Const(int(v), False)


def add(a: Expr, b: Expr) -> Expr:
    return Binary("+", a, b)


def mul(a: Expr, b: Expr) -> Expr:
    return Binary("*", a, b)


def flat_index(idx: Sequence[Expr], shape: Sequence[int]) -> Expr:
    """Row-major offset of index `idx` in a tensor of `shape`."""
    result: Expr = index(0)
    stride = 1
    for i, d in reversed(list(zip(idx, shape))):
        result = add(mul(i, index(stride)), result)
        stride *= d
    return result


def broadcast_index(idx: Sequence[Expr], out_shape: Sequence[int], in_shape: Sequence[int]) -> Expr:
    """Offset in an input of `in_shape` read at output index `idx` under NumPy broadcasting."""
    lead = len(out_shape) - len(in_shape)
    sub = [index(0) if d == 1 else idx[lead + k] for k, d in enumerate(in_shape)]
    return flat_index(sub, in_shape)


def nest(shape: Sequence[int], prefix: str, body) -> tuple[tuple[Stmt, ...], list[Var]]:
    """Loops over `shape` with index variables prefix0, prefix1, ...; `body(vars)` gives the inner
    statements. Returns (statements, vars)."""
    vars_ = [Var(f"{prefix}{k}") for k in range(len(shape))]
    stmts: tuple[Stmt, ...] = tuple(body(vars_))
    for var, extent in reversed(list(zip(vars_, shape))):
        stmts = (For(var.name, extent, stmts),)
    return stmts, vars_
