"""Int16Activation's kernel (codegen/ops/quantized_recurrent.py): per element, the input scaled to
the table's scale, its magnitude split into a table index and the bits that interpolate to the
next entry, then the sign folded back in, in int32 as TFLite's reference integer kernels compute."""
from __future__ import annotations

from tinsmith.generate.backend import CPP, takes
from tinsmith.generate.functors.quantized_math import i32, widen
from tinsmith.generate.loop_ir import Binary, Cast, Load, Select, Store, flat_index, nest
from tinsmith.ops.quantized_recurrent import FRACTION_BITS, SATURATED, scaling


@CPP.register("Int16Activation", types=takes(("int16",), ("int32",), out=("int16",)))
def int16_activation(graph, node_id, cluster_id, args, attrs):
    x, table, y = args.inputs[0], args.inputs[1], args.outputs[0]
    multiplier, shift, rounding = scaling(attrs)
    fn = attrs["function"]
    bits = FRACTION_BITS[fn]

    def body(idx):
        at = flat_index(idx, y.type.shape)
        v = Binary(">>", Binary("+", Binary("*", widen(Load(x.name, at)), i32(multiplier)), i32(rounding)),
                   i32(shift)) if shift else Binary("*", widen(Load(x.name, at)), i32(multiplier))
        magnitude = Select(Binary("<", v, i32(0)), Binary("-", i32(0), v), v)
        high = Binary(">>", magnitude, i32(bits))
        low = Binary("&", magnitude, i32((1 << bits) - 1))
        entry = Select(Binary("<", high, i32(254)), high, i32(254))
        ua = Load(table.name, Cast("index", entry))
        ub = Load(table.name, Cast("index", Binary("+", entry, i32(1))))
        r = Select(Binary(">=", high, i32(255)), i32(SATURATED[fn]),
                   Binary("+", Binary("<<", ua, i32(bits)), Binary("*", low, Binary("-", ub, ua))))
        positive = Binary(">=", v, i32(0))
        if fn == "sigmoid":
            out = Binary(">>", Select(positive, Binary("+", r, i32(1 << 9)),
                                      Binary("-", i32((1 << 25) + (1 << 9) - 1), r)), i32(10))
        else:
            out = Binary(">>", Select(positive, Binary("+", r, i32(-(1 << 23) + (1 << 7))),
                                      Binary("-", i32((1 << 23) + (1 << 7) - 1), r)), i32(8))
        return [Store(y.name, at, Cast("int16", out), tuple(idx))]
    return nest(y.type.shape, "i", body)[0]
