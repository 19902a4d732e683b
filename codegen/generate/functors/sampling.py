"""The GridSample functor: per output position, each grid coordinate becomes its taps (indices
and weights, computed once as locals, by the same `axis_taps` the NumPy reference runs), then
every channel sums its taps."""
from __future__ import annotations

import itertools
import math

from codegen.generate.backend import CPP
from codegen.generate.functors.indexing import _Float
from codegen.generate.loop_ir import (INDEX, Binary, Cast, Expr, For, Load, Local, Select, Stmt, Store, Unary, Var,
                                      const, index)
from codegen.ops.sampling import axis_taps, grid_axes, sampling_mode


class IrMath:
    """`axis_taps`'s arithmetic as float32 loop IR; `let` binds a value to a new local."""

    def __init__(self):
        self.stmts: list[Stmt] = []
        self.count = 0

    def let(self, v, hint: str):
        name = f"{hint}{self.count}"
        self.count += 1
        self.stmts.append(Local(name, _e(v), "bool" if _is_bool(v) else "float32"))
        return _Float(Var(name))

    @staticmethod
    def floor(v):
        return _Float(Unary("floor", _e(v)))

    @staticmethod
    def round_even(v):
        return _Float(Unary("round", _e(v)))

    @staticmethod
    def trunc(v):
        return _Float(Select(Binary("<", _e(v), const(0)), Unary("ceil", _e(v)), Unary("floor", _e(v))))

    @staticmethod
    def select(cond, a, b):
        return _Float(Select(_e(cond), _e(a), _e(b)))

    @staticmethod
    def lt(a, b):
        return _Float(Binary("<", _e(a), _e(b)))

    @staticmethod
    def gt(a, b):
        return _Float(Binary(">", _e(a), _e(b)))

    @staticmethod
    def both(a, b):
        return _Float(Binary("&&", _e(a), _e(b)))

    @staticmethod
    def clamp(v, lo: float, hi: float):
        # max(min(v, hi), lo): NaN gives hi, as in the reference, and never reaches an index
        return _Float(Binary("max", Binary("min", _e(v), const(hi)), const(lo)))

    @staticmethod
    def is_even(n):
        half = Unary("floor", Binary("*", _e(n), const(0.5)))
        return _Float(Binary("==", Binary("-", _e(n), Binary("*", half, const(2))), const(0)))


def _e(v) -> Expr:
    return v.e if isinstance(v, _Float) else const(v)


def _is_bool(v) -> bool:
    e = _e(v)
    return isinstance(e, Binary) and e.op in ("<", ">", "<=", ">=", "==", "!=", "&&", "||")


@CPP.register("GridSample")
def grid_sample(graph, node_id, cluster_id, args, attrs):
    """y[n, c, o] = sum over taps of weight * x[n, c, tap]; taps outside read per padding_mode."""
    x, grid = args.inputs
    y = args.outputs[0]
    axes = grid_axes(x.type.shape, attrs)
    r = len(axes)
    batch, channels = x.type.shape[:2]
    positions = math.prod(grid.type.shape[1:-1])
    plane = math.prod(x.type.shape[2:])
    strides = [math.prod(x.type.shape[2 + d + 1:]) for d in range(r)]
    m = IrMath()
    at = Binary("+", Binary("*", Var("n"), index(positions)), Var("o"))
    per_axis = []
    for d, ax in enumerate(axes):
        g = _Float(Load(grid.name, Binary("+", Binary("*", at, index(r)), index(r - 1 - d))))
        taps = axis_taps(m, g, ax, sampling_mode(attrs), attrs["padding_mode"], bool(attrs["align_corners"]))
        bound = []
        for k, (i, w, valid) in enumerate(taps):
            name = f"i{d}_{k}"
            m.stmts.append(Local(name, Cast(INDEX, _e(i)), INDEX))
            bound.append((Var(name), w, valid))
        per_axis.append(bound)
    terms, weights = [], []
    for j, combo in enumerate(itertools.product(*per_axis)):
        offset: Expr = Binary("*", Binary("+", Binary("*", Var("n"), index(channels)), Var("c")), index(plane))
        for (i, _, _), stride in zip(combo, strides):
            offset = Binary("+", offset, Binary("*", i, index(stride)))
        value: Expr = Load(x.name, offset)
        valid = [v for _, _, v in combo if v is not None]
        if valid:
            cond = _e(valid[0])
            for v in valid[1:]:
                cond = Binary("&&", cond, _e(v))
            value = Select(cond, value, const(0))
        factors = [_e(w) for _, w, _ in combo if w is not None]
        if factors:
            weight = factors[0]
            for f in factors[1:]:
                weight = Binary("*", weight, f)
            weights.append(Local(f"w{j}", weight))
            value = Binary("*", Var(f"w{j}"), value)
        terms.append(value)
    total = terms[0]
    for t in terms[1:]:
        total = Binary("+", total, t)
    store = Store(y.name, Binary("+", Binary("*", Binary("+", Binary("*", Var("n"), index(channels)), Var("c")),
                                             index(positions)), Var("o")), total)
    per_channel = For("c", channels, (store,))
    return [For("n", batch, (For("o", positions, tuple(m.stmts) + tuple(weights) + (per_channel,)),))]
