"""Channels-last convolution (ConvNHWC): vectors over output channels, register-blocked.

Output y[n, oh, ow, m] is computed in blocks of MB channel vectors (V lanes, the target's width)
times NB output positions along the row: MB * NB accumulators stay in registers.

- regular (group 1): for each tap and input channel c, each position's input x[.., c] is one
  scalar broadcast to all lanes and each weight vector w[tap, c, m..m+V] feeds NB accumulators;
  a pointwise convolution (1x1, stride 1, no padding) is this over one axis of H*W positions,
  a matrix product of [H*W, C] by [C, M] with rows of C contiguous;
- depthwise (group = C = M): for each tap, the input vector x[.., m..m+V] of each position
  times the tap's weight vector.

Channels that do not fill a V-lane vector take the widest power-of-two vector of 4 lanes or more
that fits, then scalars, so every channel count runs (odd ones included). Positions at the edges
of the window use the tiles of conv.tiles with exact segments: each tile's taps are clipped to
the input, so no load is tested. A row of positions not divisible by NB ends with single
positions. The bias starts the accumulators; every store is a vector along the channel axis (the
tensor's last), so fused ReLU, clip or residual adds run as vector code. Each accumulator adds
its terms in the reference's order (bias, then taps, then input channels). With input_nchw the
input is read in the model's layout (a network's first convolution reading its image): the
scalar broadcasts of a regular convolution cost the same either way.
"""
from __future__ import annotations

import math

from codegen.generate.backend import CPP, same
from codegen.generate.functors.conv import (Affine, Axis, dot, is_pointwise, loops, row_major_strides, tile_loops,
                                            tiles)
from codegen.generate.loop_ir import Assign, Binary, Broadcast, Comment, Const, Expr, Load, Local, Stmt, Store, Var
from codegen.generate.loop_ir import For, const, index
from codegen.ops.conv import Window

FLOAT = "float32"


def channel_vectors(count: int, lanes: int) -> list[tuple[int, int]]:
    """(offset, width) of the vectors covering `count` channels: `lanes` wide while they fit, then
    the widest power of two of at least 4 that fits, then single channels."""
    out, offset = [], 0
    while offset < count:
        width = lanes
        while width > 1 and (width > count - offset or width < 4):
            width //= 2
        width = width if width >= 4 else 1
        out.append((offset, width))
        offset += width
    return out


def channel_blocks(count: int, lanes: int, per_block: int) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """(first channel, repetitions, vectors relative to the block's start): full blocks of
    `per_block` vectors of `lanes`, repeated, then one block of what is left."""
    vectors = channel_vectors(count, lanes)
    full = [v for v in vectors if v[1] == lanes]
    blocks = len(full) // per_block
    parts = []
    if blocks:
        parts.append((0, blocks, [(i * lanes, lanes) for i in range(per_block)]))
    rest = vectors[blocks * per_block:]
    if rest:
        first = rest[0][0]
        parts.append((first, 1, [(off - first, w) for off, w in rest]))
    return parts


def _blocking(caps, depthwise: bool, vectors: int) -> tuple[int, int]:
    """(MB, NB): channel vectors and positions per block, from the registers the target has."""
    regs = max(caps.float_registers, 8)
    if depthwise:  # accumulators, a row of taps' weights and the row of inputs they share
        return 1, max(1, min(8, (regs - 5) // 2))
    mb = max(1, min(vectors, 2 if regs < 32 else 4))
    return mb, max(1, min(8, (regs - mb - 2) // mb))


def conv_nhwc(graph, node_id, cluster_id, args, attrs):
    x, w, y = args.inputs[0], args.inputs[1], args.outputs[0]
    b = args.inputs[2] if len(args.inputs) > 2 else None
    group, wins = args.prepared["group"], list(args.prepared["windows"])
    input_nchw = bool(attrs.get("input_nchw"))
    batch, channels = x.type.shape[0], x.type.shape[1 if input_nchw else -1]
    out_channels = w.type.shape[-1]
    cg = w.type.shape[-2]
    depthwise = group > 1
    k_shape = tuple(win.kernel for win in wins)
    in_spatial, out_spatial = x.type.shape[2:] if input_nchw else x.type.shape[1:-1], y.type.shape[1:-1]
    in_size, out_size = math.prod(in_spatial), math.prod(out_spatial)
    in_strides, out_strides = row_major_strides(in_spatial), row_major_strides(out_spatial)
    k_strides = row_major_strides(k_shape)
    flat = is_pointwise(wins) and len(wins) > 1
    if flat:  # one axis of every position: a matrix product
        wins = [Window(in_size, out_size, 1)]
        in_strides = out_strides = (1,)
        k_strides = (0,)
    v = args.caps.lanes(4)
    n = Affine.var("n")
    serial = [0]

    def coords(out_pos) -> tuple[Expr, ...]:
        if flat:
            p = out_pos[0].expr()
            return (Binary("/", p, index(out_spatial[-1])), Binary("%", p, index(out_spatial[-1]))) \
                if len(out_spatial) == 2 else (p,)
        return tuple(p.expr() for p in out_pos)

    def store(m: Affine, width: int, out_pos, value: Expr) -> Store:
        at = n * (out_size * out_channels) + dot(out_pos, out_strides) * out_channels + m
        return Store(y.name, at.expr(), value, (n.expr(), *coords(out_pos), m.expr()))

    def bias(m: Affine, width: int) -> Expr:
        if b is None:
            return Const(0, FLOAT, width) if width > 1 else const(0)
        return Load(b.name, m.expr(), width)

    def block(tl, m0: Affine, vectors, positions) -> list[Stmt]:
        t = serial[0]
        serial[0] += 1
        accs = [[f"acc{t}_{i}_{j}" for j in range(len(positions))] for i in range(len(vectors))]
        stmts: list[Stmt] = [Local(accs[i][j], bias(m0 + off, width), FLOAT, width)
                             for i, (off, width) in enumerate(vectors) for j in range(len(positions))]
        # The innermost tap loop is unrolled: position j at tap k reads what position j+1 reads at
        # tap k-stride, so each input is loaded once per block and row of taps.
        taps = tl.taps
        unroll = bool(taps) and taps[-1][0] == f"k{len(axes) - 1}" and taps[-1][1] <= 12
        c = Affine.var(None if depthwise else "c")
        body: list[Stmt] = []
        x_names: dict = {}
        for tv in (range(taps[-1][1]) if unroll else [None]):
            def at_tap(a: Affine) -> Affine:
                return a if tv is None else a.substituted(taps[-1][0], Affine((), tv))
            tap = dot(tuple(at_tap(p) for p in tl.tap), k_strides)
            suffix = "" if tv is None else f"_{tv}"
            for i, (off, width) in enumerate(vectors if depthwise else [(0, 1)]):
                xs = []
                for in_pos, _ in positions:
                    pixel = dot(tuple(at_tap(p) for p in in_pos), in_strides)
                    at = n * (in_size * channels) + (c * in_size + pixel if input_nchw else pixel * channels + c)
                    at = at + (m0 + off if depthwise else Affine())
                    key = (i, tuple(sorted(at.terms)), at.const)
                    if key not in x_names:
                        x_names[key] = f"x{t}_{len(x_names)}"
                        body.append(Local(x_names[key], Load(x.name, at.expr(), width), FLOAT, width))
                    xs.append(x_names[key])
                if depthwise:
                    w_at = tap * out_channels + m0 + off
                    body.append(Local(f"w{t}_{i}{suffix}", Load(w.name, w_at.expr(), width), FLOAT, width))
                    for j in range(len(positions)):
                        body.append(Assign(accs[i][j], Binary("+", Var(accs[i][j]), Binary(
                            "*", Var(xs[j], FLOAT, width), Var(f"w{t}_{i}{suffix}")))))
            if not depthwise:
                for i, (off, width) in enumerate(vectors):
                    w_at = (tap * cg + c) * out_channels + m0 + off
                    body.append(Local(f"w{t}_{i}{suffix}", Load(w.name, w_at.expr(), width), FLOAT, width))
                    for j in range(len(positions)):
                        xj: Expr = Var(xs[j], FLOAT)
                        body.append(Assign(accs[i][j], Binary("+", Var(accs[i][j]), Binary(
                            "*", Var(f"w{t}_{i}{suffix}"), Broadcast(xj, width) if width > 1 else xj))))
        reduce_loops = taps[:-1] if unroll else taps
        stmts += loops(reduce_loops if depthwise else reduce_loops + (("c", cg),), body)
        for i, (off, width) in enumerate(vectors):
            for j, (_, out_pos) in enumerate(positions):
                stmts.append(store(m0 + off, width, out_pos, Var(accs[i][j], FLOAT, width)))
        return stmts

    def tile_code(tile, m0: Affine, vectors, nb: int) -> list[Stmt]:
        tl = tile_loops(axes, tile)
        stmts: list[Stmt] = [Comment(tl.label)]
        if tl.empty:  # the window lies in the padding: the bias alone
            inner = [store(m0 + off, width, tl.out_pos, bias(m0 + off, width)) for off, width in vectors]
            return stmts + list(loops(tl.outer, inner))
        if not tl.outer:
            return stmts + block(tl, m0, vectors, [(tl.in_pos, tl.out_pos)])
        # positions along the innermost output loop (a column of edge positions runs down its rows)
        last, count = tl.outer[-1]
        blocks = max(1, min(nb, count))
        main = count - count % blocks
        if main:
            positions = tl.neighbours(last, blocks)
            stmts += loops(tl.outer[:-1], [For(last, main, tuple(block(tl, m0, vectors, positions)), blocks)])
        if count - main:  # the rest of the row as one narrower block: independent accumulators
            positions = [tl.position(last, Affine((), main + j)) for j in range(count - main)]
            stmts += loops(tl.outer[:-1], block(tl, m0, vectors, positions))
        return stmts

    axes = [Axis(win) for win in wins]
    tile_list = tiles(wins, exact_only=True)
    mb, nb = _blocking(args.caps, depthwise, max(1, out_channels // v))
    stmts: list[Stmt] = []
    for first, repeat, vectors in channel_blocks(out_channels, v, mb):
        m0 = Affine.var("mb" if repeat > 1 else None) * (mb * v) + first
        # a block narrower than the target's vectors has registers left for more positions
        block_nb = nb if vectors[0][1] == v else min(8, nb * 2)
        nests: list[Stmt] = []
        for tile in tile_list:
            nests += tile_code(tile, m0, vectors, block_nb)
        stmts += loops((("mb", repeat),) if repeat > 1 else (), [For("n", batch, tuple(nests))])
    return stmts


CPP.register("ConvNHWC", family="convolution", types=same("float32", 3, acc="float32"), layout="nhwc", epilogue=True)(conv_nhwc)
