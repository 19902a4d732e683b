"""Functors that move data: Reshape and its kin (copies), Transpose, Concat, Expand, Tile,
DepthToSpace, SpaceToDepth, Dropout."""
from __future__ import annotations

from tinsmith.generate.backend import ANY_TYPES, CPP, INDICES, same, takes
from tinsmith.generate.loop_ir import Binary, Const, Load, Store, broadcast_index, flat_index, index, nest
from tinsmith.ops.layout import block_view


@CPP.register("Reshape", "Flatten", "Squeeze", "Unsqueeze", family="movement", types=takes(None, INDICES))
def reshape(graph, node_id, cluster_id, args, attrs):
    """Row-major data is unchanged by a reshape: copy element by element."""
    x, y = args.inputs[0], args.outputs[0]
    return nest((y.type.size,), "i", lambda idx: [Store(y.name, idx[0], Load(x.name, idx[0]))])[0]


@CPP.register("Transpose", family="movement", types=ANY_TYPES)
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


@CPP.register("Concat", family="movement", types=same(None))
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


@CPP.register("Expand", family="movement", types=takes(None, INDICES))
def expand(graph, node_id, cluster_id, args, attrs):
    """Every output element reads the input at its broadcast position."""
    x, y = args.inputs[0], args.outputs[0]
    shape = y.type.shape
    return nest(shape, "i", lambda idx: [Store(y.name, flat_index(idx, shape),
                                               Load(x.name, broadcast_index(idx, shape, x.type.shape)))])[0]


@CPP.register("Tile", family="movement", types=takes(None, INDICES))
def tile(graph, node_id, cluster_id, args, attrs):
    """Output axis a of size r*n, walked as (copy 0..r-1, position 0..n-1): no division needed."""
    x, y = args.inputs[0], args.outputs[0]
    pairs = [(d // n if n else 0, n) for d, n in zip(y.type.shape, x.type.shape)]
    shape = [extent for pair in pairs for extent in pair]

    def body(idx):
        return [Store(y.name, flat_index(idx, shape), Load(x.name, flat_index(idx[1::2], x.type.shape)))]
    return nest(shape, "i", body)[0]


def permuted_copy(x: str, y: str, view: tuple[int, ...], perm: tuple[int, ...]):
    """y = transpose(x viewed with shape `view`, perm), walking y in order."""
    out_shape = [view[p] for p in perm]

    def body(idx):
        src = [None] * len(perm)
        for k, p in enumerate(perm):
            src[p] = idx[k]
        return [Store(y, flat_index(idx, out_shape), Load(x, flat_index(src, view)))]
    return nest(out_shape, "i", body)[0]


@CPP.register("DepthToSpace", "SpaceToDepth", family="movement", types=ANY_TYPES)
def block_rearrange(graph, node_id, cluster_id, args, attrs):
    """A transpose of the 6-D view in which blocks and channels are separate axes."""
    x, y = args.inputs[0], args.outputs[0]
    view, perm = block_view(graph.nodes[node_id].op, x.type.shape, attrs["blocksize"], attrs["mode"])
    return permuted_copy(x.name, y.name, view, perm)


@CPP.register("Dropout", family="movement", types=ANY_TYPES)
def dropout(graph, node_id, cluster_id, args, attrs):
    """Inference: a copy, and a mask of all true if anything reads it."""
    x, y = args.inputs[0], args.outputs[0]
    stmts = list(nest((y.type.size,), "i", lambda idx: [Store(y.name, idx[0], Load(x.name, idx[0]))])[0])
    if len(args.outputs) > 1:
        mask = args.outputs[1]
        if mask.name in graph.outputs or mask.name in graph.consumers():
            stmts += nest((mask.type.size,), "m", lambda idx: [Store(mask.name, idx[0], Const(1, False))])[0]
    return stmts
