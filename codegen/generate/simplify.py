"""Simplification on the loop IR: fold constant index arithmetic and drop trivial loops."""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from codegen.generate.loop_ir import (Assign, Binary, Const, Expr, For, Kernel, Load, Local, Select,
                                      Stmt, Store, Unary, Var)

_INT_FOLD = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def simplify_expr(e: Expr, env: Mapping[str, Expr]) -> Expr:
    """Substitute `env`, fold integer constants, drop +0 and *1 (and integer *0)."""
    if isinstance(e, Var):
        return env.get(e.name, e)
    if isinstance(e, Load):
        return Load(e.buffer, simplify_expr(e.index, env))
    if isinstance(e, Unary):
        return Unary(e.op, simplify_expr(e.a, env))
    if isinstance(e, Select):
        return Select(simplify_expr(e.cond, env), simplify_expr(e.a, env), simplify_expr(e.b, env))
    if not isinstance(e, Binary):
        return e
    a, b = simplify_expr(e.a, env), simplify_expr(e.b, env)
    ints = [isinstance(x, Const) and not x.is_float for x in (a, b)]
    if all(ints) and e.op in _INT_FOLD:
        return Const(_INT_FOLD[e.op](a.value, b.value), False)
    if e.op == "+":
        if ints[0] and a.value == 0:
            return b
        if ints[1] and b.value == 0:
            return a
    if e.op == "*":
        if (ints[0] and a.value == 0) or (ints[1] and b.value == 0):
            return Const(0, False)
        if ints[0] and a.value == 1:
            return b
        if ints[1] and b.value == 1:
            return a
    return Binary(e.op, a, b)


def _simplify_stmts(stmts: tuple[Stmt, ...], env: Mapping[str, Expr]) -> tuple[Stmt, ...]:
    out: list[Stmt] = []
    for s in stmts:
        if isinstance(s, For):
            if s.extent == 1:  # a loop of one iteration: its index is 0
                out.extend(_simplify_stmts(s.body, {**env, s.var: Const(0, False)}))
            elif s.extent > 1:
                out.append(For(s.var, s.extent, _simplify_stmts(s.body, env)))
        elif isinstance(s, Store):
            out.append(Store(s.buffer, simplify_expr(s.index, env), simplify_expr(s.value, env)))
        elif isinstance(s, Local):
            out.append(Local(s.name, simplify_expr(s.init, env)))
        elif isinstance(s, Assign):
            out.append(Assign(s.name, simplify_expr(s.value, env)))
        else:
            out.append(s)
    return tuple(out)


def simplify(kernel: Kernel) -> Kernel:
    """Return the kernel with its body simplified."""
    return replace(kernel, body=_simplify_stmts(kernel.body, {}))
