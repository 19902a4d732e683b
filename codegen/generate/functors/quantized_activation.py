"""The table functions: an int8 output read from a 256-entry table at its input (QLookup: TFLite's
LOGISTIC and TANH, codegen/quant/activations.py), and TFLite's int16 LOGISTIC and TANH
(Int16Activation: codegen/ops/quantized_recurrent.py), which interpolate between two entries.

A table function is the elementwise nest (elementwise_nest.py) with a lookup micro-kernel: its
index space, operands and schedules are the elementwise family's, and the table is a constant the
micro-kernel reads, not an operand of the nest, so it has no loop nest of its own. In flash, each
element costs one load, one table load (two for the interpolation) and one store."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from tinsmith.generate.backend import CPP, takes
from tinsmith.generate.functors import elementwise_nest as nest_
from tinsmith.generate.functors.elementwise_nest import AXES, ElementwiseNest
from tinsmith.generate.functors.quantized import QUANTIZED
from tinsmith.generate.functors.quantized_math import i32, widen
from tinsmith.generate.loop_ir import Binary, Cast, Expr, Load, Select, Stmt
from tinsmith.ops.quantized_recurrent import FRACTION_BITS, SATURATED, scaling


@dataclass(frozen=True)
class Lookup:
    """QLookup's micro-kernel: y = table[x + 128]."""

    table: str

    def __call__(self, xs: Sequence[Expr | None], idx: Sequence[Expr]) -> tuple[list[Stmt], Expr]:
        return [], Load(self.table, Cast("index", Binary("+", widen(xs[0]), i32(128))))


@dataclass(frozen=True)
class InterpolatedLookup:
    """Int16Activation's micro-kernel, in int32 as TFLite's reference integer kernels compute: the
    input scaled to the table's scale, its magnitude split into a table index and the bits that
    interpolate to the next entry, then the sign folded back in."""

    table: str
    function: str  # "sigmoid" or "tanh"
    multiplier: int
    shift: int
    rounding: int

    def __call__(self, xs: Sequence[Expr | None], idx: Sequence[Expr]) -> tuple[list[Stmt], Expr]:
        bits = FRACTION_BITS[self.function]
        x = widen(xs[0])
        v = Binary(">>", Binary("+", Binary("*", x, i32(self.multiplier)), i32(self.rounding)),
                   i32(self.shift)) if self.shift else Binary("*", x, i32(self.multiplier))
        magnitude = Select(Binary("<", v, i32(0)), Binary("-", i32(0), v), v)
        high = Binary(">>", magnitude, i32(bits))
        low = Binary("&", magnitude, i32((1 << bits) - 1))
        entry = Select(Binary("<", high, i32(254)), high, i32(254))
        ua = Load(self.table, Cast("index", entry))
        ub = Load(self.table, Cast("index", Binary("+", entry, i32(1))))
        r = Select(Binary(">=", high, i32(255)), i32(SATURATED[self.function]),
                   Binary("+", Binary("<<", ua, i32(bits)), Binary("*", low, Binary("-", ub, ua))))
        positive = Binary(">=", v, i32(0))
        if self.function == "sigmoid":
            out = Binary(">>", Select(positive, Binary("+", r, i32(1 << 9)),
                                      Binary("-", i32((1 << 25) + (1 << 9) - 1), r)), i32(10))
        else:
            out = Binary(">>", Select(positive, Binary("+", r, i32(-(1 << 23) + (1 << 7))),
                                      Binary("-", i32((1 << 23) + (1 << 7) - 1), r)), i32(8))
        return [], Cast("int16", out)


@CPP.register("QLookup", family="table", types=takes(QUANTIZED, QUANTIZED, out=QUANTIZED))
def qlookup(graph, node_id, cluster_id, args, attrs):
    """y = table[x + 128], element by element."""
    return nest_.elementwise(ElementwiseNest.of(args), AXES, Lookup(args.inputs[1].name))


@CPP.register("Int16Activation", family="table", types=takes(("int16",), ("int32",), out=("int16",)))
def int16_activation(graph, node_id, cluster_id, args, attrs):
    """TFLite's int16 LOGISTIC or TANH, interpolated in its 256-entry table."""
    return nest_.elementwise(ElementwiseNest.of(args), AXES,
                             InterpolatedLookup(args.inputs[1].name, attrs["function"], *scaling(attrs)))
