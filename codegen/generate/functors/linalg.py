"""Functors for matrix products."""
from __future__ import annotations

from tinsmith.generate.backend import CPP, FLOATS, same
from tinsmith.ops.common import broadcast_shapes
from tinsmith.generate.loop_ir import (Assign, Binary, For, Load, Local, Store, Var, broadcast_index, const,
                                      flat_index, nest)


@CPP.register("MatMul", family="matrix", types=same(FLOATS, 2, acc="float32"), epilogue=True)
def matmul(graph, node_id, cluster_id, args, attrs):
    """Batched NumPy matmul; 1-D operands are promoted as NumPy does (size-1 axes keep offsets)."""
    a, b = args.inputs
    out = args.outputs[0]
    a_shape = (1,) + a.type.shape if a.type.rank == 1 else a.type.shape
    b_shape = b.type.shape + (1,) if b.type.rank == 1 else b.type.shape
    batch = broadcast_shapes([a_shape[:-2], b_shape[:-2]])
    shape = batch + (a_shape[-2], b_shape[-1])
    k_extent = a_shape[-1]
    k = Var("k")

    def body(idx):
        *bidx, m, n = idx
        a_at = broadcast_index(bidx + [m, k], batch + a_shape[-2:], a_shape)
        b_at = broadcast_index(bidx + [k, n], batch + b_shape[-2:], b_shape)
        # float64 sums in double; float16 and bfloat16 in float32, rounded once on the store
        return [Local("acc", const(0), "float64" if out.type.dtype == "float64" else "float32"),
                For("k", k_extent, (Assign("acc", Binary("+", Var("acc"),
                                                         Binary("*", Load(a.name, a_at), Load(b.name, b_at)))),)),
                Store(out.name, flat_index(idx, shape), Var("acc"), tuple(idx))]
    return nest(shape, "i", body)[0]


@CPP.register("Gemm", family="matrix", types=same("float32", 3, acc="float32"), epilogue=True)
def gemm(graph, node_id, cluster_id, args, attrs):
    """Y = alpha * A' B' + beta * C, with A' and B' optionally transposed."""
    a, b = args.inputs[0], args.inputs[1]
    c = args.inputs[2] if len(args.inputs) > 2 else None
    out = args.outputs[0]
    m_extent, n_extent = out.type.shape
    k_extent = a.type.shape[0] if attrs["transA"] else a.type.shape[1]
    k = Var("k")

    def body(idx):
        m, n = idx
        a_at = flat_index([k, m] if attrs["transA"] else [m, k], a.type.shape)
        b_at = flat_index([n, k] if attrs["transB"] else [k, n], b.type.shape)
        result = Var("acc")
        if attrs["alpha"] != 1.0:
            result = Binary("*", const(attrs["alpha"]), result)
        if c is not None:
            bias = Load(c.name, broadcast_index(idx, (m_extent, n_extent), c.type.shape))
            result = Binary("+", result, bias if attrs["beta"] == 1.0 else Binary("*", const(attrs["beta"]), bias))
        return [Local("acc", const(0)),
                For("k", k_extent, (Assign("acc", Binary("+", Var("acc"),
                                                         Binary("*", Load(a.name, a_at), Load(b.name, b_at)))),)),
                Store(out.name, flat_index(idx, out.type.shape), result, tuple(idx))]
    return nest(out.type.shape, "i", body)[0]
