"""GridSample: X sampled at the positions a grid gives (a spatial transformer's resampler).

X is [N, C, D1, ..., Dr] and the grid [N, O1, ..., Or, r], whose last axis holds normalized
coordinates in [-1, 1], the innermost spatial axis first (x, then y, then z); the output is
[N, C, O1, ..., Or]. Per output position each coordinate is denormalized (align_corners: -1 and
1 are the centres of the edge samples, else their outer edges), moved inside the input by the
padding mode when it falls outside (border: clamped; reflection: mirrored at the edges), and
sampled by mode: nearest (ties to even), linear (2^r taps) or cubic (4^r taps, Keys' kernel
with a = -0.75). A tap outside the input reads 0 (zeros), the edge sample (border) or its
mirror image (reflection).

The description of each coordinate (`axis_taps`) is written once over an abstract arithmetic,
so the NumPy reference and the kernel compute the same steps in the same order.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from codegen.ir import TensorType
from codegen.ops.common import require_dtypes
from codegen.ops.registry import Attr, InferArgs, OpError, define

CUBIC_A = -0.75
TAPS = {"nearest": 1, "linear": 2, "cubic": 4}


@dataclass(frozen=True)
class SampledAxis:
    """One spatial axis of X: its size and the range a coordinate may take before padding applies."""

    size: int
    low: float  # -0.5, or 0 with align_corners
    high: float  # size - 0.5, or size - 1 with align_corners

    @staticmethod
    def of(size: int, align_corners: bool) -> "SampledAxis":
        return SampledAxis(size, 0.0 if align_corners else -0.5, size - 1.0 if align_corners else size - 0.5)


def cubic_coefficients(t, a: float = CUBIC_A) -> list:
    """Keys' weights of taps floor - 1 .. floor + 2 at fraction t (t, 1 - t in [0, 1])."""
    u = 1 - t
    return [((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * u - (a + 3)) * u * u + 1,
            ((a * (u + 1) - 5 * a) * (u + 1) + 8 * a) * (u + 1) - 4 * a]


class NumpyMath:
    """The arithmetic `axis_taps` needs, on float64 arrays."""

    floor = staticmethod(np.floor)
    round_even = staticmethod(np.rint)
    trunc = staticmethod(np.trunc)

    @staticmethod
    def let(v, hint: str):
        """A value computed once (a kernel binds it to a local)."""
        return v

    @staticmethod
    def select(cond, a, b):
        return np.where(cond, a, b)

    @staticmethod
    def lt(a, b):
        return a < b

    @staticmethod
    def gt(a, b):
        return a > b

    @staticmethod
    def both(a, b):
        return a & b

    @staticmethod
    def clamp(v, lo: float, hi: float):
        return np.clip(np.nan_to_num(v, nan=hi), lo, hi)

    @staticmethod
    def is_even(n):
        return np.mod(n, 2) == 0


def reflect(m, v, low: float, high: float):
    """v mirrored at low and high until it lies between them."""
    span = high - low

    def fold(distance, near: float, far: float, toward: float, hint: str):
        turns = m.let(m.floor(distance / span), f"{hint}_turns")
        rest = m.let(distance - turns * span, f"{hint}_rest")
        return m.select(m.is_even(turns), near + toward * rest, far - toward * rest)
    below = fold(low - v, low, high, 1.0, "below")
    above = fold(v - high, high, low, -1.0, "above")
    return m.select(m.lt(v, low), below, m.select(m.gt(v, high), above, v))


def pixel(m, i, ax: SampledAxis, padding: str):
    """(index inside the axis, valid) of integer tap i: valid is None unless zeros padding."""
    if padding == "zeros":
        return m.clamp(i, 0.0, ax.size - 1.0), m.both(m.lt(i, ax.size - 0.5), m.gt(i, -0.5))
    if padding == "reflection":
        i = m.trunc(m.let(reflect(m, i, ax.low, ax.high), "mirrored"))
    return m.clamp(i, 0.0, ax.size - 1.0), None


def axis_taps(m, g, ax: SampledAxis, mode: str, padding: str, align_corners: bool) -> list:
    """(index, weight, valid) of each tap of normalized coordinate g along one axis; indices are
    whole numbers in 0..size-1 (as floats), weight None for nearest, valid None where every tap is."""
    x = m.let((g + 1) / 2 * (ax.size - 1) if align_corners else ((g + 1) * ax.size - 1) / 2, "x")
    if mode == "nearest":
        x = m.let(m.round_even(x), "x")
    outside = m.lt(x, ax.low), m.gt(x, ax.high)
    if padding == "border":
        x = m.select(outside[0], m.clamp(x, 0.0, ax.size - 1.0), m.select(outside[1], m.clamp(x, 0.0, ax.size - 1.0), x))
    elif padding == "reflection":
        x = reflect(m, x, ax.low, ax.high)
    x = m.let(x, "x")
    if mode == "nearest":
        i, valid = pixel(m, m.trunc(x), ax, padding)
        return [(i, None, valid)]
    x0 = m.let(m.floor(x), "x")
    t = m.let(x - x0, "t")
    if mode == "linear":
        offsets, weights = (0, 1), [1 - t, t]
    else:
        offsets, weights = (-1, 0, 1, 2), cubic_coefficients(t)
    taps = []
    for k, w in zip(offsets, weights):
        i, valid = pixel(m, x0 + k if k else x0, ax, padding)
        taps.append((i, w, valid))
    return taps


MODES = {"nearest": "nearest", "linear": "linear", "cubic": "cubic", "bilinear": "linear", "bicubic": "cubic"}


def sampling_mode(attrs) -> str:
    """nearest, linear or cubic (opset 16 spells the last two bilinear and bicubic)."""
    return MODES[attrs["mode"]]


def grid_axes(x_shape, attrs) -> list[SampledAxis]:
    return [SampledAxis.of(d, bool(attrs["align_corners"])) for d in x_shape[2:]]


def _infer(args: InferArgs) -> list[TensorType]:
    require_dtypes(args, ("float32",), [0, 1])
    x, grid = args.types[0], args.types[1]
    r = x.rank - 2
    if r < 1 or grid.rank != r + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != r:
        raise OpError(f"GridSample needs X [N, C, D1..Dr] and grid [N, O1..Or, r]; got X {list(x.shape)} and "
                      f"grid {list(grid.shape)}", input=1)
    if sampling_mode(args.attrs) == "cubic" and r != 2:
        raise OpError(f"GridSample's cubic mode samples 2-D inputs only, this one has {r} spatial axes",
                      attr="mode")
    return [TensorType("float32", x.shape[:2] + grid.shape[1:-1])]


def _reference(xs, attrs):
    x, grid = xs[0].astype(np.float64), xs[1].astype(np.float64)
    axes = grid_axes(x.shape, attrs)
    r = len(axes)
    per_axis = [axis_taps(NumpyMath, grid[..., r - 1 - d], ax, sampling_mode(attrs), attrs["padding_mode"],
                          bool(attrs["align_corners"])) for d, ax in enumerate(axes)]
    n = np.arange(x.shape[0]).reshape((-1,) + (1,) * r)
    y = np.zeros((x.shape[0], x.shape[1]) + grid.shape[1:-1])
    for combo in itertools.product(*per_axis):
        weight = np.ones(grid.shape[:-1])
        for _, w, valid in combo:
            if w is not None:
                weight = weight * w
            if valid is not None:
                weight = weight * valid
        picked = x[(n, slice(None)) + tuple(i.astype(np.intp) for i, _, _ in combo)]  # [N, O..., C]
        y += np.moveaxis(picked, -1, 1) * weight[:, None]
    return [y.astype(np.float32)]


define("GridSample", inputs=2, infer=_infer, reference=_reference,
       attrs=[Attr("align_corners", "int", 0, (0, 1)), Attr("mode", "string", "linear", tuple(MODES)),
              Attr("padding_mode", "string", "zeros", ("zeros", "border", "reflection"))])
