"""NCHW float convolution on GCC vectors (the `vectors` kernel set), and the NCHW register-block
micro-kernels: `RegisterBlock`, which the Cortex-M's schedule uses too (cortex_m.py), and
`ChannelVectors`. Both are micro-kernels of the family's loop nest (conv_nest.py); the schedules
below say how the vectors kernel set cuts the nest.

`RegisterBlock`: a block of MB output channels times NB groups of V output positions along the
last spatial axis keeps MB * NB accumulators (V lanes each) in registers; every input vector
loaded feeds MB accumulators and every weight feeds NB. V is the target's vector width in GCC
vector extensions (1 on a scalar FPU). Each accumulator adds its terms in the portable kernel's
order (bias, then input channels, then taps), so results are those of the scalar code. Where the
window meets padding the tiles of conv.tiles test or clip taps; those edge tiles use the same
blocking over channels with V = NB = 1. A pointwise convolution (1x1, stride 1, no padding) is one
axis of H*W positions: a matrix product.

`ChannelVectors`: vectors over output channels, for a convolution without groups whose channel
count is a multiple of the vector width (weights packed [C * kh * kw, M] at build time): every
position, edges included, runs vector code; each lane stores its own element.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from tinsmith.generate.backend import KernelArgs, same
from tinsmith.generate.kernel_sets import VECTORS
from tinsmith.generate.functors.conv import Affine, ConvOperands, TileLoops, dot, loops
from tinsmith.generate.functors.conv_nest import ChannelBlock, ConvNest, ConvSchedule, convolution
from tinsmith.generate.loop_ir import (Assign, Binary, Broadcast, Const, Expr, Lane, Load, Local, Select, Stmt, Store,
                                      Var, const, index)

FLOAT = "float32"


def _blocking(caps, depthwise: bool) -> tuple[int, int, int]:
    """(MB, NB, V): output channels, vectors of positions, lanes per vector."""
    v = caps.lanes(4)
    if v > 1 and caps.vector_register_count < 16:  # 8 (Helium): MB * NB accumulators, NB inputs, one weight
        return (1, 3, v) if depthwise else (2, 2, v)
    if v > 1:  # 16 vector registers
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


# --- the NCHW steps both register-blocked kernels share (this one and cortex_m.py's) --------
N, G, C = Affine.var("n"), Affine.var("g"), Affine.var("c")


def nchw_store(ops: ConvOperands, oc: Affine, out_pos, value: Expr) -> Store:
    """y[n, oc, position] = value, saying where it writes (for fusion)."""
    geo = ops.geometry
    at = N * (geo.out_channels * geo.out_size) + oc * geo.out_size + dot(out_pos, ops.space.out_strides)
    return Store(ops.y, at.expr(), value, (N.expr(), oc.expr(), *ops.space.coords(out_pos)))


def nchw_bias_stores(ops: ConvOperands, tl: TileLoops, ocs: Sequence[Affine]) -> list[Stmt]:
    """A tile whose windows lie wholly in the padding: each channel's bias (or 0)."""
    return [nchw_store(ops, oc, tl.out_pos, Load(ops.bias, oc.expr()) if ops.bias is not None else const(0))
            for oc in ocs]


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


@dataclass(frozen=True)
class RegisterBlock:
    """The NCHW micro-kernel over positions: the channel block's channels (of group g) x the
    positions, `width` lanes along the row (see register_block)."""

    ops: ConvOperands
    clip_row: bool = False

    def prelude(self, block: ChannelBlock) -> list[Stmt]:
        return []

    def _channels(self, block: ChannelBlock) -> list[Affine]:
        return [G * self.ops.geometry.out_per_group + m for m in block.channels]

    def padding(self, tl: TileLoops, block: ChannelBlock) -> list[Stmt]:
        return nchw_bias_stores(self.ops, tl, self._channels(block))

    def block(self, tl: TileLoops, block: ChannelBlock, positions, width: int, scope: str) -> list[Stmt]:
        return register_block(self.ops, tl, self._channels(block), positions, width, self.clip_row)


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


@dataclass(frozen=True)
class ChannelVectors:
    """The NCHW micro-kernel over output channels: the channel block's vectors of `lanes` channels
    x the positions, each input a scalar splat, each weight vector loaded from the packed
    [C * kh * kw, M] weights (no groups)."""

    ops: ConvOperands
    lanes: int

    def prelude(self, block: ChannelBlock) -> list[Stmt]:
        return []

    def padding(self, tl: TileLoops, block: ChannelBlock) -> list[Stmt]:
        return nchw_bias_stores(self.ops, tl, [block.first + i for i in range(len(block.vectors) * self.lanes)])

    def block(self, tl: TileLoops, block: ChannelBlock, positions, width: int, scope: str) -> list[Stmt]:
        return _channel_vector_block(self.ops, tl, block.first, len(block.vectors), self.lanes, positions)


def conv_host(graph, node_id, cluster_id, args, attrs):
    """The nest with vectors over output channels where the weights were packed for it (MBV
    channel vectors x NB positions of a row: 4 x 2 with 4 lanes, 2 x 4 wider), else with
    vectors over positions along the row (MB channels x NB vectors, see _blocking)."""
    v = args.caps.lanes(4)
    if args.inputs[1].type.rank == 2:
        ops = ConvOperands.of(args)
        mbv, nb = (4, 2) if v <= 4 else (2, 4)
        return convolution(ConvNest.of(ops), ConvSchedule(channels=mbv, lanes=v, positions=nb),
                           ChannelVectors(ops, v))
    ops = ConvOperands.of(args, flatten_pointwise=True)
    geo = ops.geometry
    mb, nb, v = _blocking(args.caps, geo.in_per_group == 1 and geo.out_per_group == 1)
    return convolution(ConvNest.of(ops), ConvSchedule(channels=mb, positions=nb, row_lanes=v), RegisterBlock(ops))


VECTORS.register("Conv", family="convolution", types=same("float32", 3, acc="float32"), layout="nchw", epilogue=True,
                  when=_is_float_2d_conv, pack=_pack_conv)(conv_host)
# the cortex-m backend's schedule: codegen/generate/functors/cortex_m.py

# Channels-last kernels (the layout pass's ConvNHWC and pools), registered on cpp: with the
# target's vector width they are the host's, with one lane the portable ones.
from tinsmith.generate.functors import host_conv, host_pool  # noqa: E402,F401
