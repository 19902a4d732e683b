"""The GridSample functor: per output position, each grid coordinate becomes its taps (indices
and weights, computed once as locals, by the same `axis_taps` the NumPy reference runs), then
every channel sums its taps."""
from __future__ import annotations

import itertools
import math

from tinsmith.generate.backend import CPP, INDICES, same, takes
from tinsmith.generate.functors.indexing import _Float
from tinsmith.generate.loop_ir import (INDEX, Binary, Cast, Expr, For, Load, Local, Select, Stmt, Store, Unary, Var,
                                      const, index)
from tinsmith.ops.sampling import align_of, axis_taps, grid_axes, sampling_mode


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


@CPP.register("GridSamplePixels", family="sampling", types=same("float32", 2))
@CPP.register("GridSample", family="sampling", types=same("float32", 2))
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
        taps = axis_taps(m, g, ax, sampling_mode(attrs), attrs["padding_mode"], align_of(attrs))
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


def _f(e: Expr) -> Expr:
    return Cast("float32", e)


def _sum(terms: list[Expr]) -> Expr:
    total = terms[0]
    for t in terms[1:]:
        total = Binary("+", total, t)
    return total


def _max(terms: list[Expr]) -> Expr:
    total = terms[0]
    for t in terms[1:]:
        total = Binary("max", total, t)
    return total


def _floor_index(v: Expr, hi: int) -> Expr:
    """v (whole, >= 0) as an index in 0..hi; NaN gives hi, as max(min(NaN, hi), 0) does."""
    return Cast(INDEX, Binary("max", Binary("min", v, const(hi)), const(0)))


def _roi_prelude(rois: str, batch: str, images: int, half_pixel: bool, scale: float, out_h: int,
                 out_w: int) -> list[Stmt]:
    """Per roi: its image index (clamped), corner, size and bin size as locals."""
    offset = 0.5 if half_pixel else 0.0

    def roi(k: int) -> Expr:
        return Binary("-", Binary("*", Load(rois, Binary("+", Binary("*", Var("r"), index(4)), index(k))),
                                  const(scale)), const(offset))
    b = Load(batch, Var("r"))
    per_roi: list[Stmt] = [
        Local("b", Cast(INDEX, Select(Binary("<", b, Cast("int64", index(0))), Cast("int64", index(0)),
                                      Select(Binary(">", b, Cast("int64", index(images - 1))),
                                             Cast("int64", index(images - 1)), b))), INDEX),
        Local("x1", roi(0)), Local("y1", roi(1)),
        Local("roi_w", Binary("-", roi(2), Var("x1"))), Local("roi_h", Binary("-", roi(3), Var("y1")))]
    if not half_pixel:  # the legacy mode keeps rois at least one pixel wide
        per_roi += [Local("roi_w1", Binary("max", Var("roi_w"), const(1))),
                    Local("roi_h1", Binary("max", Var("roi_h"), const(1)))]
    w_name, h_name = ("roi_w", "roi_h") if half_pixel else ("roi_w1", "roi_h1")
    return per_roi + [Local("bin_h", Binary("/", Var(h_name), const(out_h))),
                      Local("bin_w", Binary("/", Var(w_name), const(out_w)))]


def _sample_axis(s: str, axis: str, size: int) -> tuple[list[Stmt], tuple[Expr, Expr, Expr]]:
    """Sample `s`'s coordinate along one axis clipped at 0: its lower and upper input index and the
    weight of the upper one, as locals."""
    v = Var(f"{s}_{axis}")
    clipped = Select(Binary("<", v, const(0)), const(0), v)
    stmts: list[Stmt] = [Local(f"{s}_{axis}c", clipped), Local(f"{s}_{axis}f", Unary("floor", Var(f"{s}_{axis}c"))),
                         Local(f"{s}_{axis}e", Binary(">=", Var(f"{s}_{axis}f"), const(size - 1)), "bool")]
    edge = Var(f"{s}_{axis}e")
    stmts += [Local(f"{s}_{axis}lo", _floor_index(Var(f"{s}_{axis}f"), size - 1), INDEX),
              Local(f"{s}_{axis}hi", Select(edge, index(size - 1), Binary("+", Var(f"{s}_{axis}lo"), index(1))), INDEX),
              Local(f"{s}_{axis}l", Select(edge, const(0), Binary("-", Var(f"{s}_{axis}c"), Var(f"{s}_{axis}f"))))]
    return stmts, (Var(f"{s}_{axis}lo"), Var(f"{s}_{axis}hi"), Var(f"{s}_{axis}l"))


def _sample(iy: int, ix: int, ratio: int, height: int, width: int) -> tuple[list[Stmt], list[tuple[Expr, Expr]]]:
    """Sample (iy, ix) of the bin (ph, pw): its position, whether it lies outside the image, and
    its four corners' weights and offsets (zero weight outside), as locals."""
    s = f"s{iy}_{ix}"
    yy = Binary("+", Binary("+", Var("y1"), Binary("*", _f(Var("ph")), Var("bin_h"))),
                Binary("/", Binary("*", const(iy + 0.5), Var("bin_h")), const(ratio)))
    xx = Binary("+", Binary("+", Var("x1"), Binary("*", _f(Var("pw")), Var("bin_w"))),
                Binary("/", Binary("*", const(ix + 0.5), Var("bin_w")), const(ratio)))
    stmts: list[Stmt] = [Local(f"{s}_y", yy), Local(f"{s}_x", xx)]
    outside = Binary("||", Binary("||", Binary("<", Var(f"{s}_y"), const(-1)), Binary(">", Var(f"{s}_y"), const(height))),
                     Binary("||", Binary("<", Var(f"{s}_x"), const(-1)), Binary(">", Var(f"{s}_x"), const(width))))
    stmts.append(Local(f"{s}_out", outside, "bool"))
    y_stmts, (ylo, yhi, ly) = _sample_axis(s, "y", height)
    x_stmts, (xlo, xhi, lx) = _sample_axis(s, "x", width)
    stmts += y_stmts + x_stmts
    hy, hx = Binary("-", const(1), ly), Binary("-", const(1), lx)
    taps = []
    for k, (row, col, weight) in enumerate(((ylo, xlo, Binary("*", hy, hx)), (ylo, xhi, Binary("*", hy, lx)),
                                            (yhi, xlo, Binary("*", ly, hx)), (yhi, xhi, Binary("*", ly, lx)))):
        offset = Binary("+", Binary("*", row, index(width)), col)
        stmts += [Local(f"{s}_w{k}", Select(Var(f"{s}_out"), const(0), weight)),
                  Local(f"{s}_p{k}", Select(Var(f"{s}_out"), index(0), offset), INDEX)]
        taps.append((Var(f"{s}_w{k}"), Var(f"{s}_p{k}")))
    return stmts, taps


@CPP.register("RoiAlign", family="sampling", types=takes("float32", "float32", INDICES, out="float32"))
def roi_align(graph, node_id, cluster_id, args, attrs):
    """Per roi and bin, the sampling_ratio^2 bilinear samples' corners and weights as locals
    (roi_samples in tinsmith.ops.sampling, step by step), then per channel their average or max."""
    x, rois, batch = args.inputs
    y = args.outputs[0]
    n, channels, height, width = x.type.shape
    count, out_h, out_w = y.type.shape[0], y.type.shape[2], y.type.shape[3]
    ratio = attrs["sampling_ratio"]
    per_roi = _roi_prelude(rois.name, batch.name, n, attrs["coordinate_transformation_mode"] == "half_pixel",
                           attrs["spatial_scale"], out_h, out_w)
    per_bin: list[Stmt] = []
    samples = []
    for iy, ix in itertools.product(range(ratio), range(ratio)):
        stmts, taps = _sample(iy, ix, ratio, height, width)
        per_bin += stmts
        samples.append(taps)
    base = Binary("*", Binary("+", Binary("*", Var("b"), index(channels)), Var("c")), index(height * width))

    def value(w, p) -> Expr:
        return Binary("*", w, Load(x.name, Binary("+", base, p)))
    if attrs["mode"] == "avg":
        result = Binary("/", _sum([value(w, p) for taps in samples for w, p in taps]), const(ratio * ratio))
    else:
        result = _max([_max([value(w, p) for w, p in taps]) for taps in samples])
    at = Binary("+", Binary("*", Binary("+", Binary("*", Binary("+", Binary("*", Var("r"), index(channels)), Var("c")),
                                                    index(out_h)), Var("ph")), index(out_w)), Var("pw"))
    per_channel = For("c", channels, (Store(y.name, at, result),))
    bins = For("ph", out_h, (For("pw", out_w, tuple(per_bin) + (per_channel,)),))
    return [For("r", count, tuple(per_roi) + (bins,))]
