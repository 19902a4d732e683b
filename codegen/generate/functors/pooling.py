"""The float pools in NCHW (MaxPool, also of 8-bit integers; AveragePool, LpPool and their Global*
forms) as schedules of the window family's nest (window_nest.py), and their micro-kernels: the
running maximum by compare and select, and the window sum (average with its count, or Lp)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tinsmith.generate.backend import CPP, FLOATS, NUMBERS, same
from tinsmith.generate.functors import window_nest
from tinsmith.generate.functors.conv import accumulate
from tinsmith.generate.functors.window_nest import WindowOutput, WindowSchedule, WindowTap
from tinsmith.generate.loop_ir import Assign, Binary, Const, Expr, Local, Select, Stmt, Store, Unary, Var, const
from tinsmith.ops.pooling import MAX_POOL_INTEGERS

LOWEST_FLOAT = -3.4028234663852886e38  # the lowest finite float32


def _power(v: Expr, p: int) -> Expr:
    """|v| ** p, with multiplications for the common small p."""
    if p == 1:
        return Unary("abs", v)
    if p == 2:
        return Binary("*", v, v)
    return Binary("pow", Unary("abs", v), const(p))


def _root(acc: Expr, p: int) -> Expr:
    """acc ** (1 / p)."""
    if p == 1:
        return acc
    if p == 2:
        return Unary("sqrt", acc)
    return Binary("pow", acc, const(1.0 / p))


def larger(tap: WindowTap, acc: str) -> Expr:
    """Whether the tap beats the running maximum: a compare and select needs no libm call, and
    NaN never wins (as in ONNX Runtime); a tap outside the input never does either."""
    beats = Binary(">", tap.value, Var(acc))
    return beats if tap.inside is None else Binary("&&", tap.inside, beats)


@dataclass(frozen=True)
class MaxSelect:
    """The running maximum from `lowest` (the lowest float32, as ONNX Runtime starts; an integer
    type's lowest value; -inf for GlobalMaxPool) in `dtype`."""

    lowest: Expr
    dtype: str = "float32"

    def start(self, scope: str, out: WindowOutput) -> list[Stmt]:
        return [Local(f"acc{scope}", self.lowest, self.dtype)]

    def step(self, scope: str, tap: WindowTap) -> list[Stmt]:
        acc = f"acc{scope}"
        return [Assign(acc, Select(larger(tap, acc), tap.value, Var(acc)))]

    def finish(self, scope: str, out: WindowOutput) -> list[Stmt]:
        return [Store(out.y, out.at, Var(f"acc{scope}"), out.coords)]

    def empty(self, scope: str, out: WindowOutput) -> list[Stmt]:
        return [Store(out.y, out.at, self.lowest, out.coords)]


@dataclass(frozen=True)
class WindowSum:
    """The sum of the taps (of |x| ** p with `p`), divided by the window's count (`average`) or
    raised to 1 / p; taps outside the input add nothing."""

    average: bool
    p: int = 1

    def start(self, scope: str, out: WindowOutput) -> list[Stmt]:
        return [Local(f"acc{scope}", const(0), "float32")]

    def step(self, scope: str, tap: WindowTap) -> list[Stmt]:
        term = tap.value if self.average else _power(tap.value, self.p)
        return [accumulate(f"acc{scope}", term if tap.inside is None else Select(tap.inside, term, const(0)))]

    def finish(self, scope: str, out: WindowOutput) -> list[Stmt]:
        acc = Var(f"acc{scope}")
        return [Store(out.y, out.at, Binary("/", acc, const(out.counted)) if self.average else _root(acc, self.p),
                      out.coords)]

    def empty(self, scope: str, out: WindowOutput) -> list[Stmt]:
        """0, or an average over no taps: NaN (0 / 0), as the reference gives."""
        return [Store(out.y, out.at, const(0) if out.counted or not self.average else const(math.nan), out.coords)]


def _max_start(dtype: str) -> MaxSelect:
    """MaxPool's micro-kernel: from the lowest float32, or an 8-bit integer type's lowest value."""
    if dtype in MAX_POOL_INTEGERS:
        return MaxSelect(Const(int(np.iinfo(dtype).min), dtype), dtype)
    return MaxSelect(const(LOWEST_FLOAT))


@CPP.register("MaxPool", family="window", types=same(NUMBERS), epilogue=True)
def max_pool(graph, node_id, cluster_id, args, attrs):
    """Largest value in each window; padding never wins."""
    return window_nest.window(window_nest.WindowNest.of(args), WindowSchedule(), _max_start(args.inputs[0].type.dtype))


@CPP.register("AveragePool", family="window", types=same(FLOATS), epilogue=True)
def average_pool(graph, node_id, cluster_id, args, attrs):
    """Window sums divided by the taps inside the input (or inside the padding too, with
    count_include_pad); every edge segment is exact, so each divisor is a constant."""
    return window_nest.window(window_nest.WindowNest.of(args), WindowSchedule(exact=True), WindowSum(True))


@CPP.register("LpPool", family="window", types=same(FLOATS), epilogue=True)
def lp_pool(graph, node_id, cluster_id, args, attrs):
    """(sum of |x| ** p over the window) ** (1 / p); padding adds nothing."""
    return window_nest.window(window_nest.WindowNest.of(args), WindowSchedule(), WindowSum(False, attrs["p"]))


GLOBAL_MICRO = {"GlobalAveragePool": lambda attrs: WindowSum(True),
                "GlobalMaxPool": lambda attrs: MaxSelect(const(-math.inf)),
                "GlobalLpPool": lambda attrs: WindowSum(False, attrs["p"])}


def _global_pool(op: str):
    def functor(graph, node_id, cluster_id, args, attrs):
        """One window per (batch, channel) plane over its contiguous spatial positions."""
        return window_nest.window(window_nest.WindowNest.of(args), WindowSchedule(taps="whole"), GLOBAL_MICRO[op](attrs))
    return functor


for _op in GLOBAL_MICRO:
    CPP.register(_op, family="window", types=same(FLOATS), epilogue=True)(_global_pool(_op))
