"""The one rewrite engine on the loop IR: rules as pattern tables, applied bottom-up to a fixpoint.

A rule is (node class, function); the function returns a replacement or None when the pattern does
not match. `RULES` is the table every kernel goes through: it folds constant integer index
arithmetic and drops the identities that are exact in floating point too (integer +0, *0; *1, /1).
A caller may pass a table of its own to `simplify` or `rewrite`. Statement-level simplification
(loops of one iteration disappear, their index becomes 0) is structural and stays below.
"""
from __future__ import annotations

import functools
from collections import Counter
from dataclasses import replace
from typing import Callable, Mapping, Optional, Sequence

from tinsmith.generate.loop_ir import (INDEX, Assign, Binary, Const, Expr, For, If, Kernel, Local, Stmt,
                                      Store, Var, map_expr)

Rule = tuple[type, Callable[[Expr], Optional[Expr]]]


def _int(e: Expr, value: int | None = None) -> bool:
    """An integer (not float) constant, of `value` if given."""
    return isinstance(e, Const) and not e.is_float and e.width == 1 and (value is None or e.value == value)


def _one(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 1 and e.width == 1


_INT_FOLD = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}

RULES: tuple[Rule, ...] = (
    # constant index arithmetic folds (division and modulo do not: C++ truncates, Python floors)
    (Binary, lambda e: Const(_INT_FOLD[e.op](e.a.value, e.b.value), INDEX)
     if e.op in _INT_FOLD and _int(e.a) and _int(e.b) else None),
    # integer +0, -0 (float x + 0.0 is not x: -0.0 + 0.0 is +0.0)
    (Binary, lambda e: e.b if e.op == "+" and _int(e.a, 0) else None),
    (Binary, lambda e: e.a if e.op in ("+", "-") and _int(e.b, 0) else None),
    # integer *0
    (Binary, lambda e: Const(0, INDEX) if e.op == "*" and (_int(e.a, 0) or _int(e.b, 0)) else None),
    # x * 1 and x / 1 are exactly x in floating point too
    (Binary, lambda e: e.b if e.op == "*" and _one(e.a) else None),
    (Binary, lambda e: e.a if e.op in ("*", "/") and _one(e.b) else None),
)


@functools.lru_cache(maxsize=16)
def _rewriter(rules: tuple[Rule, ...]) -> Callable[[Expr], Expr]:
    """The function that rewrites one node by `rules` (made once per table: a kernel's every
    expression goes through the same one)."""
    by_type: dict[type, list] = {}  # node type -> the rules for it, in the table's order

    def rules_for(node: Expr) -> list:
        kind = type(node)
        if kind not in by_type:
            by_type[kind] = [fn for cls, fn in rules if issubclass(kind, cls)]
        return by_type[kind]

    def at_node(node: Expr) -> Expr:
        for _ in range(64):  # a rule table is a terminating system; the bound only guards mistakes
            for fn in rules_for(node):
                new = fn(node)
                if new is not None:
                    node = new
                    break
            else:
                return node
        return node
    return at_node


def rewrite(e: Expr, rules: Sequence[Rule]) -> Expr:
    """`e` with every node rewritten by the first matching rule, repeatedly, children first."""
    return map_expr(e, _rewriter(tuple(rules)))


def substitute(e: Expr, env: Mapping[str, Expr]) -> Expr:
    """`e` with the variables named in `env` replaced."""
    if not env:
        return e
    return map_expr(e, lambda n: env.get(n.name, n) if isinstance(n, Var) else n)


def simplify_expr(e: Expr, env: Mapping[str, Expr], rules: Sequence[Rule] = RULES) -> Expr:
    """Substitute `env`, then rewrite with `rules` (by default the table every kernel goes through)."""
    return rewrite(substitute(e, env), rules)


def _scope_locals(stmts: tuple[Stmt, ...]) -> list[str]:
    """Locals declared in this scope, counting those of one-iteration loops that may be unwrapped into it."""
    names: list[str] = []
    for s in stmts:
        if isinstance(s, Local):
            names.append(s.name)
        elif isinstance(s, For) and s.extent == s.step:
            names += _scope_locals(s.body)
    return names


def _simplify_stmts(stmts: tuple[Stmt, ...], env: Mapping[str, Expr], rules) -> tuple[Stmt, ...]:
    out: list[Stmt] = []
    declared = Counter(_scope_locals(stmts))
    s_ = lambda e: simplify_expr(e, env, rules)
    for s in stmts:
        if isinstance(s, For):
            # A loop of one iteration goes and its index becomes 0, unless its body declares a local
            # that something else in this scope declares too: unwrapped, the two would clash.
            if s.extent == s.step and all(declared[n] == 1 for n in _scope_locals(s.body)):
                out.extend(_simplify_stmts(s.body, {**env, s.var: Const(0, INDEX)}, rules))
            elif s.extent >= 1:
                # the loop's own index shadows any outer substitution of the same name
                inner = {k: v for k, v in env.items() if k != s.var}
                out.append(For(s.var, s.extent, _simplify_stmts(s.body, inner, rules), s.step))
        elif isinstance(s, If):
            out.append(If(s_(s.cond), _simplify_stmts(s.body, env, rules)))
        elif isinstance(s, Store):
            out.append(Store(s.buffer, s_(s.index), s_(s.value),
                             None if s.at is None else tuple(s_(a) for a in s.at)))
        elif isinstance(s, Local):
            out.append(Local(s.name, s_(s.init), s.dtype, s.width))
        elif isinstance(s, Assign):
            out.append(Assign(s.name, s_(s.value)))
        else:
            out.append(s)
    return tuple(out)


def simplify(kernel: Kernel, rules: Sequence[Rule] = RULES) -> Kernel:
    """Return the kernel with its body simplified."""
    return replace(kernel, body=_simplify_stmts(kernel.body, {}, rules))
