"""ONNX Resize with antialias=1 (the ONNX importer's ResizeAntialias): linear or cubic resampling
whose filter, when an axis shrinks by a factor s < 1, is stretched by 1/s so every input sample
contributes (a box-like low-pass before decimation, as image libraries resize).

With the scales or sizes known when the graph is built, each resampled axis is a constant
[out, in] matrix of filter weights (edge samples repeated, as Resize pads), so the op is one
MatMul per axis, computed by the matrix kernels.
"""
from __future__ import annotations

import numpy as np

from tinsmith.builders.registry import builder
from tinsmith.ops.indexing import resize_axes, resize_inputs, source_coordinate
from tinsmith.ops.registry import Attr, InferArgs, OpError


def _triangle(t: np.ndarray, a: float) -> np.ndarray:
    return np.clip(1 - np.abs(t), 0, 1)


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with coefficient a, zero beyond |t| = 2."""
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


FILTERS = {"linear": (_triangle, 1), "cubic": (_cubic, 2)}  # mode -> (kernel, support radius)


def antialias_matrix(n_in: int, ax, attrs) -> np.ndarray:
    """[out, in] weights of one axis: output i takes sample j with weight k((j - x_i) s), s the
    scale where it shrinks (else 1), normalized over the taps; taps past an edge read the edge
    sample, or are dropped with exclude_outside."""
    kernel, radius = FILTERS[attrs["mode"]]
    s = min(ax.scale, 1.0)
    x = np.asarray(source_coordinate(attrs["coordinate_transformation_mode"],
                                     np.arange(ax.size, dtype=np.float64), n_in, ax), np.float64)
    reach = int(np.ceil(radius / s)) + 1
    taps = np.floor(x)[:, None] + np.arange(-reach, reach + 1)[None, :]
    weights = kernel((taps - x[:, None]) * s, attrs["cubic_coeff_a"])
    inside = (taps >= 0) & (taps <= n_in - 1)
    if attrs["exclude_outside"]:
        weights = np.where(inside, weights, 0.0)
    weights = weights / weights.sum(axis=1, keepdims=True)
    matrix = np.zeros((ax.size, n_in))
    rows = np.broadcast_to(np.arange(ax.size)[:, None], taps.shape)
    np.add.at(matrix, (rows, np.clip(taps, 0, n_in - 1).astype(np.intp)), weights)
    return matrix


_ATTRS = [Attr("mode", "string", "nearest", ("nearest", "linear", "cubic")),
          Attr("coordinate_transformation_mode", "string", "half_pixel",
               ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                "tf_crop_and_resize", "tf_half_pixel_for_nn")),
          Attr("nearest_mode", "string", "round_prefer_floor"), Attr("cubic_coeff_a", "float", -0.75),
          Attr("exclude_outside", "int", 0, (0, 1)), Attr("extrapolation_value", "float", 0.0),
          Attr("axes", "ints", None),
          Attr("keep_aspect_ratio_policy", "string", "stretch", ("stretch", "not_larger", "not_smaller"))]


@builder("ResizeAntialias", inputs=(1, 4), attrs=_ATTRS)
def resize_antialias(g, inputs, attrs):
    """ONNX Resize with antialias=1, mode linear or cubic: one constant matrix per resampled axis."""
    if attrs["mode"] not in FILTERS:
        raise OpError(f"Resize with antialias needs mode linear or cubic, not {attrs['mode']}", attr="mode")
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        raise OpError("Resize with antialias and tf_crop_and_resize is not supported: the crop's "
                      "extrapolated samples have no filter footprint", attr="coordinate_transformation_mode")
    x = inputs[0]
    shape = tuple(g.type_of(x).shape)
    names = list(inputs) + [""] * (4 - len(inputs))
    types = tuple(g.type_of(n) if n else None for n in names)
    values = tuple(g.value_of(n) if n else None for n in names)
    plan = resize_axes(shape, attrs, *resize_inputs(InferArgs(types, attrs, values)))
    rank = len(shape)
    y = x
    for axis, ax in enumerate(plan):
        if ax is None:
            continue
        matrix = antialias_matrix(shape[axis], ax, attrs).astype(np.float32)
        if axis == rank - 1:  # [..., in] @ [in, out]
            y = g.add("MatMul", [y, g.constant(np.ascontiguousarray(matrix.T), "resize")])[0]
        elif axis == rank - 2:  # [out, in] @ [..., in, last]
            y = g.add("MatMul", [g.constant(matrix, "resize"), y])[0]
        else:  # bring the axis last, resample, and put it back
            perm = [d for d in range(rank) if d != axis] + [axis]
            t = g.add("Transpose", [y], {"perm": perm})[0]
            t = g.add("MatMul", [t, g.constant(np.ascontiguousarray(matrix.T), "resize")])[0]
            y = g.add("Transpose", [t], {"perm": [int(p) for p in np.argsort(perm)]})[0]
    return [y]
