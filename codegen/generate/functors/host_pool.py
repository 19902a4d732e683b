"""Channels-last pools (AveragePoolNHWC, MaxPoolNHWC): vectors over channels.

Each output position's channels are vectors (as wide as the target's, then narrower, then single
channels: host_conv.channel_vectors); each tap adds (or takes the maximum of) one contiguous input
vector. The tiles are exact (conv.tiles), so every tap lies inside the input and AveragePool's
divisor is the tile's constant count. MaxPool starts from the lowest float32 and keeps fmax's
NaN rule (a NaN never wins), as the NCHW kernels and ONNX Runtime do.
"""
from __future__ import annotations

import math

import numpy as np

from tinsmith.generate.backend import CPP, same
from tinsmith.generate.functors.conv import Affine, Axis, dot, loops, row_major_strides, tile_loops, tiles
from tinsmith.generate.functors.host_conv import channel_vectors
from tinsmith.generate.loop_ir import Assign, Binary, Comment, Const, Load, Local, Stmt, Store, For, Var

FLOAT = "float32"


def _pool_nhwc(kind: str):
    def functor(graph, node_id, cluster_id, args, attrs):
        x, y = args.inputs[0], args.outputs[0]
        wins = list(args.prepared["windows"])
        batch, channels = x.type.shape[0], x.type.shape[-1]
        in_spatial, out_spatial = x.type.shape[1:-1], y.type.shape[1:-1]
        in_size, out_size = math.prod(in_spatial), math.prod(out_spatial)
        in_strides, out_strides = row_major_strides(in_spatial), row_major_strides(out_spatial)
        include_pad = bool(attrs.get("count_include_pad", 0))
        vectors = channel_vectors(channels, args.caps.lanes(4))
        start = float(np.finfo(np.float32).min) if kind == "max" else 0.0
        n = Affine.var("n")
        stmts: list[Stmt] = []
        for t, tile in enumerate(tiles(wins, exact_only=True, include_pad=include_pad)):
            tl = tile_loops([Axis(win) for win in wins], tile)
            body: list[Stmt] = []
            for i, (off, width) in enumerate(vectors):
                acc = f"acc{t}_{i}"
                body.append(Local(acc, Const(start, FLOAT, width), FLOAT, width))
                if not tl.empty:
                    at = n * (in_size * channels) + dot(tl.in_pos, in_strides) * channels + off
                    value = Load(x.name, at.expr(), width)
                    body += loops(tl.taps, [Assign(acc, Binary("max" if kind == "max" else "+", Var(acc), value))])
                result = Var(acc, FLOAT, width)
                if kind == "average":
                    result = Binary("/", result, Const(float(tl.counted), FLOAT, width))
                out_at = n * (out_size * channels) + dot(tl.out_pos, out_strides) * channels + off
                body.append(Store(y.name, out_at.expr(), result,
                                  (n.expr(), *(p.expr() for p in tl.out_pos), Affine((), off).expr())))
            stmts.append(Comment(tl.label))
            stmts += loops(tl.outer, body)
        return list(loops((("n", batch),), stmts))
    return functor


CPP.register("AveragePoolNHWC", family="window", types=same("float32"), layout="nhwc", epilogue=True)(_pool_nhwc("average"))
CPP.register("MaxPoolNHWC", family="window", types=same("float32"), layout="nhwc", epilogue=True)(_pool_nhwc("max"))
