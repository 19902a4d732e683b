"""Primitives that pick elements by position: Slice, Split, Gather, GatherElements, GatherND,
ScatterElements, ScatterND, OneHot, Pad, Trilu, EyeLike, and Resize (which also interpolates).

Positions come from constant inputs (starts, pads, split sizes, scales) resolved at build time;
the indices of the Gather and Scatter ops and of OneHot may be computed at run time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ops.common import ANY, INDICES, NUMERIC, constant_ints, normalize_axis, require_dtypes
from tinsmith.ops.registry import Attr, InferArgs, OpError, Pattern, define


def _ints(x: np.ndarray | None) -> tuple[int, ...] | None:
    return None if x is None else tuple(int(v) for v in np.asarray(x).reshape(-1))


# --- Slice -------------------------------------------------------------------------------------
def slice_ranges(shape: tuple[int, ...], starts, ends, axes=None, steps=None) -> list[tuple[int, int, int]]:
    """(start, step, count) for every axis, after ONNX's clamping (the same as Python's slices)."""
    rank = len(shape)
    axes = tuple(range(len(starts))) if axes is None else axes
    steps = (1,) * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise OpError(f"Slice's starts, ends, axes and steps differ in length ({len(starts)}, {len(ends)}, "
                      f"{len(axes)}, {len(steps)})", input=2)
    result = [(0, 1, d) for d in shape]
    seen = set()
    for start, end, axis, step in zip(starts, ends, axes, steps):
        a = normalize_axis(axis, rank, "axes")
        if a in seen:
            raise OpError(f"Slice's axes {list(axes)} name axis {a} twice", input=3)
        seen.add(a)
        if step == 0:
            raise OpError("Slice's steps must not be 0", input=4)
        first, stop, step = slice(start, end, step).indices(shape[a])
        result[a] = (first, step, len(range(first, stop, step)))
    return result


def slice_args(args: InferArgs) -> list[tuple[int, int, int]]:
    """Slice's per-axis (start, step, count) from its constant inputs."""
    starts = constant_ints(args, 1, "Slice's starts")
    ends = constant_ints(args, 2, "Slice's ends")
    return slice_ranges(args.types[0].shape, starts, ends, constant_ints(args, 3, "Slice's axes"),
                        constant_ints(args, 4, "Slice's steps"))


def _slices(ranges) -> tuple[slice, ...]:
    return tuple(slice(first, first + step * count if first + step * count >= 0 else None, step) if count else
                 slice(0, 0) for first, step, count in ranges)


def _infer_slice(args: InferArgs) -> list[TensorType]:
    x = args.types[0]
    return [TensorType(x.dtype, tuple(count for _, _, count in slice_args(args)))]


def _slice_reference(xs, attrs):
    ranges = slice_ranges(xs[0].shape, _ints(xs[1]), _ints(xs[2]),
                          _ints(xs[3]) if len(xs) > 3 else None, _ints(xs[4]) if len(xs) > 4 else None)
    return [xs[0][_slices(ranges)]]


define("Slice", pattern=Pattern.INJECTIVE, inputs=(3, 5), infer=_infer_slice, reference=_slice_reference, constant_inputs=[1, 2, 3, 4])


# --- Split -------------------------------------------------------------------------------------
def split_sizes(args: InferArgs) -> tuple[int, ...]:
    """The size of each part along the axis: input 1, attribute 'split' (before opset 13), or
    num_outputs parts (the last one smaller if the axis does not divide evenly)."""
    x = args.types[0]
    axis = normalize_axis(args.attrs["axis"], x.rank)
    n = x.shape[axis]
    sizes = constant_ints(args, 1, "Split's split")
    if sizes is not None and args.attrs["split"] is not None:
        raise OpError("give Split's sizes either as attribute or as input, not both", attr="split")
    sizes = sizes if sizes is not None else args.attrs["split"]
    parts = args.attrs["num_outputs"]
    if sizes is not None:
        if parts is not None:
            raise OpError("give either Split's sizes or num_outputs, not both", attr="num_outputs")
        if any(s < 0 for s in sizes) or sum(sizes) != n:
            raise OpError(f"Split's sizes {list(sizes)} do not add up to {n}, the size of axis {axis}", input=1)
        return tuple(sizes)
    if parts is None:
        raise OpError("Split needs its sizes (input 1) or attribute 'num_outputs'", attr="num_outputs")
    if not 1 <= parts <= max(n, 1):
        raise OpError(f"Split cannot cut axis {axis} of size {n} into {parts} parts", attr="num_outputs")
    each = -(-n // parts)
    return tuple(min(each, n - k * each) for k in range(parts))


def _infer_split(args: InferArgs) -> list[TensorType]:
    x = args.types[0]
    axis = normalize_axis(args.attrs["axis"], x.rank)
    return [TensorType(x.dtype, x.shape[:axis] + (s,) + x.shape[axis + 1:]) for s in split_sizes(args)]


def _split_reference(xs, attrs):
    args = InferArgs((TensorType(xs[0].dtype.name, xs[0].shape),
                      None if len(xs) < 2 or xs[1] is None else TensorType("int64", xs[1].shape)), attrs,
                     (xs[0], xs[1] if len(xs) > 1 else None))
    cuts = np.cumsum(split_sizes(args))[:-1]
    return np.split(xs[0], cuts, axis=attrs["axis"])


# outputs=-1: as many as the node names (the rule checks that they agree with the sizes).
define("Split", pattern=Pattern.INJECTIVE, inputs=(1, 2), outputs=-1, infer=_infer_split, reference=_split_reference, constant_inputs=[1],
       attrs=[Attr("axis", "int", 0), Attr("num_outputs", "int", None), Attr("split", "ints", None)])


# --- Gather, GatherElements ----------------------------------------------------------------------
def _check_indices(args: InferArgs, n: int, what: str) -> None:
    t = args.types[1]
    if t.dtype not in INDICES:
        raise OpError(f"{what}'s indices must be int64 or int32, got {t}", input=1)
    if args.values[1] is not None:
        bad = [int(i) for i in np.asarray(args.values[1]).reshape(-1) if not -n <= int(i) < n]
        if bad:
            raise OpError(f"{what}'s index {bad[0]} is out of range for an axis of size {n}", input=1)


def _infer_gather(args: InferArgs) -> list[TensorType]:
    data, indices = args.types
    axis = normalize_axis(args.attrs["axis"], data.rank)
    _check_indices(args, data.shape[axis], "Gather")
    return [TensorType(data.dtype, data.shape[:axis] + indices.shape + data.shape[axis + 1:])]


def _gather_reference(xs, attrs):
    data, indices = xs
    n = data.shape[attrs["axis"]]
    wrapped = np.where(indices < 0, indices + n, indices)
    # out of range: clamped, as the kernel does
    return [np.take(data, np.clip(wrapped, 0, n - 1), axis=attrs["axis"])]


define("Gather", pattern=Pattern.INJECTIVE, inputs=2, infer=_infer_gather, reference=_gather_reference, attrs=[Attr("axis", "int", 0)])


def _infer_gather_elements(args: InferArgs) -> list[TensorType]:
    data, indices = args.types
    axis = normalize_axis(args.attrs["axis"], data.rank)
    if indices.rank != data.rank:
        raise OpError(f"GatherElements' indices must have the rank of the data ({data.rank}), got "
                      f"{list(indices.shape)}", input=1)
    _check_indices(args, data.shape[axis], "GatherElements")
    return [TensorType(data.dtype, indices.shape)]


def _gather_elements_reference(xs, attrs):
    data, indices = xs
    axis = attrs["axis"] % data.ndim
    n = data.shape[axis]
    wrapped = np.clip(np.where(indices < 0, indices + n, indices), 0, n - 1)
    # take_along_axis broadcasts; GatherElements reads data at the indices' positions elsewhere
    sub = data[tuple(slice(0, d) if i != axis else slice(None) for i, d in enumerate(indices.shape))]
    return [np.take_along_axis(sub, wrapped, axis=axis)]


define("GatherElements", pattern=Pattern.INJECTIVE, inputs=2, infer=_infer_gather_elements, reference=_gather_elements_reference,
       attrs=[Attr("axis", "int", 0)])


def _wrap_clip(indices: np.ndarray, n: int) -> np.ndarray:
    """Negative indices count from the end; out of range ones are clamped, as the kernels do."""
    return np.clip(np.where(indices < 0, indices + n, indices), 0, n - 1)


def _infer_gather_nd(args: InferArgs) -> list[TensorType]:
    data, indices = args.types
    b = args.attrs["batch_dims"]
    if indices.dtype not in INDICES or indices.rank < 1:
        raise OpError(f"GatherND's indices must be int64 of rank 1 or more, got {indices}", input=1)
    q = indices.shape[-1]
    if not 0 <= b < min(data.rank, indices.rank) or b + q > data.rank or data.shape[:b] != indices.shape[:b]:
        raise OpError(f"GatherND cannot index data {list(data.shape)} with indices {list(indices.shape)} and "
                      f"batch_dims {b}", input=1)
    return [TensorType(data.dtype, indices.shape[:-1] + data.shape[b + q:])]


def _gather_nd_reference(xs, attrs):
    data, indices = xs
    b, q = attrs["batch_dims"], indices.shape[-1]
    out = np.empty(indices.shape[:-1] + data.shape[b + q:], data.dtype)
    for pos in np.ndindex(*indices.shape[:-1]):
        at = tuple(int(_wrap_clip(indices[pos][k], data.shape[b + k])) for k in range(q))
        out[pos] = data[pos[:b] + at]
    return [out]


define("GatherND", pattern=Pattern.INJECTIVE, inputs=2, infer=_infer_gather_nd, reference=_gather_nd_reference,
       attrs=[Attr("batch_dims", "int", 0)])


# --- ScatterElements, ScatterND: a copy of the data with updates written (or combined) into it -----
SCATTER_REDUCTIONS = {"none": lambda old, new: new, "add": np.add, "mul": np.multiply, "max": np.maximum,
                      "min": np.minimum}


def _infer_scatter_elements(args: InferArgs) -> list[TensorType]:
    data, indices, updates = args.types
    require_dtypes(args, ANY, [0, 2])
    normalize_axis(args.attrs["axis"], data.rank)
    if indices.dtype not in INDICES or indices.shape != updates.shape or indices.rank != data.rank:
        raise OpError(f"ScatterElements needs int64 indices of the updates' shape {list(updates.shape)} and the "
                      f"data's rank {data.rank}, got {indices}", input=1)
    return [data]


def _scatter_elements_reference(xs, attrs):
    data, indices, updates = xs
    axis = attrs["axis"] % data.ndim
    out = data.copy()
    combine = SCATTER_REDUCTIONS[attrs["reduction"]]
    for pos in np.ndindex(*indices.shape):  # in order: later updates of one element see earlier ones
        at = pos[:axis] + (int(_wrap_clip(indices[pos], data.shape[axis])),) + pos[axis + 1:]
        out[at] = combine(out[at], updates[pos])
    return [out]


_REDUCTION = Attr("reduction", "string", "none", tuple(SCATTER_REDUCTIONS))
define("ScatterElements", inputs=3, infer=_infer_scatter_elements, reference=_scatter_elements_reference,
       attrs=[Attr("axis", "int", 0), _REDUCTION])


def _infer_scatter_nd(args: InferArgs) -> list[TensorType]:
    data, indices, updates = args.types
    require_dtypes(args, ANY, [0, 2])
    q = indices.shape[-1] if indices.rank else 0
    if indices.dtype not in INDICES or indices.rank < 1 or q > data.rank or \
            updates.shape != indices.shape[:-1] + data.shape[q:]:
        raise OpError(f"ScatterND cannot write updates {list(updates.shape)} into data {list(data.shape)} at "
                      f"indices {indices}", input=2)
    return [data]


def _scatter_nd_reference(xs, attrs):
    data, indices, updates = xs
    q = indices.shape[-1]
    out = data.copy()
    combine = SCATTER_REDUCTIONS[attrs["reduction"]]
    for pos in np.ndindex(*indices.shape[:-1]):
        at = tuple(int(_wrap_clip(indices[pos][k], data.shape[k])) for k in range(q))
        out[at] = combine(out[at], updates[pos])
    return [out]


define("ScatterND", inputs=3, infer=_infer_scatter_nd, reference=_scatter_nd_reference, attrs=[_REDUCTION])


# --- OneHot ------------------------------------------------------------------------------------
def onehot_depth(args: InferArgs) -> int:
    """OneHot's depth, from its constant input 1 (a number of any type)."""
    t, value = args.types[1], args.values[1]
    if value is None or t.size != 1 or t.dtype == "bool":
        raise OpError(f"OneHot's depth must be a constant number, got {t}", input=1)
    depth = int(np.asarray(value).reshape(-1)[0])
    if depth < 1:
        raise OpError(f"OneHot's depth must be positive, not {depth}", input=1)
    return depth


def _infer_onehot(args: InferArgs) -> list[TensorType]:
    indices, _, values = args.types
    require_dtypes(args, NUMERIC, [0])
    if values.size != 2:
        raise OpError(f"OneHot's values must be two numbers (off, on), got {values}", input=2)
    axis = args.attrs["axis"]
    if not -indices.rank - 1 <= axis <= indices.rank:
        raise OpError(f"axis {axis} is out of range for OneHot of a tensor of rank {indices.rank}", attr="axis")
    axis = axis % (indices.rank + 1)
    return [TensorType(values.dtype, indices.shape[:axis] + (onehot_depth(args),) + indices.shape[axis:])]


def _onehot_reference(xs, attrs):
    indices, depth, values = xs
    depth = int(np.asarray(depth).reshape(-1)[0])
    axis = attrs["axis"] % (indices.ndim + 1)
    idx = indices.astype(np.int64)  # toward zero, as a cast
    idx = np.where(idx < 0, idx + depth, idx)
    hot = np.expand_dims(idx, axis) == np.arange(depth).reshape([depth if i == axis else 1
                                                                 for i in range(indices.ndim + 1)])
    off, on = np.asarray(values).reshape(-1)
    return [np.where(hot, on, off).astype(values.dtype)]


define("OneHot", inputs=3, infer=_infer_onehot, reference=_onehot_reference, constant_inputs=[1],
       attrs=[Attr("axis", "int", -1)])


# --- Pad ---------------------------------------------------------------------------------------
def pad_amounts(args: InferArgs) -> list[tuple[int, int]]:
    """(before, after) for every axis, from the constant pads and optional axes inputs."""
    x = args.types[0]
    pads = constant_ints(args, 1, "Pad's pads")
    axes = constant_ints(args, 3, "Pad's axes")
    axes = tuple(range(x.rank)) if axes is None else tuple(normalize_axis(a, x.rank, "axes") for a in axes)
    if len(pads) != 2 * len(axes):
        raise OpError(f"Pad's pads has {len(pads)} numbers; it needs {2 * len(axes)}, a start and an end for "
                      f"each of {len(axes)} axes", input=1)
    amounts = [(0, 0)] * x.rank
    for k, a in enumerate(axes):
        amounts[a] = (pads[k], pads[k + len(axes)])
    mode = args.attrs["mode"]
    for a, ((before, after), n) in enumerate(zip(amounts, x.shape)):
        kept = n - max(-before, 0) - max(-after, 0)
        if kept < 0 or n + before + after < 0:
            raise OpError(f"Pad's pads remove more than axis {a} holds ({n})", input=1)
        if mode == "reflect" and max(before, after) > kept - 1 and max(before, after) > 0:
            raise OpError(f"Pad reflects axis {a} of size {kept} by {max(before, after)}; at most {kept - 1} "
                          f"fit", input=1)
        if mode in ("edge", "wrap") and kept == 0 and max(before, after) > 0:
            raise OpError(f"Pad in {mode} mode cannot pad the empty axis {a}", input=1)
    return amounts


def _infer_pad(args: InferArgs) -> list[TensorType]:
    dtype = require_dtypes(args, ANY, [0, 2])
    x = args.types[0]
    if len(args.types) > 2 and args.types[2] is not None and args.types[2].size != 1:
        raise OpError(f"Pad's constant_value must hold one value, got {args.types[2]}", input=2)
    return [TensorType(dtype, tuple(n + b + e for n, (b, e) in zip(x.shape, pad_amounts(args))))]


def _pad_reference(xs, attrs):
    x = xs[0]
    types = tuple(None if v is None else TensorType(v.dtype.name, v.shape) for v in xs)
    amounts = pad_amounts(InferArgs(types, attrs, tuple(xs)))
    cropped = x[tuple(slice(max(-b, 0), n - max(-e, 0)) for n, (b, e) in zip(x.shape, amounts))]
    widths = [(max(b, 0), max(e, 0)) for b, e in amounts]
    if attrs["mode"] == "constant":
        value = xs[2].reshape(-1)[0] if len(xs) > 2 and xs[2] is not None else 0
        return [np.pad(cropped, widths, mode="constant", constant_values=value)]
    return [np.pad(cropped, widths, mode=attrs["mode"])]


define("Pad", pattern=Pattern.INJECTIVE, inputs=(2, 4), infer=_infer_pad, reference=_pad_reference, constant_inputs=[1, 3],
       attrs=[Attr("mode", "string", "constant", ("constant", "reflect", "edge", "wrap"))])


# --- Trilu, EyeLike ----------------------------------------------------------------------------
def trilu_k(args: InferArgs) -> int:
    k = constant_ints(args, 1, "Trilu's k", rank=None)
    return 0 if k is None else k[0]


def _infer_trilu(args: InferArgs) -> list[TensorType]:
    x = args.types[0]
    if x.rank < 2:
        raise OpError(f"Trilu takes a tensor of rank 2 or more, got {list(x.shape)}", input=0)
    trilu_k(args)
    return [x]


def _trilu_reference(xs, attrs):
    k = int(xs[1].reshape(-1)[0]) if len(xs) > 1 and xs[1] is not None else 0
    return [np.triu(xs[0], k) if attrs["upper"] else np.tril(xs[0], k)]


define("Trilu", pattern=Pattern.INJECTIVE, inputs=(1, 2), infer=_infer_trilu, reference=_trilu_reference, constant_inputs=[1],
       attrs=[Attr("upper", "int", 1, (0, 1))])


def _infer_eye_like(args: InferArgs) -> list[TensorType]:
    x = args.types[0]
    if x.rank != 2:
        raise OpError(f"EyeLike takes a 2-D tensor, got {list(x.shape)}", input=0)
    return [TensorType(args.attrs["dtype"] or x.dtype, x.shape)]


def _eye_like_reference(xs, attrs: Mapping):
    n, m = xs[0].shape
    dtype = TensorType(attrs["dtype"], ()).numpy_dtype if attrs["dtype"] else xs[0].dtype
    return [np.eye(n, m, attrs["k"], dtype=dtype)]


define("EyeLike", inputs=1, infer=_infer_eye_like, reference=_eye_like_reference,
       attrs=[Attr("dtype", "dtype", None), Attr("k", "int", 0)])


# --- Resize ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ResizeAxis:
    """How one axis is resampled: output size, the scale in the coordinate formula, the output length
    that formula divides by (scale * input size, not rounded, as ONNX's reference has it), and the
    region of interest (tf_crop_and_resize)."""

    size: int
    scale: float
    length: float
    roi: tuple[float, float] = (0.0, 1.0)


def _floats(x: np.ndarray | None) -> tuple[float, ...] | None:
    return None if x is None or x.size == 0 else tuple(float(v) for v in np.asarray(x).reshape(-1))


def resize_axes(shape: tuple[int, ...], attrs: Mapping, roi=None, scales=None,
                sizes=None) -> list[ResizeAxis | None]:
    """Per axis, how it is resampled, or None where it is left as it is."""
    rank = len(shape)
    given = attrs["axes"]
    axes = list(range(rank)) if given is None else [normalize_axis(a, rank, "axes") for a in given]
    if len(set(axes)) != len(axes):
        raise OpError(f"Resize's axes {list(attrs['axes'])} name an axis twice", attr="axes")
    if (scales is None) == (sizes is None):
        raise OpError("Resize needs either scales (input 2) or sizes (input 3), not both or neither", input=2)
    given = scales if scales is not None else sizes
    if len(given) != len(axes):
        what = "scales" if scales is not None else "sizes"
        raise OpError(f"Resize's {what} has {len(given)} numbers for {len(axes)} axes",
                      input=2 if scales is not None else 3)
    regions = {a: (0.0, 1.0) for a in range(rank)}
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        if roi is None or len(roi) != 2 * len(axes):
            raise OpError(f"Resize with tf_crop_and_resize needs roi (input 1): a start and an end for each of "
                          f"{len(axes)} axes", input=1)
        regions.update({a: (roi[k], roi[k + len(axes)]) for k, a in enumerate(axes)})
    factor = {a: 1.0 for a in range(rank)}
    size = dict(enumerate(shape))
    if scales is not None:
        if any(s <= 0 for s in scales):
            raise OpError(f"Resize's scales {list(scales)} must be positive", input=2)
        for a, s in zip(axes, scales):
            factor[a], size[a] = s, int(s * shape[a])
    else:
        if any(s < 0 for s in sizes):
            raise OpError(f"Resize's sizes {list(sizes)} must not be negative", input=3)
        empty = [a for a, s in zip(axes, sizes) if shape[a] == 0 and s != 0]
        if empty:
            raise OpError(f"Resize cannot make axis {empty[0]} of size {sizes[list(axes).index(empty[0])]} from an "
                          f"empty one (size 0): there is nothing to sample", input=3)
        ratios = {a: (s / shape[a] if shape[a] else 1.0) for a, s in zip(axes, sizes)}
        policy = attrs["keep_aspect_ratio_policy"]
        if policy != "stretch":
            one = (min if policy == "not_larger" else max)(ratios.values())
            ratios = {a: one for a in axes}
            sizes = [int(one * shape[a] + 0.5) for a in axes]  # rounded half up
        for a, s in zip(axes, sizes):
            factor[a], size[a] = ratios[a], s
    result: list[ResizeAxis | None] = []
    for a in range(rank):
        if math.isclose(factor[a], 1.0) and size[a] == shape[a] and regions[a] == (0.0, 1.0):
            result.append(None)
        else:
            result.append(ResizeAxis(size[a], factor[a], factor[a] * shape[a], regions[a]))
    return result


def resize_inputs(args: InferArgs) -> tuple:
    """Resize's roi, scales and sizes (None where omitted or empty), from its constant inputs."""
    def value(i):
        if i >= len(args.types) or args.types[i] is None or args.types[i].size == 0:
            return None
        if args.values[i] is None:
            raise OpError(f"Resize's input {i} must be a constant", input=i)
        return args.values[i]
    roi, scales, sizes = value(1), value(2), value(3)
    return _floats(roi), _floats(scales), _ints(sizes)


def source_coordinate(mode: str, x, n_in: int, ax: ResizeAxis):
    """Where output position x (a number or an array) samples the input, per
    coordinate_transformation_mode; works on NumPy values and, through operator overloading, on
    anything else that has + - * /."""
    s = ax.scale
    if mode == "half_pixel":
        return (x + 0.5) / s - 0.5
    if mode == "tf_half_pixel_for_nn":  # opset 11 only
        return (x + 0.5) / s
    if mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - ax.size / ax.length)
        return (x + 0.5) / s - 0.5 + offset
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / s - 0.5 if ax.length != 1 else x * 0 - 0.5
    if mode == "align_corners":
        return x * (n_in - 1) / (ax.length - 1) if ax.length != 1 else x * 0
    if mode == "asymmetric":
        return x / s
    start, end = ax.roi  # tf_crop_and_resize
    if ax.length == 1:
        return x * 0 + (end - start) * (n_in - 1) / 2 + start * (n_in - 1)
    return x * ((end - start) * (n_in - 1)) / (ax.length - 1) + start * (n_in - 1)


def cubic_weights(t, a: float) -> list:
    """The four cubic convolution weights for taps floor-1 .. floor+2 at fraction t."""
    u = 1 - t
    return [((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * u - (a + 3)) * u * u + 1,
            ((a * (u + 1) - 5 * a) * (u + 1) + 8 * a) * (u + 1) - 4 * a]


NEAREST = {  # nearest_mode -> the index a source coordinate rounds to
    "round_prefer_floor": lambda x: np.ceil(x - 0.5),
    "round_prefer_ceil": lambda x: np.floor(x + 0.5),
    "floor": np.floor,
    "ceil": np.ceil,
}


def _resample(x: np.ndarray, axis: int, ax: ResizeAxis, attrs: Mapping) -> np.ndarray:
    """One axis of the separable resize, in float64."""
    n = x.shape[axis]
    positions = np.arange(ax.size, dtype=np.float64)
    src = np.asarray(source_coordinate(attrs["coordinate_transformation_mode"], positions, n, ax), np.float64)

    def clamp(i):  # edge padding: positions outside the axis read its first or last element
        return np.clip(i, 0, n - 1).astype(np.intp)

    if attrs["mode"] == "nearest":
        y = np.take(x, clamp(NEAREST[attrs["nearest_mode"]](src)), axis=axis)
    else:
        if attrs["mode"] == "linear":
            c = np.clip(src, 0, n - 1)
            lo = np.floor(c)
            taps, weights = [lo, np.minimum(lo + 1, n - 1)], [1 - (c - lo), c - lo]
        else:
            lo = np.floor(src)
            taps = [lo + k for k in (-1, 0, 1, 2)]
            weights = cubic_weights(src - lo, attrs["cubic_coeff_a"])
            if attrs["exclude_outside"]:
                weights = [w * ((t >= 0) & (t <= n - 1)) for w, t in zip(weights, taps)]
                total = sum(weights)
                weights = [w / total for w in weights]
        shape = [1] * x.ndim
        shape[axis] = ax.size
        y = sum(np.take(x, clamp(t), axis=axis) * np.reshape(w, shape) for t, w in zip(taps, weights))
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        outside = np.reshape((src < 0) | (src > n - 1), [ax.size if i == axis else 1 for i in range(x.ndim)])
        y = np.where(outside, attrs["extrapolation_value"], y)
    return y


def _infer_resize(args: InferArgs) -> list[TensorType]:
    x = args.types[0]
    require_dtypes(args, ("float32",), [0])
    if args.attrs["antialias"]:
        raise OpError("Resize with antialias is not supported", attr="antialias")
    plan = resize_axes(x.shape, args.attrs, *resize_inputs(args))
    return [TensorType(x.dtype, tuple(d if ax is None else ax.size for d, ax in zip(x.shape, plan)))]


def _resize_reference(xs, attrs):
    types = tuple(None if v is None else TensorType(v.dtype.name, v.shape) for v in xs)
    plan = resize_axes(xs[0].shape, attrs, *resize_inputs(InferArgs(types, attrs, tuple(xs))))
    y = xs[0].astype(np.float64)
    for axis, ax in enumerate(plan):
        if ax is not None:
            y = _resample(y, axis, ax, attrs)
    return [y.astype(xs[0].dtype)]


define("Resize", inputs=(1, 4), infer=_infer_resize, reference=_resize_reference, constant_inputs=[1, 2, 3],
       attrs=[Attr("mode", "string", "nearest", ("nearest", "linear", "cubic")),
              Attr("coordinate_transformation_mode", "string", "half_pixel",
                   ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_crop_and_resize", "tf_half_pixel_for_nn")),
              Attr("nearest_mode", "string", "round_prefer_floor", tuple(NEAREST)),
              Attr("cubic_coeff_a", "float", -0.75), Attr("exclude_outside", "int", 0, (0, 1)),
              Attr("extrapolation_value", "float", 0.0), Attr("axes", "ints", None),
              Attr("keep_aspect_ratio_policy", "string", "stretch", ("stretch", "not_larger", "not_smaller")),
              Attr("antialias", "int", 0, (0, 1))])
