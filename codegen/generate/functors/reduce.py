"""Functors for reductions: along one axis (Softmax, LogSoftmax, Hardmax, ArgMax, ArgMin, CumSum,
TopK) and over a set of axes (Reduce*)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from tinsmith.generate.backend import CPP, FLOATS, INDICES, NUMBERS, same, takes
from tinsmith.generate.functors.elementwise import at_input_precision
from tinsmith.generate.loop_ir import (FLOAT_DTYPES, Assign, Binary, Const, Expr, For, Load, Local, Select, Stmt,
                                      Store, Unary, Var, const, flat_index, index, nest)
from tinsmith.ops.common import normalize_axis
from tinsmith.ops.reduce import cumsum_axis, reduce_axes, topk_k
from tinsmith.ops.registry import InferArgs


def _infer_args(graph, node_id, args, attrs) -> InferArgs:
    """What the op's shape rules see, to recover constant-input facts (axes) the same way."""
    node = graph.nodes[node_id]
    values = tuple(graph.constants[n].data if n in graph.constants else None for n in node.inputs)
    return InferArgs(tuple(a.type if a else None for a in args.inputs), attrs, values)


def _along_axis(shape: tuple[int, ...], axis: int, body: Callable[[Callable[[Expr], Expr]], list[Stmt]],
                after: Callable[[list[Expr]], list[Stmt]] = lambda idx: []):
    """Loops over every position but `axis`; body(at) gets `at(j)`, the offset of element j along the axis,
    and after(idx) the loop indices (the position without the axis)."""
    outer = shape[:axis] + shape[axis + 1:]

    def inner(idx):
        return body(lambda j: flat_index(idx[:axis] + [j] + idx[axis:], shape)) + after(idx)
    return nest(outer, "i", inner)[0]


def _max(a: Expr, b: Expr, dtype: str) -> Expr:
    return Binary("max", a, b) if dtype in FLOAT_DTYPES else Select(Binary(">", b, a), b, a)


def _min(a: Expr, b: Expr, dtype: str) -> Expr:
    return Binary("min", a, b) if dtype in FLOAT_DTYPES else Select(Binary("<", b, a), b, a)


# --- Softmax, LogSoftmax, Hardmax ------------------------------------------------------------
def _max_of(x: str, at, n: int) -> list[Stmt]:
    return [Local("max_v", const(-math.inf)),
            For("j", n, (Assign("max_v", Binary("max", Var("max_v"), Load(x, at(Var("j"))))),))]


@CPP.register("Softmax", family="reduction", types=same(FLOATS))
@at_input_precision
def softmax(graph, node_id, cluster_id, args, attrs):
    """Numerically stable softmax along one axis: subtract the max, exponentiate, normalise."""
    x, y = args.inputs[0], args.outputs[0]
    shape = x.type.shape
    axis = normalize_axis(attrs["axis"], len(shape))
    n, j = shape[axis], Var("j")

    def body(at):
        return _max_of(x.name, at, n) + [
            Local("sum", const(0)),
            For("j", n, (
                Store(y.name, at(j), Unary("exp", Binary("-", Load(x.name, at(j)), Var("max_v")))),
                Assign("sum", Binary("+", Var("sum"), Load(y.name, at(j)))))),
            Local("inv_sum", Binary("/", const(1), Var("sum"))),
            For("j", n, (Store(y.name, at(j), Binary("*", Load(y.name, at(j)), Var("inv_sum"))),)),
        ]
    return _along_axis(shape, axis, body)


@CPP.register("LogSoftmax", family="reduction", types=same(FLOATS))
@at_input_precision
def log_softmax(graph, node_id, cluster_id, args, attrs):
    """x - max - log(sum(exp(x - max))) along one axis."""
    x, y = args.inputs[0], args.outputs[0]
    shape = x.type.shape
    axis = normalize_axis(attrs["axis"], len(shape))
    n, j = shape[axis], Var("j")

    def body(at):
        shifted = Binary("-", Load(x.name, at(j)), Var("max_v"))
        return _max_of(x.name, at, n) + [
            Local("sum", const(0)),
            For("j", n, (Assign("sum", Binary("+", Var("sum"), Unary("exp", shifted))),)),
            Local("log_sum", Unary("log", Var("sum"))),
            For("j", n, (Store(y.name, at(j), Binary("-", shifted, Var("log_sum"))),)),
        ]
    return _along_axis(shape, axis, body)


def _arg_extreme(x: str, at, n: int, better: str, dtype: str) -> list[Stmt]:
    """Locals best_v and best_i: the extreme along the axis and its index. An element replaces
    the best so far when `better` holds (">" keeps the first maximum, ">=" the last)."""
    j = Var("j")
    wins = Binary(better, Load(x, at(j)), Var("best_v"))
    return [Local("best_v", Load(x, at(index(0))), dtype),
            Local("best_i", index(0), "int"),
            # the index first: its condition reads best_v before it changes
            For("j", n, (Assign("best_i", Select(wins, j, Var("best_i"))),
                         Assign("best_v", Select(wins, Load(x, at(j)), Var("best_v")))))]


@CPP.register("Hardmax", family="reduction", types=same(FLOATS))
def hardmax(graph, node_id, cluster_id, args, attrs):
    """1 at the first maximum along the axis, 0 elsewhere."""
    x, y = args.inputs[0], args.outputs[0]
    shape = x.type.shape
    axis = normalize_axis(attrs["axis"], len(shape))
    n, j = shape[axis], Var("j")

    def body(at):
        return _arg_extreme(x.name, at, n, ">", x.type.dtype) + [
            For("j", n, (Store(y.name, at(j), Select(Binary("==", j, Var("best_i")), const(1), const(0))),))]
    return _along_axis(shape, axis, body)


def _arg(better_first: str, better_last: str):
    def functor(graph, node_id, cluster_id, args, attrs):
        x, y = args.inputs[0], args.outputs[0]
        shape = x.type.shape
        axis = normalize_axis(attrs["axis"], len(shape))
        better = better_last if attrs["select_last_index"] else better_first
        outer = shape[:axis] + shape[axis + 1:]

        def body(at):
            return _arg_extreme(x.name, at, shape[axis], better, x.type.dtype)

        def store(idx):
            return [Store(y.name, flat_index(idx, outer), Var("best_i"))]
        return _along_axis(shape, axis, body, store)
    return functor


CPP.register("ArgMax", family="reduction", types=takes(NUMBERS, out="int64"))(_arg(">", ">="))
CPP.register("ArgMin", family="reduction", types=takes(NUMBERS, out="int64"))(_arg("<", "<="))


@CPP.register("CumSum", family="reduction", types=takes(NUMBERS, INDICES, out=NUMBERS))
def cumsum(graph, node_id, cluster_id, args, attrs):
    """A running sum along the axis (from the end with reverse; exclusive stores it before adding)."""
    x, y = args.inputs[0], args.outputs[0]
    shape = x.type.shape
    axis = cumsum_axis(_infer_args(graph, node_id, args, attrs))
    n, j = shape[axis], Var("j")
    is_float = x.type.dtype in FLOAT_DTYPES

    def body(at):
        pos = Binary("-", index(n - 1), j) if attrs["reverse"] else j
        add = Assign("acc", Binary("+", Var("acc"), Load(x.name, at(pos))))
        store = Store(y.name, at(pos), Var("acc"))
        return [Local("acc", Const(0, is_float), y.type.dtype),
                For("j", n, (store, add) if attrs["exclusive"] else (add, store))]
    return _along_axis(shape, axis, body)


# --- Reduce* ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReduceRule:
    """How a Reduce* op accumulates: the value before the first element (None: start from the first
    element), the step acc <- step(acc, x), and the result from the accumulator and the count."""

    init: Callable[[str], Expr | None]
    step: Callable[[Expr, Expr, str], Expr]
    finish: Callable[[Expr, int], Expr] = lambda acc, n: acc
    empty: float = 0.0  # the result of reducing no elements


def _zero(dtype: str) -> Expr:
    return Const(0, dtype in FLOAT_DTYPES)


def _add(acc: Expr, x: Expr, dtype: str) -> Expr:
    return Binary("+", acc, x)


REDUCE_RULES: dict[str, ReduceRule] = {
    "ReduceSum": ReduceRule(_zero, _add),
    "ReduceMean": ReduceRule(_zero, _add, lambda acc, n: Binary("/", acc, const(n)), math.nan),
    "ReduceMax": ReduceRule(lambda t: None, _max, empty=-math.inf),
    "ReduceMin": ReduceRule(lambda t: None, _min, empty=math.inf),
    "ReduceProd": ReduceRule(lambda t: Const(1, t in FLOAT_DTYPES), lambda acc, x, t: Binary("*", acc, x),
                             empty=1.0),
    "ReduceL1": ReduceRule(_zero, lambda acc, x, t: Binary("+", acc, Unary("abs", x))),
    "ReduceL2": ReduceRule(_zero, lambda acc, x, t: Binary("+", acc, Binary("*", x, x)),
                           lambda acc, n: Unary("sqrt", acc)),
    "ReduceSumSquare": ReduceRule(_zero, lambda acc, x, t: Binary("+", acc, Binary("*", x, x))),
    "ReduceLogSum": ReduceRule(_zero, _add, lambda acc, n: Unary("log", acc), -math.inf),
}


def _first_at(x_name: str, shape, axes, outer) -> Expr:
    it = iter(outer)
    return Load(x_name, flat_index([index(0) if i in axes else next(it) for i in range(len(shape))], shape))


def _reduce_functor(rule: ReduceRule):
    def functor(graph, node_id, cluster_id, args, attrs):
        x, y = args.inputs[0], args.outputs[0]
        dtype, ctype = x.type.dtype, y.type.dtype
        is_float = dtype in FLOAT_DTYPES
        axes = reduce_axes(_infer_args(graph, node_id, args, attrs))
        shape = x.type.shape
        if not axes:  # noop_with_empty_axes: a copy
            return nest((y.type.size,), "i", lambda idx: [Store(y.name, idx[0], Load(x.name, idx[0]))])[0]
        kept = [d for i, d in enumerate(shape) if i not in axes]
        count = math.prod(shape[i] for i in axes)

        def body(outer):
            if count == 0:
                empty = rule.empty if is_float else int(rule.empty) if math.isfinite(rule.empty) else 0
                return [Store(y.name, flat_index(outer, kept), Const(empty, is_float))]
            it = iter(outer)
            at = flat_index([Var(f"r{i}") if i in axes else next(it) for i in range(len(shape))], shape)
            init = rule.init(dtype)
            stmts: tuple[Stmt, ...] = (Assign("acc", rule.step(Var("acc"), Load(x.name, at), dtype)),)
            for i in reversed(axes):
                stmts = (For(f"r{i}", shape[i], stmts),)
            first = init if init is not None else _first_at(x.name, shape, axes, outer)
            return [Local("acc", first, ctype), *stmts,
                    Store(y.name, flat_index(outer, kept), rule.finish(Var("acc"), count))]
        return nest(kept, "i", body)[0]
    return functor


for _op, _rule in REDUCE_RULES.items():
    _taken = NUMBERS | {"bool"} if _op in ("ReduceMax", "ReduceMin") else NUMBERS  # of bool: any, all
    CPP.register(_op, family="reduction", types=takes(_taken, "int64", out=_taken))(_reduce_functor(_rule))


@CPP.register("ReduceLogSumExp", family="reduction", types=takes(FLOATS, "int64", out=FLOATS))
@at_input_precision
def reduce_log_sum_exp(graph, node_id, cluster_id, args, attrs):
    """log(sum(exp(x - max))) + max over the reduced axes: two passes, no overflow."""
    x, y = args.inputs[0], args.outputs[0]
    axes = reduce_axes(_infer_args(graph, node_id, args, attrs))
    shape = x.type.shape
    if not axes:
        return nest((y.type.size,), "i", lambda idx: [Store(y.name, idx[0], Load(x.name, idx[0]))])[0]
    kept = [d for i, d in enumerate(shape) if i not in axes]
    count = math.prod(shape[i] for i in axes)

    def body(outer):
        if count == 0:
            return [Store(y.name, flat_index(outer, kept), const(-math.inf))]
        it = iter(outer)
        at = flat_index([Var(f"r{i}") if i in axes else next(it) for i in range(len(shape))], shape)

        def loops(stmt: Stmt) -> Stmt:
            for i in reversed(axes):
                stmt = For(f"r{i}", shape[i], (stmt,))
            return stmt
        shifted = Binary("-", Load(x.name, at), Var("max_v"))
        return [Local("max_v", _first_at(x.name, shape, axes, outer)),
                loops(Assign("max_v", Binary("max", Var("max_v"), Load(x.name, at)))),
                Local("acc", const(0)),
                loops(Assign("acc", Binary("+", Var("acc"), Unary("exp", shifted)))),
                Store(y.name, flat_index(outer, kept), Binary("+", Unary("log", Var("acc")), Var("max_v")))]
    return nest(kept, "i", body)[0]


@CPP.register("TopK", family="reduction", types=takes(NUMBERS, "int64", out=[NUMBERS, "int64"]))
def topk(graph, node_id, cluster_id, args, attrs):
    """Selection, k passes along the axis: pass r picks the best element that comes after pass r-1's
    pick in the order (greater first, or smaller with largest=0; equal values by lower index). O(k n)
    with no scratch memory."""
    x = args.inputs[0]
    values, indices = args.outputs
    shape = x.type.shape
    axis = normalize_axis(attrs["axis"], len(shape))
    k = topk_k(_infer_args(graph, node_id, args, attrs))
    out_shape = shape[:axis] + (k,) + shape[axis + 1:]
    beats = ">" if attrs["largest"] else "<"
    ctype = x.type.dtype
    r, j = Var("r"), Var("j")

    def precedes(v: Expr, i: Expr, w: Expr, m: Expr) -> Expr:
        """(v, i) comes before (w, m) in the order."""
        return Binary("||", Binary(beats, v, w), Binary("&&", Binary("==", v, w), Binary("<", i, m)))

    def per_row(idx):
        def at(p: Expr, s: tuple[int, ...]) -> Expr:
            return flat_index(idx[:axis] + [p] + idx[axis:], s)
        xj = Load(x.name, at(j, shape))
        after_previous = Binary("||", Binary("==", r, index(0)), precedes(Var("prev_v"), Var("prev_i"), xj, j))
        best_so_far = Binary("||", Binary("<", Var("best_i"), index(0)),
                             precedes(xj, j, Var("best_v"), Var("best_i")))
        return [
            Local("prev_v", Load(x.name, at(index(0), shape)), ctype),
            Local("prev_i", index(0), "int"),
            For("r", k, (
                Local("best_v", Load(x.name, at(index(0), shape)), ctype),
                Local("best_i", index(-1), "int"),
                For("j", shape[axis], (
                    Local("wins", Binary("&&", after_previous, best_so_far), "bool"),
                    Assign("best_v", Select(Var("wins"), xj, Var("best_v"))),
                    Assign("best_i", Select(Var("wins"), j, Var("best_i"))))),
                Store(values.name, at(r, out_shape), Var("best_v")),
                Store(indices.name, at(r, out_shape), Var("best_i")),
                Assign("prev_v", Var("best_v")),
                Assign("prev_i", Var("best_i")))),
        ]
    return nest(shape[:axis] + shape[axis + 1:], "i", per_row)[0]
