"""Functors of the quantized primitives (codegen/ops/quantized.py): plain integer loops over NHWC
data with int32 accumulators and TFLite's requantization (quantized_math.py). Padding is handled
by clamping the load's index into the input and selecting the zero point's contribution (zero)
for taps outside it, so no load ever leaves the buffer."""
from __future__ import annotations

from dataclasses import dataclass

from tinsmith.generate.backend import CPP, FLOATS, same, takes
from tinsmith.generate.functors import window_nest
from tinsmith.generate.kernel_sets import micro_kernel
from tinsmith.generate.functors.quantized_math import (clamp, i32, multiply_by_quantized_multiplier,
                                                      multiply_by_quantized_multiplier_int64,
                                                      multiply_by_reduced_multiplier, multiply_with_offset,
                                                      packed_q15_multipliers,
                                                      packed_shifts_less_one, rounded_divide, select_max, widen)
from tinsmith.generate.functors import elementwise_nest as nest_, reduction_nest
from tinsmith.generate.functors.reduction_nest import Passes, ReductionNest, ReductionSchedule
from tinsmith.generate.functors.elementwise_nest import AXES, ElementwiseNest, Rescale
from tinsmith.generate.functors.quantized_onnx import CountingSum, float_requantize_store
from tinsmith.generate.functors.window_nest import WindowOutput, WindowSchedule, WindowTap, both, clamp_into
from tinsmith.generate.loop_ir import (Assign, Binary, Cast, Const, Expr, Load, Local, Select, Stmt, Store, Var,
                                      Unary, flat_index, index, nest)
from tinsmith.ops import quantized as q

# The element types of the quantized kernels: int8, uint8 or int16 activations (TFLite's int8 and
# 16x8 schemes, ONNX's uint8), int8 weights, int32 bias and per-channel requantization constants.
QUANTIZED = ("int8", "uint8", "int16")
# Input 3 is the int32 multiplier, or ONNX's float32 scale (requantize: float); the output is the
# int32 sums themselves with requantize: none (codegen/ops/quantized.py: REQUANTIZE).
REQUANTIZERS = ("int32", "float32")
QUANTIZED_CONV = takes(QUANTIZED, "int8", "int32", REQUANTIZERS, "int32", out=QUANTIZED + ("int32",), acc="int32")
# TFLite's 16x8 scheme: int16 activations, int8 weights, an int64 bias with int64 sums requantized by
# the 64-bit MultiplyByQuantizedMultiplier, or an int32 bias with int32 sums (the node's accumulator
# attribute says which)
INT16X8_CONV = takes("int16", "int8", ("int32", "int64"), "int32", "int32", out="int16", acc="int64")
# what the fast int8 kernels take: int8 activations only
INT8_CONV = takes("int8", "int8", "int32", REQUANTIZERS, "int32", out=("int8", "int32"), acc="int32")


def _requant_params(graph, args, channel: Expr) -> tuple[Expr | int, Expr | int, int]:
    """(multiplier, shift, sign of every shift): build-time ints when one pair serves every
    channel, else loads, with the shifts' common sign (0: mixed) read from the constant."""
    mult, shift = args.inputs[3], args.inputs[4]
    if mult.type.size == 1 and shift.type.size == 1:
        return (int(graph.constants[mult.name].data.reshape(-1)[0]),
                int(graph.constants[shift.name].data.reshape(-1)[0]), 0)
    sign = 0
    if shift.name in graph.constants:
        shifts = graph.constants[shift.name].data
        sign = -1 if (shifts <= 0).all() else 1 if (shifts >= 0).all() else 0
    return Load(mult.name, channel), Load(shift.name, channel), sign


def _largest_right_shift(graph, args) -> int:
    """The largest right shift among the per-channel shifts (31 where they are not constants)."""
    shift = args.inputs[4]
    if shift.name not in graph.constants:
        return 31
    return max(0, -int(graph.constants[shift.name].data.min()))


def _finish(graph, args, attrs, channel: Expr, out_at: Expr, coords, acc: str = "acc") -> list[Stmt]:
    """Requantize local `acc`, add the output zero point, clamp, and store."""
    if attrs.get("requantize") == "float":
        return [float_requantize_store(graph, args, attrs, Var(acc), channel, out_at, coords)]
    if attrs.get("requantize") == "none":  # the int32 sums are the output
        return [Store(args.outputs[0].name, out_at, Var(acc), coords)]
    mult, shift, sign = _requant_params(graph, args, channel)
    if accumulator(attrs) == "int64" and _bias_folded(args):  # packed: reduced_requant_pack
        stmts, scaled = multiply_with_offset(f"{acc}_scaled", Var(acc), mult, Load(args.inputs[2].name, channel),
                                             shift, args.prepared["int16_requantization"]["high"])
    elif accumulator(attrs) == "int64" and args.inputs[3].type.rank == 2:
        stmts, scaled = multiply_by_reduced_multiplier(f"{acc}_scaled", Var(acc), mult, shift)
    elif accumulator(attrs) == "int64":
        stmts, scaled = multiply_by_quantized_multiplier_int64(f"{acc}_scaled", Var(acc), mult, shift)
    else:
        stmts, scaled = multiply_by_quantized_multiplier(f"{acc}_scaled", Var(acc), mult, shift, sign,
                                                         _largest_right_shift(graph, args))
    y = _saturate(args, Binary("+", scaled, i32(attrs["y_zero_point"])),
                  *q.output_clamp(attrs, args.outputs[0].type.dtype))
    return [*stmts, Store(args.outputs[0].name, out_at, Cast(args.outputs[0].type.dtype, y), coords)]


def _saturate(args, v: Expr, lo: int, hi: int) -> Expr:
    """v clamped to lo..hi, by the target's int8 (int16) saturation where a kernel set spells one."""
    dtype = args.outputs[0].type.dtype
    saturate = micro_kernel(args.caps, f"saturate_{dtype}") if dtype in ("int8", "int16") else None
    return saturate(v, lo, hi) if saturate is not None else clamp(v, lo, hi)


def accumulator(attrs) -> str:
    """The element type a convolution or fully connected node sums in (int64: TFLite's 16x8 with an
    int64 bias)."""
    return attrs.get("accumulator", "int32")


def reduced_requant_pack(args, attrs) -> dict:
    """A 16x8 kernel's pack (Registration.pack) of its per-channel requantization with an int64
    accumulator, computed at build time instead of per output: with a bias, prepare's
    int16_requantization (the bias and rounding as an int64 offset in input 2, the Q15 multipliers,
    the 32-bit shifts; multiply_with_offset), else the Q15 multipliers and 14 - shift
    (multiply_by_reduced_multiplier). Each packed as [O, 1], the shape _finish reads as packed."""
    if accumulator(attrs) != "int64" or args.inputs[3].type.size == 1 or args.inputs[4].type.size == 1:
        return {}
    folded = args.prepared.facts.get("int16_requantization") if args.prepared is not None else None
    if folded is not None:  # the bias folded into an offset, the shift one of the high word
        return {2: lambda b: folded["offset"].reshape(-1, 1), 3: lambda m: folded["q15"].reshape(-1, 1),
                4: lambda s: folded["shift"].reshape(-1, 1)}
    return {3: packed_q15_multipliers, 4: packed_shifts_less_one}


def _bias_folded(args) -> bool:
    """Whether the bias input holds reduced_requant_pack's offsets (an [O, 1] array), which the
    requantization adds, rather than the bias the sum starts from."""
    b = args.inputs[2]
    return b is not None and b.type.rank == 2


def _bias(args, channel: Expr) -> Expr:
    b = args.inputs[2]
    return Load(b.name, channel) if b is not None and not _bias_folded(args) else i32(0)


def start_sum(args, attrs, channel: Expr, name: str = "acc") -> Local:
    """The local a channel's sum starts in: its bias (or 0), in the node's accumulator type."""
    return Local(name, _bias(args, channel), accumulator(attrs))


def _binary(op: str):
    def functor(graph, node_id, cluster_id, args, attrs):
        a_type, y_type = args.inputs[0].type.dtype, args.outputs[0].type.dtype

        def step(xs, idx):
            av = Binary("-", widen(xs[0]), i32(attrs["a_zero_point"]))
            bv = Binary("-", widen(xs[1]), i32(attrs["b_zero_point"]))
            if op in ("QAdd", "QSub", "QSquaredDifference"):
                p = (q.squared_difference_params if op == "QSquaredDifference" else q.add_params)(attrs, a_type)
                # (times 2^left_shift, not shifted: the offset inputs may be negative, whose left
                # shift C++17 leaves undefined; |x - zero point| < 2^16 keeps the product in int32)
                raised = i32(1 << p["left_shift"])
                sa, ra = multiply_by_quantized_multiplier("a_scaled", Binary("*", av, raised), p["a_multiplier"],
                                                          p["a_shift"])
                sb, rb = multiply_by_quantized_multiplier("b_scaled", Binary("*", bv, raised), p["b_multiplier"],
                                                          p["b_shift"])
                both = Binary("+" if op == "QAdd" else "-", ra, rb)
                if op == "QSquaredDifference":  # (|a - b| < 2^15 after the rescaling: the square fits int32)
                    sb.append(Local("difference", both, "int32"))
                    both = Binary("*", Var("difference"), Var("difference"))
                sy, ry = multiply_by_quantized_multiplier("scaled", both, p["y_multiplier"], p["y_shift"])
                stmts = [*sa, *sb, *sy]
            else:
                mult, shift = q.mul_params(attrs)
                stmts, ry = multiply_by_quantized_multiplier("scaled", Binary("*", av, bv), mult, shift)
            out = clamp(Binary("+", ry, i32(attrs["y_zero_point"])), *q.output_clamp(attrs, y_type))
            return stmts, Cast(y_type, out)
        return nest_.elementwise(ElementwiseNest.of(args), AXES, Rescale(step))
    functor.__doc__ = f"{op}: both inputs rescaled, combined, requantized as TFLite's int8 and int16 kernels."
    return functor


for _op in ("QAdd", "QSub", "QMul", "QSquaredDifference"):
    CPP.register(_op, types=same(q.ELEMENTWISE_INTS, 2, acc="int32"))(_binary(_op))


@dataclass(frozen=True)
class QuantizedMax:
    """TFLite's int8 and int16 max pool: the running maximum in int32 (padding never wins),
    clamped to the activation's range."""

    act_min: int
    act_max: int
    dtype: str

    def start(self, scope: str, out: WindowOutput) -> list[Stmt]:
        return [Local("acc", i32(-(1 << 30)), "int32")]

    def step(self, scope: str, tap: WindowTap) -> list[Stmt]:
        larger = select_max(Var("acc"), widen(tap.value))
        return [Assign("acc", larger if tap.inside is None else Select(tap.inside, larger, Var("acc")))]

    def finish(self, scope: str, out: WindowOutput) -> list[Stmt]:
        return [Store(out.y, out.at, Cast(self.dtype, clamp(Var("acc"), self.act_min, self.act_max)), out.coords)]


@dataclass(frozen=True)
class RoundedAverage(CountingSum):
    """TFLite's average pool: the sum over the taps inside the input divided by their count, ties
    away from zero, clamped to the activation's range."""

    act_min: int
    act_max: int
    dtype: str

    def finish(self, scope: str, out: WindowOutput) -> list[Stmt]:
        result = rounded_divide(Var("acc"), Var("count") if out.counted is None else out.counted)
        return [Store(out.y, out.at, Cast(self.dtype, clamp(result, self.act_min, self.act_max)), out.coords)]


# TFLite's loops and names: batch, rows, columns, then channels; every tap of a 2-D window
TFLITE_POOL = WindowSchedule(taps="clamped", channels="inner", out_vars=("oy", "ox"), tap_vars=("ky", "kx"),
                             channel_var="oc")


def _pool(op: str):
    def functor(graph, node_id, cluster_id, args, attrs):
        dtype = args.outputs[0].type.dtype
        lo, hi = q.output_clamp(attrs, dtype)
        micro = QuantizedMax(lo, hi, dtype) if op == "QMaxPool" else RoundedAverage(None, lo, hi, dtype)
        return window_nest.window(window_nest.WindowNest.of(args), TFLITE_POOL, micro)
    functor.__doc__ = f"{op} over NHWC windows; taps in the padding do not count."
    return functor


for _op in ("QAvgPool", "QMaxPool"):
    CPP.register(_op, family="window", types=same(q.ELEMENTWISE_INTS, acc="int32"), layout="nhwc")(_pool(_op))


# QMean's loops: the kept n and channel outermost, the reduced rows and columns inside
MEAN_AXES = ReductionSchedule(kept=("n", "oc"), reduced=("iy", "ix"))


@CPP.register("QMean", family="reduction", types=same(q.ELEMENTWISE_INTS, acc="int32"))
def qmean(graph, node_id, cluster_id, args, attrs):
    """Sum over H and W of (x - zero point), times one multiplier that also divides by the count."""
    x, y = args.inputs[0], args.outputs[0]
    nest = ReductionNest.of(args)
    mult, shift = q.mean_params(attrs, nest.count)

    def mean(row):
        v = Binary("-", widen(Load(x.name, row.at())), i32(attrs["x_zero_point"]))
        stmts, scaled = multiply_by_quantized_multiplier("scaled", Var("acc"), mult, shift)
        out = clamp(Binary("+", scaled, i32(attrs["y_zero_point"])), *q.output_clamp(attrs, y.type.dtype))
        n, oc = row.kept_vars
        coords = (n, index(0), index(0), oc)
        return [Local("acc", i32(0), "int32"), row.sweep(Assign("acc", Binary("+", Var("acc"), v))),
                *stmts, Store(y.name, flat_index(coords, y.type.shape), Cast(y.type.dtype, out), coords)]
    return reduction_nest.reduction(nest, MEAN_AXES, Passes((mean,)))


@CPP.register("Quantize", types=takes(FLOATS, out=QUANTIZED))
def quantize(graph, node_id, cluster_id, args, attrs):
    """round(x / scale) in float, ties away from zero, plus the zero point, saturated."""
    y_type = args.outputs[0].type.dtype
    lo, hi = q.DTYPE_RANGES[attrs["dtype"]]

    def step(xs, idx):
        scaled = Binary("/", xs[0], Const(float(attrs["y_scale"]), "float32"))
        # std::round's ties away from zero, from floor (no libm round needed): sign * floor(|v| + 0.5)
        mag = Unary("floor", Binary("+", Unary("abs", scaled), Const(0.5, "float32")))
        rounded = Select(Binary("<", scaled, Const(0.0, "float32")), Unary("neg", mag), mag)
        # saturate in float first: a float outside int32 would not convert
        limited = Binary("max", Binary("min", rounded, Const(float(hi - attrs["y_zero_point"]), "float32")),
                         Const(float(lo - attrs["y_zero_point"]), "float32"))
        return [], Cast(y_type, Binary("+", Cast("int32", limited), i32(attrs["y_zero_point"])))
    return nest_.elementwise(ElementwiseNest.of(args), AXES, Rescale(step))


@CPP.register("Dequantize", types=takes(QUANTIZED, out=FLOATS))
def dequantize(graph, node_id, cluster_id, args, attrs):
    """scale * (x - zero point), in double as TFLite computes it, rounded once to float."""
    def step(xs, idx):
        v = Binary("-", widen(xs[0]), i32(attrs["x_zero_point"]))
        # int32 * float: the scale's float32 value, exact; the product rounds once to float32,
        # matching double arithmetic because |v| < 2^24 makes the double product exact first
        return [], Binary("*", Cast("float32", v), Const(float(attrs["x_scale"]), "float32"))
    return nest_.elementwise(ElementwiseNest.of(args), AXES, Rescale(step))


@CPP.register("Requantize", types=takes(QUANTIZED + ("int32", "int64"), out=QUANTIZED, acc="int32"), inlined=False)
def requantize(graph, node_id, cluster_id, args, attrs):
    """(x - x zero point) rescaled to the output scale, plus its zero point, saturated; int64 sums
    (of an int16 matrix product) by TFLite's 64-bit MultiplyByQuantizedMultiplier."""
    y_type = args.outputs[0].type.dtype
    mult, shift = q.requantize_params(attrs)
    lo, hi = q.requantize_range(attrs)
    wide = args.inputs[0].type.dtype == "int64"

    def step(xs, idx):
        if wide:
            v = Binary("-", xs[0], Const(int(attrs["x_zero_point"]), "int64"))
            stmts, scaled = multiply_by_quantized_multiplier_int64("scaled", v, mult, shift)
            return stmts, Cast(y_type, clamp(Binary("+", scaled, i32(attrs["y_zero_point"])), lo, hi))
        v = Binary("-", widen(xs[0]), i32(attrs["x_zero_point"]))
        stmts, scaled = multiply_by_quantized_multiplier("scaled", v, mult, shift)
        return stmts, Cast(y_type, clamp(Binary("+", scaled, i32(attrs["y_zero_point"])), lo, hi))
    return nest_.elementwise(ElementwiseNest.of(args), AXES, Rescale(step))


@CPP.register("QLeakyRelu", types=same(q.ELEMENTWISE_INTS, acc="int32"))
def qleaky_relu(graph, node_id, cluster_id, args, attrs):
    """x - zero point requantized by the identity or the alpha multiplier (by its sign), plus the
    output zero point, saturated."""
    y_type = args.outputs[0].type.dtype
    identity, (alpha_multiplier, alpha_shift) = q.leaky_relu_multipliers(attrs)
    lo, hi = q.DTYPE_RANGES[y_type]

    def step(xs, idx):
        v = Binary("-", widen(xs[0]), i32(attrs["x_zero_point"]))
        s1, positive = multiply_by_quantized_multiplier("identity", v, *identity)
        # a negative alpha: the negated product of the multiplier's magnitude (q.leaky_relu_values)
        s2, negative = multiply_by_quantized_multiplier("scaled", v, abs(alpha_multiplier), alpha_shift)
        if alpha_multiplier < 0:
            negative = Binary("-", i32(0), negative)
        out = clamp(Binary("+", Select(Binary(">=", v, i32(0)), positive, negative), i32(attrs["y_zero_point"])), lo, hi)
        return [*s1, *s2], Cast(y_type, out)
    return nest_.elementwise(ElementwiseNest.of(args), AXES, Rescale(step))


@CPP.register("QPad", family="movement", types=same(QUANTIZED), layout="nhwc")
def qpad(graph, node_id, cluster_id, args, attrs):
    """Each output element: the input element it lies over, or the zero point (a real 0)."""
    x, y = args.inputs[0], args.outputs[0]
    rank = x.type.rank
    pads = attrs["pads"]

    def body(idx):
        src, inside = [], None
        for axis, i in enumerate(idx):
            pos, test = clamp_into(Binary("-", i, index(pads[axis])), x.type.shape[axis],
                                   pads[axis] + pads[axis + rank] != 0)
            src.append(pos)
            inside = both(inside, test)
        v: Expr = widen(Load(x.name, flat_index(src, x.type.shape)))
        if inside is not None:
            v = Select(inside, v, i32(attrs["x_zero_point"]))
        return [Store(y.name, flat_index(idx, y.type.shape), Cast(y.type.dtype, v), tuple(idx))]
    return nest(y.type.shape, "i", body)[0]


@CPP.register("QConcat", family="movement", types=same(QUANTIZED))
def qconcat(graph, node_id, cluster_id, args, attrs):
    """Copies of each input into its slab of the output (the inputs share one quantization)."""
    y = args.outputs[0]
    axis = attrs["axis"] % y.type.rank
    stmts: list[Stmt] = []
    offset = 0
    for k, x in enumerate(args.inputs):
        def body(idx, x=x, offset=offset):
            at = list(idx)
            at[axis] = Binary("+", at[axis], index(offset))
            return [Store(y.name, flat_index(at, y.type.shape), Load(x.name, flat_index(idx, x.type.shape)), tuple(at))]
        stmts += nest(x.type.shape, f"i{k}_", body)[0]
        offset += x.type.shape[axis]
    return stmts
