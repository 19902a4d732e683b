"""TFLite integer operators that TFLite Micro runs as kernels of their own and Tinsmith builds from
several quantized and integer primitives: each composition computes TFLite Micro's terms and its
rounding, so the result is bit-exact (the conformance cases compare with its interpreter). The
converters' shared pieces (requantization constants, the 16x8 accumulator rule) are
tflite_quantized.py's."""
from __future__ import annotations

import numpy as np

from tinsmith.load import tflite_quantized as q
from tinsmith.load.tflite_float import batch_matmul_operands
from tinsmith.load.tflite_quantized import requant_constants
from tinsmith.load.tflite_reader import Reader, Unsupported, options
from tinsmith.load.tflite_tensor_ops import same_quantization
from tinsmith.quant import fixed_point as fp


def transpose_conv(r: Reader, op, inputs, outputs) -> None:
    """TRANSPOSE_CONV(output_shape, weights [O, kh, kw, I], x, bias) on int8 or 16x8 data, as the
    convolution it equals: x with stride - 1 zero-point elements (real zeros) after each of its own
    along each axis, padded by what the window needs, under the filter turned half a turn, stride 1.
    The sums hold TFLite Micro's terms (out = in * stride - pad + tap) and its requantization is the
    convolution's, so the result is bit-exact; the inserted zeros cost MACs a dedicated kernel would
    skip. TFLite Micro's padding: SAME's total (in - 1) * stride + k - out, the odd one at the end."""
    w, x, y = int(inputs[1]), int(inputs[2]), int(outputs[0])
    opts = options(op, "TransposeConvOptions")
    name, zp = r.names[y], r.scale_zp(x)[1]
    _, kh, kw, _ = r.shape(w)
    _, *sizes, _ = r.shape(x)
    _, *outs, _ = r.shape(y)
    value, shape, pads = r.value(x), list(r.shape(x)), ([], [])
    for axis, (size, out, k, s) in enumerate(zip(sizes, outs, (kh, kw), (opts.StrideH(), opts.StrideW())), 1):
        before = k - 1 - (max((size - 1) * s + k - out, 0) // 2 if opts.Padding() == 0 else 0)
        if before < 0 or s < 1:
            raise Unsupported(f"a transposed convolution whose padding ({k - 1 - before}) exceeds its filter's "
                              f"extent less one ({k - 1}) or with stride {s}")
        value = _spread(r, value, shape, axis, s, zp, f"{name}_spread{axis}")
        after = out - size * s - before + k - 1
        if after < 0:  # the last spread elements reach no output
            value = _cut_end(r, value, shape, axis, -after, f"{name}_cut{axis}")
        pads[0].append(before)
        pads[1].append(max(after, 0))
    flipped = r.add_constant(f"{r.names[w]}_turned", np.flip(r.constant_data(w, "TRANSPOSE_CONV filter"), (1, 2)))
    bias = [int(inputs[3])] if len(inputs) > 3 and inputs[3] >= 0 else []
    attrs = {"strides": [1, 1], "dilations": [1, 1], "pads": pads[0] + pads[1], "x_zero_point": zp,
             "y_scale": r.scale_zp(y)[0], "y_zero_point": r.scale_zp(y)[1],
             **r.act(y, opts.FusedActivationFunction()), **_transposed_accumulator(r, x, y, bias)}
    r.emit("QConv2D", [value, flipped, _transposed_bias(r, bias), *requant_constants(r, x, w, y, name)], [name],
           attrs)


def _spread(r: Reader, value: str, shape: list[int], axis: int, stride: int, zp: int, hint: str) -> str:
    """`value` (of `shape`, updated) with stride - 1 elements of value `zp` after each of its own
    along `axis`: a reshape that gives each element an axis of its own, a pad of it, a reshape back."""
    if stride == 1:
        return value
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    parted, padded, spread = (r.fresh(f"{hint}_{what}") for what in ("parted", "padded", "spread"))
    r.emit("Reshape", [value, r.int64(f"{hint}_parts", shape[:axis + 1] + [1, inner])], [parted], {})
    rank = axis + 3
    ends = [0] * rank
    ends[axis + 1] = stride - 1
    r.emit("QPad", [parted], [padded], {"pads": [0] * rank + ends, "x_zero_point": zp})
    shape[axis] *= stride
    r.emit("Reshape", [padded, r.int64(f"{hint}_shape", shape)], [spread], {})
    return spread


def _cut_end(r: Reader, value: str, shape: list[int], axis: int, count: int, hint: str) -> str:
    """`value` (of `shape`, updated) without its last `count` elements along `axis`."""
    cut = r.fresh(hint)
    shape[axis] -= count
    end = shape[axis]
    r.emit("Slice", [value, r.int64(f"{hint}_starts", [0]), r.int64(f"{hint}_ends", [end]),
                     r.int64(f"{hint}_axes", [axis])], [cut], {})
    return cut


def _transposed_accumulator(r: Reader, x: int, y: int, bias: list[int]) -> dict:
    """TFLite Micro sums a 16x8 transposed convolution in int64 whatever its bias (an int16 bias is
    widened); int8 data in int32."""
    if r.dtype(x) != "int16":
        return {}
    if r.scale_zp(x)[1] != 0 or r.scale_zp(y)[1] != 0 or r.dtype(y) != "int16":
        raise Unsupported(f"16x8 data with input and output zero points {r.scale_zp(x)[1]} and {r.scale_zp(y)[1]} "
                          f"and a {r.dtype(y)} output (TFLite requires 0, 0 and int16)")
    if bias and r.dtype(bias[0]) not in ("int16", "int64"):
        raise Unsupported(f"a 16x8 transposed convolution with a {r.dtype(bias[0])} bias (TFLite Micro takes "
                          f"int64, or int16 which it widens)")
    return {"accumulator": "int64"}


def _transposed_bias(r: Reader, bias: list[int]) -> str:
    if not bias:
        return ""
    if r.dtype(bias[0]) == "int16":  # widened, as TFLite Micro does before it sums
        return r.add_constant(f"{r.names[bias[0]]}_int64", r.constant_data(bias[0], "TRANSPOSE_CONV bias").astype(np.int64))
    return r.value(bias[0])


def batch_matmul(r: Reader, op, inputs, outputs) -> None:
    """int8 BATCH_MATMUL: the int32 sums of (a - a's zero point)(b - b's zero point) (MatMulInteger),
    requantized by a_scale * b_scale / y_scale as TFLite Micro's Prepare computes it in double
    (the float32 scales widened), without an activation. Per-tensor quantization only, as TFLite's."""
    a, b, y = int(inputs[0]), int(inputs[1]), int(outputs[0])
    a_zp, b_zp = r.scale_zp(a)[1], r.scale_zp(b)[1]
    for i in (a, b, y):
        if np.size(r.required_quant(i).scale) != 1:
            raise Unsupported(f"BATCH_MATMUL with per-channel quantization of tensor '{r.original(i)}' "
                              f"(TFLite quantizes both operands per tensor)")
    name = r.names[y]
    sums = r.fresh(f"{name}_sums")
    zero_points = [r.add_constant(f"{name}_a_zero_point", np.int8(a_zp)),
                   r.add_constant(f"{name}_b_zero_point", np.int8(b_zp))]
    r.emit("MatMulInteger", [*batch_matmul_operands(r, op, inputs), *zero_points], [sums], {})
    _rescale(r, sums, y, _ratio(r, (a, b), y))


def batch_matmul_int16(r: Reader, op, inputs, outputs) -> None:
    """int16 BATCH_MATMUL (int16 x int16, which TFLite Micro runs, or int16 x int8, which TFLite runs):
    the int64 sums of the products, as TFLite's kernel accumulates them, requantized by
    a_scale * b_scale / y_scale (double) with TFLite's 64-bit MultiplyByQuantizedMultiplier. The
    products are an int64 `Mul` of a [..., M, K, 1] and b [..., 1, K, N] summed over K (`ReduceSum`):
    their intermediate holds M x K x N int64 values per batch where a kernel of its own holds none."""
    a, b, y = int(inputs[0]), int(inputs[1]), int(outputs[0])
    zero_points = [r.scale_zp(i)[1] for i in (a, b, y)]
    if zero_points != [0, 0, 0] or r.dtype(y) != "int16" or r.dtype(b) not in ("int16", "int8"):
        raise Unsupported(f"int16 BATCH_MATMUL of {r.dtype(b)} weights to {r.dtype(y)} with zero points "
                          f"{zero_points} (TFLite takes int16 or int8 weights, an int16 output, zero points 0)")
    for i in (a, b, y):
        if np.size(r.required_quant(i).scale) != 1:
            raise Unsupported(f"BATCH_MATMUL with per-channel quantization of tensor '{r.original(i)}' "
                              f"(TFLite quantizes both operands per tensor)")
    opts = options(op, "BatchMatMulOptions")
    name = r.names[y]
    shaped = []
    for k, (value, i, adjoint, spread) in enumerate(zip(batch_matmul_operands(r, op, inputs), (a, b),
                                                         (opts.AdjX(), opts.AdjY()), (-1, -3))):
        shape = list(r.shape(i))
        if adjoint:
            shape[-2:] = shape[-1], shape[-2]
        shape.insert(len(shape) + 1 + spread, 1)
        wide, spread_out = r.fresh(f"{name}_operand{k}_int64"), r.fresh(f"{name}_operand{k}_spread")
        r.emit("Cast", [value], [wide], {"to": "int64"})
        r.emit("Reshape", [wide, r.int64(f"{name}_operand{k}_shape", shape)], [spread_out], {})
        shaped.append(spread_out)
    products, sums = r.fresh(f"{name}_products"), r.fresh(f"{name}_sums")
    r.emit("Mul", shaped, [products], {})
    r.emit("ReduceSum", [products, r.int64(f"{name}_sum_axes", [-2])], [sums], {"keepdims": 0})
    _rescale(r, sums, y, _ratio(r, (a, b), y))


def _ratio(r: Reader, factors, y: int) -> float:
    """The product of the factors' scales over y's, in double from the float32 scales, as TFLite
    Micro's Prepare computes its requantization ratios."""
    return float(np.prod([float(np.float32(r.scale_zp(i)[0])) for i in factors])) / float(np.float32(r.scale_zp(y)[0]))


def _rescale(r: Reader, value: str, y: int, scale: float, out: str | None = None) -> str:
    """`value` (int32 or int64 sums) requantized to y's type and zero point by `scale`."""
    y_s, y_zp = r.scale_zp(y)
    out = out or r.names[y]
    r.emit("Requantize", [value], [out], {"x_scale": 1.0, "x_zero_point": 0, "y_scale": y_s, "y_zero_point": y_zp,
                                          "dtype": r.dtype(y), "effective_scale": scale})
    return out


def sum_(r: Reader, op, inputs, outputs) -> None:
    """int8 and int16 SUM as TFLite Micro's QuantizedMeanOrSum computes it: the int32 sums of x less
    its zero point over the axes, requantized by x_scale / y_scale (double), plus y's zero point."""
    x, y = int(inputs[0]), int(outputs[0])
    if r.dtype(y) != r.dtype(x):
        raise Unsupported(f"{r.dtype(x)} SUM with a {r.dtype(y)} output (TFLite's is the input's type)")
    rank = max(len(r.shape(x)), 1)
    axes = sorted({int(a) % rank for a in np.atleast_1d(r.constant_data(inputs[1], "SUM's axes"))})
    name = r.names[y]
    sums = r.fresh(f"{name}_sums")
    r.emit("ReduceSum", [_offset_int32(r, x, r.scale_zp(x)[1], f"{name}_x"), r.int64(f"{name}_axes", axes)], [sums],
           {"keepdims": int(bool(options(op, "ReducerOptions").KeepDims())),
            "noop_with_empty_axes": int(not axes)})  # (no axes: every element requantized alone)
    _rescale(r, sums, y, _ratio(r, (x,), y))


def mean(r: Reader, op, inputs, outputs) -> None:
    """int8 and int16 MEAN: over H and W of NHWC data TFLite Micro's integer Mean kernel (QMean,
    tflite_quantized.mean); over other axes its QuantizedMeanOrSum: the int32 sums of x less its zero
    point (`ReduceSum`), requantized by x_scale / y_scale's multiplier divided in integers by the
    element count n (the multiplier shifted up by floor(log2 n) bits, at most 32, divided by n with
    the shift lowered as much), plus y's zero point."""
    x, y = int(inputs[0]), int(outputs[0])
    rank = max(len(r.shape(x)), 1)
    axes = sorted({int(a) % rank for a in np.atleast_1d(r.constant_data(inputs[1], "MEAN's axes"))})
    if rank == 4 and axes == [1, 2]:
        q.mean(r, op, inputs, outputs)
        return
    if r.dtype(y) != r.dtype(x):
        raise Unsupported(f"{r.dtype(x)} MEAN with a {r.dtype(y)} output (TFLite's is the input's type)")
    count = int(np.prod([r.shape(x)[a] for a in axes], dtype=np.int64)) if axes else 1
    multiplier, shift = fp.quantize_multiplier(_ratio(r, (x,), y))
    headroom = min(count.bit_length() - 1, 32)
    name = r.names[y]
    sums = r.fresh(f"{name}_sums")
    r.emit("ReduceSum", [_offset_int32(r, x, r.scale_zp(x)[1], f"{name}_x"), r.int64(f"{name}_axes", axes)], [sums],
           {"keepdims": int(bool(options(op, "ReducerOptions").KeepDims())), "noop_with_empty_axes": int(not axes)})
    y_s, y_zp = r.scale_zp(y)
    r.emit("Requantize", [sums], [name], {"x_scale": 1.0, "x_zero_point": 0, "y_scale": y_s, "y_zero_point": y_zp,
                                         "dtype": r.dtype(y), "multiplier": (multiplier << headroom) // count,
                                         "shift": shift - headroom})


ADD_N_HEADROOM = 20  # TFLite's left shift of quantized additions: inputs rescaled to twice their scale


def add_n(r: Reader, op, inputs, outputs) -> None:
    """int8 ADD_N as TFLite Micro computes it: each input less the zero point, shifted up 20 bits and
    halved (rescaled to twice the shared input scale: exactly a shift of 19), summed in int32 from a
    start of the rescaled input offset, -zero point (its kernel starts the sum there, not at 0, so a
    nonzero zero point adds one more term), requantized by 2 * x_scale / (2^20 * y_scale) in double.
    The sums wrap in int32 as its kernel's do."""
    y = int(outputs[0])
    same_quantization(r, list(inputs), "ADD_N")
    x_s, zp = r.scale_zp(int(inputs[0]))
    name = r.names[y]
    widened = []
    for k, i in enumerate(inputs):
        widened.append(r.fresh(f"{name}_input{k}_int32"))
        r.emit("Cast", [r.value(i)], [widened[-1]], {"to": "int32"})
    total = _added(r, widened, name)
    centred, shifted = r.fresh(f"{name}_centred"), r.fresh(f"{name}_shifted")
    r.emit("Sub", [total, r.add_constant(f"{name}_offsets", np.int32((len(inputs) + 1) * zp))], [centred], {})
    r.emit("Mul", [centred, r.add_constant(f"{name}_headroom", np.int32(1 << (ADD_N_HEADROOM - 1)))], [shifted], {})
    twice = 2.0 * float(np.float32(x_s))
    _rescale(r, shifted, y, twice / ((1 << ADD_N_HEADROOM) * float(np.float32(r.scale_zp(y)[0]))))


def prelu(r: Reader, op, inputs, outputs) -> None:
    """int8 PRELU, and int16 PRELU with int8 alpha (TFLite Micro's pair, same arithmetic): d = x - x's zero point in int32; where d >= 0, d requantized by x_scale / y_scale,
    elsewhere d · (alpha - alpha's zero point) by x_scale · alpha_scale / y_scale (both ratios in
    double from the float32 scales, as TFLite Micro's Prepare computes them); alpha broadcasts."""
    x, alpha, y = int(inputs[0]), int(inputs[1]), int(outputs[0])
    if r.dtype(alpha) != "int8" or r.dtype(y) != r.dtype(x):
        raise Unsupported(f"{r.dtype(x)} PRELU with {r.dtype(alpha)} alpha to {r.dtype(y)} (TFLite Micro "
                          f"takes int8 alpha and an output of the input's type)")
    (x_s, x_zp), (a_s, a_zp), y_s = r.scale_zp(x), r.scale_zp(alpha), r.scale_zp(y)[0]
    name = r.names[y]
    d, slope = (_offset_int32(r, v, zp, f"{name}_{what}") for v, zp, what in ((x, x_zp, "x"), (alpha, a_zp, "alpha")))
    scaled = r.fresh(f"{name}_scaled")
    r.emit("Mul", [d, slope], [scaled], {})
    ratio = float(np.float32(x_s)) / float(np.float32(y_s))
    branches = []
    for value, scale, what in ((d, ratio, "kept"), (scaled, ratio * float(np.float32(a_s)), "sloped")):
        branches.append(_rescale(r, value, y, scale, r.fresh(f"{name}_{what}")))
    positive = r.fresh(f"{name}_positive")
    r.emit("GreaterOrEqual", [d, r.add_constant(f"{name}_zero", np.int32(0))], [positive], {})
    r.emit("Where", [positive, *branches], [name], {})


def _added(r: Reader, terms: list[str], name: str) -> str:
    """The sum of the terms, one Add after another."""
    total = terms[0]
    for k, term in enumerate(terms[1:]):
        total, partial = r.fresh(f"{name}_sum{k}"), total
        r.emit("Add", [partial, term], [total], {})
    return total


def _offset_int32(r: Reader, i: int, zp: int, hint: str) -> str:
    """Tensor i widened to int32 less its zero point."""
    wide, offset = r.fresh(f"{hint}_int32"), r.fresh(f"{hint}_offset")
    r.emit("Cast", [r.value(i)], [wide], {"to": "int32"})
    r.emit("Sub", [wide, r.add_constant(f"{hint}_zero_point", np.int32(zp))], [offset], {})
    return offset


def resize_bilinear(r: Reader, op, inputs, outputs) -> None:
    """int8 RESIZE_BILINEAR as TFLite Micro's integer kernel computes it: source positions
    in 1/1024ths of a pixel (its scale_10 and the half-pixel offset), the four corners gathered
    (`Gather` of rows, then of columns) and weighted by 1024ths along each axis (the weights can
    go negative where a half-pixel position lies before the first pixel, as in its kernel), the
    2^20-scaled sum rounded half away from zero (`Where`, a truncating `Div`), in int32 (the widest
    sum, 1536² · 128, fits). The weights are build-time constants, one per row and column."""
    opts = options(op, "ResizeBilinearOptions")
    x, y = int(inputs[0]), int(outputs[0])
    (_, h, w, _), (_, oh, ow, _) = r.shape(x), r.shape(y)
    align, half = bool(opts.AlignCorners()), bool(opts.HalfPixelCenters())
    name, wide = r.names[y], "int32"
    rows, cols = _bilinear_taps(h, oh, align, half), _bilinear_taps(w, ow, align, half)
    corners = []
    for k, (row_index, row_weight) in enumerate(((rows[0], rows[2]), (rows[1], rows[3]))):
        picked = r.fresh(f"{name}_rows{k}")
        r.emit("Gather", [r.value(x), r.int64(f"{name}_row_indices{k}", row_index)], [picked], {"axis": 1})
        for j, (col_index, col_weight) in enumerate(((cols[0], cols[2]), (cols[1], cols[3]))):
            corner = _weighted(r, picked, col_index, row_weight.reshape(1, -1, 1, 1),
                               col_weight.reshape(1, 1, -1, 1), wide, f"{name}_corner{k}{j}")
            corners.append(corner)
    _round_down_by_2_20(r, _added(r, corners, name), wide, name, r.dtype(y))


def _bilinear_taps(size: int, out: int, align: bool, half: bool):
    """Per output index along one axis: the lower and upper source index and the weights (1024ths)
    of each, as TFLite Micro's ComputeInterpolationValuesInteger gives them."""
    if align and out > 1:
        scale = ((1 << 10) * (size - 1) + (out - 1) // 2) // (out - 1)
    else:
        scale = ((1 << 10) * size + out // 2) // out
    v = np.arange(out, dtype=np.int64)
    scaled = v * scale + scale // 2 - (1 << 9) if half else v * scale
    lower = np.maximum(np.trunc(scaled / (1 << 10)).astype(np.int64), 0)
    upper = np.minimum(np.trunc((scaled + (1 << 10) - 1) / (1 << 10)).astype(np.int64), size - 1)
    frac = scaled - (1 << 10) * lower
    return lower, upper, (1 << 10) - frac, frac


def _weighted(r: Reader, rows: str, columns, row_weight, col_weight, wide: str, hint: str) -> str:
    """The gathered rows' `columns`, widened, times the row and the column weight."""
    picked, widened, by_row, weighted = (r.fresh(f"{hint}_{s}") for s in ("picked", "wide", "by_row", "weighted"))
    r.emit("Gather", [rows, r.int64(f"{hint}_column_indices", columns)], [picked], {"axis": 2})
    r.emit("Cast", [picked], [widened], {"to": wide})
    r.emit("Mul", [widened, r.add_constant(f"{hint}_row_weights", row_weight.astype(wide))], [by_row], {})
    r.emit("Mul", [by_row, r.add_constant(f"{hint}_column_weights", col_weight.astype(wide))], [weighted], {})
    return weighted


def _round_down_by_2_20(r: Reader, total: str, wide: str, name: str, dtype: str) -> None:
    """(total ± 2^19) / 2^20, the sign of the nudge the total's, truncated: rounding half away from zero."""
    positive, up, down, nudged, scaled = (r.fresh(f"{name}_{s}") for s in ("positive", "up", "down", "nudged",
                                                                            "scaled"))
    half = r.add_constant(f"{name}_half", np.array(1 << 19, wide))
    r.emit("Greater", [total, r.add_constant(f"{name}_zero", np.array(0, wide))], [positive], {})
    r.emit("Add", [total, half], [up], {})
    r.emit("Sub", [total, half], [down], {})
    r.emit("Where", [positive, up, down], [nudged], {})
    r.emit("Div", [nudged, r.add_constant(f"{name}_one", np.array(1 << 20, wide))], [scaled], {})
    r.emit("Cast", [scaled], [name], {"to": dtype})


def abs_int16(r: Reader, op, inputs, outputs) -> None:
    """int16 ABS: |x - x's zero point| in int32, requantized by x_scale / y_scale (in double, as
    TFLite Micro's Prepare; a ratio of 1 requantizes exactly), plus y's zero point, saturated."""
    x, y = int(inputs[0]), int(outputs[0])
    name = r.names[y]
    magnitude = r.fresh(f"{name}_magnitude")
    r.emit("Abs", [_offset_int32(r, x, r.scale_zp(x)[1], f"{name}_x")], [magnitude], {})
    _rescale(r, magnitude, y, _ratio(r, (x,), y))


def cumsum_int8(r: Reader, op, inputs, outputs) -> None:
    """int8 CUMSUM as TFLite Micro computes it, the way its ADD_N rescales: the running int32 sums of
    x less its zero point along the axis (exclusive and reverse as the options say), started, as its
    kernel starts them, from the rescaled input offset, -zero point (so a nonzero zero point counts
    once more); each shifted up 20 bits and halved (exactly a shift of 19; the sums wrap as its
    kernel's do) and requantized by 2 * x_scale / (2^20 * y_scale) in double, plus y's zero point."""
    x, y = int(inputs[0]), int(outputs[0])
    if r.dtype(y) != "int8":
        raise Unsupported(f"int8 CUMSUM with a {r.dtype(y)} output (TFLite Micro's is int8)")
    opts = options(op, "CumsumOptions")
    axis = int(np.asarray(r.constant_data(inputs[1], "CUMSUM axis")).reshape(-1)[0])
    (x_s, zp), name = r.scale_zp(x), r.names[y]
    sums, started, shifted = r.fresh(f"{name}_sums"), r.fresh(f"{name}_started"), r.fresh(f"{name}_shifted")
    r.emit("CumSum", [_offset_int32(r, x, zp, f"{name}_x"), r.int64(f"{name}_axis", axis)], [sums],
           {"exclusive": int(opts.Exclusive()), "reverse": int(opts.Reverse())})
    r.emit("Sub", [sums, r.add_constant(f"{name}_start", np.int32(zp))], [started], {})
    r.emit("Mul", [started, r.add_constant(f"{name}_headroom", np.int32(1 << (ADD_N_HEADROOM - 1)))], [shifted], {})
    _rescale(r, shifted, y, 2.0 * float(np.float32(x_s)) / ((1 << ADD_N_HEADROOM) * float(np.float32(r.scale_zp(y)[0]))))


def embedding_lookup_int8(r: Reader, op, inputs, outputs) -> None:
    """EMBEDDING_LOOKUP of an int8 table: its rows (`Gather`), to an int8 output as stored, or to a
    float32 output dequantized by the table's scale (TFLite Micro's hybrid form: zero point 0 and one
    scale; the float32 product of an int8 and a float32 scale is exact in double, so `Dequantize`'s
    one rounding equals its float multiply)."""
    ids, table, y = int(inputs[0]), int(inputs[1]), int(outputs[0])
    scale, zp = r.required_quant(table).scale, r.scale_zp(table)[1]
    if np.size(scale) != 1 or zp != 0:
        raise Unsupported(f"an int8 EMBEDDING_LOOKUP table quantized with {np.size(scale)} scales and zero point "
                          f"{zp} (TFLite Micro applies one scale, the first, and requires zero point 0)")
    if r.dtype(y) == "int8":
        r.emit("Gather", [r.value(table), r.value(ids)], [r.names[y]], {"axis": 0})
        return
    if r.dtype(y) != "float32":
        raise Unsupported(f"an int8 EMBEDDING_LOOKUP table with a {r.dtype(y)} output (TFLite Micro: int8 or float32)")
    rows = r.fresh(f"{r.names[y]}_rows")
    r.emit("Gather", [r.value(table), r.value(ids)], [rows], {"axis": 0})
    r.emit("Dequantize", [rows], [r.names[y]], {"x_scale": r.scale_zp(table)[0], "x_zero_point": 0})
