"""Scalar int8 kernels register-blocked for a core with 32 general registers and no packed
multiply-add (RV32IM and RV32IMAC): QConv2D, QDepthwise and QFullyConnected on the int8 family's
loop nests (quantized_driver.py).

The portable kernel computes one output channel of one pixel at a time, so every product loads
its input and its weight: about ten instructions per MAC on RV32IM. Here a block of pixels x
channels keeps its sums in registers, each input value (less the zero point) serves every channel
of the block and each weight every pixel: per input channel, PIXELS + CHANNELS loads for PIXELS *
CHANNELS multiply-adds (MUL and ADD: RV32IM has no multiply-accumulate). Eight sums, two inputs
and four weights stay in registers with room left for the pointers and loop counters. A depthwise
convolution has no sum over channels to share: four channels per step, each tap's input and
weight loaded once. Every sum is the portable kernel's exactly (integer arithmetic); the
requantization is quantized.py's.
"""
from __future__ import annotations

from typing import Sequence

from tinsmith.generate.functors import quantized as scalar
from tinsmith.generate.functors.conv import loops
from tinsmith.generate.functors.quantized import INT8_CONV
from tinsmith.generate.functors.quantized_driver import (TileGeometry, bias_only, channel_blocks, conv_nest,
                                                        depthwise_nest, fc_nest, plus)
from tinsmith.generate.functors.quantized_math import i32, widen
from tinsmith.generate.kernel_sets import INT_REGISTERS
from tinsmith.generate.loop_ir import Assign, Binary, Expr, For, Load, Local, Stmt, Var, index

# Block sizes, measured on the emulated rv32imac (kws / vww / ic / ad instructions): 2 pixels x 4
# channels 15.21 / 40.94 / 67.86 / 1.04 M, 3 x 4 13.56 / 44.18 / 65.59 / 1.04 M (the portable
# kernels: 27.06 / 84.15 / 144.74 / 2.36 M); 8 rows for a fully connected layer
PIXELS, CHANNELS, FC_ROWS, DEPTHWISE_CHANNELS = 2, 4, 8, 4


def _input(x: str, at: Expr, zero_point: int) -> Expr:
    v = widen(Load(x, at))
    return Binary("-", v, i32(zero_point)) if zero_point else v


def _block(graph, args, attrs, pixels: Sequence[tuple], first: Expr, n: int, tap_loops, w_tap: Expr,
           count: int) -> list[Stmt]:
    """Sums of len(pixels) pixels x n channels (first + c): the bias, then per input value one load
    of each pixel's input and each channel's weight feeding every sum, then each requantized."""
    x, w = args.inputs[0].name, args.inputs[1]
    k_size = w.type.size // w.type.shape[0]
    chans = [plus(first, c) for c in range(n)]
    w_base = Binary("+", Binary("*", first, index(k_size)), w_tap)
    i = Var("ic")
    body: list[Stmt] = [Local(f"x{p}", _input(x, Binary("+", at, i), attrs["x_zero_point"]), "int32")
                        for p, (at, _, _) in enumerate(pixels)]
    body += [Local(f"w{c}", widen(Load(w.name, Binary("+", plus(w_base, c * k_size), i))), "int32")
             for c in range(n)]
    body += [Assign(f"acc{p}{c}", Binary("+", Var(f"acc{p}{c}"), Binary("*", Var(f"x{p}"), Var(f"w{c}"))))
             for p in range(len(pixels)) for c in range(n)]
    stmts: list[Stmt] = [Local(f"acc{p}{c}", scalar._bias(args, ch), "int32")
                         for p in range(len(pixels)) for c, ch in enumerate(chans)]
    stmts += loops(tap_loops, [For("ic", count, tuple(body))])
    for p, (_, out_at, coords) in enumerate(pixels):
        for c, ch in enumerate(chans):
            at = coords + (ch,) if coords is not None else None
            stmts += scalar._finish(graph, args, attrs, ch, Binary("+", out_at, ch), at, f"acc{p}{c}")
    return stmts


class RegisterMicroKernel:
    """The int8 driver's inner tile for 32 general registers (see the module doc)."""

    pixels, channels = PIXELS, CHANNELS

    def conv_pixels(self, graph, args, attrs, geometry: TileGeometry, pixels) -> list[Stmt]:
        return channel_blocks(args.inputs[1].type.shape[0], self.channels, lambda first, n: _block(
            graph, args, attrs, pixels, first, n, geometry.tap_loops, geometry.w_tap, geometry.count))

    def empty(self, graph, args, attrs, out_at, coords) -> list[Stmt]:
        return bias_only(graph, args, attrs, out_at, coords)

    def fc_rows(self, graph, args, attrs, rows, k: int) -> list[Stmt]:
        return channel_blocks(args.inputs[1].type.shape[0], FC_ROWS, lambda first, n: _block(
            graph, args, attrs, rows, first, n, (), index(0), k))


REGISTER_KERNEL = RegisterMicroKernel()


@INT_REGISTERS.register("QConv2D", family="convolution", types=INT8_CONV, layout="nhwc")
def qconv2d_registers(graph, node_id, cluster_id, args, attrs):
    """QConv2D in blocks of pixels x channels held in registers."""
    return conv_nest(graph, args, attrs, REGISTER_KERNEL)


@INT_REGISTERS.register("QFullyConnected", family="matrix", types=INT8_CONV)
def qfully_connected_registers(graph, node_id, cluster_id, args, attrs):
    """QFullyConnected: FC_ROWS weight rows share each input value."""
    return fc_nest(graph, args, attrs, REGISTER_KERNEL)


def _depthwise_channels(graph, args, attrs, taps_at: list[tuple[Expr, Expr]], tap_loops, out_at: Expr,
                        coords) -> list[Stmt]:
    """DEPTHWISE_CHANNELS channels per step over the straight-line taps `taps_at` (input, weight
    offsets) inside `tap_loops`; the channels past a multiple of it in one smaller step."""
    c = args.inputs[1].type.shape[3]
    x, w = args.inputs[0].name, args.inputs[1].name

    def step(first: Expr, n: int) -> list[Stmt]:
        chans = [plus(first, j) for j in range(n)]
        macs: list[Stmt] = []
        for x_at, w_at in taps_at:
            for j, ch in enumerate(chans):
                xv = _input(x, Binary("+", x_at, ch), attrs["x_zero_point"])
                macs.append(Assign(f"acc{j}", Binary("+", Var(f"acc{j}"),
                                                     Binary("*", xv, widen(Load(w, Binary("+", w_at, ch)))))))
        body: list[Stmt] = [Local(f"acc{j}", scalar._bias(args, ch), "int32") for j, ch in enumerate(chans)]
        body += loops(tap_loops, macs)
        for j, ch in enumerate(chans):
            at = coords + (ch,) if coords is not None else None
            body += scalar._finish(graph, args, attrs, ch, Binary("+", out_at, ch), at, f"acc{j}")
        return body
    return channel_blocks(c, DEPTHWISE_CHANNELS, step)


@INT_REGISTERS.register("QDepthwise", family="convolution", types=INT8_CONV, layout="nhwc",
                        when=lambda args, attrs: attrs["depth_multiplier"] == 1)
def qdepthwise_registers(graph, node_id, cluster_id, args, attrs):
    """QDepthwise (depth multiplier 1), DEPTHWISE_CHANNELS channels per step."""
    return depthwise_nest(graph, args, attrs, _depthwise_channels)
