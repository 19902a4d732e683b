"""Fusion on the loop IR: an elementwise consumer computed where its producer's kernel stores.

The consumer's own functor gives its formula: a loop nest over its output with one Store. Each
Store of the producer to the fused value becomes a local holding the value and a Store of the
consumer's formula at the same element (the `at` coordinates bind the consumer's loop indices;
its loads of the fused value read the local). A vector store gets a vector epilogue where every
operation has a vector form (loads of inputs broadcast along the last axis become splats);
otherwise the epilogue runs lane by lane.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

from tinsmith.generate.loop_ir import (INDEX, Binary, Broadcast, Const, Expr, For, If, Lane, Load, Local, Select,
                                      Stmt, Store, Unary, Var, flat_index, map_expr)
from tinsmith.generate.simplify import simplify_expr, substitute


class NotFusable(Exception):
    """The consumer's or producer's loop IR is not of the form fusion needs."""


def elementwise_template(body: Sequence[Stmt], out: str, shape: Sequence[int]
                         ) -> tuple[Callable[[Sequence[Expr]], Mapping[str, Expr]], Expr]:
    """From a consumer's loop nest, the formula of its output element and a function mapping the
    element's coordinates to the nest's loop indices."""
    stmts, loops = tuple(body), []
    while len(stmts) == 1 and isinstance(stmts[0], For) and stmts[0].step == 1:
        loops.append((stmts[0].var, stmts[0].extent))
        stmts = stmts[0].body
    if len(stmts) != 1 or not isinstance(stmts[0], Store) or stmts[0].buffer != out:
        raise NotFusable("not one store in a loop nest")
    store = stmts[0]
    names = [v for v, _ in loops]
    if [e for _, e in loops] == list(shape):
        expected = flat_index([Var(v) for v in names], shape)
        bind = lambda at: dict(zip(names, at))
    elif len(loops) == 1 and loops[0][1] == math.prod(shape):
        expected = Var(names[0])
        bind = lambda at: {names[0]: flat_index(at, shape)}
    else:
        raise NotFusable("loops do not run over the output")
    if simplify_expr(store.index, {}) != simplify_expr(expected, {}):
        raise NotFusable("the store is not at the loop's element")
    return bind, store.value


_VECTOR_BINARY = frozenset({"+", "-", "*", "/", "max", "min", "<", "<=", ">", ">=", "==", "!="})


def _vectorizable(e: Expr) -> bool:
    """Every operation of the value has a vector form (load indices stay scalar: not looked at)."""
    if isinstance(e, (Const, Var, Load)):
        return True
    if isinstance(e, Binary):
        return e.op in _VECTOR_BINARY and _vectorizable(e.a) and _vectorizable(e.b)
    if isinstance(e, Unary):
        return e.op == "neg" and _vectorizable(e.a)
    if isinstance(e, Select):
        return all(_vectorizable(x) for x in (e.cond, e.a, e.b))
    return False


def _widen(e: Expr, width: int, contiguous: Callable[[str], bool]) -> Expr:
    """`e` over `width` lanes along the last axis: contiguous loads load vectors, others splat.
    Indices stay scalar: the rewrite stops at a load."""
    if isinstance(e, Load):
        return Load(e.buffer, e.index, width, e.dtype) if contiguous(e.buffer) else Broadcast(e, width)
    if isinstance(e, Const):
        return Const(e.value, e.dtype, width) if e.width == 1 else e
    if isinstance(e, Binary):
        return Binary(e.op, _widen(e.a, width, contiguous), _widen(e.b, width, contiguous))
    if isinstance(e, Unary):
        return Unary(e.op, _widen(e.a, width, contiguous))
    if isinstance(e, Select):
        return Select(*(_widen(x, width, contiguous) for x in (e.cond, e.a, e.b)))
    return e  # a Var: the stored value, already a vector


def fuse_epilogue(body: Sequence[Stmt], value: str, out: str, out_shape: Sequence[int], dtype: str,
                  template, contiguous: Callable[[str], bool], serial: list[int]) -> tuple[Stmt, ...]:
    """`body` (the producer's kernel) with every Store to `value` replaced by a Store to `out` of the
    consumer's formula (`template`, from elementwise_template) at the same element."""
    bind, formula = template

    def rewrite_stmts(stmts: Sequence[Stmt]) -> tuple[Stmt, ...]:
        result: list[Stmt] = []
        for s in stmts:
            if isinstance(s, For):
                result.append(For(s.var, s.extent, rewrite_stmts(s.body), s.step))
                continue
            if isinstance(s, If):
                result.append(If(s.cond, rewrite_stmts(s.body)))
                continue
            if not isinstance(s, Store) or s.buffer != value:
                result.append(s)
                continue
            if s.at is None:
                raise NotFusable(f"a store to '{value}' does not say where it writes")
            tmp = f"e{serial[0]}"
            serial[0] += 1
            width = s.value.width
            e = substitute(formula, bind(s.at))
            if width == 1:
                e = map_expr(e, lambda n: Var(tmp, dtype) if isinstance(n, Load) and n.buffer == value else n)
                result += [Local(tmp, s.value, dtype), Store(out, s.index, e, s.at)]
            elif _vectorizable(e):
                e = map_expr(e, lambda n: Var(tmp, dtype, width) if isinstance(n, Load) and n.buffer == value
                             else n)
                result += [Local(tmp, s.value, dtype, width), Store(out, s.index, _widen(e, width, contiguous), s.at)]
            else:  # lane by lane: lane l is element at + l along the last axis
                lane = f"l{tmp}"
                at = tuple(s.at[:-1]) + (Binary("+", s.at[-1], Var(lane, INDEX)),)
                e = substitute(formula, bind(at))
                e = map_expr(e, lambda n: Lane(Var(tmp, dtype, width), Var(lane, INDEX))
                             if isinstance(n, Load) and n.buffer == value else n)
                result += [Local(tmp, s.value, dtype, width),
                           For(lane, width, (Store(out, Binary("+", s.index, Var(lane, INDEX)), e, at),))]
        return tuple(result)
    return rewrite_stmts(body)
