"""TFLite operators that move, select, compare or reshape elements, and the shape operators folded at
build time. They compute on the stored values, so one converter serves every element type (an int8
tensor keeps its quantization through them: TFLite requires the output's to be the input's, and
where a node compares or picks values, `same_quantization` checks it)."""
from __future__ import annotations

import numpy as np

from tinsmith.load.tflite_float import NCHW_TO_NHWC, NHWC_TO_NCHW
from tinsmith.load.tflite_reader import Reader, Unsupported, options

BIG = np.iinfo(np.int64).max  # an end past every dimension (ONNX's Slice clamps it)


def _y(r: Reader, outputs) -> str:
    return r.names[int(outputs[0])]


def same_quantization(r: Reader, tensors, what: str) -> None:
    """Integer tensors a node compares or picks from must share one quantization, as TFLite requires."""
    quants = {(q.scale, q.zero_point) if q else None for q in (r.quant(int(t)) for t in tensors if t >= 0)}
    if r.dtype(int(tensors[0])) in ("int8", "uint8", "int16") and len(quants) > 1:
        raise Unsupported(f"{what} of {r.dtype(int(tensors[0]))} tensors with different quantizations")


def _shape_constant(r: Reader, outputs) -> str:
    return r.int64(f"{_y(r, outputs)}_shape", r.shape(int(outputs[0])))


def reshape(r: Reader, op, inputs, outputs) -> None:
    """RESHAPE, SQUEEZE, EXPAND_DIMS: the output tensor's static shape says it all."""
    r.emit("Reshape", [r.value(inputs[0]), _shape_constant(r, outputs)], [_y(r, outputs)], {})


def transpose(r: Reader, op, inputs, outputs) -> None:
    perm = [int(p) for p in r.constant_data(inputs[1], "TRANSPOSE permutation")]
    r.emit("Transpose", [r.value(inputs[0])], [_y(r, outputs)], {"perm": perm})


def _slice(r: Reader, x: int, outputs, starts, ends, steps=None) -> None:
    """ONNX Slice over every axis, then the output's own shape (axes TFLite drops or adds)."""
    name = _y(r, outputs)
    rank = len(starts)
    out = name if tuple(r.shape(int(outputs[0]))) == _sliced_shape(r.shape(x), starts, ends, steps) \
        else r.fresh(f"{name}_slice")
    operands = [r.value(x), r.int64(f"{name}_starts", starts), r.int64(f"{name}_ends", ends),
                r.int64(f"{name}_axes", list(range(rank)))]
    if steps is not None:
        operands.append(r.int64(f"{name}_steps", steps))
    r.emit("Slice", operands, [out], {})
    if out != name:
        r.emit("Reshape", [out, _shape_constant(r, outputs)], [name], {})


def _sliced_shape(shape, starts, ends, steps) -> tuple[int, ...]:
    return tuple(len(range(*slice(s, e, st).indices(d)))
                 for d, s, e, st in zip(shape, starts, ends, steps or [1] * len(shape)))


def slice_(r: Reader, op, inputs, outputs) -> None:
    x = int(inputs[0])
    begin = [int(v) for v in r.constant_data(inputs[1], "SLICE begin")]
    size = [int(v) for v in r.constant_data(inputs[2], "SLICE size")]
    ends = [d if s == -1 else b + s for b, s, d in zip(begin, size, r.shape(x))]
    _slice(r, x, outputs, begin, ends)


def _strided_axes(rank: int, begin, end, strides, opts) -> list[tuple]:
    """One (begin, end, stride, begin masked, end masked, shrink) per input axis: the ellipsis spelled
    out as whole axes, new axes dropped (the output's shape puts them back), axes the spec leaves
    out taken whole."""
    bit = lambda mask, j: bool(mask >> j & 1)  # noqa: E731
    whole = (0, 0, 1, True, True, False)
    spec = range(len(begin))
    real = sum(1 for j in spec if not bit(opts.EllipsisMask(), j) and not bit(opts.NewAxisMask(), j))
    axes = []
    for j in spec:
        if bit(opts.EllipsisMask(), j):
            axes += [whole] * (rank - real)
        elif not bit(opts.NewAxisMask(), j):
            axes.append((begin[j], end[j], strides[j], bit(opts.BeginMask(), j), bit(opts.EndMask(), j),
                         bit(opts.ShrinkAxisMask(), j)))
    if len(axes) > rank:
        raise Unsupported(f"STRIDED_SLICE of {len(axes)} axes of a rank-{rank} tensor")
    return axes + [whole] * (rank - len(axes))


def strided_slice(r: Reader, op, inputs, outputs) -> None:
    x = int(inputs[0])
    opts = options(op, "StridedSliceOptions")
    shape = r.shape(x)
    begin = [int(v) for v in r.constant_data(inputs[1], "STRIDED_SLICE begin")]
    end = [int(v) for v in r.constant_data(inputs[2], "STRIDED_SLICE end")]
    strides = [int(v) for v in r.constant_data(inputs[3], "STRIDED_SLICE strides")] if len(inputs) > 3 \
        else [1] * len(begin)
    if not len(begin) == len(end) == len(strides):
        raise Unsupported(f"STRIDED_SLICE with {len(begin)} begins, {len(end)} ends and {len(strides)} strides")
    starts, ends, steps = [], [], []
    for d, (b, e, s, begin_masked, end_masked, shrink) in enumerate(_strided_axes(len(shape), begin, end, strides,
                                                                                   opts)):
        if s == 0:
            raise Unsupported("STRIDED_SLICE with a stride of 0")
        if opts.Offset():
            e = b + e
        if shrink:  # one element, the axis dropped by the output's shape
            b = b + shape[d] if b < 0 else b
            starts.append(b)
            ends.append(b + 1)
            steps.append(1)
            continue
        starts.append((0 if s > 0 else BIG) if begin_masked else b)
        ends.append((BIG if s > 0 else -BIG) if end_masked else e)
        steps.append(s)
    _slice(r, x, outputs, starts, ends, steps)


def concat(r: Reader, op, inputs, outputs) -> None:
    """CONCATENATION of non-float tensors (int32, bool; int8 ones share one quantization)."""
    opts = options(op, "ConcatenationOptions")
    if opts.FusedActivationFunction():
        raise Unsupported(f"{r.dtype(int(inputs[0]))} CONCATENATION with a fused activation")
    r.emit("Concat", [r.value(i) for i in inputs], [_y(r, outputs)], {"axis": int(opts.Axis())})


def pack(r: Reader, op, inputs, outputs) -> None:
    opts = options(op, "PackOptions")
    rank = len(r.shape(int(outputs[0])))
    axis = int(opts.Axis()) % rank
    parts = []
    for i in inputs:
        part = r.fresh(f"{r.names[int(i)]}_packed")
        shape = list(r.shape(int(i)))
        r.emit("Reshape", [r.value(i), r.int64(f"{part}_shape", shape[:axis] + [1] + shape[axis:])], [part], {})
        parts.append(part)
    r.emit("Concat", parts, [_y(r, outputs)], {"axis": axis})


def _split(r: Reader, x: int, axis: int, sizes, outputs, keep_axis: bool = True) -> None:
    axis %= len(r.shape(x))
    names = [r.names[int(o)] if keep_axis else r.fresh(f"{r.names[int(o)]}_part") for o in outputs]
    r.emit("Split", [r.value(x), r.int64(f"{names[0]}_split", sizes)], names, {"axis": axis})
    if not keep_axis:
        for part, o in zip(names, outputs):
            r.emit("Reshape", [part, r.int64(f"{r.names[int(o)]}_shape", r.shape(int(o)))], [r.names[int(o)]], {})


def unpack(r: Reader, op, inputs, outputs) -> None:
    x = int(inputs[0])
    axis = int(options(op, "UnpackOptions").Axis())
    _split(r, x, axis, [1] * len(outputs), outputs, keep_axis=False)


def split(r: Reader, op, inputs, outputs) -> None:
    """SPLIT(axis, x): equal parts."""
    x = int(inputs[1])
    axis = int(np.asarray(r.constant_data(inputs[0], "SPLIT axis")).reshape(-1)[0])
    size = r.shape(x)[axis % len(r.shape(x))] // len(outputs)
    _split(r, x, axis, [size] * len(outputs), outputs)


def split_v(r: Reader, op, inputs, outputs) -> None:
    """SPLIT_V(x, sizes, axis): one size may be -1, the rest of the axis."""
    x = int(inputs[0])
    axis = int(np.asarray(r.constant_data(inputs[2], "SPLIT_V axis")).reshape(-1)[0])
    sizes = [int(s) for s in r.constant_data(inputs[1], "SPLIT_V sizes")]
    if -1 in sizes:
        sizes[sizes.index(-1)] = r.shape(x)[axis % len(r.shape(x))] - sum(s for s in sizes if s != -1)
    _split(r, x, axis, sizes, outputs)


def gather(r: Reader, op, inputs, outputs) -> None:
    opts = options(op, "GatherOptions")
    if opts.BatchDims():
        raise Unsupported("GATHER with batch_dims")
    r.emit("Gather", [r.value(inputs[0]), r.value(inputs[1])], [_y(r, outputs)], {"axis": int(opts.Axis())})


def gather_nd(r: Reader, op, inputs, outputs) -> None:
    r.emit("GatherND", [r.value(inputs[0]), r.value(inputs[1])], [_y(r, outputs)], {})


def embedding_lookup(r: Reader, op, inputs, outputs) -> None:
    """EMBEDDING_LOOKUP(ids, table): rows of the table."""
    r.emit("Gather", [r.value(inputs[1]), r.value(inputs[0])], [_y(r, outputs)], {"axis": 0})


def _block(r: Reader, op, inputs, outputs, onnx_op: str, options_class: str) -> None:
    """DEPTH_TO_SPACE / SPACE_TO_DEPTH on NHWC: TensorFlow orders depth as ONNX's DCR mode does."""
    name = _y(r, outputs)
    first, done = r.fresh(f"{name}_nchw_in"), r.fresh(f"{name}_nchw")
    r.emit("Transpose", [r.value(inputs[0])], [first], {"perm": NHWC_TO_NCHW})
    attrs = {"blocksize": int(options(op, options_class).BlockSize())}
    r.emit(onnx_op, [first], [done], {**attrs, "mode": "DCR"} if onnx_op == "DepthToSpace" else attrs)
    r.emit("Transpose", [done], [name], {"perm": NCHW_TO_NHWC})


def depth_to_space(r: Reader, op, inputs, outputs) -> None:
    _block(r, op, inputs, outputs, "DepthToSpace", "DepthToSpaceOptions")


def space_to_depth(r: Reader, op, inputs, outputs) -> None:
    _block(r, op, inputs, outputs, "SpaceToDepth", "SpaceToDepthOptions")


def resize(mode: str):
    def read(r: Reader, op, inputs, outputs) -> None:
        """RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR over H and W of NHWC data, TensorFlow's
        coordinate conventions spelled as ONNX Resize's."""
        opts = options(op, "ResizeBilinearOptions" if mode == "linear" else "ResizeNearestNeighborOptions")
        if opts.AlignCorners():
            coords, nearest = "align_corners", "round_prefer_ceil"
        elif opts.HalfPixelCenters():
            coords, nearest = ("half_pixel" if mode == "linear" else "tf_half_pixel_for_nn"), "floor"
        else:
            coords, nearest = "asymmetric", "floor"
        y = int(outputs[0])
        sizes = r.int64(f"{r.names[y]}_sizes", r.shape(y)[1:3])
        r.emit("Resize", [r.value(inputs[0]), "", "", sizes], [r.names[y]],
               {"mode": mode, "coordinate_transformation_mode": coords, "nearest_mode": nearest, "axes": [1, 2]})
    return read


def _nearest_indices(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """The input row of each output row, in TFLite's float32 arithmetic (GetNearestNeighbor)."""
    f32 = np.float32
    scale = f32(in_size - 1) / f32(out_size - 1) if align_corners and out_size > 1 else f32(in_size) / f32(out_size)
    at = (np.arange(out_size, dtype=np.float32) + f32(0.5 if half_pixel else 0.0)) * scale
    index = np.floor(np.abs(at.astype(np.float64)) + 0.5) if align_corners else np.floor(at)  # std::round, floor
    index = np.minimum(index.astype(np.int64), in_size - 1)
    return np.maximum(index, 0) if half_pixel else index


def resize_nearest_by_gather(r: Reader, op, inputs, outputs) -> None:
    """RESIZE_NEAREST_NEIGHBOR on data that is not float32 (int8, ...): it only picks elements, so two
    Gathers of the rows and columns TFLite picks compute it for every element type."""
    opts = options(op, "ResizeNearestNeighborOptions")
    x, y = int(inputs[0]), int(outputs[0])
    (_, h, w, _), (_, oh, ow, _) = r.shape(x), r.shape(y)
    rows = _nearest_indices(h, oh, bool(opts.AlignCorners()), bool(opts.HalfPixelCenters()))
    cols = _nearest_indices(w, ow, bool(opts.AlignCorners()), bool(opts.HalfPixelCenters()))
    picked = r.fresh(f"{_y(r, outputs)}_rows")
    r.emit("Gather", [r.value(x), r.int64(f"{_y(r, outputs)}_row_indices", rows)], [picked], {"axis": 1})
    r.emit("Gather", [picked, r.int64(f"{_y(r, outputs)}_column_indices", cols)], [_y(r, outputs)], {"axis": 2})


def cast(r: Reader, op, inputs, outputs) -> None:
    r.emit("Cast", [r.value(inputs[0])], [_y(r, outputs)], {"to": r.dtype(int(outputs[0]))})


def compare(onnx_op: str, negate: bool = False):
    def read(r: Reader, op, inputs, outputs) -> None:
        same_quantization(r, inputs[:2], "a comparison")
        y = _y(r, outputs)
        out = r.fresh(f"{y}_equal") if negate else y
        r.emit(onnx_op, [r.value(inputs[0]), r.value(inputs[1])], [out], {})
        if negate:
            r.emit("Not", [out], [y], {})
    return read


def extremum(onnx_op: str):
    def read(r: Reader, op, inputs, outputs) -> None:
        """MAXIMUM / MINIMUM; ADD_N (Sum) of float tensors."""
        same_quantization(r, [*inputs, *outputs], onnx_op.upper())
        r.emit(onnx_op, [r.value(i) for i in inputs], [_y(r, outputs)], {})
    return read


def logical(onnx_op: str):
    def read(r: Reader, op, inputs, outputs) -> None:
        r.emit(onnx_op, [r.value(i) for i in inputs], [_y(r, outputs)], {})
    return read


def select(r: Reader, op, inputs, outputs) -> None:
    same_quantization(r, [*inputs[1:], *outputs], "SELECT")
    r.emit("Where", [r.value(i) for i in inputs], [_y(r, outputs)], {})


def arg(onnx_op: str):
    def read(r: Reader, op, inputs, outputs) -> None:
        axis = int(np.asarray(r.constant_data(inputs[1], f"{onnx_op} axis")).reshape(-1)[0])
        y = int(outputs[0])
        wide = _y(r, outputs) if r.dtype(y) == "int64" else r.fresh(f"{_y(r, outputs)}_int64")
        r.emit(onnx_op, [r.value(inputs[0])], [wide], {"axis": axis, "keepdims": 0})
        if wide != _y(r, outputs):
            r.emit("Cast", [wide], [_y(r, outputs)], {"to": r.dtype(y)})
    return read


def reduce(onnx_op: str, picks: bool = False):
    def read(r: Reader, op, inputs, outputs) -> None:
        """MEAN, SUM, REDUCE_MAX, ...: axes from the second input, keep_dims from the options. On integer
        data only the reductions that pick an element (max, min) keep the quantization."""
        if picks:
            same_quantization(r, [inputs[0], *outputs], onnx_op)
        axes = [int(a) for a in np.atleast_1d(r.constant_data(inputs[1], "reduction axes"))]
        keep = int(bool(options(op, "ReducerOptions").KeepDims()))
        r.emit(onnx_op, [r.value(inputs[0]), r.int64(f"{_y(r, outputs)}_axes", axes)], [_y(r, outputs)],
               {"keepdims": keep})
    return read


def cumsum(r: Reader, op, inputs, outputs) -> None:
    opts = options(op, "CumsumOptions")
    axis = int(np.asarray(r.constant_data(inputs[1], "CUMSUM axis")).reshape(-1)[0])
    r.emit("CumSum", [r.value(inputs[0]), r.int64(f"{_y(r, outputs)}_axis", axis)], [_y(r, outputs)],
           {"exclusive": int(opts.Exclusive()), "reverse": int(opts.Reverse())})


def broadcast_to(r: Reader, op, inputs, outputs) -> None:
    r.emit("Expand", [r.value(inputs[0]), _shape_constant(r, outputs)], [_y(r, outputs)], {})


def tile(r: Reader, op, inputs, outputs) -> None:
    repeats = r.int64(f"{_y(r, outputs)}_repeats", r.constant_data(inputs[1], "TILE multiples"))
    r.emit("Tile", [r.value(inputs[0]), repeats], [_y(r, outputs)], {})


# --- shapes folded at build time -----------------------------------------------------------------
def _fold(compute):
    def read(r: Reader, op, inputs, outputs) -> None:
        y = int(outputs[0])
        r.set_constant(y, np.asarray(compute(r, inputs, y)).astype(r.dtype(y)).reshape(r.shape(y)))
    return read


shape = _fold(lambda r, inputs, y: r.shape(int(inputs[0])))
rank = _fold(lambda r, inputs, y: len(r.shape(int(inputs[0]))))
zeros_like = _fold(lambda r, inputs, y: np.zeros(r.shape(y)))
_fill_constant = _fold(lambda r, inputs, y: np.full(r.shape(y), r.constant_data(inputs[1], "FILL value")))


def fill(r: Reader, op, inputs, outputs) -> None:
    """FILL(dims, value): a constant folded at build time, or, for a value computed at run time (which
    TFLite Micro takes too), the value broadcast to the output's static shape."""
    if r.data(int(inputs[1])) is not None:
        _fill_constant(r, op, inputs, outputs)
        return
    r.emit("Expand", [r.value(inputs[1]), _shape_constant(r, outputs)], [_y(r, outputs)], {})
range_ = _fold(lambda r, inputs, y: np.arange(*(np.asarray(r.constant_data(i, "RANGE operand")).item()
                                                 for i in inputs[:3])))


def reverse(r: Reader, op, inputs, outputs) -> None:
    """REVERSE_V2: a Slice stepping back over the given axes."""
    x = int(inputs[0])
    rank = len(r.shape(x))
    axes = {int(a) % rank for a in np.atleast_1d(r.constant_data(inputs[1], "REVERSE_V2 axes"))}
    _slice(r, x, outputs, [-1 if d in axes else 0 for d in range(rank)],
           [-BIG if d in axes else BIG for d in range(rank)], [-1 if d in axes else 1 for d in range(rank)])


def mirror_pad(r: Reader, op, inputs, outputs) -> None:
    """MIRROR_PAD: REFLECT (the edge element not repeated) is Pad's reflect mode; SYMMETRIC (the edge
    element repeated) has no Pad mode, so each padded axis is a Gather of the mirrored indices."""
    widths = np.asarray(r.constant_data(inputs[1], "MIRROR_PAD paddings"), np.int64).reshape(-1, 2)
    y = _y(r, outputs)
    if options(op, "MirrorPadOptions").Mode() == 0:
        r.emit("Pad", [r.value(inputs[0]), r.int64(f"{y}_pads", widths.T.reshape(-1))], [y], {"mode": "reflect"})
        return
    shape = r.shape(int(inputs[0]))
    if len(widths) != len(shape):
        raise Unsupported(f"MIRROR_PAD with {len(widths)} pairs of paddings for a rank-{len(shape)} input")
    padded = [axis for axis, (before, after) in enumerate(widths) if before or after]
    for axis, (before, after) in enumerate(widths):
        if min(before, after) < 0 or max(before, after) > shape[axis]:
            raise Unsupported(f"MIRROR_PAD in SYMMETRIC mode pads axis {axis} of size {shape[axis]} by {before} and "
                              f"{after} (at most its size, as TFLite requires)")
    value = r.value(inputs[0])
    if not padded:
        r.emit("Identity", [value], [y], {})
    for axis in padded:
        before, after = (int(v) for v in widths[axis])
        n = shape[axis]
        indices = np.concatenate([np.arange(before)[::-1], np.arange(n), np.arange(n - after, n)[::-1]])
        out = y if axis == padded[-1] else r.fresh(f"{y}_axis{axis}")
        r.emit("Gather", [value, r.int64(f"{y}_indices{axis}", indices)], [out], {"axis": axis})
        value = out


def _pad_value(r: Reader, x: int) -> list[str]:
    """What SPACE_TO_BATCH_ND pads with: zero, the zero point of quantized data."""
    q = r.quant(x) if r.dtype(x) != "float32" else None
    zero = q.zero_point[0] if q else 0
    return [r.add_constant(f"{r.names[x]}_pad_value", np.array(zero, r.dtype(x)))]


def space_to_batch(r: Reader, op, inputs, outputs) -> None:
    """SPACE_TO_BATCH_ND over H and W of NHWC data: pad, split each spatial axis by its block,
    move the blocks in front of the batch."""
    x, y = int(inputs[0]), int(outputs[0])
    b, h, w, c = r.shape(x)
    bh, bw = (int(v) for v in r.constant_data(inputs[1], "SPACE_TO_BATCH_ND block shape"))
    pads = np.asarray(r.constant_data(inputs[2], "SPACE_TO_BATCH_ND paddings"), np.int64).reshape(2, 2)
    hp, wp = h + int(pads[0].sum()), w + int(pads[1].sum())
    name = _y(r, outputs)
    padded, split, moved = (r.fresh(f"{name}_{s}") for s in ("padded", "blocks", "moved"))
    all_pads = [0, int(pads[0, 0]), int(pads[1, 0]), 0, 0, int(pads[0, 1]), int(pads[1, 1]), 0]
    r.emit("Pad", [r.value(x), r.int64(f"{name}_pads", all_pads), *_pad_value(r, x)], [padded], {"mode": "constant"})
    r.emit("Reshape", [padded, r.int64(f"{name}_blocks_shape", [b, hp // bh, bh, wp // bw, bw, c])], [split], {})
    r.emit("Transpose", [split], [moved], {"perm": [2, 4, 0, 1, 3, 5]})
    r.emit("Reshape", [moved, _shape_constant(r, outputs)], [r.names[y]], {})


def batch_to_space(r: Reader, op, inputs, outputs) -> None:
    """BATCH_TO_SPACE_ND over H and W of NHWC data: the inverse, then the crops cut away."""
    x = int(inputs[0])
    nb, h, w, c = r.shape(x)
    bh, bw = (int(v) for v in r.constant_data(inputs[1], "BATCH_TO_SPACE_ND block shape"))
    crops = np.asarray(r.constant_data(inputs[2], "BATCH_TO_SPACE_ND crops"), np.int64).reshape(2, 2)
    b = nb // (bh * bw)
    name = _y(r, outputs)
    split, moved, joined = (r.fresh(f"{name}_{s}") for s in ("blocks", "moved", "joined"))
    r.emit("Reshape", [r.value(x), r.int64(f"{name}_blocks_shape", [bh, bw, b, h, w, c])], [split], {})
    r.emit("Transpose", [split], [moved], {"perm": [2, 3, 0, 4, 1, 5]})
    r.emit("Reshape", [moved, r.int64(f"{name}_joined_shape", [b, h * bh, w * bw, c])], [joined], {})
    starts = [0, int(crops[0, 0]), int(crops[1, 0]), 0]
    ends = [b, h * bh - int(crops[0, 1]), w * bw - int(crops[1, 1]), c]
    r.emit("Slice", [joined, r.int64(f"{name}_starts", starts), r.int64(f"{name}_ends", ends)], [name], {})
