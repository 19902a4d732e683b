"""Functors that move data: Reshape (a copy), Transpose, Concat."""
from __future__ import annotations

from codegen.generate.backend import CPP
from codegen.generate.loop_ir import Binary, Load, Store, flat_index, index, nest


@CPP.register("Reshape")
def reshape(graph, node_id, cluster_id, args, attrs):
    """Row-major data is unchanged by a reshape: copy element by element."""
    x, y = args.inputs[0], args.outputs[0]
    return nest((y.type.size,), "i", lambda idx: [Store(y.name, idx[0], Load(x.name, idx[0]))])[0]


@CPP.register("Transpose")
def transpose(graph, node_id, cluster_id, args, attrs):
    """Walk the output in order and gather from the permuted input position."""
    x, y = args.inputs[0], args.outputs[0]
    perm = attrs["perm"] or tuple(reversed(range(x.type.rank)))

    def body(idx):
        src = [None] * len(perm)
        for k, p in enumerate(perm):
            src[p] = idx[k]
        return [Store(y.name, flat_index(idx, y.type.shape), Load(x.name, flat_index(src, x.type.shape)))]
    return nest(y.type.shape, "i", body)[0]


@CPP.register("Concat")
def concat(graph, node_id, cluster_id, args, attrs):
    """Copy each input into its slab of the output along the axis."""
    y = args.outputs[0]
    axis = attrs["axis"] % y.type.rank
    stmts, offset = [], 0
    for n, x in enumerate(args.inputs):
        def body(idx, offset=offset, x=x):
            dst = list(idx)
            dst[axis] = Binary("+", idx[axis], index(offset))
            return [Store(y.name, flat_index(dst, y.type.shape), Load(x.name, flat_index(idx, x.type.shape)))]
        stmts.extend(nest(x.type.shape, f"i{n}_", body)[0])
        offset += x.type.shape[axis]
    return stmts
