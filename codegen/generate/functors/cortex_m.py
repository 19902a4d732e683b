"""Cortex-M kernels: register blocks of scalar accumulators for the FPv4/FPv5 register file.

Cost is counted in instructions per multiply-accumulate (QEMU -icount, docs/BENCHMARKS.md). A
fused multiply-add is one; what a kernel adds on top is loads, loop control and the epilogue, so
every value loaded feeds as many accumulators as the 32 single-precision registers allow, without
pushing so many callee-saved registers that the stack grows:

- a convolution with a window: MB = 2 output channels x NB = 6 positions along the row, the
  innermost tap loop unrolled so neighbouring positions share each input load; weights packed
  [C * kh * kw, M] at build time, so the block's weights for one input channel are within a few
  hundred bytes of each other and one pointer with immediate offsets reaches them all;
- a pointwise convolution (1x1, stride 1, no padding): one axis of H * W positions, 4 channels x
  6 positions (24 accumulators, 6 inputs, one weight: 31 registers);
- a depthwise convolution: 1 channel x 4 positions;
- Gemm with one row and B as [K, N]: 12 consecutive outputs per pass over a.

Every tile of the output is exact (taps clipped to the input, never a bounds test per tap), so
the edge rows of a padded convolution run blocked like the interior; positions left over after
the last full block of a row are one smaller block. A row of at most NARROW_ROW outputs is one
block over the whole row: each position's taps in the padding are left out at generation time,
so its edge positions share the row's input loads. Each accumulator adds its terms in the
portable kernel's order (bias, input channels, taps), as one fused multiply-add each.
"""
from __future__ import annotations

import math
from typing import Mapping

from codegen.generate.backend import KernelArgs, same
from codegen.generate.kernel_sets import FPU_REGISTERS
from codegen.generate.functors.conv import (Affine, Axis, channel_blocks, dot, is_pointwise, loops, plan_axis,
                                            row_major_strides, tile_loops, tiles, whole_axis)
from codegen.generate.functors.fast import FLOAT, _is_float_2d_conv, _is_gemv, gemv
from codegen.generate.loop_ir import (INDEX, Assign, Binary, Comment, Const, Expr, For, Load, Local, Stmt,
                                      Store, Var, const, index)
from codegen.ops.conv import Window

# (output channels, positions) per register block; measured on the emulated Cortex-M4 against
# instructions per MAC and the stack (4 x 4 pointwise: 2.05 on vww; 2 x 8 windows: faster than
# 2 x 6 but 16 bytes more stack on ic; 4 x 3 windows: 0.1 instructions per MAC more on ic)
POINTWISE_BLOCK = (4, 6)
WINDOW_BLOCK = (2, 6)
DEPTHWISE_BLOCK = (1, 4)
GEMV_COLUMNS = 12
NARROW_ROW = 8


def _has_fpu_conv(args: KernelArgs, attrs: Mapping) -> bool:
    # without an FPU every float operation is a library call: blocking saves nothing (the M0+)
    return args.caps.fpu != "none" and args.caps.float_registers >= 32 and _is_float_2d_conv(args, attrs)


def _pack_taps_by_channel(args: KernelArgs, attrs: Mapping) -> dict:
    """Weights [M, C, kh, kw] as [C * kh * kw, M] for a convolution with a window and no groups
    (see the module doc). With a pointer per output channel GCC spills pointers and the stack
    grows; a pointwise convolution keeps the model's layout (packed, it measured slower)."""
    w = args.inputs[1]
    if (not _has_fpu_conv(args, attrs) or args.prepared["group"] != 1 or w.type.rank != 4
            or is_pointwise(args.prepared["windows"])):
        return {}
    m = w.type.shape[0]
    return {1: lambda a: a.reshape(m, -1).T}


@FPU_REGISTERS.register("Conv", family="convolution", types=same("float32", 3, acc="float32"), layout="nchw",
                         epilogue=True, when=_has_fpu_conv, pack=_pack_taps_by_channel)
def conv_scalar_blocked(graph, node_id, cluster_id, args, attrs):
    """Register-blocked direct convolution (see the module doc)."""
    x, w, y = args.inputs[0], args.inputs[1], args.outputs[0]
    b = args.inputs[2] if len(args.inputs) > 2 else None
    group, wins = args.prepared["group"], list(args.prepared["windows"])
    batch, channels = x.type.shape[:2]
    packed = w.type.rank == 2
    out_channels = w.type.shape[1] if packed else w.type.shape[0]
    cg, mg = channels // group, out_channels // group
    k_shape = tuple(win.kernel for win in wins)
    k_size = math.prod(k_shape)
    in_size, out_size = x.type.size // (batch * channels), y.type.size // (batch * out_channels)
    in_strides, out_strides = row_major_strides(x.type.shape[2:]), row_major_strides(y.type.shape[2:])
    k_strides = row_major_strides(k_shape)
    pointwise = is_pointwise(wins)
    if pointwise:  # one axis over all positions
        wins = [Window(in_size, out_size, 1)]
        in_strides, out_strides, k_strides = (1,), (1,), (0,)
    mb_full, nb = (DEPTHWISE_BLOCK if cg == 1 and mg == 1 else POINTWISE_BLOCK if pointwise else WINDOW_BLOCK)
    axes = [Axis(win) for win in wins]
    n, g = Affine.var("n"), Affine.var("g")
    spatial = y.type.shape[2:]
    serial = [0]

    def out_coords(out_pos: tuple[Affine, ...]) -> tuple[Expr, ...]:
        """Coordinates in y of an output position (the flat axis of a pointwise conv unflattened)."""
        if len(out_pos) == 1 and len(spatial) == 2:
            flat = out_pos[0].expr()
            return (n.expr(), Binary("/", flat, index(spatial[1])), Binary("%", flat, index(spatial[1])))
        return (n.expr(), *(p.expr() for p in out_pos))

    def store(oc: Affine, out_pos, value: Expr) -> Store:
        at = n * (out_channels * out_size) + oc * out_size + dot(out_pos, out_strides)
        coords = out_coords(out_pos)
        return Store(y.name, at.expr(), value, (coords[0], oc.expr(), *coords[1:]))

    def block(tl, m0: Affine, mb: int, positions) -> list[Stmt]:
        """Accumulate and store MB channels x len(positions) outputs of one tile."""
        ocs = [g * mg + m0 + i for i in range(mb)]
        t = serial[0]  # names unique per block: a block without loops of its own shares its scope
        serial[0] += 1
        accs = [[f"acc{t}_{i}_{j}" for j in range(len(positions))] for i in range(mb)]
        stmts: list[Stmt] = [Local(accs[i][j], Load(b.name, oc.expr()) if b is not None else const(0), FLOAT)
                             for i, oc in enumerate(ocs) for j in range(len(positions))]
        # The innermost tap loop is unrolled: position j at tap k reads what position j+1 reads at
        # tap k-1, so each input is loaded once per block.
        taps = tl.taps
        unroll = bool(taps) and taps[-1][1] <= 8
        c = Affine.var("c")
        body: list[Stmt] = []
        x_names: dict = {}
        for tv in (range(taps[-1][1]) if unroll else [None]):
            def at_tap(a: Affine) -> Affine:
                return a if tv is None else a.substituted(taps[-1][0], Affine((), tv))
            xs = []
            for in_pos, _ in positions:
                col = at_tap(in_pos[-1])
                if not col.terms and not 0 <= col.const < row_in:  # a narrow row's tap in the padding
                    xs.append(None)
                    continue
                x_at = n * (channels * in_size) + g * (cg * in_size) + c * in_size + dot(
                    tuple(at_tap(p) for p in in_pos), in_strides)
                key = (tuple(sorted(x_at.terms)), x_at.const)
                if key not in x_names:
                    x_names[key] = f"x{t}_{len(x_names)}"
                    body.append(Local(x_names[key], Load(x.name, x_at.expr()), FLOAT))
                xs.append(x_names[key])
            tap = dot(tuple(at_tap(p) for p in tl.tap), k_strides)
            for i, oc in enumerate(ocs):
                w_at = (c * k_size + tap) * out_channels + oc if packed else oc * (cg * k_size) + c * k_size + tap
                wname = f"w{t}_{i}" if tv is None else f"w{t}_{i}_{tv}"
                body.append(Local(wname, Load(w.name, w_at.expr()), FLOAT))
                body += [Assign(accs[i][j], Binary("+", Var(accs[i][j]), Binary("*", Var(wname), Var(xs[j]))))
                         for j in range(len(positions)) if xs[j] is not None]
        stmts += loops((("c", cg),) + (taps[:-1] if unroll else taps), body)
        stmts += [store(oc, out_pos, Var(accs[i][j]))
                  for i, oc in enumerate(ocs) for j, (_, out_pos) in enumerate(positions)]
        return stmts

    def tile_code(tile, m0: Affine, mb: int) -> list[Stmt]:
        tl = tile_loops(axes, tile)
        stmts: list[Stmt] = [Comment(tl.label)]
        if tl.empty:  # the window lies in the padding: the bias
            return stmts + list(loops(tl.outer, [
                store(g * mg + m0 + i, tl.out_pos, Load(b.name, (g * mg + m0 + i).expr()) if b is not None
                      else const(0)) for i in range(mb)]))
        last = f"o{len(axes) - 1}"
        if narrow:  # the whole row is one block, its taps in the padding left out (block())
            count = dict(tl.outer).get(last, 1)
            positions = [tl.position(last, Affine((), j)) for j in range(count)]
            return stmts + list(loops([o for o in tl.outer if o[0] != last], block(tl, m0, mb, positions)))
        assert tl.in_bounds is None  # exact tiles clip their taps instead
        if not tl.outer or tl.outer[-1][0] != last:  # one position along the row
            return stmts + list(loops(tl.outer, block(tl, m0, mb, [(tl.in_pos, tl.out_pos)])))
        count = tl.outer[-1][1]
        blocks = min(nb, count)  # a short row takes fewer positions per block
        main = count - count % blocks
        positions = tl.neighbours(last, blocks)
        stmts += loops(tl.outer[:-1], [For(last, main, tuple(block(tl, m0, mb, positions)), blocks)])
        if count - main:  # the positions left over: one smaller block
            positions = [tl.position(last, Affine((), main + j)) for j in range(count - main)]
            stmts += loops(tl.outer[:-1], block(tl, m0, mb, positions))
        return stmts

    # A narrow row (at most NARROW_ROW outputs) is one block: its edge positions share the inputs
    # with the rest instead of running as tiles of one position; the other axes are exact tiles.
    row_in = wins[-1].in_size
    narrow = not pointwise and wins[-1].out_size <= NARROW_ROW and wins[-1].kernel <= 8
    tile_list = ([lead + (whole_axis(wins[-1], plan_axis(wins[-1], exact_only=True)),)
                  for lead in tiles(wins[:-1], exact_only=True)] if narrow else tiles(wins, exact_only=True))
    stmts: list[Stmt] = []
    for m0, mb, count in channel_blocks(mg, mb_full):
        # the channel-block loop inside each tile: what the compiler hoists out of it (pointers)
        # then lives in that tile's loops only, not across all of them (spills, stack)
        for tile in tile_list:
            stmts += loops((("mb", count),) if count > 1 else (), [For("n", batch, tuple(tile_code(tile, m0, mb)))])
    return list(loops((("g", group),), stmts))


def _is_scalar_gemv(args: KernelArgs, attrs: Mapping) -> bool:
    return _is_gemv(args, attrs) and args.caps.float_registers >= 32


@FPU_REGISTERS.register("Gemm", family="matrix", types=same("float32", 3, acc="float32"), epilogue=True, when=_is_scalar_gemv)
def gemv_scalar_blocked(graph, node_id, cluster_id, args, attrs):
    """y = alpha * a B' + beta * c for a single row a. B as [K, N]: GEMV_COLUMNS consecutive outputs
    accumulate a[k] * B[k, j..] per pass over a (each weight is used once: the loop is a load and
    a multiply-add per weight, plus the load of a[k] and the loop's own instructions shared by the
    block); the outputs left over are one smaller block. With transB, the shared kernel."""
    if attrs["transB"]:
        return gemv(graph, node_id, cluster_id, args, attrs)
    a, bm = args.inputs[0], args.inputs[1]
    c = args.inputs[2] if len(args.inputs) > 2 else None
    out = args.outputs[0]
    n_extent, k_extent = out.type.shape[1], a.type.shape[1]
    k = Var("k", INDEX)

    def columns(first: Expr, count: int, p: str) -> list[Stmt]:
        cols = [Binary("+", first, index(j)) for j in range(count)]
        body: list[Stmt] = [Local(f"{p}acc{j}", const(0), FLOAT) for j in range(count)]
        inner: list[Stmt] = [Local(f"{p}ak", Load(a.name, k), FLOAT)]
        inner += [Assign(f"{p}acc{j}", Binary("+", Var(f"{p}acc{j}"), Binary(
            "*", Var(f"{p}ak"), Load(bm.name, Binary("+", Binary("*", k, index(n_extent)), col)))))
            for j, col in enumerate(cols)]
        body.append(For("k", k_extent, tuple(inner)))
        for j, col in enumerate(cols):
            value: Expr = Var(f"{p}acc{j}", FLOAT)
            if attrs["alpha"] != 1.0:
                value = Binary("*", Const(attrs["alpha"], FLOAT), value)
            if c is not None:
                bias: Expr = Load(c.name, col if c.type.shape and c.type.shape[-1] != 1 else index(0))
                if attrs["beta"] != 1.0:
                    bias = Binary("*", Const(attrs["beta"], FLOAT), bias)
                value = Binary("+", value, bias)
            body.append(Store(out.name, col, value, (index(0), col)))
        return body

    main = n_extent - n_extent % GEMV_COLUMNS
    stmts: list[Stmt] = []
    if main:
        stmts.append(For("j", main, tuple(columns(Var("j", INDEX), GEMV_COLUMNS, "")), GEMV_COLUMNS))
    if n_extent - main:
        stmts += columns(index(main), n_extent - main, "r")
    return stmts
