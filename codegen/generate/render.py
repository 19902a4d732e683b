"""The one renderer from loop IR to C++."""
from __future__ import annotations

import numpy as np

from codegen.escape import c_comment

from codegen.generate.loop_ir import (Assign, Binary, Cast, Comment, Const, Expr, For, Kernel, Load,
                                      Local, Select, Stmt, Store, Unary, Var)

# C++ spelling of each math function, float overloads from <cmath>. nearbyint rounds ties to even in
# the default rounding mode, and unlike rint never raises the inexact flag.
_UNARY_CPP = {"exp": "std::exp", "log": "std::log", "tanh": "std::tanh", "erf": "std::erf",
              "sqrt": "std::sqrt", "abs": "std::fabs", "floor": "std::floor", "ceil": "std::ceil",
              "round": "std::nearbyint", "sin": "std::sin", "cos": "std::cos", "tan": "std::tan",
              "asin": "std::asin", "acos": "std::acos", "atan": "std::atan", "sinh": "std::sinh",
              "cosh": "std::cosh", "asinh": "std::asinh", "acosh": "std::acosh", "atanh": "std::atanh",
              "log1p": "std::log1p", "isnan": "std::isnan", "isinf": "std::isinf"}
_CALL_CPP = {"max": "std::fmax", "min": "std::fmin", "pow": "std::pow", "fmod": "std::fmod"}

BUFFER_PREFIX = "t_"  # kernel parameters are t_<value>: never clashes with loop indices or locals


def float_literal(v: float) -> str:
    """The shortest float literal that reads back (in C++ or NumPy) as the float32 nearest to `v`.

    `v` is rounded to float32 first: printing a float64 with 9 digits and letting the compiler round
    that again can land on the neighbouring float32 (double rounding)."""
    with np.errstate(over="ignore"):
        f = np.float32(v)
    if np.isnan(f):
        return "NAN"
    if np.isinf(f):
        return "-INFINITY" if f < 0 else "INFINITY"
    if f == 0 or 1e-4 <= abs(f) < 1e8:
        text = np.format_float_positional(f, unique=True, trim="0")  # 0.5, 2.0, -0.0, 12345678.0
    else:
        text = np.format_float_scientific(f, unique=True, trim="-")  # 1e-05, 1.2345679e+08
    return text + "f"


# Binding strength of infix operators; higher binds tighter (C++ precedence).
_PRECEDENCE = {"*": 6, "/": 6, "%": 6, "+": 5, "-": 5, "<": 4, "<=": 4, ">": 4, ">=": 4,
               "==": 3, "!=": 3, "&&": 2, "||": 1}


_COMPARISONS = frozenset({"<", "<=", ">", ">=", "==", "!="})


def _operand(e: Expr, parent: str, context: int) -> str:
    """An operand of infix `parent`. Where C++ needs no parentheses but -Wall asks for them
    (-Wparentheses: && inside ||, a comparison inside a comparison), they are added too."""
    if isinstance(e, Binary) and ((parent == "||" and e.op == "&&") or
                                  (parent in _COMPARISONS and e.op in _COMPARISONS)):
        return f"({render_expr(e)})"
    return render_expr(e, context)


def render_expr(e: Expr, context: int = 0) -> str:
    """C++ text of an expression; parentheses only where C++ precedence would regroup it, so the
    evaluation order of float arithmetic is exactly the IR's."""
    if isinstance(e, Const):
        text = float_literal(e.value) if e.is_float else str(int(e.value))
        return f"({text})" if text.startswith("-") and context > 0 else text
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Load):
        return f"{BUFFER_PREFIX}{e.buffer}[{render_expr(e.index)}]"
    if isinstance(e, Unary):
        if e.op in ("neg", "not"):
            sign = "-" if e.op == "neg" else "!"
            inner = render_expr(e.a, 7)
            # "--x" would be C++'s decrement operator
            return f"{sign}({inner})" if inner.startswith("-") else f"{sign}{inner}"
        return f"{_UNARY_CPP[e.op]}({render_expr(e.a)})"
    if isinstance(e, Cast):
        return f"static_cast<{e.ctype}>({render_expr(e.a)})"
    if isinstance(e, Select):
        text = f"{render_expr(e.cond, 1)} ? {render_expr(e.a)} : {render_expr(e.b)}"
        return f"({text})" if context > 0 else text
    if isinstance(e, Binary):
        if e.op in _CALL_CPP:
            return f"{_CALL_CPP[e.op]}({render_expr(e.a)}, {render_expr(e.b)})"
        prec = _PRECEDENCE[e.op]
        # Left-associative: the right operand needs parentheses at equal precedence.
        text = f"{_operand(e.a, e.op, prec)} {e.op} {_operand(e.b, e.op, prec + 1)}"
        return f"({text})" if prec < context else text
    raise TypeError(f"not a loop IR expression: {e!r}")


_COMPOUND = frozenset({"+", "-", "*", "/"})  # x = x op e  ->  x op= e


def render_stmts(stmts: tuple[Stmt, ...], indent: int) -> list[str]:
    """C++ lines of a statement list at the given indent (in spaces)."""
    pad = " " * indent
    lines: list[str] = []
    for s in stmts:
        if isinstance(s, For):
            lines.append(f"{pad}for (int {s.var} = 0; {s.var} < {s.extent}; ++{s.var}) {{")
            lines += render_stmts(s.body, indent + 2)
            lines.append(f"{pad}}}")
        elif isinstance(s, Store):
            lines.append(f"{pad}{BUFFER_PREFIX}{s.buffer}[{render_expr(s.index)}] = "
                         f"{render_expr(s.value)};")
        elif isinstance(s, Local):
            lines.append(f"{pad}{s.ctype} {s.name} = {render_expr(s.init)};")
        elif isinstance(s, Assign):
            v = s.value
            if isinstance(v, Binary) and v.op in _COMPOUND and v.a == Var(s.name):
                lines.append(f"{pad}{s.name} {v.op}= {render_expr(v.b)};")
            else:
                lines.append(f"{pad}{s.name} = {render_expr(v)};")
        elif isinstance(s, Comment):
            lines.append(f"{pad}// {c_comment(s.text)}")
        else:
            raise TypeError(f"not a loop IR statement: {s!r}")
    return lines


def render_signature(kernel: Kernel, aliased: frozenset[str] = frozenset()) -> str:
    """The kernel's C++ parameter list; the `aliased` tensors share bytes, so they are not __restrict."""
    params = [f"{'' if p.writes else 'const '}{p.ctype}* {'' if p.buffer in aliased else '__restrict '}"
              f"{BUFFER_PREFIX}{p.buffer}" for p in kernel.params]
    return f"void {kernel.name}({', '.join(params)}) noexcept"


def render_kernel(kernel: Kernel, aliased: frozenset[str] = frozenset()) -> str:
    """C++ definition of one kernel (`aliased`: parameters pointing at the same bytes)."""
    lines = [f"{render_signature(kernel, aliased)} {{"] + render_stmts(kernel.body, 2) + ["}"]
    return "\n".join(lines)
