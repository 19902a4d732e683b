"""Fast kernels: the overrides the host backend registers over the portable ones (the Cortex-M
backend's are in cortex_m.py, the channels-last ones in host_conv.py and host_pool.py).

Convolution is register-blocked: a block of MB output channels times NB groups of V output
positions along the last spatial axis keeps MB * NB accumulators (V lanes each) in registers;
every input vector loaded feeds MB accumulators and every weight feeds NB. V is the target's
vector width in GCC vector extensions (1 on a target without vectors). Each accumulator adds its terms in the portable
kernel's order (bias, then input channels, then taps), so results are those of the scalar code.

Where the window meets padding the tiles of conv.tiles test or clip taps; those edge tiles
use the same blocking over channels with V = NB = 1. Positions left over after the last full
block along the axis run one at a time. A pointwise convolution (1x1, stride 1, no padding) is
one axis of H*W positions: a matrix product.

Gemm with a single row (the fully connected layers of these models) reads each weight once:
with transB a block of NB outputs is NB dot products over k in vector lanes; without, V outputs
at a time accumulate rows of B.
"""
from __future__ import annotations

import math
from typing import Mapping

from codegen.generate.backend import KernelArgs, same
from codegen.generate.kernel_sets import VECTORS
from codegen.generate.functors.conv import (Affine, Axis, channel_blocks, dot, is_pointwise, loops, row_major_strides,
                                            tile_loops, tiles)
from codegen.generate.loop_ir import (INDEX, Assign, Binary, Broadcast, Comment, Const, Expr, For, Lane, Load,
                                      Local, ReduceLanes, Select, Stmt, Store, Var, const, index)
from codegen.ops.conv import Window

FLOAT = "float32"


def _blocking(caps, depthwise: bool) -> tuple[int, int, int]:
    """(MB, NB, V): output channels, vectors of positions, lanes per vector."""
    v = caps.lanes(4)
    if v > 1:  # 16 vector registers: MB * NB accumulators, NB inputs, one weight
        return (1, 4, v) if depthwise else (4, 2, v)
    return (1, 1, 1) if depthwise else (2, 2, 1)


def _is_float_2d_conv(args: KernelArgs, attrs: Mapping) -> bool:
    x, w = args.inputs[0], args.inputs[1]
    # without an FPU every float operation is a library call: blocking saves nothing
    return (args.caps.fpu != "none" and x.type.dtype == FLOAT and x.type.rank == 4 and w.type.rank in (2, 4) and args.prepared is not None
            and "windows" in args.prepared.facts)


def _channel_vectors(args: KernelArgs, attrs: Mapping) -> bool:
    """Vectors over output channels suit a convolution without groups whose channel count is a
    multiple of the vector width: every position, edges included, runs vector code."""
    v = args.caps.lanes(4)
    w = args.inputs[1]
    return (v > 1 and _is_float_2d_conv(args, attrs) and args.prepared["group"] == 1
            and w.type.shape[0] % v == 0)


def _pack_conv(args: KernelArgs, attrs: Mapping) -> dict:
    """Weights [M, C, kh, kw] as [C * kh * kw, M]: one tap's weights for consecutive output
    channels are consecutive, a vector load. Not for a pointwise convolution: its positions form
    one long axis, and vectors along it load and store whole vectors (measured faster)."""
    if not _channel_vectors(args, attrs) or args.inputs[1].type.rank != 4 or is_pointwise(args.prepared["windows"]):
        return {}
    m = args.inputs[1].type.shape[0]
    return {1: lambda w: w.reshape(m, -1).T}


def conv_host(graph, node_id, cluster_id, args, attrs):
    """Vectors over output channels where the weights were packed for it, else over positions."""
    if args.inputs[1].type.rank == 2:
        return conv_channel_vectors(graph, node_id, cluster_id, args, attrs)
    return conv_blocked(graph, node_id, cluster_id, args, attrs)


def conv_channel_vectors(graph, node_id, cluster_id, args, attrs):
    """acc[i][j] (V channels each) += w[c, tap, channels] * x[c, position j] over channels and taps,
    for MBV channel vectors and NB positions of a row at a time; each lane then stores its
    element (the epilogue, if any, runs per element)."""
    x, w, y = args.inputs[0], args.inputs[1], args.outputs[0]
    b = args.inputs[2] if len(args.inputs) > 2 else None
    wins = list(args.prepared["windows"])
    batch, channels = x.type.shape[:2]
    out_channels = w.type.shape[1]
    v = args.caps.lanes(4)
    mbv, nb = (4, 2) if v <= 4 else (2, 4)
    k_shape = tuple(win.kernel for win in wins)
    k_size = math.prod(k_shape)
    in_size, out_size = x.type.size // (batch * channels), y.type.size // (batch * out_channels)
    in_strides, out_strides = row_major_strides(x.type.shape[2:]), row_major_strides(y.type.shape[2:])
    k_strides = row_major_strides(k_shape)
    axes = [Axis(win) for win in wins]
    n = Affine.var("n")
    serial = [0]

    def block(tl, m0: Affine, vectors: int, positions) -> list[Stmt]:
        t = serial[0]
        serial[0] += 1
        accs = [[f"acc{t}_{i}_{j}" for j in range(len(positions))] for i in range(vectors)]
        stmts: list[Stmt] = []
        for i in range(vectors):
            init: Expr = Load(b.name, (m0 + i * v).expr(), v) if b is not None else Const(0, FLOAT, v)
            stmts += [Local(accs[i][j], init, FLOAT, v) for j in range(len(positions))]
        c = Affine.var("c")
        body: list[Stmt] = []
        for j, (in_pos, _) in enumerate(positions):
            value: Expr = Load(x.name, (n * (channels * in_size) + c * in_size + dot(in_pos, in_strides)).expr())
            if tl.in_bounds is not None:
                value = Select(tl.in_bounds, value, const(0))
            body.append(Local(f"x{t}_{j}", Broadcast(value, v), FLOAT, v))
        tap = dot(tl.tap, k_strides)
        for i in range(vectors):
            w_at = (c * k_size + tap) * out_channels + m0 + i * v
            body.append(Local(f"w{t}_{i}", Load(w.name, w_at.expr(), v), FLOAT, v))
            for j in range(len(positions)):
                body.append(Assign(accs[i][j], Binary("+", Var(accs[i][j]), Binary(
                    "*", Var(f"w{t}_{i}"), Var(f"x{t}_{j}")))))
        stmts += loops((("c", channels),) + tl.taps, body)
        for i in range(vectors):
            for j, (_, out_pos) in enumerate(positions):
                for lane in range(v):
                    oc = m0 + i * v + lane
                    out_at = n * (out_channels * out_size) + oc * out_size + dot(out_pos, out_strides)
                    stmts.append(Store(y.name, out_at.expr(), Lane(Var(accs[i][j], FLOAT, v), index(lane)),
                                       (n.expr(), oc.expr(), *(p.expr() for p in out_pos))))
        return stmts

    def tile_code(tile, m0: Affine, vectors: int) -> list[Stmt]:
        tl = tile_loops(axes, tile)
        stmts: list[Stmt] = [Comment(tl.label)]
        if tl.empty:
            inner = []
            for i in range(vectors * v):
                oc = m0 + i
                init = Load(b.name, oc.expr()) if b is not None else const(0)
                inner.append(Store(y.name, (n * (out_channels * out_size) + oc * out_size
                                            + dot(tl.out_pos, out_strides)).expr(),
                                   init, (n.expr(), oc.expr(), *(p.expr() for p in tl.out_pos))))
            return stmts + list(loops(tl.outer, inner))
        last = f"o{len(axes) - 1}"
        loop_vars = [name for name, _ in tl.outer]
        # a tested tile's bounds test is written for its own position: one position at a time
        if not loop_vars or loop_vars[-1] != last or tl.in_bounds is not None:
            return stmts + list(loops(tl.outer, block(tl, m0, vectors, [(tl.in_pos, tl.out_pos)])))
        count = tl.outer[-1][1]
        blocks = max(1, min(nb, count))
        main = count - count % blocks
        if main:
            positions = tl.neighbours(last, blocks)
            stmts += loops(tl.outer[:-1], [For(last, main, tuple(block(tl, m0, vectors, positions)), blocks)])
        if count - main:
            r = Affine.var(last + "r", main)
            positions = [tl.position(last, r)]
            stmts += loops(tl.outer[:-1], [For(last + "r", count - main, tuple(block(tl, m0, vectors, positions)))])
        return stmts

    tile_list = tiles(wins)
    stmts: list[Stmt] = []
    for m0, width, count in channel_blocks(out_channels, mbv * v):
        vectors = width // v
        nests: list[Stmt] = []
        for tile in tile_list:
            nests += tile_code(tile, m0, vectors)
        stmts += loops((("mb", count),) if count > 1 else (), [For("n", batch, tuple(nests))])
    return stmts


def conv_blocked(graph, node_id, cluster_id, args, attrs):
    """Register-blocked direct convolution (see the module doc)."""
    x, w, y = args.inputs[0], args.inputs[1], args.outputs[0]
    b = args.inputs[2] if len(args.inputs) > 2 else None
    group, wins = args.prepared["group"], list(args.prepared["windows"])
    batch, channels = x.type.shape[:2]
    out_channels = w.type.shape[0]
    cg, mg = channels // group, out_channels // group
    k_shape = w.type.shape[2:]
    k_size = math.prod(k_shape)
    in_size, out_size = x.type.size // (batch * channels), y.type.size // (batch * out_channels)
    in_strides, out_strides = row_major_strides(x.type.shape[2:]), row_major_strides(y.type.shape[2:])
    k_strides = row_major_strides(k_shape)
    pointwise = is_pointwise(wins)
    if pointwise:  # one axis over all positions
        wins = [Window(in_size, out_size, 1)]
        in_strides, out_strides, k_strides = (1,), (1,), (0,)
    mb_full, nb, v = _blocking(args.caps, cg == 1 and mg == 1)
    axes = [Axis(win) for win in wins]
    n, g = Affine.var("n"), Affine.var("g")
    spatial = y.type.shape[2:]

    def block(tl, m0: Affine, mb: int, positions: list[tuple[Affine, ...]], width: int, outer_in,
              outer_out) -> list[Stmt]:
        """Accumulate and store MB channels x len(positions) position vectors of one tile."""
        ocs = [g * mg + m0 + i for i in range(mb)]
        t = serial[0]  # names unique per block: a block without loops of its own shares its scope
        serial[0] += 1
        accs = [[f"acc{t}_{i}_{j}" for j in range(len(positions))] for i in range(mb)]
        stmts: list[Stmt] = []
        for i, oc in enumerate(ocs):
            init: Expr = Load(b.name, oc.expr()) if b is not None else const(0)
            if width > 1:
                init = Broadcast(init, width) if b is not None else Const(0, FLOAT, width)
            stmts += [Local(accs[i][j], init, FLOAT, width) for j in range(len(positions))]
        c = Affine.var("c")
        body: list[Stmt] = []
        # Scalar code unrolls the innermost tap loop: neighbouring positions share inputs (position
        # j at tap k reads what position j+1 reads at tap k-1), so each input is loaded once.
        taps = tl.taps
        unroll = width == 1 and tl.in_bounds is None and bool(taps) and taps[-1][1] <= 8
        loop_taps = taps[:-1] if unroll else taps
        x_names: dict = {}
        for tv in (range(taps[-1][1]) if unroll else [None]):
            def at_tap(a: Affine) -> Affine:
                return a if tv is None else a.substituted(taps[-1][0], Affine((), tv))
            xs = []
            for in_pos, _ in positions:
                x_at = n * (channels * in_size) + g * (cg * in_size) + c * in_size + outer_in(
                    tuple(at_tap(p) for p in in_pos))
                key = (tuple(sorted(x_at.terms)), x_at.const)
                if key not in x_names:
                    x_names[key] = f"x{t}_{len(x_names)}"
                    stride = dict(in_pos[-1].terms).get(f"o{len(axes) - 1}", 1) if width > 1 else 1
                    value: Expr = Load(x.name, x_at.expr(), width, None, stride)
                    if tl.in_bounds is not None:
                        value = Select(tl.in_bounds, value, const(0))
                    body.append(Local(x_names[key], value, FLOAT, width))
                xs.append(x_names[key])
            for i, oc in enumerate(ocs):
                w_at = oc * (cg * k_size) + c * k_size + dot(tuple(at_tap(p) for p in tl.tap), k_strides)
                wv: Expr = Load(w.name, w_at.expr())
                wname = f"w{t}_{i}" if tv is None else f"w{t}_{i}_{tv}"
                body.append(Local(wname, Broadcast(wv, width) if width > 1 else wv, FLOAT, width))
                for j in range(len(positions)):
                    body.append(Assign(accs[i][j], Binary("+", Var(accs[i][j]), Binary(
                        "*", Var(wname), Var(xs[j])))))
        reduce_loops = (("c", cg),) + loop_taps
        stmts += loops(reduce_loops, body)
        for i, oc in enumerate(ocs):
            for j, (_, out_pos) in enumerate(positions):
                out_at = n * (out_channels * out_size) + oc * out_size + outer_out(out_pos)
                coords = (n.expr(), oc.expr(), *outer_coords(out_pos))
                stmts.append(Store(y.name, out_at.expr(), Var(accs[i][j]), coords))
        return stmts

    def outer_coords(out_pos: tuple[Affine, ...]) -> tuple[Expr, ...]:
        """Coordinates in y of an output position (the flat axis of a pointwise conv unflattened)."""
        if len(out_pos) == 1 and len(spatial) == 2:
            flat = out_pos[0].expr()
            return (Binary("/", flat, index(spatial[1])), Binary("%", flat, index(spatial[1])))
        return tuple(p.expr() for p in out_pos)

    def tile_code(tile, m0: Affine, mb: int) -> list[Stmt]:
        tl = tile_loops(axes, tile)
        stmts: list[Stmt] = [Comment(tl.label)]
        in_flat = lambda pos: dot(pos, in_strides)
        out_flat = lambda pos: dot(pos, out_strides)
        if tl.empty:
            ocs = [g * mg + m0 + i for i in range(mb)]
            inner = []
            for oc in ocs:
                init = Load(b.name, oc.expr()) if b is not None else const(0)
                inner.append(Store(y.name, (n * (out_channels * out_size) + oc * out_size + out_flat(tl.out_pos)).expr(),
                                   init, (n.expr(), oc.expr(), *outer_coords(tl.out_pos))))
            return stmts + list(loops(tl.outer, inner))
        last = f"o{len(axes) - 1}"
        loop_vars = [name for name, _ in tl.outer]
        stride_last = dict(tl.in_pos[-1].terms).get(last, 0)
        if tl.in_bounds is not None or not loop_vars or loop_vars[-1] != last:
            return stmts + list(loops(tl.outer, block(tl, m0, mb, [(tl.in_pos, tl.out_pos)], 1, in_flat, out_flat)))
        count = tl.outer[-1][1]
        width = v if stride_last in (1, 2) and count >= v else 1
        blocks = max(1, min(nb, count // width))  # a short row takes fewer vectors per block
        step = width * blocks
        main = count - count % step
        result: list[Stmt] = []
        if main:
            positions = tl.neighbours(last, blocks, width)  # lanes: o, o+1, ...
            inner = block(tl, m0, mb, positions, width, in_flat, out_flat)
            result += loops(tl.outer[:-1], [For(last, main, tuple(inner), step)])
        if count - main:  # the positions after the last full block, one at a time
            r = Affine.var(last + "r", main)
            positions = [tl.position(last, r)]
            inner = block(tl, m0, mb, positions, 1, in_flat, out_flat)
            result += loops(tl.outer[:-1], [For(last + "r", count - main, tuple(inner))])
        return stmts + result

    tile_list = tiles(wins)
    serial = [0]
    stmts: list[Stmt] = []
    for m0, mb, blocks in channel_blocks(mg, mb_full):
        nests: list[Stmt] = []
        for tile in tile_list:
            nests += tile_code(tile, m0, mb)
        inner = [For("n", batch, tuple(nests))]
        stmts += loops((("mb", blocks),) if blocks > 1 else (), inner)
    return list(loops((("g", group),), stmts))


# --- Gemm with one row ---------------------------------------------------------------------
def _is_gemv(args: KernelArgs, attrs: Mapping) -> bool:
    a = args.inputs[0]
    return (args.caps.fpu != "none" and a.type.dtype == FLOAT and args.outputs[0].type.shape[0] == 1 and not attrs["transA"])


def gemv(graph, node_id, cluster_id, args, attrs):
    """y = alpha * a B' + beta * c for a single row a (see the module doc)."""
    a, bm = args.inputs[0], args.inputs[1]
    c = args.inputs[2] if len(args.inputs) > 2 else None
    out = args.outputs[0]
    n_extent = out.type.shape[1]
    k_extent = a.type.shape[1]
    v = args.caps.lanes(4)
    k = Var("k", INDEX)

    def finish(acc: Expr, col: Expr) -> Expr:
        result = acc if attrs["alpha"] == 1.0 else Binary("*", const(attrs["alpha"]), acc)
        if c is not None:
            cs = c.type.shape
            at = col if cs and cs[-1] != 1 else index(0)
            bias = Load(c.name, at)
            result = Binary("+", result, bias if attrs["beta"] == 1.0 else Binary("*", const(attrs["beta"]), bias))
        return result

    stmts: list[Stmt] = []
    if attrs["transB"]:  # B is [N, K]: dot products along k, NB outputs share each load of a
        nb = 4
        kv = k_extent - k_extent % v if v > 1 else 0

        def outputs(first: Expr, count: int, p: str = "") -> list[Stmt]:
            """`count` outputs from `first`; `p` prefixes local names (no shadowing in nested scopes)."""
            cols = [Binary("+", first, index(j)) for j in range(count)]
            body: list[Stmt] = []
            if kv:
                body += [Local(f"{p}s{j}", Const(0, FLOAT, v), FLOAT, v) for j in range(count)]
                inner: list[Stmt] = [Local(p + "av", Load(a.name, k, v), FLOAT, v)]
                inner += [Assign(f"{p}s{j}", Binary("+", Var(f"{p}s{j}"), Binary(
                    "*", Var(p + "av"), Load(bm.name, Binary("+", Binary("*", col, index(k_extent)), k), v))))
                    for j, col in enumerate(cols)]
                body.append(For("k", kv, tuple(inner), v))
                body += [Local(f"{p}acc{j}", ReduceLanes("+", Var(f"{p}s{j}", FLOAT, v)), FLOAT) for j in range(count)]
            else:
                body += [Local(f"{p}acc{j}", const(0), FLOAT) for j in range(count)]
            if k_extent - kv:
                kr = Binary("+", Var("kr"), index(kv))
                body.append(For("kr", k_extent - kv, tuple(
                    Assign(f"{p}acc{j}", Binary("+", Var(f"{p}acc{j}"), Binary(
                        "*", Load(a.name, kr), Load(bm.name, Binary("+", Binary("*", col, index(k_extent)), kr)))))
                    for j, col in enumerate(cols))))
            body += [Store(out.name, col, finish(Var(f"{p}acc{j}"), col), (index(0), col)) for j, col in enumerate(cols)]
            return body
        main = n_extent - n_extent % nb
        if main:
            stmts.append(For("j", main, tuple(outputs(Var("j", INDEX), nb)), nb))
        if n_extent - main:  # leftover outputs, one at a time
            stmts.append(For("jr", n_extent - main, tuple(outputs(Binary("+", Var("jr", INDEX), index(main)), 1, "r"))))
        return stmts
    # B is [K, N]: V outputs at a time accumulate rows of B
    # each weight is used once: the loop is loads and multiply-adds, plus one load of a[k] and the
    # loop's own instructions, shared by more outputs the more accumulators the registers hold
    nb = 2 if v > 1 else 8 if args.caps.float_registers >= 32 else 4
    step = v * nb

    def columns(first: Expr, count: int, width: int, p: str = "") -> list[Stmt]:
        """`count` vectors of `width` columns from `first`; `p` prefixes local names."""
        cols = [Binary("+", first, index(j * width)) for j in range(count)]
        zero = Const(0, FLOAT, width) if width > 1 else const(0)
        body: list[Stmt] = [Local(f"{p}acc{j}", zero, FLOAT, width) for j in range(count)]
        def row(kk: Expr, tag: str) -> list[Stmt]:
            """acc_j += a[kk] * B[kk, col_j]"""
            ak: Expr = Load(a.name, kk)
            name = f"{p}ak{tag}"
            stmts_: list[Stmt] = [Local(name, Broadcast(ak, width) if width > 1 else ak, FLOAT, width)]
            stmts_ += [Assign(f"{p}acc{j}", Binary("+", Var(f"{p}acc{j}"), Binary(
                "*", Var(name), Load(bm.name, Binary("+", Binary("*", kk, index(n_extent)), col), width))))
                for j, col in enumerate(cols)]
            return stmts_
        unroll = 1  # two rows per iteration measured slower on the Cortex-M4 (address arithmetic)
        main_k = k_extent - k_extent % unroll
        inner = [s for u in range(unroll) for s in row(Binary("+", k, index(u)) if u else k, str(u))]
        body.append(For("k", main_k, tuple(inner), unroll))
        if k_extent - main_k:
            body += row(index(main_k), "t")
        for j, col in enumerate(cols):
            value: Expr = Var(f"{p}acc{j}", FLOAT, width)
            if attrs["alpha"] != 1.0:
                value = Binary("*", Const(attrs["alpha"], FLOAT, width), value)
            if c is not None:
                cs = c.type.shape
                bias: Expr = Load(c.name, col, width) if cs and cs[-1] != 1 else Load(c.name, index(0))
                if width > 1 and not (cs and cs[-1] != 1):
                    bias = Broadcast(bias, width)
                if attrs["beta"] != 1.0:
                    bias = Binary("*", Const(attrs["beta"], FLOAT, width), bias)
                value = Binary("+", value, bias)
            body.append(Store(out.name, col, value, (index(0), col)))
        return body
    main = n_extent - n_extent % step
    if main:
        stmts.append(For("j", main, tuple(columns(Var("j", INDEX), nb, v)), step))
    if n_extent - main:  # leftover columns, one at a time
        stmts.append(For("jr", n_extent - main, tuple(columns(Binary("+", Var("jr", INDEX), index(main)), 1, 1, "r"))))
    return stmts


VECTORS.register("Conv", family="convolution", types=same("float32", 3, acc="float32"), layout="nchw", epilogue=True,
                  when=_is_float_2d_conv, pack=_pack_conv)(conv_host)
VECTORS.register("Gemm", family="matrix", types=same("float32", 3, acc="float32"), epilogue=True, when=_is_gemv)(gemv)
# the cortex-m backend's kernels: codegen/generate/functors/cortex_m.py

# Channels-last kernels (the layout pass's ConvNHWC and pools), registered on cpp: with the
# target's vector width they are the host's, with one lane the portable ones.
from codegen.generate.functors import host_conv, host_pool  # noqa: E402,F401
