"""Host int8 kernels of QConv2D, QDepthwise and QFullyConnected: loops GCC's vectorizer takes.

The portable kernels compute one output channel at a time, a dot product over the window's taps
and input channels. Here the innermost loop runs over output channels instead: an int32
accumulator row (a scratch buffer of one element per output channel) gets `(x - x_zero_point) *
w[tap, c, oc]` for consecutive oc, one input value broadcast against a contiguous run of weights
(the convolution and fully connected weights are packed at build time so that a tap's weights for
consecutive output channels are consecutive; the depthwise weights already are), four inputs of a
run of taps per pass (a depthwise pixel: all its taps in one pass). That loop has a constant trip
count, no reduction and no dependence between its iterations, so GCC vectorizes it at -O2 (its
'very cheap' cost model) as wide as the target's vector unit: int8 loads widened to int32 lanes,
multiplied and added. Each accumulator still adds exactly the terms the reference adds (integer
sums are exact), and the requantization afterwards is the portable kernels' (quantized_math), so
outputs are bit-exact. The loop nests are the int8 driver's (quantized_driver.py: conv_nest,
depthwise_nest, fc_nest) with the micro-kernel `AccumulatorRow`."""
from __future__ import annotations

import numpy as np

from tinsmith.generate.kernel_sets import VECTORS
from tinsmith.generate.functors.quantized import INT8_CONV
from tinsmith.generate.functors import quantized as q
from tinsmith.generate.functors.conv import loops
from tinsmith.generate.functors.quantized_driver import (TileGeometry, bias_only, conv_nest, depthwise_nest, fc_nest,
                                                         model_layout)
from tinsmith.generate.functors.quantized_math import i32, widen
from tinsmith.generate.loop_ir import Binary, Cast, Expr, For, Load, Local, Scratch, Stmt, Store, Var, index

ACC = "acc_row"  # the scratch row of int32 accumulators, one per output channel


def _acc_row(prepared, caps) -> list[Scratch]:
    return [Scratch(ACC, "int32", prepared.outputs[0].shape[-1])]


def _vectors(args, attrs) -> bool:
    return args.caps.simd_bits >= 128


def _output_channels_last(w: np.ndarray) -> np.ndarray:
    """[O, ...] -> [..., O]: one tap's and input channel's weights for consecutive outputs adjacent,
    widened to int16 at build time (the kernels multiply 16-bit lanes; loading them ready saves the
    sign extension in every pass, for twice the weight bytes, which a host does not count)."""
    return np.ascontiguousarray(np.moveaxis(w, 0, -1)).astype(np.int16)


def _pack(args, attrs) -> dict:
    return {1: _output_channels_last}


def _start(args, channels: int) -> Stmt:
    oc = Var("oc")
    return For("oc", channels, (Store(ACC, oc, q._bias(args, oc)),))


def _int16_product(x_value: Expr, weight: Expr) -> Expr:
    """x_value * weight through int16: |x - x_zero_point| <= 255 and |w| <= 128, so the product
    (at most 32,640 in magnitude) is exact in 16 bits, and saying so lets GCC multiply 16-bit
    lanes (twice as many per vector as 32-bit ones, and one instruction on SSE2, which has no
    32-bit multiply) before widening to the int32 accumulators."""
    return Cast("int32", Cast("int16", Binary("*", x_value, weight)))


def _accumulate_row(channels: int, products: list[Expr]) -> Stmt:
    """acc_row[oc] += the sum of `products` (each reading channel oc), for every oc: the loop GCC
    vectorizes. Several products per pass load and store the accumulator row once for all of them."""
    oc = Var("oc")
    total: Expr = Load(ACC, oc)
    for product in products:
        total = Binary("+", total, product)
    return For("oc", channels, (Store(ACC, oc, total),))


def _add_products(channels: int, terms: list[tuple[Expr, str, Expr]]) -> Stmt:
    """acc_row[oc] += the sum over `terms` (x_value, weights, w_at) of x_value * w[w_at + oc]
    (consecutive input channels)."""
    oc = Var("oc")
    return _accumulate_row(channels, [_int16_product(x_value, widen(Load(w_name, Binary("+", w_at, oc))))
                                      for x_value, w_name, w_at in terms])


UNROLL = 4  # input channels per pass over the accumulator row


def _channel_passes(count: int, var: str, x_value, w_at, w_name: str, channels: int) -> list[Stmt]:
    """Passes over the accumulator row for input channels 0..count-1, UNROLL at a time, then one by
    one; `x_value(ic)` and `w_at(ic)` give a channel's input (an int32 expression) and weights."""
    stmts: list[Stmt] = []
    full = count // UNROLL
    if full:
        ics = [Binary("+", Binary("*", Var(var), index(UNROLL)), index(j)) for j in range(UNROLL)]
        xs = [Local(f"xv{j}", x_value(ic), "int32") for j, ic in enumerate(ics)]
        terms = [(Var(f"xv{j}"), w_name, w_at(ic)) for j, ic in enumerate(ics)]
        stmts.append(For(var, full, (*xs, _add_products(channels, terms))))
    if count % UNROLL:
        ic = Binary("+", Var(f"{var}_t"), index(full * UNROLL))
        stmts.append(For(f"{var}_t", count % UNROLL, (Local("xv", x_value(ic), "int32"),
                                                       _add_products(channels, [(Var("xv"), w_name, w_at(ic))]))))
    return stmts


def _finish_row(graph, args, attrs, channels: int, out_at: Expr, coords: tuple[Expr, ...]) -> Stmt:
    oc = Var("oc")
    return For("oc", channels, (Local("acc", Load(ACC, oc), "int32"),
                                *q._finish(graph, args, attrs, oc, Binary("+", out_at, oc), (*coords, oc))))


class AccumulatorRow:
    """The int8 driver's micro-kernel on the host (quantized_driver.py): one pixel (or fully connected
    row) at a time, every output channel in the accumulator row; the weights packed [..., O]."""

    pixels, channels = 1, 1

    def _x_value(self, args, attrs, x_at: Expr):
        x, zero_point = args.inputs[0].name, i32(attrs["x_zero_point"])
        return lambda i: Binary("-", widen(Load(x, Binary("+", x_at, i))), zero_point)

    def conv_pixels(self, graph, args, attrs, geometry: TileGeometry, pixels) -> list[Stmt]:
        """Each run of taps: for each of its input values, that value times its weights of every
        output channel (at (run offset + i) * O), added to the row."""
        (x_at, out_at, coords), = pixels
        o = args.inputs[1].type.shape[0]
        passes = _channel_passes(geometry.count, "ic", self._x_value(args, attrs, x_at), lambda ic: Binary(
            "*", Binary("+", geometry.w_tap, ic), index(o)), args.inputs[1].name, o)
        return [_start(args, o), *loops(geometry.tap_loops, passes), _finish_row(graph, args, attrs, o, out_at, coords)]

    def empty(self, graph, args, attrs, out_at: Expr, coords) -> list[Stmt]:
        return bias_only(graph, args, attrs, out_at, coords)

    def fc_rows(self, graph, args, attrs, rows, k: int) -> list[Stmt]:
        """For each of the row's K inputs, that input times its weights of every output."""
        (x_at, out_at, coords), = rows
        o = args.inputs[1].type.shape[0]
        passes = _channel_passes(k, "k", self._x_value(args, attrs, x_at), lambda i: Binary("*", i, index(o)),
                                 args.inputs[1].name, o)
        return [_start(args, o), *passes, _finish_row(graph, args, attrs, o, out_at, coords)]


def depthwise_row(graph, args, attrs, taps_at, tap_loops, out_at: Expr, coords) -> list[Stmt]:
    """depthwise_nest's `channels` on the host: each pass adds the taps' products of every channel
    to the row (depth multiplier 1: output channel oc reads input channel oc)."""
    x, w = args.inputs[0], args.inputs[1]
    c, oc = w.type.shape[3], Var("oc")
    products = [_int16_product(Binary("-", widen(Load(x.name, Binary("+", x_at, oc))), i32(attrs["x_zero_point"])),
                               widen(Load(w.name, Binary("+", w_at, oc)))) for x_at, w_at in taps_at]
    return [_start(args, c), *loops(tap_loops, [_accumulate_row(c, products)]),
            _finish_row(graph, args, attrs, c, out_at, coords)]


@VECTORS.register("QConv2D", family="convolution", types=INT8_CONV, layout="nhwc", when=_vectors, pack=_pack, scratch=_acc_row)
def qconv2d_host(graph, node_id, cluster_id, args, attrs):
    """For each tap and input channel, one input value times the tap's weights of every output
    channel, added to the accumulator row: the int8 driver's conv_nest."""
    return conv_nest(graph, model_layout(args), attrs, AccumulatorRow())


@VECTORS.register("QDepthwise", family="convolution", types=INT8_CONV, layout="nhwc",
                  when=lambda args, attrs: _vectors(args, attrs) and attrs["depth_multiplier"] == 1,
                  scratch=_acc_row)
def qdepthwise_host(graph, node_id, cluster_id, args, attrs):
    """For each pixel, its taps' inputs times their weights, channel by channel, added to the
    accumulator row: the int8 driver's depthwise_nest."""
    return depthwise_nest(graph, args, attrs, depthwise_row)


@VECTORS.register("QFullyConnected", family="matrix", types=INT8_CONV, when=_vectors, pack=_pack, scratch=_acc_row)
def qfully_connected_host(graph, node_id, cluster_id, args, attrs):
    """Per row: for each of the K inputs, that input times its weights of every output."""
    return fc_nest(graph, model_layout(args), attrs, AccumulatorRow())
