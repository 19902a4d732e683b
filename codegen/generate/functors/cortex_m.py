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

from typing import Mapping, Sequence

from tinsmith.generate.backend import KernelArgs, same
from tinsmith.generate.kernel_sets import FPU_REGISTERS
from tinsmith.generate.functors.conv import (Affine, ConvAxes, ConvOperands, TileLoops, blocked_row, channel_blocks,
                                            loops, plan_axis, tile_loops, tiles, whole_axis)
from tinsmith.generate.functors.fast import (FLOAT, G, _gemv_operands, _is_float_2d_conv, _is_gemv, gemv,
                                            gemv_epilogue, nchw_bias_stores, register_block)
from tinsmith.generate.loop_ir import INDEX, Assign, Binary, Comment, Expr, For, Load, Local, Stmt, Store, Var, const, index

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
            or args.prepared["geometry"].pointwise):
        return {}
    m = w.type.shape[0]
    return {1: lambda a: a.reshape(m, -1).T}


def _scalar_tile(ops: ConvOperands, tl: TileLoops, ocs: Sequence[Affine], nb: int, narrow: bool) -> list[Stmt]:
    """One exact tile: MB channels x NB positions along the row, the positions left over one
    smaller block; a narrow row is one block, its taps in the padding left out."""
    stmts: list[Stmt] = [Comment(tl.label)]
    if tl.empty:  # the window lies in the padding: the bias
        return stmts + nchw_bias_stores(ops, tl, ocs)
    row = ops.space.row

    def block(positions, width: int = 1) -> list[Stmt]:
        return register_block(ops, tl, ocs, positions, clip_row=True)
    if narrow:  # the whole row is one block
        count = dict(tl.outer).get(row, 1)
        positions = [tl.position(row, Affine((), j)) for j in range(count)]
        return stmts + list(loops([o for o in tl.outer if o[0] != row], block(positions)))
    assert tl.in_bounds is None  # exact tiles clip their taps instead
    if not tl.outer or tl.outer[-1][0] != row:  # one position along the row
        return stmts + list(loops(tl.outer, block([(tl.in_pos, tl.out_pos)])))
    blocks = min(nb, tl.outer[-1][1])  # a short row takes fewer positions per block
    return stmts + blocked_row(tl, blocks, block, leftover_loop=False)


def _scalar_tiles(space: ConvAxes) -> tuple[list, bool]:
    """The exact tiles, and whether the row is narrow: at most NARROW_ROW outputs, one block whose
    edge positions share the inputs with the rest instead of running as tiles of one position (the
    other axes are exact tiles)."""
    wins = space.windows
    narrow = not space.flat and wins[-1].out_size <= NARROW_ROW and wins[-1].kernel <= 8
    if narrow:
        row = whole_axis(wins[-1], plan_axis(wins[-1], exact_only=True))
        return [lead + (row,) for lead in tiles(wins[:-1], exact_only=True)], True
    return tiles(wins, exact_only=True), False


@FPU_REGISTERS.register("Conv", family="convolution", types=same("float32", 3, acc="float32"), layout="nchw",
                         epilogue=True, when=_has_fpu_conv, pack=_pack_taps_by_channel)
def conv_scalar_blocked(graph, node_id, cluster_id, args, attrs):
    """Register-blocked direct convolution (see the module doc)."""
    ops = ConvOperands.of(args, flatten_pointwise=True)
    geo = ops.geometry
    mg = geo.out_per_group
    mb_full, nb = (DEPTHWISE_BLOCK if geo.in_per_group == 1 and mg == 1
                   else POINTWISE_BLOCK if ops.space.flat else WINDOW_BLOCK)
    tile_list, narrow = _scalar_tiles(ops.space)
    stmts: list[Stmt] = []
    for m0, mb, count in channel_blocks(mg, mb_full):
        ocs = [G * mg + m0 + i for i in range(mb)]
        # the channel-block loop inside each tile: what the compiler hoists out of it (pointers)
        # then lives in that tile's loops only, not across all of them (spills, stack)
        for tile in tile_list:
            nest = _scalar_tile(ops, tile_loops(ops.space.axes, tile), ocs, nb, narrow)
            stmts += loops((("mb", count),) if count > 1 else (), [For("n", geo.batch, tuple(nest))])
    return list(loops((("g", geo.group),), stmts))


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
    a, bm, c, out, n_extent, k_extent = _gemv_operands(args)
    k = Var("k", INDEX)

    def columns(first: Expr, count: int, p: str) -> list[Stmt]:
        cols = [Binary("+", first, index(j)) for j in range(count)]
        body: list[Stmt] = [Local(f"{p}acc{j}", const(0), FLOAT) for j in range(count)]
        inner: list[Stmt] = [Local(f"{p}ak", Load(a.name, k), FLOAT)]
        inner += [Assign(f"{p}acc{j}", Binary("+", Var(f"{p}acc{j}"), Binary(
            "*", Var(f"{p}ak"), Load(bm.name, Binary("+", Binary("*", k, index(n_extent)), col)))))
            for j, col in enumerate(cols)]
        body.append(For("k", k_extent, tuple(inner)))
        return body + [Store(out.name, col, gemv_epilogue(Var(f"{p}acc{j}", FLOAT), col, 1, c, attrs), (index(0), col))
                       for j, col in enumerate(cols)]

    main = n_extent - n_extent % GEMV_COLUMNS
    stmts: list[Stmt] = []
    if main:
        stmts.append(For("j", main, tuple(columns(Var("j", INDEX), GEMV_COLUMNS, "")), GEMV_COLUMNS))
    if n_extent - main:
        stmts += columns(index(main), n_extent - main, "r")
    return stmts
