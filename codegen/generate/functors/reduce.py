"""Functors for reductions along axes."""
from __future__ import annotations

import math

from codegen.generate.backend import CPP
from codegen.generate.loop_ir import (Assign, Binary, For, Load, Local, Store, Unary, Var, const,
                                      flat_index, nest)
from codegen.ops.common import normalize_axis
from codegen.ops.reduce import reduce_axes
from codegen.ops.registry import InferArgs


@CPP.register("Softmax")
def softmax(graph, node_id, cluster_id, args, attrs):
    """Numerically stable softmax along one axis: subtract the max, exponentiate, normalise."""
    x, y = args.inputs[0], args.outputs[0]
    shape = x.type.shape
    axis = normalize_axis(attrs["axis"], len(shape))
    outer = shape[:axis] + shape[axis + 1:]
    j = Var("j")

    def body(idx):
        at = flat_index(idx[:axis] + [j] + idx[axis:], shape)
        return [
            Local("max_v", const(-math.inf)),
            For("j", shape[axis], (Assign("max_v", Binary("max", Var("max_v"), Load(x.name, at))),)),
            Local("sum", const(0)),
            For("j", shape[axis], (
                Store(y.name, at, Unary("exp", Binary("-", Load(x.name, at), Var("max_v")))),
                Assign("sum", Binary("+", Var("sum"), Load(y.name, at))))),
            Local("inv_sum", Binary("/", const(1), Var("sum"))),
            For("j", shape[axis], (Store(y.name, at, Binary("*", Load(y.name, at), Var("inv_sum"))),)),
        ]
    return nest(outer, "i", body)[0]


@CPP.register("ReduceMean")
def reduce_mean(graph, node_id, cluster_id, args, attrs):
    """Mean over the reduced axes: sum in a local, scale once."""
    x, y = args.inputs[0], args.outputs[0]
    node = graph.nodes[node_id]
    values = tuple(graph.constants[n].data if n in graph.constants else None for n in node.inputs)
    axes = reduce_axes(InferArgs(tuple(a.type if a else None for a in args.inputs), attrs, values))
    shape = x.type.shape
    kept = [d for i, d in enumerate(shape) if i not in axes]
    count = math.prod(shape[i] for i in axes)

    def body(outer):
        inner = [Var(f"r{i}") for i in axes]
        it_outer, it_inner = iter(outer), iter(inner)
        at = flat_index([next(it_inner) if i in axes else next(it_outer) for i in range(len(shape))], shape)
        stmts = (Assign("acc", Binary("+", Var("acc"), Load(x.name, at))),)
        for i in reversed(axes):
            stmts = (For(f"r{i}", shape[i], stmts),)
        return [Local("acc", const(0)), *stmts,
                Store(y.name, flat_index(outer, kept), Binary("/", Var("acc"), const(count)))]
    return nest(kept, "i", body)[0]
