"""QSoftmax's kernel: TFLite's int8 softmax (codegen/quant/fixed_point.py: softmax_int8) spelled
in the loop IR, step by step, on int32 locals with int64 products."""
from __future__ import annotations

from tinsmith.generate.backend import CPP, takes
from tinsmith.generate.functors import reduction_nest as nest_
from tinsmith.generate.functors.reduction_nest import Passes, ReductionNest, ReductionSchedule, Row
from tinsmith.generate.functors.fixed_point_steps import Steps
from tinsmith.generate.functors.quantized_math import i32, i64, select_max, widen
from tinsmith.generate.loop_ir import Assign, Binary, Cast, Expr, For, Load, Local, Select, Stmt, Store, Var
from tinsmith.quant import fixed_point as fp

# the rows (every axis but the last) counted by r, each row's elements by c
ROWS = ReductionSchedule(kept=("r",), reduced=("c",))


@CPP.register("QSoftmax", family="reduction", types=takes("int8", out=("int8", "int16"), acc="int32"))
def qsoftmax(graph, node_id, cluster_id, args, attrs):
    """Per row: the max; the sum of exp(beta * scale * (x - max)) in Q12.19; its reciprocal by
    Newton-Raphson; each output exp * reciprocal rounded to the output's 8 bits."""
    return nest_.reduction(ReductionNest.of(args), ROWS, Passes((lambda row: _softmax_row(row, args, attrs),)))


def _softmax_row(row: Row, args, attrs) -> list[Stmt]:
    """One row's three sweeps: its max, the sum of its exponentials, each output."""
    x, y = args.inputs[0], args.outputs[0]
    p = fp.softmax_params(attrs["beta"], attrs["x_scale"])
    lo, hi = fp.DTYPE_RANGES[y.type.dtype]
    at = row.at()

    def exp_of_element(prefix: str) -> tuple[list[Stmt], Expr, Var]:
        s = Steps(prefix)
        diff = s.let(Binary("-", widen(Load(x.name, at)), Var("row_max")))
        shifted = Cast("int32", Binary("<<", Cast("int64", diff), i64(p["left_shift"])))
        e = s.exp_on_negative_values(s.srdhm(shifted, p["multiplier"]))
        return s.stmts, Binary(">=", diff, i32(p["diff_min"])), e

    body: list[Stmt] = [Local("row_max", i32(lo if x.type.dtype != "int8" else -128), "int32"),
                        row.sweep(Assign("row_max", select_max(Var("row_max"), widen(Load(x.name, at))))),
                        Local("sum", i32(0), "int32")]
    stmts, valid, e = exp_of_element("s")
    acc = Steps("a")
    contribution = acc.rdbpot(e, fp.SOFTMAX_ACCUM_INTEGER_BITS)
    body.append(row.sweep(*stmts, *acc.stmts, Assign("sum", Binary("+", Var("sum"), Select(valid, contribution, i32(0))))))
    # the sum's leading zeros (it is positive: the max element alone adds 2^19)
    body += [Local("bits", i32(0), "int32"),
             For("k", 31, (Assign("bits", Binary("+", Var("bits"), Select(
                 Binary(">", Binary(">>", Var("sum"), Var("k")), i32(0)), i32(1), i32(0)))),)),
             Local("headroom", Binary("-", i32(32), Var("bits")), "int32")]
    r = Steps("n")
    shifted_minus_one = r.let(Cast("int32", Binary("-", Binary("<<", Cast("int64", Var("sum")), Var("headroom")),
                                                   i64(1 << 31))))
    reciprocal = r.one_over_one_plus_x(shifted_minus_one)
    body += r.stmts
    stmts, valid, e = exp_of_element("o")
    out = Steps("q")
    bits = 8 * y.type.numpy_dtype.itemsize
    shift = Binary("+", Binary("-", i32(fp.SOFTMAX_ACCUM_INTEGER_BITS), Var("headroom")), i32(31 - bits))
    value = out.rdbpot(out.srdhm(reciprocal, e), shift)
    clamped = Select(Binary(">", value, i32(hi - lo)), i32(hi), Binary("+", value, i32(lo)))
    body.append(row.sweep(*stmts, *out.stmts, Store(y.name, at, Cast(y.type.dtype, Select(valid, clamped, i32(lo))))))
    return body
