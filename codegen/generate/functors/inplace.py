"""The in-place variant of an NCHW pointwise convolution (variants.py says what a variant is).

`pointwise_per_pixel`: a 1x1 convolution (stride 1, no padding, no groups) that copies a block of
positions' input channels into a scratch buffer, then computes every output channel of those
positions from the buffer: the convolution nest (conv_nest.py) in the "positions" order with the
micro-kernel `PixelBlock`. Output positions are written after their input positions were read and
before any later position is, so in NCHW the output may start at the input's first byte whatever
the channel counts: the workspace holds the larger of the two plus a few pixels.
"""
from __future__ import annotations

from dataclasses import dataclass

from tinsmith.generate.backend import KernelArgs
from tinsmith.generate.functors.conv import Affine, ConvOperands
from tinsmith.generate.functors.conv_nest import ChannelBlock, ConvNest, ConvSchedule, convolution
from tinsmith.generate.functors.fast import nchw_bias_stores, nchw_store
from tinsmith.generate.functors.variants import register_variant
from tinsmith.generate.loop_ir import Assign, Binary, For, Load, Local, Scratch, Stmt, Store, Var, const


def _is_plain_pointwise(args: KernelArgs, attrs) -> bool:
    x, y = args.inputs[0], args.outputs[0]
    if args.prepared is None or x.type.rank != 4 or x.type.dtype != "float32" or args.inputs[1] is None:
        return False
    wins = args.prepared["windows"]
    return args.prepared["group"] == 1 and len(wins) == 2 and all(
        w.kernel == 1 and w.stride == 1 and w.pad_begin == 0 and w.in_size == w.out_size for w in wins) \
        and y.type.dtype == "float32"


PIXELS, CHANNELS = 4, 4  # a block of positions times output channels kept in registers
N, C = Affine.var("n"), Affine.var("c")


@dataclass(frozen=True)
class PixelBlock:
    """The micro-kernel of pointwise_per_pixel: a block of positions' input channels copied into
    `pixel` (gather), then a channel block x those positions from the copy."""

    ops: ConvOperands

    def gather(self, tl, positions) -> list[Stmt]:
        geo, count = self.ops.geometry, len(positions)
        return [For("c", geo.channels, tuple(
            Store("pixel", (C * count + j).expr(),
                  Load(self.ops.x, (N * (geo.channels * geo.in_size) + C * geo.in_size + in_pos[0]).expr()))
            for j, (in_pos, _) in enumerate(positions)))]

    def prelude(self, block: ChannelBlock) -> list[Stmt]:
        return []

    def padding(self, tl, block: ChannelBlock) -> list[Stmt]:
        return nchw_bias_stores(self.ops, tl, block.channels)  # (no padding: a pointwise convolution)

    def block(self, tl, block: ChannelBlock, positions, width: int, scope: str) -> list[Stmt]:
        geo, t = self.ops.geometry, self.ops.serial()
        ocs, count = block.channels, len(positions)
        accs = [[f"acc{t}_{i}_{j}" for j in range(count)] for i in range(len(ocs))]
        stmts: list[Stmt] = [Local(accs[i][j], Load(self.ops.bias, oc.expr()) if self.ops.bias else const(0))
                             for i, oc in enumerate(ocs) for j in range(count)]
        body: list[Stmt] = [Local(f"w{t}_{i}", Load(self.ops.w, (oc * geo.channels + C).expr()))
                            for i, oc in enumerate(ocs)]
        body += [Local(f"x{t}_{j}", Load("pixel", (C * count + j).expr())) for j in range(count)]
        body += [Assign(accs[i][j], Binary("+", Var(accs[i][j]), Binary("*", Var(f"x{t}_{j}"), Var(f"w{t}_{i}"))))
                 for i in range(len(ocs)) for j in range(count)]
        stmts.append(For("c", geo.channels, tuple(body)))
        return stmts + [nchw_store(self.ops, oc, out_pos, Var(accs[i][j]))
                        for i, oc in enumerate(ocs) for j, (_, out_pos) in enumerate(positions)]


@register_variant("pointwise_per_pixel", "Conv", _is_plain_pointwise,
                  scratch=lambda prepared, caps: [Scratch("pixel", "float32", PIXELS * prepared.inputs[0].shape[1])])
def pointwise_per_pixel(graph, node_id, cluster_id, args, attrs):
    """The convolution nest with positions outside channels: per block of PIXELS positions, their
    input channels into `pixel`, then every output channel of those positions, CHANNELS at a time
    (PIXELS x CHANNELS accumulators, each input and weight loaded once per block). Positions and
    channels left over run as one smaller block each."""
    ops = ConvOperands.of(args, flatten_pointwise=True)
    schedule = ConvSchedule(channels=CHANNELS, positions=PIXELS, leftover_loop=False, order="positions",
                            channel_steps=True, channel_var="m")
    return convolution(ConvNest.of(ops), schedule, PixelBlock(ops))
