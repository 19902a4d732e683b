"""Kernels of int16 functions computed through interpolated int16 tables (codegen/ops/
quantized_int16.py): Int16Softmax, TFLite's int16 softmax, and Int16Lookup, a function of one int16
value (TFLite's int16 GELU) on the elementwise nest. The tables are constants in flash; each
lookup is two table loads and a rounded linear interpolation in int32."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from tinsmith.generate.backend import CPP, takes
from tinsmith.generate.functors.quantized_math import clamp, i32, i64, multiply_by_quantized_multiplier, select_max, widen
from tinsmith.generate.functors.fixed_point_steps import Steps
from tinsmith.generate.functors.quantized_softmax import ROWS
from tinsmith.generate.functors import elementwise_nest as nest_, reduction_nest
from tinsmith.generate.functors.elementwise_nest import AXES, ElementwiseNest
from tinsmith.generate.functors.reduction_nest import Passes, ReductionNest, Row
from tinsmith.generate.loop_ir import Assign, Binary, Cast, Expr, For, Load, Local, Select, Stmt, Store, Var
from tinsmith.ops.quantized_int16 import EXP_OFFSET, RECIPROCAL_OFFSET


def table_lookup(s: Steps, table: str, value: Expr) -> Expr:
    """Statements into `s` looking `value` (saturated to int16) up in a 513-entry int16 table: the
    top 9 bits pick the entry, the low 7 interpolate to the next one."""
    return interpolate(s, table, s.let(clamp(value, -32768, 32767)))


def interpolate(s: Steps, table: str, v: Expr) -> Expr:
    """`table_lookup` of `v`, already an int16 value (widened to int32)."""
    entry = s.let(Binary("+", i32(256), Binary(">>", v, i32(7))))
    base = s.let(widen(Load(table, Cast("index", entry))))
    slope = Binary("-", widen(Load(table, Cast("index", Binary("+", entry, i32(1))))), base)
    delta = Binary(">>", Binary("+", Binary("*", slope, Binary("&", v, i32(0x7F))), i32(64)), i32(7))
    return s.let(Binary("+", base, delta))


@CPP.register("Int16Softmax", family="reduction",
              types=takes("int16", "int16", "int16", out=("int16",), acc="int32"))
def int16_softmax(graph, node_id, cluster_id, args, attrs):
    """Per row: the max; each exp from the table (computed twice, not stored: the output is not
    scratch) summed; the reciprocal of the normalised sum from its table; each output the exp
    times the reciprocal, rounded and clamped to [0, 32767]."""
    return reduction_nest.reduction(ReductionNest.of(args), ROWS, Passes((lambda row: _softmax_row(row, args, attrs),)))


def _softmax_row(row: Row, args, attrs) -> list[Stmt]:
    """One row's three sweeps: the max, the sum of the exps, the outputs."""
    x, exp_table, reciprocal_table = (t.name for t in args.inputs)
    y = args.outputs[0]
    at = row.at()

    def exp_of_element(prefix: str) -> tuple[list[Stmt], Expr]:
        s = Steps(prefix)
        diff = s.let(Binary("-", widen(Load(x, at)), Var("row_max")))
        stmts, scaled = multiply_by_quantized_multiplier(f"{prefix}_scaled", diff, attrs["input_multiplier"],
                                                         attrs["input_left_shift"])
        s.stmts += stmts
        return s.stmts, table_lookup(s, exp_table, Binary("+", scaled, i32(EXP_OFFSET)))

    body: list[Stmt] = [Local("row_max", i32(-32768), "int32"),
                        row.sweep(Assign("row_max", select_max(Var("row_max"), widen(Load(x, at))))),
                        Local("sum", i32(0), "int32")]
    stmts, e = exp_of_element("s")
    body.append(row.sweep(*stmts, Assign("sum", Binary("+", Var("sum"), e))))
    # the sum's leading zeros plus one (it is positive: the max element alone adds about 2^15)
    body += [Local("bits", i32(0), "int32"),
             For("k", 31, (Assign("bits", Binary("+", Var("bits"), Select(
                 Binary(">", Binary(">>", Var("sum"), Var("k")), i32(0)), i32(1), i32(0)))),)),
             Local("headroom", Binary("-", i32(32), Var("bits")), "int32"),
             Local("right_shift", Binary("-", i32(31), Var("headroom")), "int32")]
    n = Steps("n")
    shifted = n.let(Cast("int32", Binary(">>", Binary("+", Binary("<<", Cast("int64", Var("sum")),
                                                                  Binary("-", Var("headroom"), i32(1))),
                                                     i64(1 << 13)), i64(14))))
    reciprocal = n.let(Cast("int64", table_lookup(n, reciprocal_table, Binary("+", shifted, i32(RECIPROCAL_OFFSET)))),
                       "int64")
    body += n.stmts
    stmts, e = exp_of_element("o")
    rounding = Binary("<<", i64(1), Binary("-", Var("right_shift"), i32(1)))
    value = Cast("int32", Binary(">>", Binary("+", Binary("*", Cast("int64", e), reciprocal), rounding),
                                 Var("right_shift")))
    body.append(row.sweep(*stmts, Store(y.name, at, Cast("int16", clamp(value, 0, 32767)))))
    return body


@dataclass(frozen=True)
class InterpolatedTable:
    """Int16Lookup's micro-kernel: the table's entry at the input's top 9 bits, interpolated to the
    next by the low 7."""

    table: str

    def __call__(self, xs: Sequence[Expr | None], idx: Sequence[Expr]) -> tuple[list[Stmt], Expr]:
        s = Steps("lut")
        value = interpolate(s, self.table, s.let(widen(xs[0])))
        return s.stmts, Cast("int16", value)


@CPP.register("Int16Lookup", family="table", types=takes("int16", "int16", out=("int16",), acc="int32"))
def int16_lookup(graph, node_id, cluster_id, args, attrs):
    """y = the interpolated lookup of x in the 513-entry table, element by element."""
    return nest_.elementwise(ElementwiseNest.of(args), AXES, InterpolatedTable(args.inputs[1].name))
