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

TFLite's 16x8 scheme (int16 inputs, int8 weights) runs on the same blocks: four int16 inputs are
two words re-paired by PKHBT / PKHTB into the lanes SXTB16 gives four weights (int16_pairs), and
the sums are int32 SMLADs where the weights prove them exact, else SMLALDs (Sums). Their
per-channel requantization constants are packed at build time (quantized.reduced_requant_pack).
"""
from __future__ import annotations

from tinsmith.generate.kernel_sets import ARM_DSP
from tinsmith.generate.functors.quantized import INT8_CONV, INT16X8_CONV
from tinsmith.generate.functors import quantized as scalar
from tinsmith.generate.functors.conv import loops
from tinsmith.generate.functors.quantized_driver import (TileGeometry, bias_only, channel_blocks, conv_nest, depthwise_nest,
                                                        fc_nest, is_pointwise, plus as _plus, pointwise_nest)
from tinsmith.generate.functors.quantized_math import i32, select_max, select_min, widen
from tinsmith.generate.loop_ir import (Assign, Binary, Call, Cast, Expr, For, Load, Local, Scratch, Stmt, Store,
                                      Var, index)



def _ssat(bits: int):
    def saturate(v: Expr, lo: int, hi: int) -> Expr:
        """v clamped to lo..hi for an int8 (int16) output: one SSAT saturates to the type's range, and
        only a fused activation's tighter bound is tested."""
        y: Expr = Call(f"ssat{bits}", (v,), "int32")
        if lo > -(1 << (bits - 1)):
            y = select_max(y, i32(lo))
        if hi < (1 << (bits - 1)) - 1:
            y = select_min(y, i32(hi))
        return y
    return saturate


ARM_DSP.micro_kernel("saturate_int8")(_ssat(8))
ARM_DSP.micro_kernel("saturate_int16")(_ssat(16))

def pair(v: int) -> int:
    """v in both int16 lanes of an int32 (what SXTAB16 adds to each lane)."""
    h = v & 0xFFFF
    word = h | (h << 16)
    return word - (1 << 32) if word >= 1 << 31 else word


def int16_pairs(name: str, x: str, at: Expr) -> list[Stmt]:
    """Four int16 inputs from `at` as the lane pairs (x0, x2) and (x1, x3) (locals name_lo and
    name_hi), matching SXTB16's split of a word of four int8 weights: two words re-paired by PKHBT
    and PKHTB."""
    return [Local(f"{name}_01", Call("read_i16x2", (Load(x, at),), "int32"), "int32"),
            Local(f"{name}_23", Call("read_i16x2", (Load(x, _plus(at, 2)),), "int32"), "int32"),
            Local(f"{name}_lo", Call("pkhbt", (Var(f"{name}_01"), Var(f"{name}_23")), "int32"), "int32"),
            Local(f"{name}_hi", Call("pkhtb", (Var(f"{name}_23"), Var(f"{name}_01")), "int32"), "int32")]


def block_dot(x: str, x_ats: list[Expr], w: str, w_ats: list[Expr], count: int, x_zero_point: int,
              var: str, lanes: tuple[str, list[Expr]] | None = None, straight: int | None = None,
              sixteen: bool = False, mac: str = "smlad") -> list[Stmt]:
    """acc<p><c> += sum over i < count of (x[x_ats[p] + i] - zero point) * w[w_ats[c] + i] for every
    pixel p and channel c: each input word is loaded and split once for all channels, each weight
    word once for all pixels. With `lanes` (a scratch buffer and each pixel's offset in it) the
    input words come already split: word q's two lane pairs at offset + 2q and + 2q + 1. With
    `sixteen` the inputs are int16 (zero point 0, TFLite's 16x8), two words re-paired per four
    weights (int16_pairs); `mac` is smlad (int32 sums) or smlald (int64)."""
    stmts: list[Stmt] = []
    quads, tail = divmod(count, 4)
    offset = i32(pair(-x_zero_point))

    def split(name: str, word: Expr, fn: str) -> list[Stmt]:
        args = (lambda v: (offset, v)) if fn == "sxtab16" else (lambda v: (v,))
        return [Local(name, word, "int32"), Local(f"{name}_lo", Call(fn, args(Var(name)), "int32"), "int32"),
                Local(f"{name}_hi", Call(f"{fn}_ror8", args(Var(name)), "int32"), "int32")]

    acc_type = "int64" if mac == "smlald" else "int32"

    def macs(tag: str, p: int, c: int) -> list[Stmt]:
        acc = f"acc{p}{c}"
        return [Assign(acc, Call(mac, (Var(f"{tag}_x{p}_lo"), Var(f"{tag}_w{c}_lo"), Var(acc)), acc_type)),
                Assign(acc, Call(mac, (Var(f"{tag}_x{p}_hi"), Var(f"{tag}_w{c}_hi"), Var(acc)), acc_type))]

    def presplit(name: str, buffer: str, at: Expr) -> list[Stmt]:
        return [Local(f"{name}_lo", Load(buffer, at), "int32"), Local(f"{name}_hi", Load(buffer, _plus(at, 1)), "int32")]

    def quad(at: Expr, pairs_at: Expr, tag: str) -> list[Stmt]:
        """Word `at` / 4 of every pixel and channel; its lane pairs at `pairs_at` in `lanes`."""
        if lanes is not None:
            xs = [presplit(f"{tag}_x{p}", lanes[0], Binary("+", base, pairs_at)) for p, base in enumerate(lanes[1])]
        elif sixteen:
            xs = [int16_pairs(f"{tag}_x{p}", x, Binary("+", x_at, at)) for p, x_at in enumerate(x_ats)]
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
    return stmts + _scalar_tail(x, x_ats, w, w_ats, range(4 * quads, count), x_zero_point)


def _scalar_tail(x: str, x_ats: list[Expr], w: str, w_ats: list[Expr], positions, x_zero_point: int) -> list[Stmt]:
    """The values of a run past its last whole word, one multiply-add each into acc<p><c>."""
    stmts: list[Stmt] = []
    for at in positions:
        xs = [Binary("-", widen(Load(x, _plus(x_at, at))), i32(x_zero_point)) for x_at in x_ats]
        for c, w_at in enumerate(w_ats):
            wv = widen(Load(w, _plus(w_at, at)))
            stmts += [Assign(f"acc{p}{c}", Binary("+", Var(f"acc{p}{c}"), Binary("*", xs[p], wv)))
                      for p in range(len(x_ats))]
    return stmts


class Sums:
    """How a block's sums accumulate: int32 on SMLAD (TFLite's int8, and its 16x8 with an int32
    bias); for 16x8 with an int64 accumulator, on SMLAD widened once where the weights prove the
    sums inside int32 (the primitive's prepare fact int16_sums_fit_int32), else on SMLALD. Gives
    each sum's local (start) and the statements that requantize and store it (finish)."""

    def __init__(self, args, attrs):
        self.wide = scalar.accumulator(attrs) == "int64"
        self.narrow_sums = self.wide and bool(args.prepared.facts.get("int16_sums_fit_int32"))
        self.mac = "smlald" if self.wide and not self.narrow_sums else "smlad"

    def start(self, args, name: str, channel: Expr) -> Local:
        if self.narrow_sums:  # the bias joins after the int32 sum, in int64
            return Local(name, i32(0), "int32")
        return Local(name, scalar._bias(args, channel), "int64" if self.wide else "int32")

    def finish(self, graph, args, attrs, name: str, channel: Expr, out_at: Expr, coords) -> list[Stmt]:
        stmts: list[Stmt] = []
        if self.narrow_sums:
            stmts.append(Local(f"{name}_wide", Binary("+", Cast("int64", Var(name)), scalar._bias(args, channel)),
                               "int64"))
            name = f"{name}_wide"
        return stmts + scalar._finish(graph, args, attrs, channel, out_at, coords, name)


def _block(graph, args, attrs, pixels: list[tuple[Expr, Expr, tuple | None]], channel_base: Expr, n_chan: int,
           tap_loops, w_tap: Expr, count: int, lanes=None, straight=None) -> list[Stmt]:
    """Accumulators for len(pixels) pixels x n_chan channels (channel_base + c): bias, the taps'
    dot products, then each requantized and stored. pixels: (input offset, output offset, coords)."""
    w = args.inputs[1]
    k_size = w.type.size // w.type.shape[0]
    chans = [_plus(channel_base, c) for c in range(n_chan)]
    sums = Sums(args, attrs)
    stmts: list[Stmt] = []
    for p in range(len(pixels)):
        for c, ch in enumerate(chans):
            stmts.append(sums.start(args, f"acc{p}{c}", ch))
    # one weight pointer for the block, the channels at constant offsets from it
    w_base = Binary("+", Binary("*", channel_base, index(k_size)), w_tap)
    w_ats = [_plus(w_base, c * k_size) for c in range(n_chan)]
    stmts += loops(tap_loops, block_dot(args.inputs[0].name, [px[0] for px in pixels], w.name, w_ats, count,
                                        attrs["x_zero_point"], "ic", lanes, straight,
                                        args.inputs[0].type.dtype == "int16", sums.mac))
    for p, (_, out_at, coords) in enumerate(pixels):
        for c, ch in enumerate(chans):
            at = coords + (ch,) if coords is not None else None
            stmts += sums.finish(graph, args, attrs, f"acc{p}{c}", ch, Binary("+", out_at, ch), at)
    return stmts


def _channels(graph, args, attrs, pixels, tap_loops, w_tap, count, per: int, lanes=None,
              straight=None) -> list[Stmt]:
    """The output channels in blocks of `per` for the given pixels (channel_blocks)."""
    return channel_blocks(args.inputs[1].type.shape[0], per, lambda base, n: _block(
        graph, args, attrs, pixels, base, n, tap_loops, w_tap, count, lanes, straight))


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


def _split_inputs(x: str, x_ats: list[Expr], c: int, x_zero_point: int, sixteen: bool = False) -> list[Stmt]:
    """The input words of each pixel split once into `lanes` (SXTAB16, the zero point subtracted;
    int16 inputs re-paired by int16_pairs), two int32 per four inputs, pixel after pixel: every
    output channel then loads them ready to use."""
    offset = i32(pair(-x_zero_point))
    quads = c // 4
    body: list[Stmt] = []
    for p, x_at in enumerate(x_ats):
        word = f"sx{p}"
        at = Binary("+", index(2 * p * quads), Binary("*", Var("sq"), index(2)))
        first = Binary("+", x_at, Binary("*", Var("sq"), index(4)))
        if sixteen:
            body += [*int16_pairs(word, x, first), Store("lanes", at, Var(f"{word}_lo")),
                     Store("lanes", _plus(at, 1), Var(f"{word}_hi"))]
            continue
        body += [Local(word, Call("read_i8x4", (Load(x, first),), "int32"), "int32"),
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
    c = args.inputs[0].type.shape[3]
    quads = c // 4

    def run(block) -> list[Stmt]:
        lanes = ("lanes", [index(2 * p * quads) for p in range(len(block))])
        return [*_split_inputs(args.inputs[0].name, [b[0] for b in block], c, attrs["x_zero_point"],
                               args.inputs[0].type.dtype == "int16"),
                *_channels(graph, args, attrs, block, (), index(0), c, CHANNELS, lanes)]
    return pointwise_nest(args, PIXELS, run)


class DspMicroKernel:
    """The DSP extension's inner tile for the int8 driver: pixels x channels accumulators fed by
    SMLAD (block_dot), each sum requantized by the portable requantization."""

    pixels, channels = 2, CONV_CHANNELS

    def conv_pixels(self, graph, args, attrs, geometry: TileGeometry, pixels) -> list[Stmt]:
        return _channels(graph, args, attrs, pixels, geometry.tap_loops, geometry.w_tap, geometry.count,
                         self.channels)

    def empty(self, graph, args, attrs, out_at, coords) -> list[Stmt]:
        return bias_only(graph, args, attrs, out_at, coords)

    def fc_rows(self, graph, args, attrs, rows, k: int) -> list[Stmt]:
        return _channels(graph, args, attrs, rows, (), index(0), k, FC_ROWS, straight=FC_STRAIGHT_QUADS)


DSP_KERNEL = DspMicroKernel()


def _takes_16x8(args, attrs) -> bool:
    """TFLite's 16x8 scheme, the one the 16x8 kernels compute: int16 data symmetric (zero points
    0). A graph file's int16 node with zero points takes the portable kernel."""
    return args.caps.dsp and attrs["x_zero_point"] == 0 and attrs.get("y_zero_point", 0) == 0


@ARM_DSP.register("QConv2D", family="convolution", types=INT16X8_CONV, layout="nhwc",
                  when=_takes_16x8, scratch=_lanes_scratch, pack=scalar.reduced_requant_pack)
@ARM_DSP.register("QConv2D", family="convolution", types=INT8_CONV, layout="nhwc", when=lambda args, attrs: args.caps.dsp, scratch=_lanes_scratch)
def qconv2d_dsp(graph, node_id, cluster_id, args, attrs):
    """QConv2D on SMLAD in blocks of pixels x channels (see the module doc); 16x8 on SMLAD (SMLALD
    where the weights do not prove int32 sums exact), int16 inputs re-paired by PKHBT / PKHTB
    (block_dot's `sixteen`)."""
    if is_pointwise(args, attrs):
        return _pointwise(graph, args, attrs)
    # a 1x1 window with strides and padding that keep the size: the scratch is not needed
    unused = _has_lanes(args.inputs[0].type.shape, args.inputs[1].type.shape, args.outputs[0].type.shape)
    return conv_nest(graph, args, attrs, DSP_KERNEL, [Store("lanes", index(0), i32(0))] if unused else [])


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
    sums = Sums(args, attrs)
    for t, (x_at, w_at) in enumerate(taps_at):
        ww = Call("read_i8x4", (Load(w.name, Binary("+", w_at, base)),), "int32")
        dx, dw = f"dx{t}", f"dw{t}"
        if x.type.dtype == "int16":  # (x0, x2) and (x1, x3) from two words of int16 inputs
            taps += int16_pairs(dx, x.name, Binary("+", x_at, base))
        else:
            xw = Call("read_i8x4", (Load(x.name, Binary("+", x_at, base)),), "int32")
            taps += [Local(dx, xw, "int32"),
                     Local(f"{dx}_lo", Call("sxtab16", (offset, Var(dx)), "int32"), "int32"),
                     Local(f"{dx}_hi", Call("sxtab16_ror8", (offset, Var(dx)), "int32"), "int32")]
        taps += [Local(dw, ww, "int32"),
                 Local(f"{dw}_lo", Call("sxtb16", (Var(dw),), "int32"), "int32"),
                 Local(f"{dw}_hi", Call("sxtb16_ror8", (Var(dw),), "int32"), "int32")]
        for j, (fn, lanes) in enumerate((("smlabb", "lo"), ("smlabb", "hi"), ("smlatt", "lo"), ("smlatt", "hi"))):
            taps.append(Assign(f"acc{j}", Call(fn, (Var(f"{dx}_{lanes}"), Var(f"{dw}_{lanes}"), Var(f"acc{j}")),
                                               "int32")))
    body: list[Stmt] = [sums.start(args, f"acc{j}", ch) for j, ch in enumerate(chans)]
    body += loops(tap_loops, taps)
    for j, ch in enumerate(chans):
        at = coords + (ch,) if coords is not None else None
        body += sums.finish(graph, args, attrs, f"acc{j}", ch, Binary("+", out_at, ch), at)
    stmts: list[Stmt] = [For("cq", c // 4, tuple(body))]
    for r in range(c - c % 4, c):  # the channels past a multiple of four, one by one
        ch = _plus(Var("cl"), r)
        macs: list[Stmt] = []
        for x_at, w_at in taps_at:
            xv = Binary("-", widen(Load(x.name, Binary("+", x_at, ch))), i32(attrs["x_zero_point"]))
            wv = widen(Load(w.name, Binary("+", w_at, ch)))
            macs.append(Assign("acc", Binary("+", Var("acc"), Binary("*", xv, wv))))
        at = coords + (ch,) if coords is not None else None
        stmts.append(For("cl", 1, (scalar.start_sum(args, attrs, ch), *loops(tap_loops, macs),
                                   *scalar._finish(graph, args, attrs, ch, Binary("+", out_at, ch), at))))
    return stmts


def _depthwise_takes(args, attrs) -> bool:
    """Depth multiplier 1, at least four channels; 16x8 sums on SMLABB / SMLATT where the weights
    prove they fit int32 (they always do below 2^16 / 128 = 512 taps)."""
    return (args.caps.dsp and attrs["depth_multiplier"] == 1 and args.inputs[1].type.shape[3] >= 4
            and (scalar.accumulator(attrs) == "int32" or bool(args.prepared.facts.get("int16_sums_fit_int32"))))


@ARM_DSP.register("QDepthwise", family="convolution", types=INT16X8_CONV, layout="nhwc",
                  when=lambda args, attrs: _depthwise_takes(args, attrs) and _takes_16x8(args, attrs),
                  pack=scalar.reduced_requant_pack)
@ARM_DSP.register("QDepthwise", family="convolution", types=INT8_CONV, layout="nhwc", when=_depthwise_takes)
def qdepthwise_dsp(graph, node_id, cluster_id, args, attrs):
    """QDepthwise (depth multiplier 1), four channels per step on SMLABB / SMLATT."""
    return depthwise_nest(graph, args, attrs, _depthwise_quads)


@ARM_DSP.register("QFullyConnected", family="matrix", types=INT16X8_CONV, when=_takes_16x8,
                  pack=scalar.reduced_requant_pack)
@ARM_DSP.register("QFullyConnected", family="matrix", types=INT8_CONV, when=lambda args, attrs: args.caps.dsp)
def qfully_connected_dsp(graph, node_id, cluster_id, args, attrs):
    """QFullyConnected: FC_ROWS weight rows per step share each input word (then the last few)."""
    return fc_nest(graph, args, attrs, DSP_KERNEL)
