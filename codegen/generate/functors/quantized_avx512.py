"""AVX-512 micro-kernels of the int8 family: QConv2D, QFullyConnected and QDepthwise on the host.

The loop nests are the int8 driver's (quantized_driver.py: conv_nest over the exact tiles,
pointwise_nest over flattened pixels, fc_nest, depthwise_nest); this module supplies the inner
tile, written from XNNPACK's design (its code is not used):

- **Weights packed at build time** into the order the block reads them: per sixteen output
  channels, per four consecutive window values k, the sixteen channels' four weights (64 bytes,
  one vector), the window padded to a multiple of four values and the channels to a multiple of
  sixteen with zero weights.
- **Four products per int32 lane and instruction**: VPDPBUSD multiplies unsigned bytes by signed
  ones, so each pixel's four input bytes are made unsigned (x + 128, an exclusive or) and
  broadcast to every lane; the bias absorbs the difference at build time,
  sum((x - zp) * w) + b = sum((x + 128) * w) + (b - (128 + zp) * sum(w)), from the weight sums
  the primitive's `prepare` computes. Windows that are not read in place (every window but a 1x1
  over a multiple of four channels, fully connected rows of such a length) are first gathered
  into a scratch row (`cols`), taps in the padding written as the input zero point, so the folded
  bias holds at the borders too. Integer sums are exact (modulo 2^32, as TFLite's int32 sums), so
  every output equals the reference's.
- **Register blocks**: a block of MR pixels x NB vectors of sixteen channels keeps its MR * NB
  sums in vector registers over the whole window; each weight vector serves the MR pixels and each
  broadcast input the NB vectors.
- **Requantization sixteen channels at a time** (kernel_sets.AVX512_HELPERS' avx512_requantize):
  TFLite's doubling high multiply on 64-bit products and its rounding division, per channel
  (per-tensor constants are packed per channel), bit-exact with the portable kernels.
- **Depthwise** (depth multiplier 1, channels a multiple of sixteen): sixteen channels per vector,
  each tap (x - zp) * w on int32 lanes, the weights widened to int32 at build time.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from tinsmith.generate.backend import TensorArg
from tinsmith.generate.functors.conv import loops
from tinsmith.generate.functors.quantized import INT8_CONV
from tinsmith.generate.functors.quantized_driver import (Pixel, TileGeometry, conv_nest, copy_values, depthwise_nest,
                                                        fc_nest, padding_runs, plus, pointwise_nest)
from tinsmith.generate.functors.quantized_math import i32
from tinsmith.generate.kernel_sets import AVX512_INT8
from tinsmith.generate.loop_ir import Assign, Binary, Call, Expr, For, Lane, Load, Local, Scratch, Stmt, Store, Var, index

LANES = 16  # int32 lanes of a 512-bit vector: output channels per vector
GROUP = 4  # int8 values per lane that one VPDPBUSD multiplies and adds
COLS = "cols"  # the scratch rows a block's windows are gathered into
# pixels per block by vectors of channels per block: MR * NB sums, NB weight vectors and MR
# broadcast inputs within the 32 vector registers
PIXELS = {1: 8, 2: 6, 4: 4}
FC_VECTORS = 8  # a fully connected row (one pixel): up to 8 vectors of sums


def _up(n: int, m: int) -> int:
    return -(-n // m) * m


def _window(w_shape) -> int:
    """K: one output channel's weights (KH * KW * C, or a fully connected row's length)."""
    return int(np.prod(w_shape[1:]))


def _direct(w_shape) -> bool:
    """Windows read in place: 1x1 windows over a multiple of four channels (without padding, see
    _takes), fully connected rows of a multiple of four values; the others are gathered into `cols`."""
    return (len(w_shape) == 2 or tuple(w_shape[1:3]) == (1, 1)) and w_shape[-1] % GROUP == 0


def _vectors_per_block(w_shape) -> int:
    """NB: vectors of sixteen channels per block (a fully connected row has one pixel, so more)."""
    vectors = _up(w_shape[0], LANES) // LANES
    if len(w_shape) == 2:
        return min(FC_VECTORS, vectors)
    return 4 if vectors >= 4 else vectors if vectors in PIXELS else 2


def _pixels(w_shape) -> int:
    return 1 if len(w_shape) == 2 else PIXELS[_vectors_per_block(w_shape)]


def _cols_scratch(prepared, caps) -> list[Scratch]:
    w = prepared.inputs[1].shape
    return [] if _direct(w) else [Scratch(COLS, "int8", _pixels(w) * _up(_window(w), GROUP))]


def _takes(args, attrs) -> bool:
    """Constant weights, bias, multipliers and shifts (all packed at build time), TFLite's
    fixed-point requantization to int8; no 1x1 window with padding (1x1 windows are read in place,
    and a window wholly in the padding needs `cols`)."""
    p = args.prepared
    one_by_one_padded = len(p.inputs[1].shape) == 4 if p is not None else False
    one_by_one_padded = one_by_one_padded and tuple(p.inputs[1].shape[1:3]) == (1, 1) and any(attrs.get("pads", ()))
    return (p is not None and not one_by_one_padded and "weight_sums" in p.facts and args.inputs[2] is not None and len(p.constant) > 4
            and all(p.constant[1:5]) and attrs.get("requantize", "fixed_point") == "fixed_point"
            and args.outputs[0].type.dtype == "int8")


def _packed_weights(w: np.ndarray) -> np.ndarray:
    """[O, ...] -> [O/16, K/4, 16, 4] (O and K padded with zero weights): the block's vector order."""
    o, flat = w.shape[0], w.reshape(w.shape[0], -1)
    k = flat.shape[1]
    full = np.zeros((_up(o, LANES), _up(k, GROUP)), np.int8)
    full[:o, :k] = flat
    return np.ascontiguousarray(full.reshape(-1, LANES, full.shape[1] // GROUP, GROUP).transpose(0, 2, 1, 3))


def _per_channel(count: int):
    """A per-tensor or per-channel int32 constant as `count` channels (padding channels 0)."""
    def pack(a: np.ndarray) -> np.ndarray:
        flat = a.reshape(-1).astype(np.int32)
        out = np.full(count, flat[0] if flat.size == 1 else 0, np.int32)
        if flat.size > 1:
            out[:flat.size] = flat
        return out
    return pack


def _pack(args, attrs) -> dict:
    w = args.prepared.inputs[1].shape
    o = _up(w[0], LANES)
    offset = (128 + int(attrs["x_zero_point"])) * args.prepared["weight_sums"]

    def bias(b: np.ndarray) -> np.ndarray:
        return _per_channel(o)((b.astype(np.int64) - offset).astype(np.int32))
    return {1: _packed_weights, 2: bias, 3: _per_channel(o), 4: _per_channel(o)}


def _dot_block(args, xs: list[tuple[str, Expr]], base: Expr, vectors: int, k: int) -> list[Stmt]:
    """acc<p>_<j> = the folded biases of channels base + 16j.. plus every pixel p's window (k values
    from xs[p], a multiple of four) times their packed weights, four values a step."""
    w, b = args.inputs[1].name, args.inputs[2].name
    stmts: list[Stmt] = [Local(f"acc{p}_{j}", Load(b, plus(base, LANES * j), LANES, "int32"), "int32", LANES)
                         for p in range(len(xs)) for j in range(vectors)]
    kq = Var("kq")
    step: list[Stmt] = [Local(f"x{p}", Call("x4_u8", (Load(buffer, Binary("+", at, Binary("*", kq, index(GROUP)))),),
                                            "int32", LANES), "int32", LANES) for p, (buffer, at) in enumerate(xs)]
    for j in range(vectors):
        w_at = Binary("+", Binary("*", plus(base, LANES * j), index(k)), Binary("*", kq, index(GROUP * LANES)))
        step += [Assign(f"acc{p}_{j}", Call("dot4_i32x16", (Var(f"acc{p}_{j}", "int32", LANES), Var(f"x{p}", "int32", LANES),
                                                             Load(w, w_at)), "int32", LANES)) for p in range(len(xs))]
    return stmts + [For("kq", k // GROUP, tuple(step))]


def _requantized(args, attrs, acc: Expr, channel: Expr) -> Expr:
    mult, shift = args.inputs[3].name, args.inputs[4].name
    return Call("requantize_i32x16", (acc, Load(mult, channel), Load(shift, channel), i32(attrs["y_zero_point"]),
                                      i32(attrs["act_min"]), i32(attrs["act_max"])), "int8", LANES)


def _store(args, attrs, name: str, acc: Expr, out_at: Expr, channel: Expr, valid: int) -> list[Stmt]:
    """Sixteen channels requantized and stored; a last vector with fewer real channels lane by lane."""
    y = args.outputs[0].name
    if valid == LANES:
        return [Store(y, Binary("+", out_at, channel), _requantized(args, attrs, acc, channel))]
    q = Var(name, "int8", LANES)
    return [Local(name, _requantized(args, attrs, acc, channel), "int8", LANES),
            *(Store(y, plus(Binary("+", out_at, channel), c), Lane(q, index(c))) for c in range(valid))]


def channel_vectors(args, attrs, pixels: list[Pixel], xs: list[tuple[str, Expr]], k: int, per: int) -> list[Stmt]:
    """Every output channel of these pixels: blocks of `per` vectors of sixteen channels in a loop,
    the channels left as one block of fewer vectors (its last vector maybe partly real)."""
    o = args.outputs[0].type.shape[-1]

    def block(base: Expr, vectors: int, last_valid: int) -> list[Stmt]:
        stmts = _dot_block(args, xs, base, vectors, k)
        for p, (_, out_at, _) in enumerate(pixels):
            for j in range(vectors):
                valid = last_valid if j == vectors - 1 else LANES
                stmts += _store(args, attrs, f"q{p}_{j}", Var(f"acc{p}_{j}", "int32", LANES), out_at,
                                plus(base, LANES * j), valid)
        return stmts
    size = per * LANES
    stmts: list[Stmt] = []
    if o // size:
        stmts.append(For("ocb", o // size, tuple(block(Binary("*", Var("ocb"), index(size)), per, LANES))))
    left = o % size
    if left:
        vectors = _up(left, LANES) // LANES
        stmts.append(For("ol", 1, tuple(block(plus(Var("ol"), o - left), vectors, left - LANES * (vectors - 1)))))
    return stmts


class Avx512MicroKernel:
    """The AVX-512 inner tile for the int8 driver (see the module doc), for one node's shapes."""

    def __init__(self, w_shape):
        self.k = _up(_window(w_shape), GROUP)
        self.vectors = _vectors_per_block(w_shape)
        self.pixels = _pixels(w_shape)
        self.direct = _direct(w_shape)

    def _gather_tail(self, pixel: int, window: int) -> list[Stmt]:
        """The values past the window up to a multiple of four: zeros (their weights are zero)."""
        return copy_values(COLS, index(pixel * self.k + window), None, None, self.k - window)

    def conv_pixels(self, graph, args, attrs, geometry: TileGeometry, pixels: list[Pixel]) -> list[Stmt]:
        x = args.inputs[0].name
        if self.direct:
            return channel_vectors(args, attrs, pixels, [(x, at) for at, _, _ in pixels], self.k, self.vectors)
        window = _window(args.inputs[1].type.shape)
        stmts: list[Stmt] = []
        copies: list[Stmt] = []
        for p, (x_at, _, _) in enumerate(pixels):
            for at, n in padding_runs(geometry):
                stmts += copy_values(COLS, index(p * self.k + at), None, None, n, attrs["x_zero_point"])
            stmts += self._gather_tail(p, window)
            copies += copy_values(COLS, plus(geometry.w_tap, p * self.k), x, x_at, geometry.count)
        stmts += loops(geometry.tap_loops, copies)
        cols = [(COLS, index(p * self.k)) for p in range(len(pixels))]
        return stmts + channel_vectors(args, attrs, pixels, cols, self.k, self.vectors)

    def empty(self, graph, args, attrs, out_at: Expr, coords) -> list[Stmt]:
        """A window wholly in the padding: every tap the zero point, so the folded bias comes back
        to the bias."""
        window = _window(args.inputs[1].type.shape)
        return [*copy_values(COLS, index(0), None, None, window, attrs["x_zero_point"]), *self._gather_tail(0, window),
                *channel_vectors(args, attrs, [(index(0), out_at, coords)], [(COLS, index(0))], self.k, self.vectors)]

    def fc_rows(self, graph, args, attrs, rows: list[Pixel], k: int) -> list[Stmt]:
        x = args.inputs[0].name
        if self.direct:
            return channel_vectors(args, attrs, rows, [(x, at) for at, _, _ in rows], self.k, self.vectors)
        copies = [s for p, (x_at, _, _) in enumerate(rows)
                  for s in (*copy_values(COLS, index(p * self.k), x, x_at, k), *self._gather_tail(p, k))]
        return copies + channel_vectors(args, attrs, rows, [(COLS, index(p * self.k)) for p in range(len(rows))],
                                        self.k, self.vectors)


def _model_layout(args) -> object:
    """The arguments with the weights' model shape ([O, KH, KW, C] or [O, K]): the driver's geometry
    reads it; the micro-kernel addresses the packed weights itself."""
    w = args.inputs[1]
    return replace(args, inputs=(args.inputs[0], TensorArg(w.name, args.prepared.inputs[1]), *args.inputs[2:]))


@AVX512_INT8.register("QConv2D", family="convolution", types=INT8_CONV, layout="nhwc", when=_takes, pack=_pack,
                      scratch=_cols_scratch, priority=1)
def qconv2d_avx512(graph, node_id, cluster_id, args, attrs):
    """QConv2D: blocks of pixels x vectors of sixteen channels on four-byte dot products."""
    model = _model_layout(args)
    kernel = Avx512MicroKernel(model.inputs[1].type.shape)
    if kernel.direct and tuple(attrs["strides"]) == (1, 1):  # pointwise: the flattened pixels
        c = args.inputs[0].type.shape[3]
        return pointwise_nest(model, kernel.pixels, lambda pixels: channel_vectors(
            model, attrs, pixels, [(args.inputs[0].name, at) for at, _, _ in pixels], c, kernel.vectors))
    return conv_nest(graph, model, attrs, kernel)


@AVX512_INT8.register("QFullyConnected", family="matrix", types=INT8_CONV, when=_takes, pack=_pack,
                      scratch=_cols_scratch, priority=1)
def qfully_connected_avx512(graph, node_id, cluster_id, args, attrs):
    """QFullyConnected: each row's outputs in up to eight vectors of sums."""
    model = _model_layout(args)
    return fc_nest(graph, model, attrs, Avx512MicroKernel(model.inputs[1].type.shape))


def _depthwise_takes(args, attrs) -> bool:
    return _takes(args, attrs) and attrs["depth_multiplier"] == 1 and args.inputs[1].type.shape[3] % LANES == 0


def _pack_depthwise(args, attrs) -> dict:
    c = args.prepared.inputs[1].shape[3]
    return {1: lambda w: w.astype(np.int32), 3: _per_channel(c), 4: _per_channel(c)}


def _depthwise_vectors(graph, args, attrs, taps_at: list[tuple[Expr, Expr]], tap_loops, out_at: Expr,
                       coords) -> list[Stmt]:
    """Sixteen channels per step: the biases, each tap's (x - zero point) * w added, requantized."""
    x, w, b = args.inputs[0].name, args.inputs[1].name, args.inputs[2].name
    base = Binary("*", Var("cb"), index(LANES))
    acc = Var("acc", "int32", LANES)
    taps = [Assign("acc", Call("tap_i32x16", (acc, Load(x, Binary("+", x_at, base)), Load(w, Binary("+", w_at, base)),
                                              i32(attrs["x_zero_point"])), "int32", LANES)) for x_at, w_at in taps_at]
    body = [Local("acc", Load(b, base, LANES, "int32"), "int32", LANES), *loops(tap_loops, taps),
            *_store(args, attrs, "q", acc, out_at, base, LANES)]
    return [For("cb", args.inputs[1].type.shape[3] // LANES, tuple(body))]


@AVX512_INT8.register("QDepthwise", family="convolution", types=INT8_CONV, layout="nhwc", when=_depthwise_takes,
                      pack=_pack_depthwise, priority=1)
def qdepthwise_avx512(graph, node_id, cluster_id, args, attrs):
    """QDepthwise (depth multiplier 1, channels a multiple of sixteen): sixteen channels per vector."""
    return depthwise_nest(graph, args, attrs, _depthwise_vectors)
