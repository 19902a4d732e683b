"""Simplification on the loop IR: fold constant index arithmetic and drop trivial loops."""
from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Mapping

from codegen.generate.loop_ir import (Assign, Binary, Cast, Const, Expr, For, Kernel, Load, Local,
                                      Select, Stmt, Store, Unary, Var)

_INT_FOLD = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def simplify_expr(e: Expr, env: Mapping[str, Expr]) -> Expr:
    """Substitute `env`, fold integer constants, drop integer +0 and -0, *1 and /1 (and integer *0)."""
    if isinstance(e, Var):
        return env.get(e.name, e)
    if isinstance(e, Load):
        return Load(e.buffer, simplify_expr(e.index, env))
    if isinstance(e, Unary):
        return Unary(e.op, simplify_expr(e.a, env))
    if isinstance(e, Select):
        return Select(simplify_expr(e.cond, env), simplify_expr(e.a, env), simplify_expr(e.b, env))
    if isinstance(e, Cast):
        return Cast(e.ctype, simplify_expr(e.a, env))
    if not isinstance(e, Binary):
        return e
    a, b = simplify_expr(e.a, env), simplify_expr(e.b, env)
    ints = [isinstance(x, Const) and not x.is_float for x in (a, b)]
    if all(ints) and e.op in _INT_FOLD:
        return Const(_INT_FOLD[e.op](a.value, b.value), False)
    consts = [isinstance(x, Const) for x in (a, b)]
    if e.op == "+":
        if ints[0] and a.value == 0:
            return b
        if ints[1] and b.value == 0:
            return a
    if e.op == "-" and ints[1] and b.value == 0:
        return a
    if e.op == "*":
        if (ints[0] and a.value == 0) or (ints[1] and b.value == 0):
            return Const(0, False)
        # x * 1 is exactly x in floating point too (x + 0.0 is not: -0.0 + 0.0 is +0.0)
        if consts[0] and a.value == 1:
            return b
        if consts[1] and b.value == 1:
            return a
    if e.op == "/" and consts[1] and b.value == 1:
        return a
    return Binary(e.op, a, b)


def _scope_locals(stmts: tuple[Stmt, ...]) -> list[str]:
    """Locals declared in this scope, counting those of one-iteration loops that may be unwrapped into it."""
    names: list[str] = []
    for s in stmts:
        if isinstance(s, Local):
            names.append(s.name)
        elif isinstance(s, For) and s.extent == 1:
            names += _scope_locals(s.body)
    return names


def _simplify_stmts(stmts: tuple[Stmt, ...], env: Mapping[str, Expr]) -> tuple[Stmt, ...]:
    out: list[Stmt] = []
    declared = Counter(_scope_locals(stmts))
    for s in stmts:
        if isinstance(s, For):
            # A loop of one iteration goes and its index becomes 0, unless its body declares a local
            # that something else in this scope declares too: unwrapped, the two would clash.
            if s.extent == 1 and all(declared[n] == 1 for n in _scope_locals(s.body)):
                out.extend(_simplify_stmts(s.body, {**env, s.var: Const(0, False)}))
            elif s.extent >= 1:
                # the loop's own index shadows any outer substitution of the same name
                inner = {k: v for k, v in env.items() if k != s.var}
                out.append(For(s.var, s.extent, _simplify_stmts(s.body, inner)))
        elif isinstance(s, Store):
            out.append(Store(s.buffer, simplify_expr(s.index, env), simplify_expr(s.value, env)))
        elif isinstance(s, Local):
            out.append(Local(s.name, simplify_expr(s.init, env), s.ctype))
        elif isinstance(s, Assign):
            out.append(Assign(s.name, simplify_expr(s.value, env)))
        else:
            out.append(s)
    return tuple(out)


def simplify(kernel: Kernel) -> Kernel:
    """Return the kernel with its body simplified."""
    return replace(kernel, body=_simplify_stmts(kernel.body, {}))
