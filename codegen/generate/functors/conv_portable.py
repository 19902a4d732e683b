"""The portable float convolution kernels (Conv and ConvTranspose, every grouping, 1-D to 3-D): the
family's loop nest (conv_nest.py) with one output channel and one position per block and the
scalar micro-kernel `ScalarDot`: acc = bias; acc += x * w over the group's input channels and the
taps (innermost), the taps clipped or tested only at the edges (checked tiles).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from tinsmith.generate.backend import CPP, same
from tinsmith.generate.functors.conv import (Affine, ConvOperands, TileLoops, accumulate, dot, loops,
                                            row_major_strides, transposed_phases)
from tinsmith.generate.functors.conv_nest import ChannelBlock, ConvNest, ConvSchedule, ConvSpace, convolution
from tinsmith.generate.loop_ir import Binary, Expr, Load, Local, Select, Stmt, Store, Var, const

N, G, C = Affine.var("n"), Affine.var("g"), Affine.var("c")

# one output channel (loop m) and one position per block
PORTABLE = ConvSchedule(along="none", channel_var="m")


@dataclass(frozen=True)
class ScalarDot:
    """The portable micro-kernel: one output as a dot product over the group's input channels and
    the tile's taps. Offsets: input n * in_batch + g * in_group + c * in_channel + position; weight
    g * w_group + m * w_out + c * w_channel + tap; output n * out_batch + (g * per_group + m) *
    out_channel + position. `coords`: the stores say where they write (for fusion)."""

    x: str
    w: str
    y: str
    bias: str | None
    per_group: int  # output channels per group
    in_batch: int
    in_group: int
    in_channel: int
    in_strides: tuple[int, ...]
    w_group: int
    w_out: int
    w_channel: int
    tap_strides: tuple[int, ...]
    out_batch: int
    out_channel: int
    out_strides: tuple[int, ...]
    channels: int  # input channels per group
    coords: bool = True
    accumulator = "float32"  # the sums' and the bias's element type (a class attribute, not a field)

    def prelude(self, block: ChannelBlock) -> list[Stmt]:
        """The bias of the block's channel, loaded once."""
        oc = G * self.per_group + block.first
        return [Local("bias", Load(self.bias, oc.expr()), self.accumulator)] if self.bias is not None else []

    def _init(self) -> Expr:
        return Var("bias") if self.bias is not None else const(0)

    def _store(self, tl: TileLoops, block: ChannelBlock, value: Expr) -> Store:
        oc = G * self.per_group + block.first
        out_at = N * self.out_batch + oc * self.out_channel + dot(tl.out_pos, self.out_strides)
        coords = tuple(a.expr() for a in (N, oc, *tl.out_pos)) if self.coords else None
        return Store(self.y, out_at.expr(), value, coords)

    def padding(self, tl: TileLoops, block: ChannelBlock) -> list[Stmt]:
        return [self._store(tl, block, self._init())]

    def _input(self, load: Expr) -> Expr:
        """A tap's input value as the product takes it, and the value a tap in the padding adds."""
        return load

    def _weight(self, load: Expr) -> Expr:
        """A tap's weight as the product takes it."""
        return load

    def block(self, tl: TileLoops, block: ChannelBlock, positions, width: int, scope: str) -> list[Stmt]:
        acc = f"acc{scope}"
        x_at = N * self.in_batch + G * self.in_group + C * self.in_channel + dot(tl.in_pos, self.in_strides)
        w_at = G * self.w_group + block.first * self.w_out + C * self.w_channel + dot(tl.tap, self.tap_strides)
        value = self._input(Load(self.x, x_at.expr()))
        if tl.in_bounds is not None:
            value = Select(tl.in_bounds, value, self._padding_value())
        product = Binary("*", value, self._weight(Load(self.w, w_at.expr())))
        reduce = loops((("c", self.channels),) + tl.taps, [accumulate(acc, product)])
        return [Local(acc, self._init(), self.accumulator), *reduce, self._store(tl, block, Var(acc))]

    def _padding_value(self) -> Expr:
        return const(0)


def scalar_dot_of(ops: ConvOperands, micro: type = ScalarDot, **extra) -> ScalarDot:
    """The portable micro-kernel (ScalarDot, or a subclass with its `extra` fields) of a convolution
    whose operands and geometry are `ops` (NCHW, groups)."""
    geo, space = ops.geometry, ops.space
    cg, mg, k = geo.in_per_group, geo.out_per_group, geo.kernel_size
    return micro(ops.x, ops.w, ops.y, ops.bias, per_group=mg, in_batch=geo.channels * geo.in_size,
                 in_group=cg * geo.in_size, in_channel=geo.in_size, in_strides=space.in_strides,
                 w_group=mg * cg * k, w_out=cg * k, w_channel=k, tap_strides=space.tap_strides,
                 out_batch=geo.out_channels * geo.out_size, out_channel=geo.out_size,
                 out_strides=space.out_strides, channels=cg, **extra)


@CPP.register("Conv", family="convolution", types=same("float32", 3, acc="float32"), layout="nchw",
               epilogue=True)
def conv(graph, node_id, cluster_id, args, attrs):
    """Direct convolution: per output channel and position, a dot product over the group's input
    channels and the kernel taps."""
    ops = ConvOperands.of(args)
    return convolution(ConvNest.of(ops), PORTABLE, scalar_dot_of(ops))


@CPP.register("ConvTranspose", family="convolution", types=same("float32", 3, acc="float32"), layout="nchw")
def conv_transpose(graph, node_id, cluster_id, args, attrs):
    """Transposed convolution written as gathers: one ordinary convolution per combination of
    phases (conv.transposed_phases), each a space of the nest."""
    x, w, y = args.inputs[0], args.inputs[1], args.outputs[0]
    b = args.inputs[2] if len(args.inputs) > 2 else None
    group, axes = args.prepared["group"], args.prepared["axes"]
    batch, channels = x.type.shape[:2]
    mg = w.type.shape[1]
    cg, out_channels = channels // group, mg * group
    in_size, out_size = x.type.size // (batch * channels), y.type.size // (batch * out_channels)
    k = w.type.size // (channels * mg)
    spaces = []
    for index, phase in enumerate(itertools.product(*[transposed_phases(a) for a in axes])):
        if any(p is None for p in phase):
            continue
        label = None
        if any(a.stride > 1 for a in axes):
            label = "phase: output positions " + " x ".join(f"{p.out_offset} + {p.out_scale} * o{d}"
                                                             for d, p in enumerate(phase))
        spaces.append(ConvSpace(tuple(phase), label, f"p{index}_"))  # the phases share the batch loop's scope
    micro = ScalarDot(x.name, w.name, y.name, b.name if b is not None else None, per_group=mg,
                      in_batch=channels * in_size, in_group=cg * in_size, in_channel=in_size,
                      in_strides=row_major_strides(x.type.shape[2:]), w_group=cg * mg * k, w_out=k, w_channel=mg * k,
                      tap_strides=row_major_strides(w.type.shape[2:]), out_batch=out_channels * out_size,
                      out_channel=out_size, out_strides=row_major_strides(y.type.shape[2:]), channels=cg,
                      coords=False)
    return convolution(ConvNest(batch, group, mg, tuple(spaces)), PORTABLE, micro)
