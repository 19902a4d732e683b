"""Kernels of the primitives built on TFLite's fixed-point 1/sqrt, log and reciprocal
(codegen/ops/quantized_fixed_point.py): QRsqrt and QDiv on the elementwise nest, QL2Normalization and
QLogSoftmax on the reduction nest's rows. The arithmetic is fixed_point_steps.Steps', step for step
the NumPy definition's (codegen/quant/fixed_point_functions.py)."""
from __future__ import annotations

from tinsmith.generate.backend import CPP, same, takes
from tinsmith.generate.functors import elementwise_nest, reduction_nest
from tinsmith.generate.functors.elementwise_nest import AXES, ElementwiseNest, Rescale
from tinsmith.generate.functors.fixed_point_steps import Steps
from tinsmith.generate.functors.quantized_math import clamp, i32, select_max, widen
from tinsmith.generate.functors.quantized_softmax import ROWS, add_to_sum, row_length, scaled_up
from tinsmith.generate.functors.reduction_nest import Passes, ReductionNest, Row
from tinsmith.generate.loop_ir import Assign, Binary, Cast, Load, Local, Select, Stmt, Store, Var
from tinsmith.ops import quantized as q
from tinsmith.quant import fixed_point as fp
from tinsmith.quant import fixed_point_functions as ff


# (not inlined into a consumer: its body holds loops, the leading zeros' count and the Newton steps)
@CPP.register("QRsqrt", types=same(("int8", "int16"), acc="int32"), inlined=False)
def qrsqrt(graph, node_id, cluster_id, args, attrs):
    """1 / sqrt(x - zero point) as a multiplier and shift, applied to 1 scaled by 2^20, rescaled to
    the output; the type's largest value at (or below) the zero point."""
    dtype = args.outputs[0].type.dtype
    lo, hi = fp.DTYPE_RANGES[dtype]
    multiplier, shift = args.prepared["multiplier"], args.prepared["shift"]

    def step(xs, idx):
        s = Steps("r")
        v = s.let(Binary("-", widen(xs[0]), i32(attrs["x_zero_point"])))
        inv, inv_shift = s.inv_sqrt(Select(Binary(">", v, i32(0)), v, i32(0)))
        data = s.multiply(i32(1), inv, Binary("+", inv_shift, i32(ff.RSQRT_SHIFT)))
        out = s.multiply(data, multiplier, shift - ff.RSQRT_SHIFT)
        value = Select(Binary(">", v, i32(0)), clamp(Binary("+", out, i32(attrs["y_zero_point"])), lo, hi), i32(hi))
        return s.stmts, Cast(dtype, value)
    return elementwise_nest.elementwise(ElementwiseNest.of(args), AXES, Rescale(step))


# (not inlined into a consumer: its body holds the leading zeros' counts and the Newton steps)
@CPP.register("QDiv", types=same(("int8",), 2, acc="int32"), inlined=False)
def qdiv(graph, node_id, cluster_id, args, attrs):
    """a / b per element as fixed_point_functions.divide_int8: the signs moved so the offset divisor
    is positive, the offset dividend normalised by its leading sign bits times the divisor's
    fixed-point reciprocal, times prepare's multiplier, one rounding shift right (the host
    interpreter's value where it reaches 32), plus the zero point, clamped to the fused activation.
    A divisor at its zero point gives the clamp bound of the dividend's sign (the zero point for
    0 / 0)."""
    lo, hi = q.output_clamp(attrs, "int8")
    multiplier, shift, y_zp = args.prepared["multiplier"], args.prepared["shift"], attrs["y_zero_point"]

    def step(xs, idx):
        s = Steps("d")
        a = s.let(Binary("-", widen(xs[0]), i32(attrs["a_zero_point"])))
        b = s.let(Binary("-", widen(xs[1]), i32(attrs["b_zero_point"])))
        negative = Binary("<", b, i32(0))
        dividend = s.let(Select(negative, Binary("-", i32(0), a), a))
        divisor = s.let(Select(negative, Binary("-", i32(0), b), Select(Binary("==", b, i32(0)), i32(1), b)))
        inverse, bits_over_unit = s.reciprocal(divisor)
        # leading sign bits: the leading zeros of the dividend, or of its complement when negative, less one
        headroom = s.let(Binary("-", s.leading_zeros(Select(Binary("<", dividend, i32(0)),
                                                           Binary("-", i32(-1), dividend), dividend)), i32(1)))
        # (a multiplication, not a shift: the dividend may be negative; the product fits int32)
        normalised = s.let(Cast("int32", Binary("*", Cast("int64", dividend),
                                                Binary("<<", Cast("int64", i32(1)), Cast("int64", headroom)))))
        scaled = s.srdhm(s.srdhm(normalised, inverse), multiplier)
        right = s.let(Binary("-", Binary("+", bits_over_unit, headroom), i32(shift)))
        quotient = clamp(Binary("+", s.rdbpot_as_built(scaled, right), i32(y_zp)), lo, hi)
        by_zero = Select(Binary(">", a, i32(0)), i32(hi), Select(Binary("<", a, i32(0)), i32(lo), i32(y_zp)))
        return s.stmts, Cast("int8", Select(Binary("==", b, i32(0)), by_zero, quotient))
    return elementwise_nest.elementwise(ElementwiseNest.of(args), AXES, Rescale(step))


@CPP.register("QL2Normalization", family="reduction", types=takes("int8", out="int8", acc="int32"))
def ql2_normalization(graph, node_id, cluster_id, args, attrs):
    """Per row: the sum of squares less the zero point, its 1/sqrt as a multiplier and shift; each
    output the element times it in Q0.7, saturated."""
    return reduction_nest.reduction(ReductionNest.of(args), ROWS, Passes((lambda row: _l2_row(row, args, attrs),)))


MOST_SQUARE = 255 * 255  # the largest square of an int8 value less an int8 zero point


def _l2_row(row: Row, args, attrs) -> list[Stmt]:
    x, y = args.inputs[0].name, args.outputs[0].name
    centered = Binary("-", widen(Load(x, row.at())), i32(attrs["x_zero_point"]))
    body: list[Stmt] = [Local("sum", i32(0), "int32"),
                        row.sweep(Local("v", centered, "int32"),
                                  Assign("sum", add_to_sum(row_length(args), Binary("*", Var("v"), Var("v")),
                                                           MOST_SQUARE)))]
    n = Steps("n")
    multiplier, shift = n.inv_sqrt(Var("sum"))
    body += n.stmts
    o = Steps("o")
    v = o.let(centered)
    out = o.multiply(v, multiplier, Binary("+", shift, i32(ff.L2_OUTPUT_BITS)))
    body.append(row.sweep(*o.stmts, Store(y, row.at(), Cast("int8", clamp(out, -128, 127)))))
    return body


@CPP.register("QLogSoftmax", family="reduction", types=takes("int8", out="int8", acc="int32"))
def qlog_softmax(graph, node_id, cluster_id, args, attrs):
    """Per row: the max; the Q12.19 sum of exp(x - max); its log in Q5.26; each output
    (x - max) - log(sum) in 1/16ths from 127, or -128 where that falls below the range."""
    return reduction_nest.reduction(ReductionNest.of(args), ROWS,
                                    Passes((lambda row: _log_softmax_row(row, args),)))


def _log_softmax_row(row: Row, args) -> list[Stmt]:
    x, y = args.inputs[0].name, args.outputs[0].name
    p = args.prepared

    def scaled_difference(s: Steps) -> tuple[Var, Var]:
        diff = s.let(Binary("-", widen(Load(x, row.at())), Var("row_max")))
        return diff, s.srdhm(scaled_up(diff, p["left_shift"]), p["multiplier"])

    body: list[Stmt] = [Local("row_max", i32(-128), "int32"),
                        row.sweep(Assign("row_max", select_max(Var("row_max"), widen(Load(x, row.at()))))),
                        Local("sum", i32(0), "int32")]
    s = Steps("s")
    diff, scaled = scaled_difference(s)
    contribution = s.rdbpot(s.exp_on_negative_values(scaled), fp.SOFTMAX_ACCUM_INTEGER_BITS)
    valid = Binary(">=", diff, i32(p["diff_min"]))
    body.append(row.sweep(*s.stmts, Assign("sum", add_to_sum(row_length(args), Select(valid, contribution, i32(0))))))
    n = Steps("n")
    log_sum = n.log_x(Var("sum"), fp.SOFTMAX_ACCUM_INTEGER_BITS, fp.SOFTMAX_DIFF_INTEGER_BITS)
    reach = n.multiply(n.wrapping("+", log_sum, fp.INT32_MIN), p["reverse_multiplier"], p["reverse_shift"])
    limit = n.let(Select(Binary(">", reach, i32(p["diff_min"] - 1)), reach, i32(p["diff_min"] - 1)))
    body += n.stmts
    o = Steps("o")
    diff, scaled = scaled_difference(o)
    out_shift = 31 - fp.SOFTMAX_DIFF_INTEGER_BITS - ff.LOG_SOFTMAX_OUTPUT_INTEGER_BITS
    out = o.rdbpot(o.wrapping("-", scaled, log_sum), out_shift)
    value = Select(Binary(">", diff, limit), clamp(Binary("+", out, i32(127)), -128, 127), i32(-128))
    body.append(row.sweep(*o.stmts, Store(y, row.at(), Cast("int8", value))))
    return body
