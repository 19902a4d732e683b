"""Functors for reductions: along one axis (Softmax, LogSoftmax, Hardmax, ArgMax, ArgMin, CumSum,
TopK) and over a set of axes (Reduce*)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from tinsmith.generate.backend import CPP, FLOATS, INDICES, NUMBERS, same, takes
from tinsmith.generate.functors import elementwise_nest, reduction_nest as nest_
from tinsmith.generate.functors.elementwise import at_input_precision
from tinsmith.generate.functors.reduction_nest import (ALONG_AXIS, OVER_AXES, Accumulator, Passes, ReductionNest,
                                                      local, sweep)
from tinsmith.generate.loop_ir import (FLOAT_DTYPES, Assign, Binary, Const, Expr, For, Load, Local, Select, Stmt,
                                      Store, Unary, Var, const, index)
from tinsmith.ops.registry import Prepared


def _max(a: Expr, b: Expr, dtype: str) -> Expr:
    return Binary("max", a, b) if dtype in FLOAT_DTYPES else Select(Binary(">", b, a), b, a)


def _min(a: Expr, b: Expr, dtype: str) -> Expr:
    return Binary("min", a, b) if dtype in FLOAT_DTYPES else Select(Binary("<", b, a), b, a)


def _run(args, schedule, steps) -> list[Stmt]:
    """The reduction nest of the node with a Passes micro-kernel of `steps`."""
    return nest_.reduction(ReductionNest.of(args), schedule, Passes(tuple(steps)))


# --- Softmax, LogSoftmax, Hardmax ------------------------------------------------------------
def _max_of(x: str) -> list:
    """The passes leaving the largest element in local max_v."""
    return [local("max_v", lambda row: const(-math.inf)),
            sweep(lambda row: [Assign("max_v", Binary("max", Var("max_v"), Load(x, row.at())))])]


@CPP.register("Softmax", family="reduction", types=same(FLOATS))
@at_input_precision
def softmax(graph, node_id, cluster_id, args, attrs):
    """Numerically stable softmax along one axis: subtract the max, exponentiate, normalise."""
    x, y = args.inputs[0].name, args.outputs[0].name
    return _run(args, ALONG_AXIS, [
        *_max_of(x), local("sum", lambda row: const(0)),
        sweep(lambda row: [Store(y, row.at(), Unary("exp", Binary("-", Load(x, row.at()), Var("max_v")))),
                           Assign("sum", Binary("+", Var("sum"), Load(y, row.at())))]),
        local("inv_sum", lambda row: Binary("/", const(1), Var("sum"))),
        sweep(lambda row: [Store(y, row.at(), Binary("*", Load(y, row.at()), Var("inv_sum")))])])


@CPP.register("LogSoftmax", family="reduction", types=same(FLOATS))
@at_input_precision
def log_softmax(graph, node_id, cluster_id, args, attrs):
    """x - max - log(sum(exp(x - max))) along one axis."""
    x, y = args.inputs[0].name, args.outputs[0].name

    def shifted(row):
        return Binary("-", Load(x, row.at()), Var("max_v"))
    return _run(args, ALONG_AXIS, [
        *_max_of(x), local("sum", lambda row: const(0)),
        sweep(lambda row: [Assign("sum", Binary("+", Var("sum"), Unary("exp", shifted(row))))]),
        local("log_sum", lambda row: Unary("log", Var("sum"))),
        sweep(lambda row: [Store(y, row.at(), Binary("-", shifted(row), Var("log_sum")))])])


def _arg_extreme(x: str, better: str, dtype: str) -> list:
    """The passes leaving the extreme along the axis in local best_v and its index in best_i. An
    element replaces the best so far when `better` holds (">" keeps the first maximum, ">=" the last)."""
    def step(row):
        j = row.reduced[0]
        wins = Binary(better, Load(x, row.at()), Var("best_v"))
        # the index first: its condition reads best_v before it changes
        return [Assign("best_i", Select(wins, j, Var("best_i"))),
                Assign("best_v", Select(wins, Load(x, row.at()), Var("best_v")))]
    return [local("best_v", lambda row: Load(x, row.first()), dtype), local("best_i", lambda row: index(0), "int"),
            sweep(step)]


@CPP.register("Hardmax", family="reduction", types=same(FLOATS))
def hardmax(graph, node_id, cluster_id, args, attrs):
    """1 at the first maximum along the axis, 0 elsewhere."""
    x, y = args.inputs[0], args.outputs[0].name
    return _run(args, ALONG_AXIS, [
        *_arg_extreme(x.name, ">", x.type.dtype),
        sweep(lambda row: [Store(y, row.at(), Select(Binary("==", row.reduced[0], Var("best_i")), const(1), const(0)))])])


def _arg(better_first: str, better_last: str):
    def functor(graph, node_id, cluster_id, args, attrs):
        x, y = args.inputs[0], args.outputs[0].name
        better = better_last if attrs["select_last_index"] else better_first
        return _run(args, ALONG_AXIS, [*_arg_extreme(x.name, better, x.type.dtype),
                                       lambda row: [Store(y, row.out(), Var("best_i"))]])
    return functor


CPP.register("ArgMax", family="reduction", types=takes(NUMBERS, out="int64"))(_arg(">", ">="))
CPP.register("ArgMin", family="reduction", types=takes(NUMBERS, out="int64"))(_arg("<", "<="))


@CPP.register("CumSum", family="reduction", types=takes(NUMBERS, INDICES, out=NUMBERS))
def cumsum(graph, node_id, cluster_id, args, attrs):
    """A running sum along the axis (from the end with reverse; exclusive stores it before adding)."""
    x, y = args.inputs[0], args.outputs[0]
    n = ReductionNest.of(args).count

    def step(row):
        j = row.reduced[0]
        pos = row.at([Binary("-", index(n - 1), j) if attrs["reverse"] else j])
        add = Assign("acc", Binary("+", Var("acc"), Load(x.name, pos)))
        store = Store(y.name, pos, Var("acc"))
        return [store, add] if attrs["exclusive"] else [add, store]
    return _run(args, ALONG_AXIS, [local("acc", lambda row: Const(0, x.type.dtype in FLOAT_DTYPES), y.type.dtype),
                                   sweep(step)])


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


def _copy(args) -> list[Stmt]:
    """noop_with_empty_axes: the reduction of no axes is a copy, an elementwise kernel."""
    x, y = args.inputs[0], args.outputs[0]
    copy = elementwise_nest.ElementwiseNest(y.name, y.type.shape, (
        elementwise_nest.Operand(x.name, x.type.dtype, Prepared.strides(x.type.shape)),))
    return elementwise_nest.elementwise(copy, elementwise_nest.flat(), lambda xs, idx: ([], xs[0]))


def _reduce_functor(rule: ReduceRule):
    def functor(graph, node_id, cluster_id, args, attrs):
        x, y = args.inputs[0], args.outputs[0]
        dtype = x.type.dtype
        is_float = dtype in FLOAT_DTYPES
        nest = ReductionNest.of(args)
        if not nest.axes:
            return _copy(args)
        empty = rule.empty if is_float else int(rule.empty) if math.isfinite(rule.empty) else 0
        return nest_.reduction(nest, OVER_AXES, Accumulator(
            x.name, y.name, y.type.dtype, rule.init(dtype), lambda acc, v: rule.step(acc, v, dtype), rule.finish,
            Const(empty, is_float)))
    return functor


for _op, _rule in REDUCE_RULES.items():
    _taken = NUMBERS | {"bool"} if _op in ("ReduceMax", "ReduceMin") else NUMBERS  # of bool: any, all
    CPP.register(_op, family="reduction", types=takes(_taken, "int64", out=_taken))(_reduce_functor(_rule))


@CPP.register("ReduceLogSumExp", family="reduction", types=takes(FLOATS, "int64", out=FLOATS))
@at_input_precision
def reduce_log_sum_exp(graph, node_id, cluster_id, args, attrs):
    """log(sum(exp(x - max))) + max over the reduced axes: two passes, no overflow."""
    x, y = args.inputs[0].name, args.outputs[0].name
    nest = ReductionNest.of(args)
    if not nest.axes:
        return _copy(args)
    if nest.count == 0:
        return _run(args, OVER_AXES, [lambda row: [Store(y, row.out(), const(-math.inf))]])

    def shifted(row):
        return Binary("-", Load(x, row.at()), Var("max_v"))
    return _run(args, OVER_AXES, [
        local("max_v", lambda row: Load(x, row.first())),
        sweep(lambda row: [Assign("max_v", Binary("max", Var("max_v"), Load(x, row.at())))]),
        local("acc", lambda row: const(0)),
        sweep(lambda row: [Assign("acc", Binary("+", Var("acc"), Unary("exp", shifted(row))))]),
        lambda row: [Store(y, row.out(), Binary("+", Unary("log", Var("acc")), Var("max_v")))]])


@CPP.register("TopK", family="reduction", types=takes(NUMBERS, "int64", out=[NUMBERS, "int64"]))
def topk(graph, node_id, cluster_id, args, attrs):
    """Selection, k passes along the axis: pass r picks the best element that comes after pass r-1's
    pick in the order (greater first, or smaller with largest=0; equal values by lower index). O(k n)
    with no scratch memory."""
    x = args.inputs[0]
    values, indices = args.outputs
    k, ctype = args.prepared["k"], x.type.dtype
    beats = ">" if attrs["largest"] else "<"
    out_shape, r = values.type.shape, Var("r")

    def precedes(v: Expr, i: Expr, w: Expr, m: Expr) -> Expr:
        """(v, i) comes before (w, m) in the order."""
        return Binary("||", Binary(beats, v, w), Binary("&&", Binary("==", v, w), Binary("<", i, m)))

    def selection(row):
        j = row.reduced[0]
        xj = Load(x.name, row.at())
        after_previous = Binary("||", Binary("==", r, index(0)), precedes(Var("prev_v"), Var("prev_i"), xj, j))
        best_so_far = Binary("||", Binary("<", Var("best_i"), index(0)),
                             precedes(xj, j, Var("best_v"), Var("best_i")))
        return [For("r", k, (
            Local("best_v", Load(x.name, row.first()), ctype),
            Local("best_i", index(-1), "int"),
            row.sweep(Local("wins", Binary("&&", after_previous, best_so_far), "bool"),
                      Assign("best_v", Select(Var("wins"), xj, Var("best_v"))),
                      Assign("best_i", Select(Var("wins"), j, Var("best_i")))),
            Store(values.name, row.at([r], out_shape), Var("best_v")),
            Store(indices.name, row.at([r], out_shape), Var("best_i")),
            Assign("prev_v", Var("best_v")),
            Assign("prev_i", Var("best_i"))))]
    return _run(args, ALONG_AXIS, [local("prev_v", lambda row: Load(x.name, row.first()), ctype),
                                   local("prev_i", lambda row: index(0), "int"), selection])
