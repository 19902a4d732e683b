"""The portable micro-kernel of the int8 family: the driver's loop nest (quantized_driver.py) with
one output channel at a time and a plain loop over each run of taps (a fully connected row: over its
K inputs; a depthwise window: its taps, any depth multiplier), (x - zero point) * w added to an int32
sum, requantized by the portable requantization.
It takes every quantized type the primitives accept (int8, uint8 and int16 activations;
fixed-point, float or no requantization)."""
from __future__ import annotations

from tinsmith.generate.backend import CPP
from tinsmith.generate.functors import quantized as q
from tinsmith.generate.functors.conv import loops
from tinsmith.generate.functors.quantized import INT16X8_CONV, QUANTIZED_CONV
from tinsmith.generate.functors.quantized_driver import TileGeometry, bias_only, conv_nest, depthwise_nest, fc_nest
from tinsmith.generate.functors.quantized_math import i32, widen
from tinsmith.generate.functors.quantized_windows import scalar_dot
from tinsmith.generate.loop_ir import Assign, Binary, Expr, For, Load, Stmt, Var, index


class ScalarMicroKernel:
    """One pixel, one output channel: a sum over the tile's runs of taps (see the module doc)."""

    pixels, channels = 1, 1

    def conv_pixels(self, graph, args, attrs, geometry: TileGeometry, pixels) -> list[Stmt]:
        (x_at, out_at, coords), = pixels
        kh, kw, c = geometry.kernel
        oc = Var("oc")
        w_at = Binary("+", Binary("*", oc, index(kh * kw * c)), geometry.w_tap)
        dot = scalar_dot(args.inputs[0].name, x_at, args.inputs[1].name, w_at, geometry.count,
                         attrs["x_zero_point"], "ic")
        return [For("oc", args.inputs[1].type.shape[0], (
            q.start_sum(args, attrs, oc), *loops(geometry.tap_loops, dot),
            *q._finish(graph, args, attrs, oc, Binary("+", out_at, oc), (*coords, oc))))]

    def empty(self, graph, args, attrs, out_at: Expr, coords) -> list[Stmt]:
        return bias_only(graph, args, attrs, out_at, coords)

    def fc_rows(self, graph, args, attrs, rows, k: int) -> list[Stmt]:
        (x_at, out_at, coords), = rows
        o = Var("o")
        dot = scalar_dot(args.inputs[0].name, x_at, args.inputs[1].name, Binary("*", o, index(k)), k,
                         attrs["x_zero_point"], "k")
        return [For("o", args.inputs[1].type.shape[0], (
            q.start_sum(args, attrs, o), *dot, *q._finish(graph, args, attrs, o, Binary("+", out_at, o), (*coords, o))))]


@CPP.register("QConv2D", family="convolution", types=INT16X8_CONV, layout="nhwc")
@CPP.register("QConv2D", family="convolution", types=QUANTIZED_CONV, layout="nhwc")
def qconv2d(graph, node_id, cluster_id, args, attrs):
    """acc = bias + sum over the window and input channels of (x - x_zero_point) * w; requantized."""
    return conv_nest(graph, args, attrs, ScalarMicroKernel())


@CPP.register("QFullyConnected", family="matrix", types=INT16X8_CONV)
@CPP.register("QFullyConnected", family="matrix", types=QUANTIZED_CONV)
def qfully_connected(graph, node_id, cluster_id, args, attrs):
    """Each row of K input values against each of the O weight rows; requantized."""
    return fc_nest(graph, args, attrs, ScalarMicroKernel())


def depthwise_channels(graph, args, attrs, taps_at, tap_loops, out_at: Expr, coords) -> list[Stmt]:
    """Every output channel oc of one pixel: its sum over the window's taps of (x - x_zero_point) * w,
    x from input channel oc / depth_multiplier (depthwise_nest's `channels`)."""
    x, w = args.inputs[0], args.inputs[1]
    m = attrs["depth_multiplier"]
    oc = Var("oc")
    ic = oc if m == 1 else Binary("/", oc, index(m))
    macs = [Assign("acc", Binary("+", Var("acc"), Binary(
        "*", Binary("-", widen(Load(x.name, Binary("+", x_at, ic))), i32(attrs["x_zero_point"])),
        widen(Load(w.name, Binary("+", w_at, oc)))))) for x_at, w_at in taps_at]
    return [For("oc", w.type.shape[3], (q.start_sum(args, attrs, oc), *loops(tap_loops, macs),
                                        *q._finish(graph, args, attrs, oc, Binary("+", out_at, oc), (*coords, oc))))]


@CPP.register("QDepthwise", family="convolution", types=INT16X8_CONV, layout="nhwc")
@CPP.register("QDepthwise", family="convolution", types=QUANTIZED_CONV, layout="nhwc")
def qdepthwise(graph, node_id, cluster_id, args, attrs):
    """Per output channel oc (input channel oc / depth_multiplier): a window sum, requantized."""
    return depthwise_nest(graph, args, attrs, depthwise_channels)
