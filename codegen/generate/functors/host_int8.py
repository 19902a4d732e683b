"""Host int8 kernels of QConv2D, QDepthwise and QFullyConnected: loops GCC's vectorizer takes.

The portable kernels compute one output channel at a time, a dot product over the window's taps
and input channels. Here the innermost loop runs over output channels instead: an int32
accumulator row (a scratch buffer of one element per output channel) gets
`(x - x_zero_point) * w[tap, c, oc]` for consecutive oc, one input value broadcast against a
contiguous run of weights (the convolution and fully connected weights are packed at build
time so that a tap's weights for consecutive output channels are consecutive; the depthwise
weights already are), four input channels per pass. That loop has a constant trip count, no reduction and no dependence
between its iterations, so GCC vectorizes it at -O2 (its 'very cheap' cost model) as wide as
the target's vector unit: int8 loads widened to int32 lanes, multiplied and added. Each
accumulator still adds exactly the terms the reference adds (integer sums are exact), and the
requantization afterwards is the portable kernels' (quantized_math), so outputs are bit-exact.
Tiles and raster order are the portable kernels' (quantized_windows)."""
from __future__ import annotations

import numpy as np

from tinsmith.generate.kernel_sets import VECTORS
from tinsmith.generate.functors.quantized import INT8_CONV
from tinsmith.generate.functors import quantized as q
from tinsmith.generate.functors.conv import Affine, Axis, dot, loops, tiles, window_nests
from tinsmith.generate.functors.quantized_math import i32, widen
from tinsmith.generate.functors.quantized_windows import _windows, row_major
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


def _add_products(channels: int, terms: list[tuple[Expr, str, Expr]]) -> Stmt:
    """acc_row[oc] += the sum over `terms` (x_value, weights, w_at) of x_value * w[w_at + oc], for
    every oc: the loop GCC vectorizes. Several terms per pass (consecutive input channels) load and
    store the accumulator row once for all of them."""
    oc = Var("oc")
    total: Expr = Load(ACC, oc)
    for x_value, w_name, w_at in terms:
        total = Binary("+", total, _int16_product(x_value, widen(Load(w_name, Binary("+", w_at, oc)))))
    return For("oc", channels, (Store(ACC, oc, total),))


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


def _window_kernel(graph, args, attrs, kh: int, kw: int, accumulate) -> list[Stmt]:
    """Per tile and output position: the accumulator row from the bias, `accumulate(tile)`'s
    statements, then each channel requantized and stored."""
    x, y = args.inputs[0], args.outputs[0]
    n = x.type.shape[0]
    o = y.type.shape[3]
    wins = _windows(args, attrs, kh, kw)
    batch = Affine.var("n")

    def body(tl, suffix: str) -> list[Stmt]:
        out_at = (batch * (y.type.size // n) + dot(tl.out_pos, (y.type.shape[2] * o, o))).expr()
        coords = tuple(p.expr() for p in (batch, *tl.out_pos))
        middle = [] if tl.empty else accumulate(tl, batch)
        return [_start(args, o), *middle, _finish_row(graph, args, attrs, o, out_at, coords)]
    nests = window_nests([Axis(win) for win in wins], tiles(wins, exact_only=True), body)
    return [For("n", n, tuple(row_major(nests)))]


@VECTORS.register("QConv2D", family="convolution", types=INT8_CONV, layout="nhwc", when=_vectors, pack=_pack, scratch=_acc_row)
def qconv2d_host(graph, node_id, cluster_id, args, attrs):
    """For each tap and input channel, one input value times the tap's weights of every output
    channel, added to the accumulator row."""
    x, w = args.inputs[0], args.inputs[1]
    kh, kw, c, o = w.type.shape  # packed: [KH, KW, C, O]
    _, h, wd, _ = x.type.shape

    def accumulate(tl, batch: Affine) -> list[Stmt]:
        x_at = (batch * (h * wd * c) + dot(tl.in_pos, (wd * c, c))).expr()
        tap_at = dot(tl.tap, (kw * c * o, c * o)).expr()

        def x_value(ic: Expr) -> Expr:
            return Binary("-", widen(Load(x.name, Binary("+", x_at, ic))), i32(attrs["x_zero_point"]))
        return list(loops(tl.taps, _channel_passes(c, "ic", x_value, lambda ic: Binary(
            "+", tap_at, Binary("*", ic, index(o))), w.name, o)))
    return _window_kernel(graph, args, attrs, kh, kw, accumulate)


@VECTORS.register("QDepthwise", family="convolution", types=INT8_CONV, layout="nhwc",
                  when=lambda args, attrs: _vectors(args, attrs) and attrs["depth_multiplier"] == 1,
               scratch=_acc_row)
def qdepthwise_host(graph, node_id, cluster_id, args, attrs):
    """For each tap, the input's channels times the tap's weights, channel by channel, added to the
    accumulator row (depth multiplier 1: output channel oc reads input channel oc)."""
    x, w = args.inputs[0], args.inputs[1]
    _, kh, kw, c = w.type.shape
    _, h, wd, _ = x.type.shape

    def accumulate(tl, batch: Affine) -> list[Stmt]:
        oc = Var("oc")
        x_at = Binary("+", (batch * (h * wd * c) + dot(tl.in_pos, (wd * c, c))).expr(), oc)
        w_at = Binary("+", dot(tl.tap, (kw * c, c)).expr(), oc)
        xv = Binary("-", widen(Load(x.name, x_at)), i32(attrs["x_zero_point"]))
        mac = Store(ACC, oc, Binary("+", Load(ACC, oc), _int16_product(xv, widen(Load(w.name, w_at)))))
        return list(loops(tl.taps, [For("oc", c, (mac,))]))
    return _window_kernel(graph, args, attrs, kh, kw, accumulate)


@VECTORS.register("QFullyConnected", family="matrix", types=INT8_CONV, when=_vectors, pack=_pack, scratch=_acc_row)
def qfully_connected_host(graph, node_id, cluster_id, args, attrs):
    """Per row: for each of the K inputs, that input times its weights of every output."""
    x, w, y = args.inputs[0], args.inputs[1], args.outputs[0]
    k, o = w.type.shape  # packed: [K, O]
    rows = y.type.shape[0]
    def x_value(i: Expr) -> Expr:
        return Binary("-", widen(Load(x.name, Binary("+", Binary("*", Var("r"), index(k)), i))),
                      i32(attrs["x_zero_point"]))
    at = Binary("*", Var("r"), index(o))
    body = [_start(args, o), *_channel_passes(k, "k", x_value, lambda i: Binary("*", i, index(o)), w.name, o),
            _finish_row(graph, args, attrs, o, at, (Var("r"),))]
    return [For("r", rows, tuple(body))]
