"""QLookup's kernel: each int8 output is the table entry of its input (index input + 128). The
table (codegen/quant/activations.py for TFLite's LOGISTIC and TANH) is a constant in flash, so
the kernel costs one load, one table load and one store per element."""
from __future__ import annotations

from tinsmith.generate.backend import CPP, takes
from tinsmith.generate.functors.quantized import QUANTIZED
from tinsmith.generate.functors.quantized_math import i32, widen
from tinsmith.generate.loop_ir import Binary, Cast, Load, Store, flat_index, nest


@CPP.register("QLookup", family="table", types=takes(QUANTIZED, QUANTIZED, out=QUANTIZED))
def qlookup(graph, node_id, cluster_id, args, attrs):
    """y = table[x + 128], element by element."""
    x, table, y = args.inputs[0], args.inputs[1], args.outputs[0]

    def body(idx):
        at = flat_index(idx, y.type.shape)
        entry = Load(table.name, Cast("index", Binary("+", widen(Load(x.name, at)), i32(128))))
        return [Store(y.name, at, entry, tuple(idx))]
    return nest(y.type.shape, "i", body)[0]
