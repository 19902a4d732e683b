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


def scaled_up(diff: Expr, left_shift: int) -> Expr:
    """An input difference (<= 0) times 2^left_shift wrapped to int32, as TFLite's int32 product:
    in int64, a product rather than a shift (C++17 leaves a negative value's left shift undefined)."""
    if not 0 <= left_shift <= 31:
        raise ValueError(f"softmax input left shift {left_shift} outside 0 to 31")
    return Cast("int32", Binary("*", Cast("int64", diff), i64(1 << left_shift)))


def row_length(args) -> int:
    return args.inputs[0].type.shape[-1]


# each element adds at most exp(0) = 1 in Q12.19, 2^19, to its row's sum
MOST_PER_ELEMENT = 1 << (31 - fp.SOFTMAX_ACCUM_INTEGER_BITS)


def sum_may_wrap(length: int, most: int = MOST_PER_ELEMENT) -> bool:
    """Whether a row this long, each element adding at most `most`, can take its int32 sum past
    INT32_MAX."""
    return length * most > fp.INT32_MAX


def add_to_sum(length: int, contribution: Expr, most: int = MOST_PER_ELEMENT) -> Expr:
    """sum + contribution as TFLite's int32 sum: a plain int32 add while the row is too short to
    reach 2^31, else computed in int64 and wrapped (the NumPy definition's wrap; an int32 overflow
    would be undefined in C++)."""
    if not sum_may_wrap(length, most):
        return Binary("+", Var("sum"), contribution)
    return Cast("int32", Binary("+", Cast("int64", Var("sum")), Cast("int64", contribution)))


def largest_output_shift(length: int, bits: int) -> int:
    """The largest final rounding shift, 12 - the sum's leading zeros + 31 - bits: its leading zeros
    are fewest at the largest sum (every element at the row's max), none once it may wrap."""
    most = length * MOST_PER_ELEMENT
    leading_zeros = 0 if sum_may_wrap(length) else 32 - most.bit_length()
    return fp.SOFTMAX_ACCUM_INTEGER_BITS - leading_zeros + 31 - bits


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
        shifted = scaled_up(diff, p["left_shift"])
        e = s.exp_on_negative_values(s.srdhm(shifted, p["multiplier"]))
        return s.stmts, Binary(">=", diff, i32(p["diff_min"])), e

    body: list[Stmt] = [Local("row_max", i32(lo if x.type.dtype != "int8" else -128), "int32"),
                        row.sweep(Assign("row_max", select_max(Var("row_max"), widen(Load(x.name, at))))),
                        Local("sum", i32(0), "int32")]
    stmts, valid, e = exp_of_element("s")
    acc = Steps("a")
    contribution = acc.rdbpot(e, fp.SOFTMAX_ACCUM_INTEGER_BITS)
    added = add_to_sum(row_length(args), Select(valid, contribution, i32(0)))
    body.append(row.sweep(*stmts, *acc.stmts, Assign("sum", added)))
    r = Steps("n")
    if sum_may_wrap(row_length(args)):
        # the sum's leading zeros as a uint32 (0 where it wrapped negative, 32 at 0), as the NumPy
        # definition counts them; normalised in int64 from its uint32 bits, so no count reaches 64
        # and no negative value is shifted left
        r.stmts.append(Local("headroom", r.leading_zeros(Var("sum")), "int32"))
        normalised = Binary("<<", Cast("int64", Cast("uint32", Var("sum"))), Var("headroom"))
    else:
        # the sum's leading zeros (it is positive: the max element alone adds 2^19)
        body += [Local("bits", i32(0), "int32"),
                 For("k", 31, (Assign("bits", Binary("+", Var("bits"), Select(
                     Binary(">", Binary(">>", Var("sum"), Var("k")), i32(0)), i32(1), i32(0)))),)),
                 Local("headroom", Binary("-", i32(32), Var("bits")), "int32")]
        normalised = Binary("<<", Cast("int64", Var("sum")), Var("headroom"))
    shifted_minus_one = r.let(Cast("int32", Binary("-", normalised, i64(1 << 31))))
    reciprocal = r.one_over_one_plus_x(shifted_minus_one)
    body += r.stmts
    stmts, valid, e = exp_of_element("o")
    out = Steps("q")
    bits = 8 * y.type.numpy_dtype.itemsize
    shift = Binary("+", Binary("-", i32(fp.SOFTMAX_ACCUM_INTEGER_BITS), Var("headroom")), i32(31 - bits))
    value = out.rdbpot(out.srdhm(reciprocal, e), shift, largest_output_shift(row_length(args), bits))
    clamped = Select(Binary(">", value, i32(hi - lo)), i32(hi), Binary("+", value, i32(lo)))
    body.append(row.sweep(*stmts, *out.stmts, Store(y.name, at, Cast(y.type.dtype, Select(valid, clamped, i32(lo))))))
    return body
