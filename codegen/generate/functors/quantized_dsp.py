"""Cortex-M DSP-extension kernels for the int8 QConv2D, QDepthwise and QFullyConnected:
register-blocked dot products on SMLAD, lane-wise products on SMLABB / SMLATT. The intrinsics are
ACLE's, from GCC's arm_acle.h (codegen/generate/kernel_sets.py spells them).

Each inner step of a convolution reads one 32-bit word (four int8 values) per output pixel and
one per output channel, splits every word into two int16 lane pairs (SXTAB16 adding the negated
input zero point to the input's lanes in the same instruction, SXTB16 for the weights; bytes 1
and 3 after a rotate by 8) and feeds a block of pixels x channels accumulators with SMLAD, each
input word serving every channel of the block and each weight word every pixel (the register
blocking of CMSIS-NN's and TinyEngine's convolutions, written here from their papers; the block
sizes are measured, see PIXELS). A pointwise convolution with stride 1 and no padding is a
matrix product over the flattened pixels: each block's input words are split once into a
scratch buffer (`lanes`) that every output channel then reads ready. A fully connected layer
takes eight weight rows per input word.

Along the innermost spatial axis the taps of one window row are contiguous in the input (NHWC,
dilation 1) and in the weights ([O, KH, KW, C]), so a row of kw taps over C channels is one run
of kw*C values: a first convolution with three (or one) input channels still runs on SMLAD.
Runs not a multiple of four end in a scalar tail. Windows are split into tiles whose taps all
lie inside the input (quantized_windows.py), so no tap tests a bound.

A depthwise convolution has no sum over channels for SMLAD's pairs: four channels per step, one
input and one weight word per tap, multiplied lane by lane with SMLABB / SMLATT.

Every sum is the scalar kernel's exactly (integer arithmetic, no reassociation effects); the
requantization is quantized.py's. Channels and pixels past a block run in smaller blocks.
"""
from __future__ import annotations

from tinsmith.generate.kernel_sets import ARM_DSP
from tinsmith.generate.functors.quantized import INT8_CONV
from tinsmith.generate.functors import quantized as scalar
from tinsmith.generate.functors.conv import Affine, Axis, TileLoops, dot, loops, tile_loops, tiles
from tinsmith.generate.functors.quantized_math import i32, select_max, select_min, widen
from tinsmith.generate.functors.quantized_windows import _windows, row_major
from tinsmith.generate.loop_ir import (Assign, Binary, Call, Comment, Expr, For, Load, Local, Scratch, Stmt, Store,
                                      Var, index)



@ARM_DSP.micro_kernel("saturate_int8")
def ssat8(v: Expr, lo: int, hi: int) -> Expr:
    """v clamped to lo..hi for an int8 output: one SSAT saturates to -128..127, and only a fused
    activation's tighter bound is tested."""
    y: Expr = Call("ssat8", (v,), "int32")
    if lo > -128:
        y = select_max(y, i32(lo))
    if hi < 127:
        y = select_min(y, i32(hi))
    return y

def pair(v: int) -> int:
    """v in both int16 lanes of an int32 (what SXTAB16 adds to each lane)."""
    h = v & 0xFFFF
    word = h | (h << 16)
    return word - (1 << 32) if word >= 1 << 31 else word


def _plus(e: Expr, k: int) -> Expr:
    return e if k == 0 else Binary("+", e, index(k))


def block_dot(x: str, x_ats: list[Expr], w: str, w_ats: list[Expr], count: int, x_zero_point: int,
              var: str, lanes: tuple[str, list[Expr]] | None = None, straight: int | None = None) -> list[Stmt]:
    """acc<p><c> += sum over i < count of (x[x_ats[p] + i] - zero point) * w[w_ats[c] + i] for every
    pixel p and channel c: each input word is loaded and split once for all channels, each weight
    word once for all pixels. With `lanes` (a scratch buffer and each pixel's offset in it) the
    input words come already split: word q's two lane pairs at offset + 2q and + 2q + 1."""
    stmts: list[Stmt] = []
    quads, tail = divmod(count, 4)
    offset = i32(pair(-x_zero_point))

    def split(name: str, word: Expr, fn: str) -> list[Stmt]:
        args = (lambda v: (offset, v)) if fn == "sxtab16" else (lambda v: (v,))
        return [Local(name, word, "int32"), Local(f"{name}_lo", Call(fn, args(Var(name)), "int32"), "int32"),
                Local(f"{name}_hi", Call(f"{fn}_ror8", args(Var(name)), "int32"), "int32")]

    def macs(tag: str, p: int, c: int) -> list[Stmt]:
        acc = f"acc{p}{c}"
        return [Assign(acc, Call("smlad", (Var(f"{tag}_x{p}_lo"), Var(f"{tag}_w{c}_lo"), Var(acc)), "int32")),
                Assign(acc, Call("smlad", (Var(f"{tag}_x{p}_hi"), Var(f"{tag}_w{c}_hi"), Var(acc)), "int32"))]

    def presplit(name: str, buffer: str, at: Expr) -> list[Stmt]:
        return [Local(f"{name}_lo", Load(buffer, at), "int32"), Local(f"{name}_hi", Load(buffer, _plus(at, 1)), "int32")]

    def quad(at: Expr, pairs_at: Expr, tag: str) -> list[Stmt]:
        """Word `at` / 4 of every pixel and channel; its lane pairs at `pairs_at` in `lanes`."""
        if lanes is not None:
            xs = [presplit(f"{tag}_x{p}", lanes[0], Binary("+", base, pairs_at)) for p, base in enumerate(lanes[1])]
        else:
            xs = [split(f"{tag}_x{p}", Call("read_i8x4", (Load(x, Binary("+", x_at, at)),), "int32"), "sxtab16")
                  for p, x_at in enumerate(x_ats)]
        ws = [split(f"{tag}_w{c}", Call("read_i8x4", (Load(w, Binary("+", w_at, at)),), "int32"), "sxtb16")
              for c, w_at in enumerate(w_ats)]
        # the weights' lanes first, then each pixel's in turn (or the other way round), so only
        # one word of the second kind is split and live at a time
        weights_first = len(x_ats) > len(w_ats) or lanes is not None
        first, second = (ws, xs) if weights_first else (xs, ws)
        body: list[Stmt] = [stmt for words in first for stmt in words]
        for j, words in enumerate(second):
            body += words
            for i in range(len(first)):
                body += macs(tag, *((j, i) if weights_first else (i, j)))
        return body
    if quads <= (STRAIGHT_QUADS if straight is None else straight):  # straight-line: a short loop costs its counter more than its body
        for q in range(quads):
            stmts += quad(index(4 * q), index(2 * q), f"{var}q{q}")
    else:
        v = Var(var)
        stmts.append(For(var, quads, tuple(quad(Binary("*", v, index(4)), Binary("*", v, index(2)), var))))
    for t in range(tail):
        at = 4 * quads + t
        xs = [Binary("-", widen(Load(x, _plus(x_at, at))), i32(x_zero_point)) for x_at in x_ats]
        for c, w_at in enumerate(w_ats):
            wv = widen(Load(w, _plus(w_at, at)))
            for p in range(len(x_ats)):
                acc = f"acc{p}{c}"
                stmts.append(Assign(acc, Binary("+", Var(acc), Binary("*", xs[p], wv))))
    return stmts


def _block(graph, args, attrs, pixels: list[tuple[Expr, Expr, tuple | None]], channel_base: Expr, n_chan: int,
           tap_loops, w_tap: Expr, count: int, lanes=None, straight=None) -> list[Stmt]:
    """Accumulators for len(pixels) pixels x n_chan channels (channel_base + c): bias, the taps'
    dot products, then each requantized and stored. pixels: (input offset, output offset, coords)."""
    w = args.inputs[1]
    k_size = w.type.size // w.type.shape[0]
    chans = [_plus(channel_base, c) for c in range(n_chan)]
    stmts: list[Stmt] = []
    for p in range(len(pixels)):
        for c, ch in enumerate(chans):
            stmts.append(Local(f"acc{p}{c}", scalar._bias(args, ch), "int32"))
    # one weight pointer for the block, the channels at constant offsets from it
    w_base = Binary("+", Binary("*", channel_base, index(k_size)), w_tap)
    w_ats = [_plus(w_base, c * k_size) for c in range(n_chan)]
    stmts += loops(tap_loops, block_dot(args.inputs[0].name, [px[0] for px in pixels], w.name, w_ats, count,
                                        attrs["x_zero_point"], "ic", lanes, straight))
    for p, (_, out_at, coords) in enumerate(pixels):
        for c, ch in enumerate(chans):
            at = coords + (ch,) if coords is not None else None
            stmts += scalar._finish(graph, args, attrs, ch, Binary("+", out_at, ch), at, f"acc{p}{c}")
    return stmts


def _channels(graph, args, attrs, pixels, tap_loops, w_tap, count, per: int, lanes=None,
              straight=None) -> list[Stmt]:
    """The output channels in blocks of `per` for the given pixels; the last few in blocks of half
    as many, and so on, so they too share their input reads."""
    o = args.inputs[1].type.shape[0]
    stmts: list[Stmt] = []
    if o // per:
        stmts.append(For("ocb", o // per, tuple(_block(graph, args, attrs, pixels, Binary("*", Var("ocb"), index(per)),
                                                       per, tap_loops, w_tap, count, lanes, straight))))
    done, size = o - o % per, per // 2
    while done < o:
        if o - done >= size:  # a loop of one scopes the locals
            stmts.append(For("ol", 1, tuple(_block(graph, args, attrs, pixels, _plus(Var("ol"), done), size,
                                                   tap_loops, w_tap, count, lanes, straight))))
            done += size
        size //= 2
    return stmts


def _empty(graph, args, attrs, out_at: Expr, coords) -> list[Stmt]:
    """A window wholly in the padding: the bias alone, requantized."""
    o = args.inputs[1].type.shape[0]
    oc = Var("oc")
    return [For("oc", o, (Local("acc", scalar._bias(args, oc), "int32"),
                          *scalar._finish(graph, args, attrs, oc, Binary("+", out_at, oc), coords + (oc,))))]


# Block sizes, measured on the emulated M4 (kws / vww instructions): a pointwise block of 3 pixels
# x 2 channels, its input words split once into `lanes` (5.78 / 17.25 M), beats 2 x 2 (6.06 / 17.92),
# 4 x 2 (5.93 / 17.59) and 4 x 1 (6.26 / 18.51); other convolutions take 2 pixels x 4 channels,
# splitting their input words in the loop; a fully connected layer 8 rows (ad: 0.52 M, 0.54 with 4)
PIXELS, CHANNELS = 3, 2
CONV_CHANNELS = 4
FC_ROWS = 8
# a run of up to this many input words is straight-line code, longer runs a loop of one word per
# iteration (measured kws / vww / ic: 5.45 / 16.36 / 21.28 M looping from 2 words, 5.45 / 15.98 / 21.07
# from 5, 5.45 / 15.75 / 21.00 from 9, 5.03 / 15.51 / 20.69 from 17; firmware text of ic 139 KB at 8,
# 168 KB at 16, kws 55 / 61 KB); two words per loop iteration instead was slower (ic 21.96 M)
STRAIGHT_QUADS = 16
# a fully connected layer's rows, straight-line up to 32 words (128 inputs): ad 0.45 -> 0.42 M, its
# firmware text 292 -> 307 KB
FC_STRAIGHT_QUADS = 32


def _split_inputs(x: str, x_ats: list[Expr], c: int, x_zero_point: int) -> list[Stmt]:
    """The input words of each pixel split once into `lanes` (SXTAB16, the zero point subtracted),
    two int32 per word, pixel after pixel: every output channel then loads them ready to use."""
    offset = i32(pair(-x_zero_point))
    quads = c // 4
    body: list[Stmt] = []
    for p, x_at in enumerate(x_ats):
        word = f"sx{p}"
        at = Binary("+", index(2 * p * quads), Binary("*", Var("sq"), index(2)))
        body += [Local(word, Call("read_i8x4", (Load(x, Binary("+", x_at, Binary("*", Var("sq"), index(4)))),), "int32"),
                       "int32"),
                 Store("lanes", at, Call("sxtab16", (offset, Var(word)), "int32")),
                 Store("lanes", _plus(at, 1), Call("sxtab16_ror8", (offset, Var(word)), "int32"))]
    return [For("sq", quads, tuple(body))] if quads else []


def _has_lanes(x_shape, w_shape, y_shape) -> bool:
    """Whether the kernel gets a `lanes` scratch buffer: what the types say of a pointwise
    convolution with at least one input word (the scratch rule does not see strides and pads)."""
    return tuple(w_shape[1:3]) == (1, 1) and tuple(x_shape[1:3]) == tuple(y_shape[1:3]) and x_shape[3] >= 4


def _lanes_scratch(prepared, caps) -> list[Scratch]:
    """The split input words of a pointwise block (what _pointwise stores in `lanes`)."""
    x, w, y = prepared.inputs[0], prepared.inputs[1], prepared.outputs[0]
    if not _has_lanes(x.shape, w.shape, y.shape):
        return []
    return [Scratch("lanes", "int32", PIXELS * 2 * (x.shape[3] // 4))]


def _pointwise(graph, args, attrs) -> list[Stmt]:
    """1x1, stride 1, no padding: rows of C inputs against rows of C weights over the flattened
    pixels, PIXELS x CHANNELS at a time, each block's input words split once into `lanes`."""
    x, y = args.inputs[0], args.outputs[0]
    c, o = x.type.shape[3], y.type.shape[3]
    pixels = x.type.size // c
    quads = c // 4

    def run(first: Expr, count: int) -> list[Stmt]:
        block = [(_plus(Binary("*", first, index(c)), p * c), _plus(Binary("*", first, index(o)), p * o), None)
                 for p in range(count)]
        lanes = ("lanes", [index(2 * p * quads) for p in range(count)])
        return [*_split_inputs(x.name, [b[0] for b in block], c, attrs["x_zero_point"]),
                *_channels(graph, args, attrs, block, (), index(0), c, CHANNELS, lanes)]
    stmts: list[Stmt] = []
    if pixels // PIXELS:
        stmts.append(For("px", pixels - pixels % PIXELS, tuple(run(Var("px"), PIXELS)), step=PIXELS))
    if pixels % PIXELS:
        stmts.append(For("pl", 1, tuple(run(_plus(Var("pl"), pixels - pixels % PIXELS), pixels % PIXELS))))
    return stmts


def _is_pointwise(args, attrs) -> bool:
    w = args.inputs[1]
    return (tuple(w.type.shape[1:3]) == (1, 1) and tuple(attrs["strides"]) == (1, 1)
            and not any(attrs["pads"]))


@ARM_DSP.register("QConv2D", family="convolution", types=INT8_CONV, layout="nhwc", when=lambda args, attrs: args.caps.dsp, scratch=_lanes_scratch)
def qconv2d_dsp(graph, node_id, cluster_id, args, attrs):
    """QConv2D on SMLAD in blocks of pixels x channels (see the module doc)."""
    if _is_pointwise(args, attrs):
        return _pointwise(graph, args, attrs)
    stmts: list[Stmt] = []
    if _has_lanes(args.inputs[0].type.shape, args.inputs[1].type.shape, args.outputs[0].type.shape):
        # a 1x1 window with strides and padding that keep the size: the scratch is not needed
        stmts.append(Store("lanes", index(0), i32(0)))
    x, w, y = args.inputs[0], args.inputs[1], args.outputs[0]
    o, kh, kw, c = w.type.shape
    n, h, wd, _ = x.type.shape
    wins = _windows(args, attrs, kh, kw)
    axes = [Axis(win) for win in wins]
    runs_merge = wins[1].dilation == 1
    batch = Affine.var("n")
    for tile in tiles(wins, exact_only=True):
        tl = tile_loops(axes, tile)
        stmts.append(Comment(tl.label))
        out_pos, in_pos, tap = list(tl.out_pos), list(tl.in_pos), list(tl.tap)
        tap_loops = list(tl.taps)
        count = c
        if runs_merge:  # the row's taps and channels as one contiguous run
            k1 = dict(tap_loops).get("k1")
            if k1 is not None:
                tap_loops = [t for t in tap_loops if t[0] != "k1"]
                in_pos[1], tap[1] = in_pos[1].substituted("k1", Affine((), 0)), tap[1].substituted("k1", Affine((), 0))
                count = k1 * c
        w_tap = dot(tap, (kw * c, c)).expr()

        def at(ip, op):
            x_at = (batch * (h * wd * c) + dot(ip, (wd * c, c))).expr()
            out_at = (batch * (y.type.size // n) + dot(op, (y.type.shape[2] * o, o))).expr()
            coords = tuple(p.expr() for p in (batch, *op))
            return x_at, out_at, coords
        outer = list(tl.outer)
        if tl.empty:
            x_at, out_at, coords = at(in_pos, out_pos)
            body = _empty(graph, args, attrs, out_at, coords)
            stmts += loops(outer, body)
            continue
        if outer and outer[-1][0] == "o1" and outer[-1][1] >= 2:  # pixels in pairs along the row
            e = outer[-1][1]
            pixel_pair = [at(in_pos, out_pos), at([a.shifted("o1", 1) for a in in_pos],
                                                  [a.shifted("o1", 1) for a in out_pos])]
            inner: list[Stmt] = [For("o1", e - e % 2, tuple(_channels(graph, args, attrs, pixel_pair, tap_loops,
                                                                        w_tap, count, CONV_CHANNELS)), step=2)]
            if e % 2:
                last = [at([a.shifted("o1", e - 1) for a in in_pos], [a.shifted("o1", e - 1) for a in out_pos])]
                inner.append(For("o1", 1, tuple(_channels(graph, args, attrs, last, tap_loops, w_tap, count,
                                                          CONV_CHANNELS))))
            stmts += loops(outer[:-1], inner)
        else:
            stmts += loops(outer, _channels(graph, args, attrs, [at(in_pos, out_pos)], tap_loops, w_tap, count,
                                            CONV_CHANNELS))
    return [For("n", n, tuple(row_major(stmts)))]


# a depthwise window of up to this many taps runs straight-line (measured: 3x3 unrolled is faster
# than its loops)
UNROLL_TAPS = 9


def _tap_offsets(tl: TileLoops) -> tuple[list[tuple[list[Affine], list[Affine]]], list[tuple[str, int]]]:
    """(input positions, weight positions) of each straight-line tap, and the tap loops left
    around them: tap loops unrolled from the innermost while the taps number at most UNROLL_TAPS."""
    positions = [(list(tl.in_pos), list(tl.tap))]
    left = list(tl.taps)
    while left and left[-1][1] * len(positions) <= UNROLL_TAPS:
        var, extent = left.pop()
        positions = [([a.substituted(var, Affine((), v)) for a in ip], [a.substituted(var, Affine((), v)) for a in tp])
                     for ip, tp in positions for v in range(extent)]
    return positions, left


def _depthwise_quads(graph, args, attrs, taps_at: list[tuple[Expr, Expr]], tap_loops, out_at: Expr,
                     coords) -> list[Stmt]:
    """Four channels per step: one input word and one weight word per tap, split into lanes
    (channels 0 and 2 in one register, 1 and 3 in the other) and multiplied lane by lane with
    SMLABB / SMLATT into four accumulators. `taps_at`: the (input, weight) offsets of each
    straight-line tap, inside `tap_loops`."""
    x, w = args.inputs[0], args.inputs[1]
    c = w.type.shape[3]
    offset = i32(pair(-attrs["x_zero_point"]))
    base = Binary("*", Var("cq"), index(4))
    chans = [_plus(base, j) for j in range(4)]
    taps: list[Stmt] = []
    for t, (x_at, w_at) in enumerate(taps_at):
        xw = Call("read_i8x4", (Load(x.name, Binary("+", x_at, base)),), "int32")
        ww = Call("read_i8x4", (Load(w.name, Binary("+", w_at, base)),), "int32")
        dx, dw = f"dx{t}", f"dw{t}"
        taps += [Local(dx, xw, "int32"), Local(dw, ww, "int32"),
                 Local(f"{dx}_lo", Call("sxtab16", (offset, Var(dx)), "int32"), "int32"),
                 Local(f"{dx}_hi", Call("sxtab16_ror8", (offset, Var(dx)), "int32"), "int32"),
                 Local(f"{dw}_lo", Call("sxtb16", (Var(dw),), "int32"), "int32"),
                 Local(f"{dw}_hi", Call("sxtb16_ror8", (Var(dw),), "int32"), "int32")]
        for j, (fn, lanes) in enumerate((("smlabb", "lo"), ("smlabb", "hi"), ("smlatt", "lo"), ("smlatt", "hi"))):
            taps.append(Assign(f"acc{j}", Call(fn, (Var(f"{dx}_{lanes}"), Var(f"{dw}_{lanes}"), Var(f"acc{j}")),
                                               "int32")))
    body: list[Stmt] = [Local(f"acc{j}", scalar._bias(args, ch), "int32") for j, ch in enumerate(chans)]
    body += loops(tap_loops, taps)
    for j, ch in enumerate(chans):
        at = coords + (ch,) if coords is not None else None
        body += scalar._finish(graph, args, attrs, ch, Binary("+", out_at, ch), at, f"acc{j}")
    stmts: list[Stmt] = [For("cq", c // 4, tuple(body))]
    for r in range(c - c % 4, c):  # the channels past a multiple of four, one by one
        ch = _plus(Var("cl"), r)
        macs: list[Stmt] = []
        for x_at, w_at in taps_at:
            xv = Binary("-", widen(Load(x.name, Binary("+", x_at, ch))), i32(attrs["x_zero_point"]))
            wv = widen(Load(w.name, Binary("+", w_at, ch)))
            macs.append(Assign("acc", Binary("+", Var("acc"), Binary("*", xv, wv))))
        at = coords + (ch,) if coords is not None else None
        stmts.append(For("cl", 1, (Local("acc", scalar._bias(args, ch), "int32"), *loops(tap_loops, macs),
                                   *scalar._finish(graph, args, attrs, ch, Binary("+", out_at, ch), at))))
    return stmts


@ARM_DSP.register("QDepthwise", family="convolution", types=INT8_CONV, layout="nhwc",
                  when=lambda args, attrs: args.caps.dsp and attrs["depth_multiplier"] == 1
                   and args.inputs[1].type.shape[3] >= 4)
def qdepthwise_dsp(graph, node_id, cluster_id, args, attrs):
    """QDepthwise (depth multiplier 1), four channels per step on SMLABB / SMLATT."""
    x, w, y = args.inputs[0], args.inputs[1], args.outputs[0]
    _, kh, kw, c = w.type.shape
    n, h, wd, _ = x.type.shape
    wins = _windows(args, attrs, kh, kw)
    axes = [Axis(win) for win in wins]
    batch = Affine.var("n")
    stmts: list[Stmt] = []
    for tile in tiles(wins, exact_only=True):
        tl = tile_loops(axes, tile)
        stmts.append(Comment(tl.label))
        out_at = (batch * (y.type.size // n) + dot(tl.out_pos, (y.type.shape[2] * c, c))).expr()
        coords = tuple(p.expr() for p in (batch, *tl.out_pos))
        if tl.empty:
            oc = Var("oc")
            body = [For("oc", c, (Local("acc", scalar._bias(args, oc), "int32"),
                                  *scalar._finish(graph, args, attrs, oc, Binary("+", out_at, oc), coords + (oc,))))]
        else:
            positions, tap_loops = _tap_offsets(tl)
            taps_at = [((batch * (h * wd * c) + dot(ip, (wd * c, c))).expr(), dot(tp, (kw * c, c)).expr())
                       for ip, tp in positions]
            body = _depthwise_quads(graph, args, attrs, taps_at, tap_loops, out_at, coords)
        stmts += loops(tl.outer, body)
    return [For("n", n, tuple(row_major(stmts)))]


@ARM_DSP.register("QFullyConnected", family="matrix", types=INT8_CONV, when=lambda args, attrs: args.caps.dsp)
def qfully_connected_dsp(graph, node_id, cluster_id, args, attrs):
    """QFullyConnected: four weight rows per step share each input word (then the last few alone)."""
    x, w, y = args.inputs[0], args.inputs[1], args.outputs[0]
    rows, o = y.type.shape
    k = w.type.shape[1]
    row = [(Binary("*", Var("r"), index(k)), Binary("*", Var("r"), index(o)), (Var("r"),))]
    return [For("r", rows, tuple(_channels(graph, args, attrs, row, (), index(0), k, FC_ROWS,
                                           straight=FC_STRAIGHT_QUADS)))]
