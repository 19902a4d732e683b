"""Selecting and placing parts of a tensor with shapes known when the graph is built: ONNX
Compress (a constant condition picks the slices to keep) and CenterCropPad (each axis cropped
or zero-padded around its centre)."""
from __future__ import annotations

import numpy as np

from codegen.builders.registry import builder
from codegen.ops.common import normalize_axis
from codegen.ops.registry import Attr, OpError


@builder("Compress", inputs=2, attrs=[Attr("axis", "int", None)])
def compress(g, inputs, attrs):
    """The slices of `input` along `axis` (of the flattened input without one) whose condition
    is true; a condition shorter than the axis leaves the rest out."""
    x, condition = inputs
    keep = g.value_of(condition)
    if keep is None:
        raise OpError("Compress condition must be a constant, known when the graph is built: the "
                      "output's shape depends on it", input=1)
    keep = np.asarray(keep).reshape(-1).astype(bool)
    shape = list(g.type_of(x).shape)
    if attrs["axis"] is None:
        x = g.add("Reshape", [x, g.constant(np.array([-1], np.int64), "shape")])[0]
        axis, length = 0, int(np.prod(shape))
    else:
        axis = normalize_axis(attrs["axis"], len(shape))
        length = shape[axis]
    if keep.size > length:
        raise OpError(f"Compress condition has {keep.size} entries, more than the {length} along the axis", input=1)
    picked = np.flatnonzero(keep)
    if picked.size == 0:
        raise OpError("Compress condition selects nothing: zero-size tensors are not supported", input=1)
    return g.add("Gather", [x, g.constant(picked.astype(np.int64), "indices")], {"axis": axis})


@builder("CenterCropPad", inputs=2, attrs=[Attr("axes", "ints", None)])
def center_crop_pad(g, inputs, attrs):
    """Each listed axis cropped to, or zero-padded up to, the requested length, centred (an odd
    difference puts the extra element at the end)."""
    x, wanted = inputs
    lengths = g.value_of(wanted)
    if lengths is None:
        raise OpError("CenterCropPad shape must be a constant, known when the graph is built", input=1)
    shape = list(g.type_of(x).shape)
    rank = len(shape)
    axes = [normalize_axis(a, rank) for a in attrs["axes"]] if attrs["axes"] is not None else list(range(rank))
    lengths = [int(v) for v in np.asarray(lengths).reshape(-1)]
    if len(lengths) != len(axes):
        raise OpError(f"CenterCropPad shape has {len(lengths)} lengths for {len(axes)} axes", input=1)
    starts, ends, pads_before, pads_after = [], [], [0] * rank, [0] * rank
    for axis, length in zip(axes, lengths):
        dim = shape[axis]
        if length <= 0:
            raise OpError(f"CenterCropPad length {length} must be positive", input=1)
        if length < dim:
            start = (dim - length) // 2
            starts.append((axis, start, start + length))
        elif length > dim:
            pads_before[axis] = (length - dim) // 2
            pads_after[axis] = length - dim - pads_before[axis]
    y = x
    if starts:
        y = g.add("Slice", [y, g.constant(np.array([s for _, s, _ in starts], np.int64), "starts"),
                            g.constant(np.array([e for _, _, e in starts], np.int64), "ends"),
                            g.constant(np.array([a for a, _, _ in starts], np.int64), "axes")])[0]
    if any(pads_before) or any(pads_after):
        y = g.add("Pad", [y, g.constant(np.array(pads_before + pads_after, np.int64), "pads")])[0]
    if y == x:
        y = g.add("Identity", [x])[0]
    return [y]
