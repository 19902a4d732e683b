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

from typing import Mapping, Sequence

from tinsmith.generate.backend import KernelArgs, same
from tinsmith.generate.kernel_sets import VECTORS
from tinsmith.generate.functors.conv import (Affine, ConvOperands, TileLoops, blocked_row, channel_blocks, dot, loops,
                                            tile_loops, tiles)
from tinsmith.generate.loop_ir import (INDEX, Assign, Binary, Broadcast, Comment, Const, Expr, For, Lane, Load,
                                      Local, ReduceLanes, Select, Stmt, Store, Var, const, index)

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
            and "geometry" in args.prepared.facts)


def _channel_vectors(args: KernelArgs, attrs: Mapping) -> bool:
    """Vectors over output channels suit a convolution without groups whose channel count is a
    multiple of the vector width: every position, edges included, runs vector code."""
    v = args.caps.lanes(4)
    return (v > 1 and _is_float_2d_conv(args, attrs) and args.prepared["group"] == 1
            and args.prepared["geometry"].out_channels % v == 0)


def _pack_conv(args: KernelArgs, attrs: Mapping) -> dict:
    """Weights [M, C, kh, kw] as [C * kh * kw, M]: one tap's weights for consecutive output
    channels are consecutive, a vector load. Not for a pointwise convolution: its positions form
    one long axis, and vectors along it load and store whole vectors (measured faster)."""
    if not _channel_vectors(args, attrs) or args.inputs[1].type.rank != 4 or args.prepared["geometry"].pointwise:
        return {}
    m = args.inputs[1].type.shape[0]
    return {1: lambda w: w.reshape(m, -1).T}


def conv_host(graph, node_id, cluster_id, args, attrs):
    """Vectors over output channels where the weights were packed for it, else over positions."""
    if args.inputs[1].type.rank == 2:
        return conv_channel_vectors(graph, node_id, cluster_id, args, attrs)
    return conv_blocked(graph, node_id, cluster_id, args, attrs)


# --- the NCHW steps both register-blocked kernels share (this one and cortex_m.py's) --------
N, G, C = Affine.var("n"), Affine.var("g"), Affine.var("c")


def nchw_store(ops: ConvOperands, oc: Affine, out_pos, value: Expr) -> Store:
    """y[n, oc, position] = value, saying where it writes (for fusion)."""
    geo = ops.geometry
    at = N * (geo.out_channels * geo.out_size) + oc * geo.out_size + dot(out_pos, ops.space.out_strides)
    return Store(ops.y, at.expr(), value, (N.expr(), oc.expr(), *ops.space.coords(out_pos)))


def nchw_bias_stores(ops: ConvOperands, tl: TileLoops, ocs: Sequence[Affine]) -> list[Stmt]:
    """A tile whose windows lie wholly in the padding: each channel's bias (or 0) in its loops."""
    stores = [nchw_store(ops, oc, tl.out_pos, Load(ops.bias, oc.expr()) if ops.bias is not None else const(0))
              for oc in ocs]
    return list(loops(tl.outer, stores))


def _accumulator_start(ops: ConvOperands, oc: Affine, width: int) -> Expr:
    """The bias of channel `oc` (or 0) in every lane."""
    init: Expr = Load(ops.bias, oc.expr()) if ops.bias is not None else const(0)
    if width > 1:
        return Broadcast(init, width) if ops.bias is not None else Const(0, FLOAT, width)
    return init


def _input_loads(ops: ConvOperands, tl: TileLoops, positions, at_tap, width: int, t: int, names: dict,
                 body: list[Stmt], clip_row: bool) -> list[str | None]:
    """Each position's input at one tap as a local (added to `body`), loaded once however many
    positions read it; None where a clipped row's tap lies in the padding."""
    geo, space = ops.geometry, ops.space
    row_in = space.windows[-1].in_size
    xs: list[str | None] = []
    for in_pos, _ in positions:
        col = at_tap(in_pos[-1])
        if clip_row and not col.terms and not 0 <= col.const < row_in:
            xs.append(None)
            continue
        x_at = (N * (geo.channels * geo.in_size) + G * (geo.in_per_group * geo.in_size) + C * geo.in_size
                + dot(tuple(at_tap(p) for p in in_pos), space.in_strides))
        key = (tuple(sorted(x_at.terms)), x_at.const)
        if key not in names:
            names[key] = f"x{t}_{len(names)}"
            stride = dict(in_pos[-1].terms).get(space.row, 1) if width > 1 else 1
            value: Expr = Load(ops.x, x_at.expr(), width, None, stride)
            if tl.in_bounds is not None and not clip_row:
                value = Select(tl.in_bounds, value, const(0))
            body.append(Local(names[key], value, FLOAT, width))
        xs.append(names[key])
    return xs


def _weight_products(ops: ConvOperands, tl: TileLoops, ocs, accs, xs, at_tap, width: int, t: int,
                     tv: int | None) -> list[Stmt]:
    """Per channel of the block: its weight at this tap as a local, times every position's input."""
    geo = ops.geometry
    k_size = geo.kernel_size
    tap = dot(tuple(at_tap(p) for p in tl.tap), ops.space.tap_strides)
    body: list[Stmt] = []
    for i, oc in enumerate(ocs):
        w_at = ((C * k_size + tap) * geo.out_channels + oc if ops.weights_packed
                else oc * (geo.in_per_group * k_size) + C * k_size + tap)
        wv: Expr = Load(ops.w, w_at.expr())
        wname = f"w{t}_{i}" if tv is None else f"w{t}_{i}_{tv}"
        body.append(Local(wname, Broadcast(wv, width) if width > 1 else wv, FLOAT, width))
        body += [Assign(accs[i][j], Binary("+", Var(accs[i][j]), Binary("*", Var(wname), Var(x))))
                 for j, x in enumerate(xs) if x is not None]
    return body


def register_block(ops: ConvOperands, tl: TileLoops, ocs: Sequence[Affine], positions, width: int = 1,
                   clip_row: bool = False) -> list[Stmt]:
    """Accumulate and store len(ocs) channels x len(positions) position vectors (`width` lanes) of
    one tile. Scalar code unrolls the innermost tap loop: position j at tap k reads what position
    j+1 reads at tap k-1, so each input is loaded once. With `clip_row` the taps of a row that
    fall in the padding are left out at generation time instead of tested."""
    t = ops.serial()
    accs = [[f"acc{t}_{i}_{j}" for j in range(len(positions))] for i in range(len(ocs))]
    stmts: list[Stmt] = [Local(accs[i][j], _accumulator_start(ops, oc, width), FLOAT, width)
                         for i, oc in enumerate(ocs) for j in range(len(positions))]
    taps = tl.taps
    unroll = width == 1 and (clip_row or tl.in_bounds is None) and bool(taps) and taps[-1][1] <= 8
    body: list[Stmt] = []
    names: dict = {}
    for tv in (range(taps[-1][1]) if unroll else [None]):
        def at_tap(a: Affine, tv=tv) -> Affine:
            return a if tv is None else a.substituted(taps[-1][0], Affine((), tv))
        xs = _input_loads(ops, tl, positions, at_tap, width, t, names, body, clip_row)
        body += _weight_products(ops, tl, ocs, accs, xs, at_tap, width, t, tv)
    stmts += loops((("c", ops.geometry.in_per_group),) + (taps[:-1] if unroll else taps), body)
    stmts += [nchw_store(ops, oc, out_pos, Var(accs[i][j]))
              for i, oc in enumerate(ocs) for j, (_, out_pos) in enumerate(positions)]
    return stmts


# --- register blocks over positions ---------------------------------------------------------
def _blocked_tile(ops: ConvOperands, tl: TileLoops, ocs: Sequence[Affine], nb: int, v: int) -> list[Stmt]:
    """One tile: MB channels x NB vectors of V positions along the row where the row is the tile's
    innermost loop and no tap is tested, else one position at a time."""
    stmts: list[Stmt] = [Comment(tl.label)]
    if tl.empty:
        return stmts + nchw_bias_stores(ops, tl, ocs)
    row = ops.space.row
    if tl.in_bounds is not None or not tl.outer or tl.outer[-1][0] != row:
        return stmts + list(loops(tl.outer, register_block(ops, tl, ocs, [(tl.in_pos, tl.out_pos)])))
    count = tl.outer[-1][1]
    stride_last = dict(tl.in_pos[-1].terms).get(row, 0)
    width = v if stride_last in (1, 2) and count >= v else 1
    blocks = max(1, min(nb, count // width))  # a short row takes fewer vectors per block
    return stmts + blocked_row(tl, blocks, lambda positions, w: register_block(ops, tl, ocs, positions, w), width)


def conv_blocked(graph, node_id, cluster_id, args, attrs):
    """Register-blocked direct convolution (see the module doc)."""
    ops = ConvOperands.of(args, flatten_pointwise=True)
    geo = ops.geometry
    mg = geo.out_per_group
    mb_full, nb, v = _blocking(args.caps, geo.in_per_group == 1 and mg == 1)
    tile_list = tiles(ops.space.windows)
    stmts: list[Stmt] = []
    for m0, mb, blocks in channel_blocks(mg, mb_full):
        ocs = [G * mg + m0 + i for i in range(mb)]
        nests = [s for tile in tile_list for s in _blocked_tile(ops, tile_loops(ops.space.axes, tile), ocs, nb, v)]
        stmts += loops((("mb", blocks),) if blocks > 1 else (), [For("n", geo.batch, tuple(nests))])
    return list(loops((("g", geo.group),), stmts))


# --- register blocks over output channels --------------------------------------------------
def _lane_stores(ops: ConvOperands, m0: Affine, vectors: int, v: int, accs, positions) -> list[Stmt]:
    """Each lane of each accumulator to its own channel (the epilogue, if any, runs per element)."""
    stmts: list[Stmt] = []
    for i in range(vectors):
        for j, (_, out_pos) in enumerate(positions):
            stmts += [nchw_store(ops, m0 + i * v + lane, out_pos, Lane(Var(accs[i][j], FLOAT, v), index(lane)))
                      for lane in range(v)]
    return stmts


def _channel_vector_block(ops: ConvOperands, tl: TileLoops, m0: Affine, vectors: int, v: int,
                          positions) -> list[Stmt]:
    """acc[i][j] (V channels each) += w[c, tap, channels] * x[c, position j] over channels and taps."""
    geo, space = ops.geometry, ops.space
    t = ops.serial()
    accs = [[f"acc{t}_{i}_{j}" for j in range(len(positions))] for i in range(vectors)]
    stmts: list[Stmt] = []
    for i in range(vectors):
        init: Expr = Load(ops.bias, (m0 + i * v).expr(), v) if ops.bias is not None else Const(0, FLOAT, v)
        stmts += [Local(accs[i][j], init, FLOAT, v) for j in range(len(positions))]
    body: list[Stmt] = []
    for j, (in_pos, _) in enumerate(positions):
        value: Expr = Load(ops.x, (N * (geo.channels * geo.in_size) + C * geo.in_size
                                   + dot(in_pos, space.in_strides)).expr())
        if tl.in_bounds is not None:
            value = Select(tl.in_bounds, value, const(0))
        body.append(Local(f"x{t}_{j}", Broadcast(value, v), FLOAT, v))
    tap = dot(tl.tap, space.tap_strides)
    for i in range(vectors):
        w_at = (C * geo.kernel_size + tap) * geo.out_channels + m0 + i * v
        body.append(Local(f"w{t}_{i}", Load(ops.w, w_at.expr(), v), FLOAT, v))
        body += [Assign(accs[i][j], Binary("+", Var(accs[i][j]), Binary("*", Var(f"w{t}_{i}"), Var(f"x{t}_{j}"))))
                 for j in range(len(positions))]
    stmts += loops((("c", geo.channels),) + tl.taps, body)
    return stmts + _lane_stores(ops, m0, vectors, v, accs, positions)


def _channel_vector_tile(ops: ConvOperands, tl: TileLoops, m0: Affine, vectors: int, v: int, nb: int) -> list[Stmt]:
    """One tile: NB positions along the row at a time where the row is the tile's innermost loop
    and no tap is tested (a tested tile's test is written for its own position), else one."""
    stmts: list[Stmt] = [Comment(tl.label)]
    if tl.empty:
        return stmts + nchw_bias_stores(ops, tl, [m0 + i for i in range(vectors * v)])
    if not tl.outer or tl.outer[-1][0] != ops.space.row or tl.in_bounds is not None:
        return stmts + list(loops(tl.outer, _channel_vector_block(ops, tl, m0, vectors, v, [(tl.in_pos, tl.out_pos)])))
    blocks = max(1, min(nb, tl.outer[-1][1]))
    return stmts + blocked_row(tl, blocks,
                               lambda positions, _: _channel_vector_block(ops, tl, m0, vectors, v, positions))


def conv_channel_vectors(graph, node_id, cluster_id, args, attrs):
    """acc[i][j] (V channels each) += w[c, tap, channels] * x[c, position j] over channels and taps,
    for MBV channel vectors and NB positions of a row at a time; each lane then stores its
    element (the epilogue, if any, runs per element)."""
    ops = ConvOperands.of(args)
    v = args.caps.lanes(4)
    mbv, nb = (4, 2) if v <= 4 else (2, 4)
    tile_list = tiles(ops.space.windows)
    stmts: list[Stmt] = []
    for m0, width, count in channel_blocks(ops.geometry.out_channels, mbv * v):
        nests = [s for tile in tile_list
                 for s in _channel_vector_tile(ops, tile_loops(ops.space.axes, tile), m0, width // v, v, nb)]
        stmts += loops((("mb", count),) if count > 1 else (), [For("n", ops.geometry.batch, tuple(nests))])
    return stmts


# --- Gemm with one row ---------------------------------------------------------------------
def _is_gemv(args: KernelArgs, attrs: Mapping) -> bool:
    a = args.inputs[0]
    return (args.caps.fpu != "none" and a.type.dtype == FLOAT and args.outputs[0].type.shape[0] == 1 and not attrs["transA"])


def gemv_epilogue(acc: Expr, col: Expr, width: int, c, attrs: Mapping) -> Expr:
    """alpha * acc + beta * c[col] (c's one column broadcast along the row where it has one)."""
    value = acc
    if attrs["alpha"] != 1.0:
        value = Binary("*", Const(attrs["alpha"], FLOAT, width), value)
    if c is not None:
        per_column = bool(c.type.shape) and c.type.shape[-1] != 1
        bias: Expr = Load(c.name, col, width) if per_column else Load(c.name, index(0))
        if width > 1 and not per_column:
            bias = Broadcast(bias, width)
        if attrs["beta"] != 1.0:
            bias = Binary("*", Const(attrs["beta"], FLOAT, width), bias)
        value = Binary("+", value, bias)
    return value


def _gemv_operands(args: KernelArgs):
    """(a, B, c or None, y, N, K) of a one-row Gemm."""
    a, out = args.inputs[0], args.outputs[0]
    return (a, args.inputs[1], args.inputs[2] if len(args.inputs) > 2 else None, out, out.type.shape[1],
            a.type.shape[1])


def _dot_outputs(args: KernelArgs, attrs: Mapping, first: Expr, count: int, p: str = "") -> list[Stmt]:
    """`count` outputs from `first` as dot products of a with rows of B ([N, K]): V lanes along k,
    then the rest of k one at a time; `p` prefixes local names (no shadowing in nested scopes)."""
    a, bm, c, out, _, k_extent = _gemv_operands(args)
    v = args.caps.lanes(4)
    kv = k_extent - k_extent % v if v > 1 else 0
    k = Var("k", INDEX)
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
    body += [Store(out.name, col, gemv_epilogue(Var(f"{p}acc{j}"), col, 1, c, attrs), (index(0), col))
             for j, col in enumerate(cols)]
    return body


def _row_products(a, bm, cols, kk: Expr, n_extent: int, width: int, p: str, tag: str) -> list[Stmt]:
    """acc_j += a[kk] * B[kk, col_j]"""
    ak: Expr = Load(a.name, kk)
    name = f"{p}ak{tag}"
    stmts: list[Stmt] = [Local(name, Broadcast(ak, width) if width > 1 else ak, FLOAT, width)]
    stmts += [Assign(f"{p}acc{j}", Binary("+", Var(f"{p}acc{j}"), Binary(
        "*", Var(name), Load(bm.name, Binary("+", Binary("*", kk, index(n_extent)), col), width))))
        for j, col in enumerate(cols)]
    return stmts


def _column_outputs(args: KernelArgs, attrs: Mapping, first: Expr, count: int, width: int, p: str = "") -> list[Stmt]:
    """`count` vectors of `width` columns from `first`, accumulating rows of B ([K, N]) scaled by a[k];
    `p` prefixes local names."""
    a, bm, c, out, n_extent, k_extent = _gemv_operands(args)
    k = Var("k", INDEX)
    cols = [Binary("+", first, index(j * width)) for j in range(count)]
    zero = Const(0, FLOAT, width) if width > 1 else const(0)
    body: list[Stmt] = [Local(f"{p}acc{j}", zero, FLOAT, width) for j in range(count)]
    unroll = 1  # two rows per iteration measured slower on the Cortex-M4 (address arithmetic)
    main_k = k_extent - k_extent % unroll
    inner = [s for u in range(unroll)
             for s in _row_products(a, bm, cols, Binary("+", k, index(u)) if u else k, n_extent, width, p, str(u))]
    body.append(For("k", main_k, tuple(inner), unroll))
    if k_extent - main_k:
        body += _row_products(a, bm, cols, index(main_k), n_extent, width, p, "t")
    body += [Store(out.name, col, gemv_epilogue(Var(f"{p}acc{j}", FLOAT, width), col, width, c, attrs), (index(0), col))
             for j, col in enumerate(cols)]
    return body


def gemv(graph, node_id, cluster_id, args, attrs):
    """y = alpha * a B' + beta * c for a single row a (see the module doc)."""
    n_extent = args.outputs[0].type.shape[1]
    v = args.caps.lanes(4)
    stmts: list[Stmt] = []
    if attrs["transB"]:  # B is [N, K]: dot products along k, NB outputs share each load of a
        nb = 4
        main = n_extent - n_extent % nb
        if main:
            stmts.append(For("j", main, tuple(_dot_outputs(args, attrs, Var("j", INDEX), nb)), nb))
        if n_extent - main:  # leftover outputs, one at a time
            first = Binary("+", Var("jr", INDEX), index(main))
            stmts.append(For("jr", n_extent - main, tuple(_dot_outputs(args, attrs, first, 1, "r"))))
        return stmts
    # B is [K, N]: V outputs at a time accumulate rows of B
    # each weight is used once: the loop is loads and multiply-adds, plus one load of a[k] and the
    # loop's own instructions, shared by more outputs the more accumulators the registers hold
    nb = 2 if v > 1 else 8 if args.caps.float_registers >= 32 else 4
    step = v * nb
    main = n_extent - n_extent % step
    if main:
        stmts.append(For("j", main, tuple(_column_outputs(args, attrs, Var("j", INDEX), nb, v)), step))
    if n_extent - main:  # leftover columns, one at a time
        first = Binary("+", Var("jr", INDEX), index(main))
        stmts.append(For("jr", n_extent - main, tuple(_column_outputs(args, attrs, first, 1, 1, "r"))))
    return stmts


VECTORS.register("Conv", family="convolution", types=same("float32", 3, acc="float32"), layout="nchw", epilogue=True,
                  when=_is_float_2d_conv, pack=_pack_conv)(conv_host)
VECTORS.register("Gemm", family="matrix", types=same("float32", 3, acc="float32"), epilogue=True, when=_is_gemv)(gemv)
# the cortex-m backend's kernels: codegen/generate/functors/cortex_m.py

# Channels-last kernels (the layout pass's ConvNHWC and pools), registered on cpp: with the
# target's vector width they are the host's, with one lane the portable ones.
from tinsmith.generate.functors import host_conv, host_pool  # noqa: E402,F401
