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

from tinsmith.ir import TensorType
from tinsmith.ops.common import require_dtypes
from tinsmith.ops.registry import Attr, InferArgs, OpError, define

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


def axis_taps(m, g, ax: SampledAxis, mode: str, padding: str, align_corners: bool | None) -> list:
    """(index, weight, valid) of each tap of normalized coordinate g along one axis (or, with
    align_corners None, of g already in input positions); indices are whole numbers in 0..size-1
    (as floats), weight None for nearest, valid None where every tap is."""
    if align_corners is None:
        x = g
    else:
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
    return [SampledAxis.of(d, bool(attrs.get("align_corners", 0))) for d in x_shape[2:]]


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


def align_of(attrs) -> bool | None:
    """align_corners of GridSample; None for GridSamplePixels, whose grid holds input positions."""
    return bool(attrs["align_corners"]) if "align_corners" in attrs else None


def _reference(xs, attrs):
    x, grid = xs[0].astype(np.float64), xs[1].astype(np.float64)
    axes = grid_axes(x.shape, attrs)
    r = len(axes)
    per_axis = [axis_taps(NumpyMath, grid[..., r - 1 - d], ax, sampling_mode(attrs), attrs["padding_mode"],
                          align_of(attrs)) for d, ax in enumerate(axes)]
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

# GridSample whose grid holds input positions (innermost axis first) rather than normalized
# coordinates: what DeformConv samples, with no rounding on the way to and from [-1, 1].
define("GridSamplePixels", inputs=2, infer=_infer, reference=_reference,
       attrs=[Attr("mode", "string", "linear", tuple(MODES)),
              Attr("padding_mode", "string", "zeros", ("zeros", "border", "reflection"))])


# --- RoiAlign ---------------------------------------------------------------------------------
MAX_SAMPLES_PER_BIN = 64  # sampling_ratio^2: each sample is unrolled in the kernel


def roi_samples(roi, scale: float, half_pixel: bool, out_h: int, out_w: int, ratio: int, height: int, width: int):
    """For one roi (x1, y1, x2, y2): per bin (ph, pw) and sample (iy, ix), the four corner offsets
    (in one H x W plane) and bilinear weights; a sample farther than one pixel outside the map
    has weights 0. Plain Python floats, in the order the kernel computes them."""
    offset = 0.5 if half_pixel else 0.0
    x1, y1, x2, y2 = (v * scale - offset for v in roi)
    roi_w, roi_h = x2 - x1, y2 - y1
    if not half_pixel:  # the legacy mode keeps rois at least one pixel wide
        roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
    bin_h, bin_w = roi_h / out_h, roi_w / out_w
    samples = {}
    for ph, pw, iy, ix in itertools.product(range(out_h), range(out_w), range(ratio), range(ratio)):
        y = y1 + ph * bin_h + (iy + 0.5) * bin_h / ratio
        x = x1 + pw * bin_w + (ix + 0.5) * bin_w / ratio
        if y < -1.0 or y > height or x < -1.0 or x > width:
            samples[ph, pw, iy, ix] = ((0, 0, 0, 0), (0.0, 0.0, 0.0, 0.0))
            continue
        y, x = max(y, 0.0), max(x, 0.0)
        y_lo, x_lo = int(y), int(x)
        if y_lo >= height - 1:
            y_lo = y_hi = height - 1
            y = float(y_lo)
        else:
            y_hi = y_lo + 1
        if x_lo >= width - 1:
            x_lo = x_hi = width - 1
            x = float(x_lo)
        else:
            x_hi = x_lo + 1
        ly, lx = y - y_lo, x - x_lo
        hy, hx = 1 - ly, 1 - lx
        samples[ph, pw, iy, ix] = ((y_lo * width + x_lo, y_lo * width + x_hi, y_hi * width + x_lo, y_hi * width + x_hi),
                                   (hy * hx, hy * lx, ly * hx, ly * lx))
    return samples


def _infer_roi_align(args: InferArgs) -> list[TensorType]:
    require_dtypes(args, ("float32",), [0, 1])
    x, rois, batch = args.types
    if x.rank != 4 or rois.rank != 2 or rois.shape[1] != 4 or batch.shape != rois.shape[:1]:
        raise OpError(f"RoiAlign needs X [N, C, H, W], rois [R, 4] and batch_indices [R]; got {list(x.shape)}, "
                      f"{list(rois.shape)} and {list(batch.shape)}", input=1)
    ratio = args.attrs["sampling_ratio"]
    if ratio <= 0:
        raise OpError("RoiAlign with sampling_ratio 0 takes as many samples per bin as each roi's size at run "
                      "time asks; a compiled kernel needs a fixed count: give sampling_ratio > 0",
                      attr="sampling_ratio")
    if ratio * ratio > MAX_SAMPLES_PER_BIN:
        raise OpError(f"RoiAlign sampling_ratio {ratio} takes {ratio * ratio} samples per bin, more than "
                      f"{MAX_SAMPLES_PER_BIN}", attr="sampling_ratio")
    return [TensorType("float32", (rois.shape[0], x.shape[1], args.attrs["output_height"], args.attrs["output_width"]))]


def _roi_align_reference(xs, attrs):
    x, rois, batch = xs[0].astype(np.float64), xs[1].astype(np.float64), xs[2].astype(np.int64)
    n, c, height, width = x.shape
    out_h, out_w, ratio = attrs["output_height"], attrs["output_width"], attrs["sampling_ratio"]
    y = np.zeros((rois.shape[0], c, out_h, out_w))
    for r in range(rois.shape[0]):
        plane = x[int(np.clip(batch[r], 0, n - 1))].reshape(c, -1)
        samples = roi_samples(rois[r], attrs["spatial_scale"], attrs["coordinate_transformation_mode"] == "half_pixel",
                              out_h, out_w, ratio, height, width)
        for ph, pw in itertools.product(range(out_h), range(out_w)):
            values = [sum(w * plane[:, p] for p, w in zip(*samples[ph, pw, iy, ix])) if attrs["mode"] == "avg"
                      else np.max([w * plane[:, p] for p, w in zip(*samples[ph, pw, iy, ix])], axis=0)
                      for iy, ix in itertools.product(range(ratio), range(ratio))]
            y[r, :, ph, pw] = np.sum(values, axis=0) / (ratio * ratio) if attrs["mode"] == "avg" \
                else np.max(values, axis=0)
    return [y.astype(np.float32)]


define("RoiAlign", inputs=3, infer=_infer_roi_align, reference=_roi_align_reference,
       attrs=[Attr("coordinate_transformation_mode", "string", "half_pixel", ("half_pixel", "output_half_pixel")),
              Attr("mode", "string", "avg", ("avg", "max")), Attr("output_height", "int", 1),
              Attr("output_width", "int", 1), Attr("sampling_ratio", "int", 0), Attr("spatial_scale", "float", 1.0)])
