"""Functors of ONNX's quantized operators (codegen/ops/quantized_onnx.py): their families' nests
(ConvInteger and QLinearConv the convolution nest, MatMulInteger and QLinearMatMul the matrix
nest, the pools the window nest, QuantizeLinear and the like the elementwise nest) with int32
micro-kernels whose zero points are their data, and ONNX's float requantization as the epilogue:
float32(acc) * scale, rounded to nearest with ties to even (float32 addition of 1.5 * 2^23, in the
default rounding mode), plus the zero point, saturated. Per-axis scales and zero points are loaded from their constants,
so per-channel output scales are computed in the kernel exactly as ONNX Runtime does,
(x_scale * w_scale[m]) / y_scale in float32."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from tinsmith.generate.backend import CPP, takes
from tinsmith.generate.functors import window_nest
from tinsmith.generate.functors.conv import ConvAxes, ConvOperands
from tinsmith.generate.functors.conv_nest import ConvNest, convolution
from tinsmith.generate.functors.matrix import Block, MatrixOperands, MatrixSchedule, matrix_product
from tinsmith.generate.functors.conv_portable import G, PORTABLE, ScalarDot, scalar_dot_of
from tinsmith.generate.functors import elementwise_nest as nest_, reduction_nest
from tinsmith.generate.functors.reduction_nest import Passes, ReductionNest, ReductionSchedule, local, sweep
from tinsmith.generate.functors.elementwise_nest import AXES, ElementwiseNest, Rescale
from tinsmith.generate.functors.quantized_math import i32, widen
from tinsmith.generate.functors.window_nest import WindowOutput, WindowTap
from tinsmith.generate.loop_ir import (Assign, Binary, Cast, Const, Expr, For, Load, Local, Select, Stmt, Store, Unary,
                                      Var, flat_index, index)
from tinsmith.ops import quantized_onnx as qo
from tinsmith.ops.quantized import output_clamp
from tinsmith.quant.fixed_point import DTYPE_RANGES

# ONNX's quantized element types: x and w int8, uint8 or int16 each, scales float32, int32 bias.
Q8 = ("int8", "uint8", "int16")
ONNX_QCONV = takes(Q8, "float32", Q8, Q8, "float32", Q8, "float32", Q8, "int32", out=Q8, acc="int32")


def f32(v: float) -> Const:
    return Const(float(np.float32(v)), "float32")


def _data(graph, value) -> np.ndarray | None:
    return None if value is None else np.asarray(graph.constants[value.name].data).reshape(-1)


def _per_axis(graph, value, at: Expr, as_float: bool) -> Expr | None:
    """A scale or zero point: a constant when it has one value (None for an omitted or all-zero
    zero point), else loaded at `at`."""
    data = _data(graph, value)
    if data is None or (not as_float and not data.any()):
        return None
    if data.size == 1 or (data == data[0]).all():
        return f32(data[0]) if as_float else i32(int(data[0]))
    return Load(value.name, at) if as_float else widen(Load(value.name, at))


def _minus(v: Expr, zp: Expr | None) -> Expr:
    return v if zp is None else Binary("-", v, zp)


# 1.5 * 2^23: added to a float32 of magnitude below 2^22, it leaves no fraction bits, so the
# addition itself rounds to the nearest integer, ties to even; subtracting it back is exact
ROUNDING_MAGIC = 12582912.0


def _round_store(out, at, coords, v: Expr, zp: int | Expr | None, lo: int, hi: int) -> Store:
    """Store round(v) + zp saturated to lo..hi (`_rounded`)."""
    return Store(out.name, at, _rounded(out.type.dtype, v, zp, lo, hi), coords)


def _rounded(dtype: str, v: Expr, zp: int | Expr | None, lo: int, hi: int) -> Expr:
    """round(v) + zp saturated to lo..hi, ties to even, as `dtype`. v is clamped to lo - zp .. hi - zp
    first (integers, so clamping and rounding commute): no value past int32's range reaches the
    conversion, and the rounding needs no libm call (soft-float nearbyint on Cortex-M)."""
    if zp is None or isinstance(zp, int):
        z = zp or 0
        low, high = f32(lo - z), f32(hi - z)
        zf: Expr | None = f32(z) if z else None
    else:
        zf = Cast("float32", zp)
        low, high = Binary("-", f32(lo), zf), Binary("-", f32(hi), zf)
    clamped = Binary("max", Binary("min", v, high), low)
    r: Expr = Binary("-", Binary("+", clamped, f32(ROUNDING_MAGIC)), f32(ROUNDING_MAGIC))
    if zf is not None:
        r = Binary("+", r, zf)
    return Cast(dtype, Cast("int32", r))


def float_requantize_store(graph, args, attrs, acc: Expr, channel: Expr, out_at: Expr, coords) -> Store:
    """The store of a TFLite-style primitive (QConv2D, QDepthwise, QFullyConnected) with ONNX's
    requantization (attribute requantize: float): float32(acc) * scale[channel], rounded half to
    even, plus the output zero point, clamped to the activation's range."""
    scale = _per_axis(graph, args.inputs[3], channel, True)
    return _round_store(args.outputs[0], out_at, coords, Binary("*", Cast("float32", acc), scale),
                        attrs["y_zero_point"], *output_clamp(attrs, args.outputs[0].type.dtype))


@CPP.register("QuantizeLinear", types=takes("float32", "float32", Q8, out=Q8))
def quantize_linear(graph, node_id, cluster_id, args, attrs):
    """saturate(round(x / scale) + zero point), ties to even; per-axis parameters loaded."""
    x, y = args.inputs[0], args.outputs[0]
    scale_v, zp_v = args.inputs[1], args.inputs[2] if len(args.inputs) > 2 else None
    lo, hi = DTYPE_RANGES[y.type.dtype]
    axis = attrs["axis"] % max(x.type.rank, 1)

    def step(xs, idx):
        at = idx[axis] if x.type.rank else index(0)
        v = Binary("/", xs[0], _per_axis(graph, scale_v, at, True))
        return [], _rounded(y.type.dtype, v, _per_axis(graph, zp_v, at, False), lo, hi)
    return nest_.elementwise(ElementwiseNest.of(args), AXES, Rescale(step))


@CPP.register("DequantizeLinear", types=takes(Q8 + ("int32",), "float32", Q8 + ("int32",), out="float32"))
def dequantize_linear(graph, node_id, cluster_id, args, attrs):
    """float32(x - zero point) * scale; per-axis parameters loaded."""
    x = args.inputs[0]
    scale_v, zp_v = args.inputs[1], args.inputs[2] if len(args.inputs) > 2 else None
    axis = attrs["axis"] % max(x.type.rank, 1)

    def step(xs, idx):
        at = idx[axis] if x.type.rank else index(0)
        v = _minus(widen(xs[0]), _per_axis(graph, zp_v, at, False))
        return [], Binary("*", Cast("float32", v), _per_axis(graph, scale_v, at, True))
    return nest_.elementwise(ElementwiseNest.of(args), AXES, Rescale(step))


# DynamicQuantizeLinear's loops: no kept axis, the elements counted by i
WHOLE = ReductionSchedule(kept=(), reduced=("i",))


@CPP.register("DynamicQuantizeLinear", family="reduction", types=takes("float32", out=["uint8", "float32", "uint8"]))
def dynamic_quantize_linear(graph, node_id, cluster_id, args, attrs):
    """The range of x widened to include 0 sets scale = range / 255 and the zero point; then x is
    quantized to uint8 with them (ties to even): the reduction nest over every element, two sweeps."""
    x, y, y_scale, y_zp = args.inputs[0], *args.outputs
    # a zero range (x all 0) quantizes to zero point 0 without dividing by the scale
    safe = Select(Binary(">", Var("scale"), f32(0.0)), Var("scale"), f32(1.0))
    zp = Binary("max", Binary("min", Unary("round", Binary("/", Unary("neg", Var("lo")), safe)), f32(255.0)),
                f32(0.0))

    def quantize(row):
        v = Load(x.name, row.at())
        return [_round_store(y, row.at(), None, Binary("/", v, safe), Var("zp"), 0, 255)]
    return reduction_nest.reduction(ReductionNest.of(args), WHOLE, Passes((
        local("lo", lambda row: f32(0.0)), local("hi", lambda row: f32(0.0)),
        sweep(lambda row: [Assign("lo", Binary("min", Var("lo"), Load(x.name, row.at()))),
                           Assign("hi", Binary("max", Var("hi"), Load(x.name, row.at())))]),
        local("scale", lambda row: Binary("/", Binary("-", Var("hi"), Var("lo")), f32(255.0))),
        local("zp", lambda row: Cast("int32", zp), "int32"),
        lambda row: [Store(y_scale.name, index(0), Var("scale"), ()),
                     Store(y_zp.name, index(0), Cast("uint8", Var("zp")), ())],
        sweep(quantize))))


# --- convolutions: the convolution nest (conv_nest.py) with an integer micro-kernel ---------------
@dataclass(frozen=True)
class IntegerDot(ScalarDot):
    """ScalarDot in int32 (ConvInteger, QLinearConv): acc = bias; acc += (x - x_zp) * (w - w_zp) over
    the group's channels and the taps inside the input (a tap in the padding reads x_zp: it adds 0).
    The stored value is finish(acc, output channel), after the channel's `constants` (locals that
    w_zp or finish read, computed once per channel before its positions)."""

    x_zp: Expr | None = None
    w_zp: Expr | None = None
    constants: Callable[[Expr], list[Stmt]] = lambda oc: []
    finish: Callable[[Expr, Expr], Expr] = lambda acc, oc: acc
    accumulator = "int32"

    def _channel(self, block) -> Expr:
        return (G * self.per_group + block.first).expr()

    def prelude(self, block) -> list[Stmt]:
        return [*super().prelude(block), *self.constants(self._channel(block))]

    def _init(self) -> Expr:
        return Var("bias") if self.bias is not None else i32(0)

    def _input(self, load: Expr) -> Expr:
        return _minus(widen(load), self.x_zp)

    def _weight(self, load: Expr) -> Expr:
        return _minus(widen(load), self.w_zp)

    def _padding_value(self) -> Expr:
        return i32(0)

    def _store(self, tl, block, value: Expr) -> Store:
        return super()._store(tl, block, self.finish(value, self._channel(block)))


def _integer_conv(graph, args, w_at: int, zero_points: tuple[int, int], finish,
                  constants: Callable[[Expr], list[Stmt]] = lambda oc: []) -> list[Stmt]:
    """ConvInteger or QLinearConv (weights at `w_at`, zero points at `zero_points`): the portable
    schedule of the convolution nest, one output channel and position per block; a per-channel
    weight zero point is loaded once per channel."""
    x, w, y = args.inputs[0], args.inputs[w_at], args.outputs[0]
    b = args.inputs[8] if w_at == 3 and len(args.inputs) > 8 else None
    geo = args.prepared["geometry"]
    ops = ConvOperands(x.name, w.name, y.name, b.name if b is not None else None, geo, ConvAxes.of(geo), False)
    x_zp_v, w_zp_v = (args.inputs[i] if i < len(args.inputs) else None for i in zero_points)
    w_zp = _per_axis(graph, w_zp_v, index(0), False)
    if w_zp is not None and not isinstance(w_zp, Const):
        w_zp, finish_constants = Var("w_zero"), constants

        def constants(oc: Expr) -> list[Stmt]:
            return [Local("w_zero", _per_axis(graph, w_zp_v, oc, False), "int32"), *finish_constants(oc)]
    micro = scalar_dot_of(ops, IntegerDot, x_zp=_per_axis(graph, x_zp_v, index(0), False), w_zp=w_zp,
                          constants=constants, finish=finish)
    return convolution(ConvNest.of(ops), PORTABLE, micro)


def _requantize(graph, args, attrs, a_scale_at: int, b_scale_at: int, channel: Expr, zp_at: int):
    """The channel's multiplier (a_scale * b_scale[channel]) / y_scale as a float32 expression,
    and requantized(acc, multiplier): float32(acc) * multiplier, rounded, plus the output zero point,
    clamped."""
    y = args.outputs[0]
    a_s, b_s, y_s = (_data(graph, args.inputs[i]) for i in (a_scale_at, b_scale_at, 6))
    scales = qo.output_scales(a_s, b_s, y_s, b_s.size)
    if (scales == scales[0]).all():
        scale: Expr = f32(scales[0])
    else:  # the same float32 steps as ONNX Runtime, in the kernel: (a * b[c]) / y
        scale = Binary("/", Binary("*", f32(a_s[0]), Load(args.inputs[b_scale_at].name, channel)), f32(y_s[0]))
    zp_data = _data(graph, args.inputs[zp_at])
    zp = 0 if zp_data is None else int(zp_data[0])
    lo, hi = qo.act_range(attrs, y.type.dtype)

    def requantized(acc: Expr, multiplier: Expr = scale) -> Expr:
        return _rounded(y.type.dtype, Binary("*", Cast("float32", acc), multiplier), zp, lo, hi)
    return scale, requantized


@CPP.register("QLinearConv", family="convolution", layout="nchw", types=ONNX_QCONV)
def qlinear_conv(graph, node_id, cluster_id, args, attrs):
    """Integer convolution, then ONNX's float requantization per output channel (the channel's
    multiplier computed once, before its output positions)."""
    scale, requantized = _requantize(graph, args, attrs, 1, 4, index(0), 7)
    if isinstance(scale, Const):
        return _integer_conv(graph, args, 3, (2, 5), lambda acc, oc: requantized(acc))
    return _integer_conv(graph, args, 3, (2, 5), lambda acc, oc: requantized(acc, Var("multiplier")),
                         lambda oc: [Local("multiplier", _requantize(graph, args, attrs, 1, 4, oc, 7)[0], "float32")])


@CPP.register("ConvInteger", family="convolution", layout="nchw", types=takes(Q8, Q8, Q8, Q8, out="int32", acc="int32"))
def conv_integer(graph, node_id, cluster_id, args, attrs):
    """Integer convolution; the int32 sums are the output."""
    return _integer_conv(graph, args, 1, (2, 3), lambda acc, oc: acc)


# --- matrix products: the matrix nest (matrix.py) with an integer micro-kernel ---------------------
def integer_dot(a_zp, b_zp, epilogue, bias=None) -> Block:
    """One output of an integer product: acc = bias(j) (or 0); acc += (a - a_zp(i)) * (b - b_zp(j))
    over K; then epilogue(offset, coordinates, j) (i, j: the output's row and column)."""
    def block(ops: MatrixOperands, row, first: Expr, count: int, width: int, p: str) -> list[Stmt]:
        idx = [*row, first]
        i, j, k = idx[-2], idx[-1], Var("k")
        av = _minus(widen(Load(ops.a, ops.a_at(idx, k))), a_zp(i))
        bv = _minus(widen(Load(ops.b, ops.b_at(idx, k))), b_zp(j))
        return [Local("acc", bias(j) if bias else i32(0), "int32"),
                For("k", ops.k, (Assign("acc", Binary("+", Var("acc"), Binary("*", av, bv))),)),
                *epilogue(flat_index(idx, ops.shape), tuple(idx), j)]
    return block


def _matmul(graph, args, a_zp, b_zp, epilogue, bias=None) -> list[Stmt]:
    """The output [..., M, N] of a @ b (b at input 3 of a QLinearMatMul), one output per block."""
    ops = MatrixOperands.product(args.inputs[0], args.inputs[3 if len(args.inputs) >= 8 else 1], args.outputs[0])
    schedule = MatrixSchedule(column_var=f"i{len(ops.shape) - 1}")
    return matrix_product(ops, schedule, integer_dot(a_zp, b_zp, epilogue, bias))


@CPP.register("QLinearMatMul", family="matrix", types=ONNX_QCONV)
def qlinear_matmul(graph, node_id, cluster_id, args, attrs):
    """Integer matrix product (plus a folded Gemm's int32 bias), then ONNX's float requantization."""
    a_zp = _per_axis(graph, args.inputs[2], index(0), False)
    bias = args.inputs[8] if len(args.inputs) > 8 else None

    def epilogue(at, coords, j):
        return [Store(args.outputs[0].name, at, _requantize(graph, args, attrs, 1, 4, j, 7)[1](Var("acc")), coords)]
    return _matmul(graph, args, lambda i: a_zp, lambda j: _per_axis(graph, args.inputs[5], j, False), epilogue,
                   (lambda j: Load(bias.name, j)) if bias is not None else None)


@CPP.register("MatMulInteger", family="matrix", types=takes(Q8, Q8, Q8, Q8, out="int32", acc="int32"))
def matmul_integer(graph, node_id, cluster_id, args, attrs):
    """Integer matrix product; a's zero point may be per row, b's per column."""
    y = args.outputs[0]
    a_zp_v = args.inputs[2] if len(args.inputs) > 2 else None
    b_zp_v = args.inputs[3] if len(args.inputs) > 3 else None
    return _matmul(graph, args, lambda i: _per_axis(graph, a_zp_v, i, False),
                   lambda j: _per_axis(graph, b_zp_v, j, False),
                   lambda at, coords, j: [Store(y.name, at, Var("acc"), coords)])


# --- folded QDQ patterns ------------------------------------------------------------------------
@CPP.register("QLinearAdd", types=takes(Q8, Q8, out=Q8, acc="int32"))  # the scales are attributes
def qlinear_add(graph, node_id, cluster_id, args, attrs):
    """(a - a_zp) * a_scale / y_scale + (b - b_zp) * b_scale / y_scale in float32, rounded."""
    y_type = args.outputs[0].type.dtype
    ra, rb = qo.add_ratios(attrs)
    lo, hi = qo.act_range(attrs, y_type)

    def step(xs, idx):
        av = Binary("-", widen(xs[0]), i32(attrs["a_zero_point"]))
        bv = Binary("-", widen(xs[1]), i32(attrs["b_zero_point"]))
        v = Binary("+", Binary("*", Cast("float32", av), f32(ra)), Binary("*", Cast("float32", bv), f32(rb)))
        return [], _rounded(y_type, v, attrs["y_zero_point"], lo, hi)
    return nest_.elementwise(ElementwiseNest.of(args), AXES, Rescale(step))


# --- pools: the window nest (window_nest.py) with an int32 sum ---------------------------------
@dataclass(frozen=True)
class CountingSum:
    """The int32 sum of the taps (less `zero_point` where one is given) that lie inside the input
    and, where some may not (WindowOutput.counted None), their count at run time."""

    zero_point: int | None

    def start(self, scope: str, out: WindowOutput) -> list[Stmt]:
        count = [Local("count", i32(0), "int32")] if out.counted is None else []
        return [Local("acc", i32(0), "int32"), *count]

    def step(self, scope: str, tap: WindowTap) -> list[Stmt]:
        v = widen(tap.value)
        if self.zero_point is not None:
            v = Binary("-", v, i32(self.zero_point))
        if tap.inside is None:
            return [Assign("acc", Binary("+", Var("acc"), v))]
        return [Assign("acc", Binary("+", Var("acc"), Select(tap.inside, v, i32(0)))),
                Assign("count", Binary("+", Var("count"), Select(tap.inside, i32(1), i32(0))))]


@dataclass(frozen=True, eq=False)
class QLinearAverage(CountingSum):
    """The mean of (x - x_zp) over the taps inside the input, times x_scale / y_scale, in float32,
    rounded half to even, plus y_zp (ONNX Runtime's QLinearAveragePool)."""

    y: object  # the output argument
    attrs: dict

    def finish(self, scope: str, out: WindowOutput) -> list[Stmt]:
        ratio = f32(np.float32(np.float32(self.attrs["x_scale"]) / np.float32(self.attrs["y_scale"])))
        count = Cast("float32", Var("count")) if out.counted is None else f32(float(out.counted))
        mean = Binary("/", Binary("*", Cast("float32", Var("acc")), ratio), count)
        lo, hi = DTYPE_RANGES[self.y.type.dtype]
        return [_round_store(self.y, out.at, out.coords, mean, self.attrs["y_zero_point"], lo, hi)]


@dataclass(frozen=True, eq=False)
class QLinearGlobalAverage(QLinearAverage):
    """The raw sum less count * x_zp, times one multiplier x_scale / (y_scale * count)."""

    def finish(self, scope: str, out: WindowOutput) -> list[Stmt]:
        raw = Binary("-", Var("acc"), i32(out.counted * self.attrs["x_zero_point"]))
        scaled = Binary("*", Cast("float32", raw), f32(qo.pool_scale(self.attrs, out.counted)))
        lo, hi = DTYPE_RANGES[self.y.type.dtype]
        return [_round_store(self.y, out.at, out.coords, scaled, self.attrs["y_zero_point"], lo, hi)]


@CPP.register("QLinearGlobalAveragePool", family="window", layout="any", types=takes(Q8, "float32", Q8, "float32", Q8, out=Q8, acc="int32"))
def qlinear_global_average_pool(graph, node_id, cluster_id, args, attrs):
    """The sum of (x - x_zp) over each channel's positions, times x_scale / (y_scale * count), rounded.
    Channels last (N, D1.., C): channel c of position p at p * C + c."""
    schedule = window_nest.WindowSchedule(taps="whole", channels="outer", position_var="p")
    return window_nest.window(window_nest.WindowNest.of(args), schedule, QLinearGlobalAverage(None, args.outputs[0], attrs))


@CPP.register("QLinearAveragePool", family="window", layout="nchw", types=takes(Q8, "float32", Q8, "float32", Q8, out=Q8, acc="int32"))
def qlinear_average_pool(graph, node_id, cluster_id, args, attrs):
    """The sum of (x - x_zp) over each window's taps inside the input, times x_scale / y_scale,
    divided by their count, in float32, rounded."""
    micro = QLinearAverage(attrs["x_zero_point"], args.outputs[0], attrs)
    schedule = window_nest.WindowSchedule(taps="clamped", channels="outer")
    return window_nest.window(window_nest.WindowNest.of(args), schedule, micro)
