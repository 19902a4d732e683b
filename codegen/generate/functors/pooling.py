"""Functors for the pools: MaxPool, AveragePool, LpPool over windows (tiles as for Conv), and the
Global* pools over every spatial position of a channel."""
from __future__ import annotations

import math

import numpy as np

from tinsmith.generate.backend import CPP, FLOATS, NUMBERS, same
from tinsmith.generate.functors.conv import (Affine, Axis, TileLoops, accumulate, dot, infer_args, loops,
                                            row_major_strides, tiles, window_nests)
from tinsmith.generate.loop_ir import (Assign, Binary, Const, Expr, For, Load, Local, Select, Stmt, Store, Unary, Var,
                                      const, index)
from tinsmith.ops.pooling import MAX_POOL_INTEGERS, pool_windows


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


def plane_coords(batch: int, channels: int) -> tuple[Expr, Expr]:
    """(batch, channel) of plane i, where one loop runs over both."""
    if batch == 1:
        return index(0), Var("i")
    return Binary("/", Var("i"), index(channels)), Binary("%", Var("i"), index(channels))


LOWEST_FLOAT = -3.4028234663852886e38  # the lowest finite float32


def _pool(op: str, graph, args, attrs) -> list[Stmt]:
    """A windowed pool: per (batch, channel) plane, the tiles of conv.tiles, each window reduced
    into a local."""
    x, y = args.inputs[0], args.outputs[0]
    wins = pool_windows(infer_args(graph, args, attrs), op)
    batch, channels = x.type.shape[:2]
    in_size, out_size = x.type.size // (batch * channels), y.type.size // (batch * channels)
    in_strides, out_strides = row_major_strides(x.type.shape[2:]), row_major_strides(y.type.shape[2:])
    plane = Affine.var("i")  # one (batch, channel) plane: N and C are a single loop
    average = op == "AveragePool"
    integer = x.type.dtype in MAX_POOL_INTEGERS
    # AveragePool's divisor differs between exact segments, so it never tests bounds at run time.
    tile_list = tiles(wins, exact_only=average, include_pad=average and bool(attrs["count_include_pad"]))

    def body(tl: TileLoops, suffix: str) -> list[Stmt]:
        out_at = (plane * out_size + dot(tl.out_pos, out_strides)).expr()
        # where the store writes, for fusion: plane i is batch i / C, channel i % C
        coords = (*plane_coords(batch, channels), *(p.expr() for p in tl.out_pos))
        acc = f"acc{suffix}"
        start: Expr = const(LOWEST_FLOAT) if op == "MaxPool" else const(0)  # (as ONNX Runtime starts)
        if integer:  # MaxPool of int8 or uint8 data: the type's lowest value
            start = Const(int(np.iinfo(x.type.dtype).min), x.type.dtype)
        if tl.empty:  # a window that lies wholly in the padding
            return [Store(y.name, out_at, start if op != "AveragePool" or tl.counted else const(math.nan), coords)]
        v = Load(x.name, (plane * in_size + dot(tl.in_pos, in_strides)).expr())
        if op == "MaxPool":
            # NaN never wins (as in ONNX Runtime); a compare and select needs no libm call
            larger = Binary(">", v, Var(acc))
            cond = larger if tl.in_bounds is None else Binary("&&", tl.in_bounds, larger)
            step = loops(tl.taps, [Assign(acc, Select(cond, v, Var(acc)))])
            result: Expr = Var(acc)
        else:
            term = v if average else _power(v, attrs["p"])
            if tl.in_bounds is not None:
                term = Select(tl.in_bounds, term, const(0))
            step = loops(tl.taps, [accumulate(acc, term)])
            if average:
                result = Binary("/", Var(acc), const(tl.counted))
            else:
                result = _root(Var(acc), attrs["p"])
        return [Local(acc, start, x.type.dtype if integer else "float32"), *step,
                Store(y.name, out_at, result, coords)]
    return [For("i", batch * channels, tuple(window_nests([Axis(w) for w in wins], tile_list, body)))]


@CPP.register("MaxPool", family="window", types=same(NUMBERS), epilogue=True)
def max_pool(graph, node_id, cluster_id, args, attrs):
    """Largest value in each window; padding never wins."""
    return _pool("MaxPool", graph, args, attrs)


@CPP.register("AveragePool", family="window", types=same(FLOATS), epilogue=True)
def average_pool(graph, node_id, cluster_id, args, attrs):
    """Window sums divided by the taps inside the input (or inside the padding too, with
    count_include_pad); every edge segment is exact, so each divisor is a constant."""
    return _pool("AveragePool", graph, args, attrs)


@CPP.register("LpPool", family="window", types=same(FLOATS), epilogue=True)
def lp_pool(graph, node_id, cluster_id, args, attrs):
    """(sum of |x| ** p over the window) ** (1 / p); padding adds nothing."""
    return _pool("LpPool", graph, args, attrs)


def _global_pool(op: str):
    def functor(graph, node_id, cluster_id, args, attrs):
        """One reduction per (batch, channel) plane over its contiguous spatial positions."""
        x, y = args.inputs[0], args.outputs[0]
        planes = y.type.size
        size = x.type.size // planes
        v = Load(x.name, Binary("+", Binary("*", Var("i"), index(size)), Var("j")))
        if op == "GlobalMaxPool":
            start: Expr = const(-math.inf)
            step: Stmt = Assign("acc", Select(Binary(">", v, Var("acc")), v, Var("acc")))
            result: Expr = Var("acc")
        elif op == "GlobalAveragePool":
            start, step = const(0), accumulate("acc", v)
            result = Binary("/", Var("acc"), const(size))
        else:
            start, step = const(0), accumulate("acc", _power(v, attrs["p"]))
            result = _root(Var("acc"), attrs["p"])
        return [For("i", planes, (Local("acc", start), For("j", size, (step,)),
                                  Store(y.name, Var("i"), result,
                                        (*plane_coords(*y.type.shape[:2]), *[index(0)] * (y.type.rank - 2)))))]
    return functor


for _op in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"):
    CPP.register(_op, family="window", types=same(FLOATS), epilogue=True)(_global_pool(_op))
