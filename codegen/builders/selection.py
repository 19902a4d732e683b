"""Selecting and placing parts of a tensor with shapes known when the graph is built: ONNX
Compress (a constant condition picks the slices to keep) and CenterCropPad (each axis cropped
or zero-padded around its centre)."""
from __future__ import annotations

import numpy as np

from tinsmith.builders.registry import builder
from tinsmith.ops.common import normalize_axis
from tinsmith.ops.registry import Attr, OpError


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
    starts, pads_before, pads_after = [], [0] * rank, [0] * rank  # starts: (axis, start, end)
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


@builder("ReverseSequence", inputs=2, attrs=[Attr("batch_axis", "int", 1, (0, 1)), Attr("time_axis", "int", 0, (0, 1))])
def reverse_sequence(g, inputs, attrs):
    """The first sequence_lens[i] steps of each batch entry i reversed along the time axis, the
    rest kept: one GatherElements with indices known when the graph is built."""
    x, lengths = inputs
    known = g.value_of(lengths)
    if known is None:
        raise OpError("ReverseSequence sequence_lens must be a constant, known when the graph is built", input=1)
    shape = tuple(g.type_of(x).shape)
    batch_axis, time_axis = attrs["batch_axis"], attrs["time_axis"]
    if batch_axis == time_axis or len(shape) < 2:
        raise OpError("ReverseSequence needs distinct batch and time axes of a tensor of rank 2 or more",
                      attr="time_axis")
    known = np.asarray(known).reshape(-1).astype(np.int64)
    steps = shape[time_axis]
    if known.shape != (shape[batch_axis],) or (known < 0).any() or (known > steps).any():
        raise OpError(f"ReverseSequence sequence_lens {known.tolist()} must hold {shape[batch_axis]} lengths "
                      f"between 0 and {steps}", input=1)
    t = np.arange(steps).reshape(-1, 1)
    source = np.where(t < known.reshape(1, -1), known.reshape(1, -1) - 1 - t, t)  # [time, batch]
    if batch_axis < time_axis:
        source = source.T
    source = source.reshape(source.shape + (1,) * (len(shape) - 2))
    indices = np.ascontiguousarray(np.broadcast_to(source, shape)).astype(np.int64)
    return g.add("GatherElements", [x, g.constant(indices, "indices")], {"axis": time_axis})


@builder("MaxUnpool", inputs=(2, 3), attrs=[Attr("kernel_shape", "ints"), Attr("pads", "ints", None),
                                            Attr("strides", "ints", None)])
def max_unpool(g, inputs, attrs):
    """Each value of X placed at its flat index (from MaxPool's Indices) in a zero tensor of the
    unpooled shape (padded at the end up to output_shape): a Gather from X and one zero, with
    indices known when the graph is built."""
    x, indices = inputs[:2]
    where = g.value_of(indices)
    if where is None:
        raise OpError("MaxUnpool indices must be a constant, known when the graph is built", input=1)
    shape = tuple(g.type_of(x).shape)
    kernel = attrs["kernel_shape"]
    dims = len(kernel)
    strides = attrs["strides"] or (1,) * dims
    pads = attrs["pads"] or (0,) * (2 * dims)
    if len(shape) != dims + 2:
        raise OpError(f"MaxUnpool input has rank {len(shape)}, expected {dims + 2}", input=0)
    unpooled = shape[:2] + tuple((shape[2 + d] - 1) * strides[d] - (pads[d] + pads[dims + d]) + kernel[d]
                                 for d in range(dims))
    where = np.asarray(where).reshape(-1).astype(np.int64)
    total, count = int(np.prod(unpooled)), int(np.prod(shape))
    if where.size != count or (where < 0).any() or (where >= total).any():
        raise OpError(f"MaxUnpool indices must hold {count} positions in [0, {total})", input=1)
    source = np.full(total, count, np.int64)  # position `count` is the zero appended to X
    source[where] = np.arange(count)  # a later element wins a position, as in ONNX's reference
    flat = g.add("Reshape", [x, g.constant(np.array([-1], np.int64), "shape")])[0]
    padded = g.add("Concat", [flat, g.constant(np.zeros(1, np.float32), "zero")], {"axis": 0})[0]
    y = g.add("Gather", [padded, g.constant(source, "source")], {"axis": 0})[0]
    y = g.add("Reshape", [y, g.constant(np.array(unpooled, np.int64), "shape")])[0]
    if len(inputs) > 2 and inputs[2]:
        wanted = g.value_of(inputs[2])
        if wanted is None:
            raise OpError("MaxUnpool output_shape must be a constant, known when the graph is built", input=2)
        wanted = [int(v) for v in np.asarray(wanted).reshape(-1)]
        extra = [w - u for w, u in zip(wanted, unpooled)]
        if len(wanted) != len(unpooled) or any(e < 0 for e in extra):
            raise OpError(f"MaxUnpool output_shape {wanted} is smaller than the unpooled shape {list(unpooled)}",
                          input=2)
        if any(extra):
            y = g.add("Pad", [y, g.constant(np.array([0] * len(extra) + extra, np.int64), "pads")])[0]
    return [y]


def _grid_axis(size: int, align_corners: bool) -> np.ndarray:
    """Normalised coordinates in [-1, 1] of `size` positions: the end points themselves with
    align_corners, else the centres of `size` equal cells."""
    if align_corners:
        return np.linspace(-1.0, 1.0, size) if size > 1 else np.array([-1.0])
    return (2.0 * np.arange(size) + 1.0) / size - 1.0


@builder("AffineGrid", inputs=2, attrs=[Attr("align_corners", "int", 0, (0, 1))])
def affine_grid(g, inputs, attrs):
    """ONNX AffineGrid: each position's normalised (x, y[, z], 1) times theta^T, for the grid
    size known when the graph is built; a constant base grid through one MatMul."""
    theta, size = inputs
    known = g.value_of(size)
    if known is None:
        raise OpError("AffineGrid size must be a constant, known when the graph is built", input=1)
    known = [int(v) for v in np.asarray(known).reshape(-1)]
    spatial = known[2:]
    tshape = list(g.type_of(theta).shape)
    if len(spatial) not in (2, 3) or tshape != [known[0], len(spatial), len(spatial) + 1]:
        raise OpError(f"AffineGrid theta of shape {tshape} does not match size {known}: expected "
                      f"[N, 2, 3] with [N, C, H, W] or [N, 3, 4] with [N, C, D, H, W]", input=0)
    axes = [_grid_axis(s, bool(attrs["align_corners"])) for s in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")  # D, H, W order; the grid lists x (W) first
    base = np.stack([m.reshape(-1) for m in reversed(mesh)] + [np.ones(mesh[0].size)], axis=1)
    product = g.add("MatMul", [g.constant(base.astype(np.float32), "base_grid"),
                               g.add("Transpose", [theta], {"perm": [0, 2, 1]})[0]])[0]
    return g.add("Reshape", [product, g.constant(np.array([known[0], *spatial, len(spatial)], np.int64),
                                                 "shape")])


@builder("Col2Im", inputs=3, attrs=[Attr("dilations", "ints", None), Attr("pads", "ints", None),
                                     Attr("strides", "ints", None)])
def col2im(g, inputs, attrs):
    """ONNX Col2Im: the columns of sliding blocks summed back into an image of the shape known
    when the graph is built, as a product with a constant 0/1 matrix (block element and block
    position -> image position), so overlapping blocks add up."""
    x, image, block = inputs
    image_shape, block_shape = g.value_of(image), g.value_of(block)
    if image_shape is None or block_shape is None:
        raise OpError("Col2Im image_shape and block_shape must be constants, known when the graph is built",
                      input=1 if image_shape is None else 2)
    image_shape = [int(v) for v in np.asarray(image_shape).reshape(-1)]
    block_shape = [int(v) for v in np.asarray(block_shape).reshape(-1)]
    dims = len(image_shape)
    dilations = list(attrs["dilations"] or [1] * dims)
    strides = list(attrs["strides"] or [1] * dims)
    pads = list(attrs["pads"] or [0] * (2 * dims))
    counts = [(image_shape[d] + pads[d] + pads[dims + d] - dilations[d] * (block_shape[d] - 1) - 1) // strides[d] + 1
              for d in range(dims)]
    n, cols, length = g.type_of(x).shape
    block_size, blocks = int(np.prod(block_shape)), int(np.prod(counts))
    if cols % block_size or length != blocks or min(counts) < 1:
        raise OpError(f"Col2Im input of shape {[n, cols, length]} does not hold blocks {block_shape} at "
                      f"{counts} positions of image {image_shape}", input=0)
    pixels = int(np.prod(image_shape))
    scatter = np.zeros((block_size * blocks, pixels), np.float32)
    for b, offset in enumerate(np.ndindex(*block_shape)):
        for p, position in enumerate(np.ndindex(*counts)):
            at = [position[d] * strides[d] - pads[d] + offset[d] * dilations[d] for d in range(dims)]
            if all(0 <= at[d] < image_shape[d] for d in range(dims)):
                scatter[b * blocks + p, int(np.ravel_multi_index(at, image_shape))] += 1.0
    rows = g.add("Reshape", [x, g.constant(np.array([n, cols // block_size, block_size * blocks], np.int64),
                                           "shape")])[0]
    y = g.add("MatMul", [rows, g.constant(scatter, "scatter")])[0]
    return g.add("Reshape", [y, g.constant(np.array([n, cols // block_size, *image_shape], np.int64), "shape")])


@builder("TensorScatter", inputs=(2, 3), attrs=[Attr("axis", "int", -2),
                                                Attr("mode", "string", "linear", ("linear", "circular"))])
def tensor_scatter(g, inputs, attrs):
    """ONNX TensorScatter (a key/value cache update): batch entry b's update written into the
    cache along `axis` from write_indices[b] on (wrapping around in circular mode). With the
    indices known when the graph is built, one GatherElements from cache and update side by side."""
    cache, update = inputs[:2]
    shape, ushape = list(g.type_of(cache).shape), list(g.type_of(update).shape)
    axis = normalize_axis(attrs["axis"], len(shape))
    if axis == 0 or len(ushape) != len(shape) or any(a != b for i, (a, b) in enumerate(zip(shape, ushape))
                                                     if i != axis) or ushape[axis] > shape[axis]:
        raise OpError(f"TensorScatter update of shape {ushape} does not fit cache {shape} along axis {axis}",
                      input=1)
    starts = np.zeros(shape[0], np.int64)
    if len(inputs) > 2 and inputs[2]:
        known = g.value_of(inputs[2])
        if known is None:
            raise OpError("TensorScatter write_indices must be a constant, known when the graph is built", input=2)
        starts = np.asarray(known).reshape(-1).astype(np.int64)
    length, count = shape[axis], ushape[axis]
    circular = attrs["mode"] == "circular"
    source = np.broadcast_to(np.arange(length), (shape[0], length)).copy()  # [batch, cache position]
    for b in range(shape[0]):
        for s in range(count):
            at = starts[b] + s
            if circular:
                at %= length
            if not 0 <= at < length:
                raise OpError(f"TensorScatter writes position {at} of a cache of {length}", input=2)
            source[b, at] = length + s  # the update's rows follow the cache's
    view = [shape[0]] + [1] * (axis - 1) + [length] + [1] * (len(shape) - axis - 1)
    indices = np.ascontiguousarray(np.broadcast_to(source.reshape(view), shape)).astype(np.int64)
    both = g.add("Concat", [cache, update], {"axis": axis})[0]
    return g.add("GatherElements", [both, g.constant(indices, "indices")], {"axis": axis})
