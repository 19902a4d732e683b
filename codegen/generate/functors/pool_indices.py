"""The MaxPoolIndices functor: MaxPool's window walk (tiles as for Conv) keeping, beside the
running maximum, the flat input position it came from."""
from __future__ import annotations

from tinsmith.generate.backend import CPP, NUMBERS, takes
from tinsmith.generate.functors.conv import (Affine, Axis, TileLoops, dot, infer_args, loops, row_major_strides,
                                            tiles, window_nests)
from tinsmith.generate.functors.pooling import LOWEST_FLOAT, plane_coords
from tinsmith.generate.loop_ir import Assign, Binary, Cast, For, Load, Local, Select, Stmt, Store, Var, const, index
from tinsmith.ops.pool_indices import spatial_strides
from tinsmith.ops.pooling import pool_windows


@CPP.register("MaxPoolIndices", family="window", types=takes(NUMBERS, out=[NUMBERS, "int64"]))
def max_pool_indices(graph, node_id, cluster_id, args, attrs):
    """Per window, the position of its first largest value (padding and NaN never win)."""
    x, y = args.inputs[0], args.outputs[0]
    wins = pool_windows(infer_args(graph, args, attrs), "MaxPoolIndices")
    batch, channels = x.type.shape[:2]
    in_size, out_size = x.type.size // (batch * channels), y.type.size // (batch * channels)
    in_strides, out_strides = row_major_strides(x.type.shape[2:]), row_major_strides(y.type.shape[2:])
    flat_strides = spatial_strides(x.type.shape[2:], attrs["storage_order"])
    plane = Affine.var("i")

    def body(tl: TileLoops, suffix: str) -> list[Stmt]:
        out_at = (plane * out_size + dot(tl.out_pos, out_strides)).expr()
        coords = (*plane_coords(batch, channels), *(p.expr() for p in tl.out_pos))
        acc, at = f"acc{suffix}", f"at{suffix}"
        if tl.empty:  # a window wholly in the padding has no position: 0, as the reference gives
            return [Store(y.name, out_at, Cast("int64", index(0)), coords)]
        v = Load(x.name, (plane * in_size + dot(tl.in_pos, in_strides)).expr())
        position = Cast("int64", (plane * in_size + dot(tl.in_pos, flat_strides)).expr())
        larger = Binary(">", v, Var(acc))
        cond = larger if tl.in_bounds is None else Binary("&&", tl.in_bounds, larger)
        step = loops(tl.taps, [Assign(at, Select(cond, position, Var(at))), Assign(acc, Select(cond, v, Var(acc)))])
        return [Local(acc, const(LOWEST_FLOAT)), Local(at, Cast("int64", index(0)), "int64"), *step,
                Store(y.name, out_at, Var(at), coords)]
    return [For("i", batch * channels, tuple(window_nests([Axis(w) for w in wins], tiles(wins), body)))]

