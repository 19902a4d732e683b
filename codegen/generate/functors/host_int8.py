"""Host int8 kernels of QConv2D, QDepthwise and QFullyConnected: loops GCC's vectorizer takes.

The portable kernels compute one output channel at a time, a dot product over the window's taps
and input channels. Here the innermost loop runs over output channels instead: an int32
accumulator row (a scratch buffer of one element per output channel) gets
`(x - x_zero_point) * w[tap, c, oc]` for consecutive oc, one input value broadcast against a
contiguous run of weights (the convolution and fully connected weights are packed at build
time so that a tap's weights for consecutive output channels are consecutive; the depthwise
weights already are). That loop has a constant trip count, no reduction and no dependence
between its iterations, so GCC vectorizes it at -O2 (its 'very cheap' cost model) as wide as
the target's vector unit: int8 loads widened to int32 lanes, multiplied and added. Each
accumulator still adds exactly the terms the reference adds (integer sums are exact), and the
requantization afterwards is the portable kernels' (quantized_math), so outputs are bit-exact.
Tiles and raster order are the portable kernels' (quantized_windows)."""
from __future__ import annotations

import numpy as np

from codegen.generate.backends import HOST
from codegen.generate.functors import quantized as q
from codegen.generate.functors.conv import Affine, Axis, dot, loops, tiles, window_nests
from codegen.generate.functors.quantized_math import i32, widen
from codegen.generate.functors.quantized_windows import _windows, row_major
from codegen.generate.loop_ir import Binary, Expr, For, Load, Local, Scratch, Stmt, Store, Var, index

ACC = "acc_row"  # the scratch row of int32 accumulators, one per output channel


def _acc_row(prepared, caps) -> list[Scratch]:
    return [Scratch(ACC, "int32", prepared.outputs[0].shape[-1])]


def _vectors(args, attrs) -> bool:
    return args.caps.simd_bits >= 128


def _output_channels_last(w: np.ndarray) -> np.ndarray:
    """[O, ...] -> [..., O]: one tap's and input channel's weights for consecutive outputs adjacent."""
    return np.ascontiguousarray(np.moveaxis(w, 0, -1))


def _pack(args, attrs) -> dict:
    return {1: _output_channels_last}


def _start(args, channels: int) -> Stmt:
    oc = Var("oc")
    return For("oc", channels, (Store(ACC, oc, q._bias(args, oc)),))


def _add_products(channels: int, x_value: Expr, w_name: str, w_at: Expr) -> Stmt:
    """acc_row[oc] += x_value * w[w_at + oc] for every oc: the loop GCC vectorizes."""
    oc = Var("oc")
    product = Binary("*", x_value, widen(Load(w_name, Binary("+", w_at, oc))))
    return For("oc", channels, (Store(ACC, oc, Binary("+", Load(ACC, oc), product)),))


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


@HOST.register("QConv2D", when=_vectors, pack=_pack, scratch=_acc_row)
def qconv2d_host(graph, node_id, cluster_id, args, attrs):
    """For each tap and input channel, one input value times the tap's weights of every output
    channel, added to the accumulator row."""
    x, w = args.inputs[0], args.inputs[1]
    kh, kw, c, o = w.type.shape  # packed: [KH, KW, C, O]
    _, h, wd, _ = x.type.shape

    def accumulate(tl, batch: Affine) -> list[Stmt]:
        x_at = (batch * (h * wd * c) + dot(tl.in_pos, (wd * c, c))).expr()
        w_at = Binary("+", dot(tl.tap, (kw * c * o, c * o)).expr(), Binary("*", Var("ic"), index(o)))
        xv = Local("xv", Binary("-", widen(Load(x.name, Binary("+", x_at, Var("ic")))), i32(attrs["x_zero_point"])),
                   "int32")
        return list(loops(tl.taps, [For("ic", c, (xv, _add_products(o, Var("xv"), w.name, w_at)))]))
    return _window_kernel(graph, args, attrs, kh, kw, accumulate)


@HOST.register("QDepthwise", when=lambda args, attrs: _vectors(args, attrs) and attrs["depth_multiplier"] == 1,
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
        mac = Store(ACC, oc, Binary("+", Load(ACC, oc), Binary("*", xv, widen(Load(w.name, w_at)))))
        return list(loops(tl.taps, [For("oc", c, (mac,))]))
    return _window_kernel(graph, args, attrs, kh, kw, accumulate)


@HOST.register("QFullyConnected", when=_vectors, pack=_pack, scratch=_acc_row)
def qfully_connected_host(graph, node_id, cluster_id, args, attrs):
    """Per row: for each of the K inputs, that input times its weights of every output."""
    x, w, y = args.inputs[0], args.inputs[1], args.outputs[0]
    k, o = w.type.shape  # packed: [K, O]
    rows = y.type.shape[0]
    xv = Local("xv", Binary("-", widen(Load(x.name, Binary("+", Binary("*", Var("r"), index(k)), Var("k")))),
                              i32(attrs["x_zero_point"])), "int32")
    at = Binary("*", Var("r"), index(o))
    body = [_start(args, o), For("k", k, (xv, _add_products(o, Var("xv"), w.name, Binary("*", Var("k"), index(o))))),
            _finish_row(graph, args, attrs, o, at, (Var("r"),))]
    return [For("r", rows, tuple(body))]
