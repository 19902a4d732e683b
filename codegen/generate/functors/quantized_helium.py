"""Helium (MVE) micro-kernels of the int8 family: QConv2D and QFullyConnected on the Cortex-M55.

The loop nest is the int8 driver's (quantized_driver.py: tiles, pixel and channel blocks); this
module supplies its inner tile. A block of pixels x four output channels keeps one int32 sum per
pair in a general register and adds sixteen int8 products at a time to it with VMLADAVA, each
input vector serving the four channels and each weight vector every pixel of the block (the
register blocking CMSIS-NN describes for its MVE matrix products, written here from that design).
A dot product whose length is not a multiple of sixteen ends in one step whose loads are
predicated (VCTP): lanes past the end read as zero.

VMLADAV multiplies the raw int8 values, so the input zero point cannot be subtracted lane by lane
(x - zp does not fit in int8). It is folded into the bias at build time instead, from the
weights' sums that the primitive's `prepare` computed: sum((x - zp) * w) + b = sum(x * w) +
(b - zp * sum(w)). Where a window is not one contiguous run of the input with a length that is a
multiple of sixteen (a 3x3 window, a first layer of three channels, padding), the block's windows
are first gathered into a scratch row (`cols`), taps in the padding written as the zero point, so
the folded bias holds for edge tiles too; every read of the input is then a declared load.

Four channels' sums are requantized together in Q registers (mve_requantize_x4, TFLite's
fixed-point arithmetic: VQRDMULH is its doubling high multiply, VRSHL after a sign fix-up its
rounding division by a power of two), so the outputs are bit-exact with the portable kernels.
"""
from __future__ import annotations

from tinsmith.generate.backend import same
from tinsmith.generate.kernel_sets import HELIUM
from tinsmith.generate.functors import quantized as scalar
from tinsmith.generate.functors.conv import loops
from tinsmith.generate.functors.quantized import INT8_CONV
from tinsmith.generate.functors import reduction_nest
from tinsmith.generate.functors.reduction_nest import Passes, ReductionNest, ReductionSchedule
from tinsmith.generate.functors.quantized_driver import (Pixel, TileGeometry, channel_blocks, conv_nest, copy_values,
                                                        depthwise_nest, fc_nest, is_pointwise, padding_runs, plus,
                                                        pointwise_nest)
from tinsmith.generate.functors.quantized_math import i32, qadd_steps
from tinsmith.ops import quantized as q
from tinsmith.generate.loop_ir import (Assign, Binary, Call, Const, Expr, For, Load, Local, Scratch, Stmt, Store,
                                      Var, index)

LANES = 16
COLS = "cols"  # the scratch rows a block's windows are gathered into
# pixels per block of a convolution, and channels (one Q register of sums); measured on the M55 (ic:
# 3.57 M instructions with 2 x 4, 3.61 M with 1 x 4; VMLADAV's sum must be an even register, so the
# eight sums of 2 x 4 already spill one)
PIXELS, CHANNELS = 2, 4
# a dot product of up to this many full vectors is straight-line code, a longer one a loop (measured
# on the M55, ic: 3.54 M instructions with loops from 5 vectors, 3.40 M from 10, i.e. a 3x3 window
# over 16 channels straight-line)
STRAIGHT_STEPS = 9


def _window_size(w_shape) -> int:
    k = 1
    for d in w_shape[1:]:
        k *= d
    return k


def _gathers(w_shape) -> bool:
    """Whether a block's windows go through `cols`: all but 1x1 windows over a multiple of sixteen
    channels (and fully connected rows of such a length), which are read in place."""
    direct = (len(w_shape) == 2 or tuple(w_shape[1:3]) == (1, 1)) and w_shape[-1] % LANES == 0
    return not direct


def _cols_scratch(prepared, caps) -> list[Scratch]:
    """The gathered windows of a block; a convolution that reads in place still gets one window's
    worth, for windows wholly in the padding (read as the zero point, see HeliumMicroKernel.empty)."""
    w = prepared.inputs[1]
    if len(w.shape) == 2:
        return [Scratch(COLS, "int8", w.shape[1])] if _gathers(w.shape) else []
    return [Scratch(COLS, "int8", (PIXELS if _gathers(w.shape) else 1) * _window_size(w.shape))]


def _takes(args, attrs) -> bool:
    """Helium folds the zero point into a bias it packs: constant weights and bias, TFLite's
    fixed-point requantization to int8."""
    p = args.prepared
    return ("helium" in args.caps.kernels and p is not None and "weight_sums" in p.facts
            and args.inputs[2] is not None and len(p.constant) > 2 and p.constant[2]
            and attrs.get("requantize", "fixed_point") == "fixed_point" and args.outputs[0].type.dtype == "int8")


def _fold_zero_point(args, attrs) -> dict:
    sums = args.prepared["weight_sums"]
    zp = int(attrs["x_zero_point"])
    return {2: lambda bias: (bias.astype("int64") - zp * sums).astype("int32")}


def _vector(buffer: str, at: Expr) -> Expr:
    return Load(buffer, at, width=LANES, dtype="int8")


def dot_block(xs: list[tuple[str, Expr]], w: str, w_ats: list[Expr], k: int) -> list[Stmt]:
    """acc<p><c> = sum over i < k of x_p[i] * w_c[i] (raw int8 values), sixteen lanes a step:
    each weight vector loaded once for all pixels, each input vector once for all channels."""
    stmts: list[Stmt] = [Local(f"acc{p}{c}", i32(0), "int32") for p in range(len(xs)) for c in range(len(w_ats))]

    def step(at: Expr, tag: str, tail: int = 0) -> list[Stmt]:
        def load(buffer: str, base: Expr) -> Expr:
            where = Binary("+", base, at)
            return Call("vldrb_tail", (Load(buffer, where), i32(tail)), "int8", LANES) if tail else _vector(buffer, where)
        body: list[Stmt] = [Local(f"{tag}w{c}", load(w, w_at), "int8", LANES) for c, w_at in enumerate(w_ats)]
        for p, (buffer, x_at) in enumerate(xs):
            body.append(Local(f"{tag}x{p}", load(buffer, x_at), "int8", LANES))
            body += [Assign(f"acc{p}{c}", Call("vmladava", (Var(f"acc{p}{c}"), Var(f"{tag}x{p}"), Var(f"{tag}w{c}")),
                                               "int32")) for c in range(len(w_ats))]
        return body
    full, tail = divmod(k, LANES)
    if full <= STRAIGHT_STEPS:
        for s in range(full):
            stmts += step(index(s * LANES), f"s{s}")
    else:
        stmts.append(For("ks", full, tuple(step(Binary("*", Var("ks"), index(LANES)), "s"))))
    if tail:
        stmts += step(index(full * LANES), "t", tail)
    return stmts


def _requantization(graph, args, attrs, channel: Expr) -> tuple[str, tuple[Expr, ...]]:
    """The requantization intrinsic's variant (per tensor, per channel with right shifts only, or per
    channel) and its arguments after the sums: multipliers, shifts, zero point and bounds."""
    mult, shift = args.inputs[3], args.inputs[4]
    tail = (i32(attrs["y_zero_point"]), *(i32(v) for v in q.output_clamp(attrs, args.outputs[0].type.dtype)))
    if mult.type.size == 1 and shift.type.size == 1:
        m = int(graph.constants[mult.name].data.reshape(-1)[0])
        s = int(graph.constants[shift.name].data.reshape(-1)[0])
        return "_tensor", (i32(m), i32(max(s, 0)), i32(min(s, 0)), *tail)
    shifts = graph.constants[shift.name].data if shift.name in graph.constants else None
    variant = "_right" if shifts is not None and (shifts <= 0).all() else ""
    return variant, (Load(mult.name, channel), Load(shift.name, channel), *tail)


def _requantize_x4(graph, args, attrs, accs: list[str], channel: Expr) -> Expr:
    """Four channels' sums, plus their folded biases, requantized to four int8 values."""
    variant, rest = _requantization(graph, args, attrs, channel)
    bias = Load(args.inputs[2].name, channel)
    return Call(_variant("requantize_x4", variant), (*(Var(a) for a in accs), bias, *rest), "int8", 4)


def _variant(name: str, variant: str) -> str:
    """The intrinsic's name for a requantization variant: NAME_tensor, NAME_channels[_right]."""
    return f"{name}_tensor" if variant == "_tensor" else f"{name}_channels{variant}"


def _finish(graph, args, attrs, pixels: list[Pixel], base: Expr, n: int) -> list[Stmt]:
    """Each pixel's n channels requantized and stored: four to a vector, fewer one by one."""
    stmts: list[Stmt] = []
    y = args.outputs[0].name
    for p, (_, out_at, coords) in enumerate(pixels):
        if n == CHANNELS:
            stmts.append(Store(y, Binary("+", out_at, base),
                               _requantize_x4(graph, args, attrs, [f"acc{p}{c}" for c in range(n)], base)))
            continue
        for c in range(n):
            ch = plus(base, c)
            acc = f"acc{p}{c}"
            stmts.append(Assign(acc, Binary("+", Var(acc), scalar._bias(args, ch))))
            at = coords + (ch,) if coords is not None else None
            stmts += scalar._finish(graph, args, attrs, ch, Binary("+", out_at, ch), at, acc)
    return stmts


def _blocks(graph, args, attrs, pixels: list[Pixel], xs: list[tuple[str, Expr]], k: int) -> list[Stmt]:
    """Every output channel of these pixels, CHANNELS at a time: dot products, then requantized."""
    w = args.inputs[1].name

    def block(base: Expr, n: int) -> list[Stmt]:
        w_ats = [Binary("*", plus(base, c), index(k)) for c in range(n)]
        return [*dot_block(xs, w, w_ats, k), *_finish(graph, args, attrs, pixels, base, n)]
    return channel_blocks(args.inputs[1].type.shape[0], CHANNELS, block)


class HeliumMicroKernel:
    """The Helium inner tile for the int8 driver (see the module doc)."""

    pixels, channels = PIXELS, CHANNELS

    def conv_pixels(self, graph, args, attrs, geometry: TileGeometry, pixels: list[Pixel]) -> list[Stmt]:
        w_shape = args.inputs[1].type.shape
        k = _window_size(w_shape)
        x = args.inputs[0].name
        if not _gathers(w_shape):
            return _blocks(graph, args, attrs, pixels, [(x, at) for at, _, _ in pixels], k)
        stmts: list[Stmt] = []
        copies: list[Stmt] = []
        for p, (x_at, _, _) in enumerate(pixels):
            for at, n in padding_runs(geometry):
                stmts += copy_values(COLS, index(p * k + at), None, None, n, attrs["x_zero_point"])
            copies += copy_values(COLS, plus(geometry.w_tap, p * k), x, x_at, geometry.count)
        stmts += loops(geometry.tap_loops, copies)
        return stmts + _blocks(graph, args, attrs, pixels, [(COLS, index(p * k)) for p in range(len(pixels))], k)

    def empty(self, graph, args, attrs, out_at: Expr, coords) -> list[Stmt]:
        """A window wholly in the padding: every tap the zero point, so the folded bias comes back
        to the bias (b - zp * sum(w) + zp * sum(w))."""
        k = _window_size(args.inputs[1].type.shape)
        return [*copy_values(COLS, index(0), None, None, k, attrs["x_zero_point"]),
                *_blocks(graph, args, attrs, [(index(0), out_at, coords)], [(COLS, index(0))], k)]

    def fc_rows(self, graph, args, attrs, rows: list[Pixel], k: int) -> list[Stmt]:
        x = args.inputs[0].name
        if not _gathers(args.inputs[1].type.shape):
            return _blocks(graph, args, attrs, rows, [(x, at) for at, _, _ in rows], k)
        copies = [s for p, (x_at, _, _) in enumerate(rows) for s in copy_values(COLS, index(p * k), x, x_at, k)]
        return copies + _blocks(graph, args, attrs, rows, [(COLS, index(p * k)) for p in range(len(rows))], k)


HELIUM_KERNEL = HeliumMicroKernel()


def _depthwise_lanes(graph, args, attrs, taps_at: list[tuple[Expr, Expr]], tap_loops, out_at: Expr,
                     coords) -> list[Stmt]:
    """Four channels per step as int32 lanes: the biases, each tap's (x - zero point) * w added lane
    by lane (VMUL and VADD on widening byte loads), the four sums requantized in the vector."""
    x, w, y = args.inputs[0].name, args.inputs[1].name, args.outputs[0].name
    base = Binary("*", Var("cq"), index(4))
    acc = Var("lanes", "int32", 4)
    minus_zp = i32(-attrs["x_zero_point"])
    taps = [Assign("lanes", Call("tap_x4", (acc, Load(x, Binary("+", x_at, base)), Load(w, Binary("+", w_at, base)),
                                            minus_zp), "int32", 4)) for x_at, w_at in taps_at]
    variant, rest = _requantization(graph, args, attrs, base)
    body = [Local("lanes", Call("lanes_x4", (Load(args.inputs[2].name, base),), "int32", 4), "int32", 4),
            *loops(tap_loops, taps),
            Store(y, Binary("+", out_at, base), Call(f"requantize_lanes_x4{variant}", (acc, *rest), "int8", 4))]
    return [For("cq", args.inputs[1].type.shape[3] // 4, tuple(body))]


# eight channels per step as int16 lanes, their constants packed even channels first
EVEN_ODD = (0, 2, 4, 6, 1, 3, 5, 7)


def _even_odd(a):
    """Per eight channels, the even ones first (the order of VMULLB's and VMULLT's sums)."""
    if a.size == 1:
        return a
    return a.reshape(-1, 8)[:, list(EVEN_ODD)].reshape(a.shape)


def _pack_even_odd(args, attrs) -> dict:
    return {i: _even_odd for i in (2, 3, 4)}


def _even_odd_at(oc: Expr) -> Expr:
    """Where output channel oc's constants are once packed by _even_odd."""
    j = Binary("%", oc, index(8))
    half = Binary("+", Binary("/", j, index(2)), Binary("*", Binary("%", j, index(2)), index(4)))
    return Binary("+", Binary("*", Binary("/", oc, index(8)), index(8)), half)


def _depthwise_octets(graph, args, attrs, taps_at: list[tuple[Expr, Expr]], tap_loops, out_at: Expr,
                      coords) -> list[Stmt]:
    """Eight channels per step: (x - zero point) and w as int16 lanes, each tap's products widened
    into even- and odd-channel int32 sums (VMULLB, VMULLT), requantized and interleaved back."""
    x, w, y = args.inputs[0].name, args.inputs[1].name, args.outputs[0].name
    base = Binary("*", Var("co"), index(8))
    even, odd = Var("even", "int32", 4), Var("odd", "int32", 4)
    taps: list[Stmt] = []
    for t, (x_at, w_at) in enumerate(taps_at):
        xv, wv = Var(f"x{t}", "int16", 8), Var(f"w{t}", "int16", 8)
        taps += [Local(xv.name, Call("x_x8", (Load(x, Binary("+", x_at, base)), i32(attrs["x_zero_point"])),
                                     "int16", 8), "int16", 8),
                 Local(wv.name, Call("w_x8", (Load(w, Binary("+", w_at, base)),), "int16", 8), "int16", 8),
                 Assign("even", Call("even_x8", (even, xv, wv), "int32", 4)),
                 Assign("odd", Call("odd_x8", (odd, xv, wv), "int32", 4))]
    variant, rest = _requantization(graph, args, attrs, base)
    bias = args.inputs[2].name
    body = [Local("even", Call("lanes_x4", (Load(bias, base),), "int32", 4), "int32", 4),
            Local("odd", Call("lanes_x4", (Load(bias, plus(base, 4)),), "int32", 4), "int32", 4),
            *loops(tap_loops, taps),
            Store(y, Binary("+", out_at, base), Call(_variant("requantize_x8", variant), (even, odd, *rest), "int8", 8))]
    return [For("co", args.inputs[1].type.shape[3] // 8, tuple(body))]


def _depthwise_takes(args, attrs) -> bool:
    p = args.prepared
    return ("helium" in args.caps.kernels and attrs["depth_multiplier"] == 1 and args.inputs[1].type.shape[3] % 4 == 0
            and args.inputs[2] is not None and attrs.get("requantize", "fixed_point") == "fixed_point"
            and args.outputs[0].type.dtype == "int8" and p is not None and all(p.constant[3:5]))


def _octets(args, attrs) -> bool:
    return _depthwise_takes(args, attrs) and args.inputs[1].type.shape[3] % 8 == 0


@HELIUM.register("QDepthwise", family="convolution", types=INT8_CONV, layout="nhwc", when=_octets,
                 pack=_pack_even_odd, priority=2)
def qdepthwise_helium_octets(graph, node_id, cluster_id, args, attrs):
    """QDepthwise (depth multiplier 1, channels a multiple of eight) on int16 lanes, eight channels a step."""
    return depthwise_nest(graph, args, attrs, _depthwise_octets, _even_odd_at)


@HELIUM.register("QDepthwise", family="convolution", types=INT8_CONV, layout="nhwc", when=_depthwise_takes,
                 priority=1)
def qdepthwise_helium(graph, node_id, cluster_id, args, attrs):
    """QDepthwise (depth multiplier 1, channels a multiple of four) on int32 lanes, four channels a step."""
    return depthwise_nest(graph, args, attrs, _depthwise_lanes)


@HELIUM.register("QConv2D", family="convolution", types=INT8_CONV, layout="nhwc", when=_takes,
                 pack=_fold_zero_point, scratch=_cols_scratch, priority=1)
def qconv2d_helium(graph, node_id, cluster_id, args, attrs):
    """QConv2D on VMLADAV: blocks of pixels x four channels (see the module doc)."""
    # a kernel reading in place has `cols` for windows in the padding only: where it has none, the
    # store keeps the parameter used
    unused = [] if _gathers(args.inputs[1].type.shape) else [Store(COLS, index(0), Const(0, "int8"))]
    if is_pointwise(args, attrs) and unused:
        x = args.inputs[0].name
        return unused + pointwise_nest(args, PIXELS, lambda pixels: _blocks(
            graph, args, attrs, pixels, [(x, at) for at, _, _ in pixels], args.inputs[0].type.shape[3]))
    return conv_nest(graph, args, attrs, HELIUM_KERNEL, unused)


@HELIUM.register("QFullyConnected", family="matrix", types=INT8_CONV, when=_takes, pack=_fold_zero_point,
                 scratch=_cols_scratch, priority=1)
def qfully_connected_helium(graph, node_id, cluster_id, args, attrs):
    """QFullyConnected on VMLADAV: four weight rows per block share each input vector."""
    return fc_nest(graph, args, attrs, HELIUM_KERNEL)


def _qadd_takes(args, attrs) -> bool:
    a, b, y = args.inputs[0].type, args.inputs[1].type, args.outputs[0].type
    return "helium" in args.caps.kernels and a.shape == b.shape == y.shape and y.size % LANES == 0


@HELIUM.register("QAdd", types=same("int8", 2, acc="int32"), when=_qadd_takes, priority=1)
def qadd_helium(graph, node_id, cluster_id, args, attrs):
    """QAdd of two inputs of the output's shape, sixteen values a step: widened to int32 lanes,
    rescaled, added and requantized as TFLite's int8 ADD (the portable kernel's arithmetic)."""
    return qadd_steps(args, attrs, LANES)


# QMean on Helium: four channels a step (the last kept axis in blocks of 4), the positions as one loop
MEAN_LANES = ReductionSchedule(kept=("n", "cq"), reduced=("p",), merged=True, lanes=4)


@HELIUM.register("QMean", family="reduction", types=same("int8", acc="int32"),
                 when=lambda args, attrs: "helium" in args.caps.kernels and args.inputs[0].type.shape[3] % 4 == 0,
                 priority=1)
def qmean_helium(graph, node_id, cluster_id, args, attrs):
    """QMean over H and W, four channels a step: raw sums in int32 lanes, the zero point's share
    (count * zero point) taken off once, rescaled as the portable kernel does."""
    x, y = args.inputs[0].name, args.outputs[0].name
    nest = ReductionNest.of(args)
    mult, shift = q.mean_params(attrs, nest.count)
    lanes = Var("lanes", "int32", 4)
    consts = (-nest.count * attrs["x_zero_point"], mult, shift, attrs["y_zero_point"], *q.output_clamp(attrs, "int8"))

    def mean(row):
        # the block's first element, then one row of channels per position
        at = Binary("+", row.first(), Binary("*", row.reduced[0], index(args.inputs[0].type.shape[3])))
        return [Local("lanes", Const(0, "int32", 4), "int32", 4),
                row.sweep(Assign("lanes", Call("sum_x4", (lanes, Load(x, at)), "int32", 4))),
                Store(y, row.out(), Call("qmean_x4", (lanes, *(i32(v) for v in consts)), "int8", 4))]
    return reduction_nest.reduction(nest, MEAN_LANES, Passes((mean,)))
