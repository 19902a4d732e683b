"""QSoftmax's kernel: TFLite's int8 softmax (codegen/quant/fixed_point.py: softmax_int8) spelled
in the loop IR, step by step, on int32 locals with int64 products."""
from __future__ import annotations

from tinsmith.generate.backend import CPP, takes
from tinsmith.generate.functors import reduction_nest as nest_
from tinsmith.generate.functors.reduction_nest import Passes, ReductionNest, ReductionSchedule, Row
from tinsmith.generate.functors.quantized_math import i32, i64, select_max, widen
from tinsmith.generate.loop_ir import Assign, Binary, Cast, Expr, For, Load, Local, Select, Stmt, Store, Var
from tinsmith.quant import fixed_point as fp

# the rows (every axis but the last) counted by r, each row's elements by c
ROWS = ReductionSchedule(kept=("r",), reduced=("c",))


class Steps:
    """Statements under construction: each step a fresh int32 local, so nothing is computed twice."""

    def __init__(self, prefix: str):
        self.prefix, self.stmts, self.count = prefix, [], 0

    def let(self, value: Expr, dtype: str = "int32") -> Var:
        self.count += 1
        name = f"{self.prefix}{self.count}"
        self.stmts.append(Local(name, value, dtype))
        return Var(name)

    def srdhm(self, a: Expr, b: Expr | int) -> Var:
        """Saturating rounding doubling high multiply (neither operand is INT32_MIN here)."""
        bb = i64(b) if isinstance(b, int) else Cast("int64", b)
        ab = self.let(Binary("*", Cast("int64", a), bb), "int64")
        nudge = Select(Binary(">=", ab, i64(0)), i64(1 << 30), i64(1 - (1 << 30)))
        return self.let(Cast("int32", Binary("/", Binary("+", ab, nudge), i64(1 << 31))))

    def rdbpot(self, x: Expr, exponent: Expr | int) -> Var:
        """Rounding arithmetic right shift, ties away from zero."""
        e = i32(exponent) if isinstance(exponent, int) else exponent
        mask = self.let(Binary("-", Binary("<<", i32(1), e), i32(1)))
        threshold = Binary("+", Binary(">>", mask, i32(1)), Select(Binary("<", x, i32(0)), i32(1), i32(0)))
        return self.let(Binary("+", Binary(">>", x, e),
                               Select(Binary(">", Binary("&", x, mask), threshold), i32(1), i32(0))))

    def shl_saturating(self, x: Expr, exponent: int) -> Var:
        threshold = (1 << (31 - exponent)) - 1
        return self.let(Select(Binary(">", x, i32(threshold)), i32(fp.INT32_MAX),
                               Select(Binary("<", x, i32(-threshold)), i32(fp.INT32_MIN),
                                      Cast("int32", Binary("<<", Cast("int64", x), i64(exponent))))))

    def exp_on_negative_values(self, a: Var) -> Var:
        frac = 31 - fp.SOFTMAX_DIFF_INTEGER_BITS
        quarter = 1 << (frac - 2)
        mod = self.let(Binary("-", Binary("&", a, i32(quarter - 1)), i32(quarter)))
        # exp on [-1/4, 0): Taylor around -1/8
        x = self.let(Binary("+", self.shl_saturating(mod, fp.SOFTMAX_DIFF_INTEGER_BITS), i32(1 << 28)))
        x2 = self.srdhm(x, x)
        x3 = self.srdhm(x2, x)
        x4 = self.srdhm(x2, x2)
        x4_over_4 = self.rdbpot(x4, 2)
        poly = self.rdbpot(Binary("+", self.srdhm(Binary("+", x4_over_4, x3), fp.ONE_THIRD), x2), 1)
        result = self.let(Binary("+", i32(fp.EXP_MINUS_ONE_EIGHTH),
                                 self.srdhm(i32(fp.EXP_MINUS_ONE_EIGHTH), Binary("+", x, poly))))
        remainder = self.let(Binary("-", mod, a))
        for k, factor in fp.EXP_BARREL:
            scaled = self.srdhm(result, factor)
            bit = Binary("!=", Binary("&", remainder, i32(1 << (frac + k))), i32(0))
            self.stmts.append(Assign(result.name, Select(bit, scaled, result)))
        return self.let(Select(Binary("==", a, i32(0)), i32(fp.INT32_MAX), result))


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
    half = r.let(Cast("int32", Binary("/", Binary("+", Binary("+", Cast("int64", shifted_minus_one),
                                                              i64(fp.INT32_MAX)), i64(1)), i64(2))))
    xv = r.let(Binary("+", i32(fp.Q2_48_OVER_17), r.srdhm(half, fp.Q2_NEG_32_OVER_17)))
    for _ in range(3):
        one_minus = r.let(Binary("-", i32(1 << 29), r.srdhm(half, xv)))
        r.stmts.append(Assign(xv.name, Binary("+", xv, r.shl_saturating(r.srdhm(xv, one_minus), 2))))
    reciprocal = r.shl_saturating(xv, 1)
    body += r.stmts
    stmts, valid, e = exp_of_element("o")
    out = Steps("q")
    bits = 8 * y.type.numpy_dtype.itemsize
    shift = Binary("+", Binary("-", i32(fp.SOFTMAX_ACCUM_INTEGER_BITS), Var("headroom")), i32(31 - bits))
    value = out.rdbpot(out.srdhm(reciprocal, e), shift)
    clamped = Select(Binary(">", value, i32(hi - lo)), i32(hi), Binary("+", value, i32(lo)))
    body.append(row.sweep(*stmts, *out.stmts, Store(y.name, at, Cast(y.type.dtype, Select(valid, clamped, i32(lo))))))
    return body
