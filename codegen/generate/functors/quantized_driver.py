"""The int8 convolution and matrix family's loop nest: ONE driver for QConv2D and QFullyConnected,
parameterised by a micro-kernel (the inner tile) that the Arm DSP and Helium kernel sets supply.

The driver owns the geometry, computed once per node from the primitive's window facts: the
output split into tiles whose taps all lie inside the input (quantized_windows.py), the taps of a
window row merged into one contiguous run where the dilation allows (NHWC input, [O, KH, KW, C]
weights), output pixels taken `pixels` at a time along the innermost output axis, output channels
`channels` at a time (the last few in blocks of half as many, and so on), rows of a fully
connected layer as pixels. The micro-kernel owns what happens inside one block of pixels x
channels: how inputs are staged (read in place, or gathered into a scratch row), how the dot
products run (SMLAD on 16-bit lane pairs, VMLADAV over 16 int8 lanes) and how sums are
requantized and stored (one by one, or four channels to a vector).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Protocol, Sequence

from tinsmith.generate.backend import TensorArg
from tinsmith.generate.functors import quantized as scalar
from tinsmith.generate.functors.conv import Affine, Axis, Segment, TileLoops, dot, loops, tile_loops, tiles
from tinsmith.generate.functors.quantized_windows import _windows, row_major
from tinsmith.generate.loop_ir import Binary, Comment, Const, Expr, For, Load, Local, Stmt, Store, Var, index

# one output pixel of a block: (input offset of its first tap, output offset, output coordinates)
Pixel = tuple[Expr, Expr, tuple | None]


def plus(e: Expr, k: int) -> Expr:
    """e + k, or e itself for k = 0."""
    return e if k == 0 else Binary("+", e, index(k))


@dataclass(frozen=True)
class TileGeometry:
    """One tile of a convolution as the micro-kernel sees it: the tap loops left after the row's
    taps merged into runs, the weight (and window) offset of a run inside one output channel's
    K = KH*KW*C values, the run's length, and the tile's segments (which taps lie inside)."""

    tile: tuple[Segment, ...]
    tap_loops: tuple[tuple[str, int], ...]
    w_tap: Expr
    count: int
    kernel: tuple[int, int, int]  # (KH, KW, C)


class Int8MicroKernel(Protocol):
    """The inner tile of the int8 family (see the module doc)."""

    pixels: int  # output pixels per block along a convolution's innermost output axis
    channels: int  # output channels per block

    def conv_pixels(self, graph, args, attrs, geometry: TileGeometry, pixels: list[Pixel]) -> list[Stmt]:
        """Every output channel of these pixels of one tile (channel_blocks over `block`)."""

    def empty(self, graph, args, attrs, out_at: Expr, coords) -> list[Stmt]:
        """The outputs of a window wholly in the padding (the bias alone, requantized)."""

    def fc_rows(self, graph, args, attrs, rows: list[Pixel], k: int) -> list[Stmt]:
        """Every output of these fully connected rows of K inputs."""


def channel_blocks(o: int, per: int, block: Callable[[Expr, int], list[Stmt]]) -> list[Stmt]:
    """The O output channels in blocks of `per` (block(first channel, how many)); the last few in
    blocks of half as many, and so on, so they too share their input reads."""
    stmts: list[Stmt] = []
    if o // per:
        stmts.append(For("ocb", o // per, tuple(block(Binary("*", Var("ocb"), index(per)), per))))
    done, size = o - o % per, per // 2
    while done < o:
        if o - done >= size:  # a loop of one scopes the locals
            stmts.append(For("ol", 1, tuple(block(plus(Var("ol"), done), size))))
            done += size
        size = max(1, size // 2)  # a block size not a power of two halves to 1, never to 0
    return stmts


def bias_only(graph, args, attrs, out_at: Expr, coords) -> list[Stmt]:
    """A window wholly in the padding: every output channel the bias alone, requantized."""
    oc = Var("oc")
    return [For("oc", args.inputs[1].type.shape[0], (
        scalar.start_sum(args, attrs, oc),
        *scalar._finish(graph, args, attrs, oc, Binary("+", out_at, oc), coords + (oc,))))]


def _merged_runs(tl: TileLoops, c: int, kw: int, runs_merge: bool):
    """(tap loops, input positions, weight offset, run length): a window row's taps and channels as
    one contiguous run where the dilation along the row is 1."""
    in_pos, tap = list(tl.in_pos), list(tl.tap)
    tap_loops = list(tl.taps)
    count = c
    if runs_merge:
        k1 = dict(tap_loops).get("k1")
        if k1 is not None:
            tap_loops = [t for t in tap_loops if t[0] != "k1"]
            in_pos[1], tap[1] = in_pos[1].substituted("k1", Affine((), 0)), tap[1].substituted("k1", Affine((), 0))
            count = k1 * c
    return tuple(tap_loops), in_pos, dot(tap, (kw * c, c)).expr(), count


def window_tiles(args, attrs) -> tuple[list, list[tuple[tuple[Segment, ...], TileLoops]]]:
    """The windows of a convolution's spatial axes, and its tiles (every tap inside the input) with
    their loops."""
    w = args.inputs[1].type.shape
    wins = _windows(args, attrs, w[1], w[2])
    axes = [Axis(win) for win in wins]
    return wins, [(tuple(tile), tile_loops(axes, tile)) for tile in tiles(wins, exact_only=True)]


def conv_nest(graph, args, attrs, kernel: Int8MicroKernel, prologue: Sequence[Stmt] = ()) -> list[Stmt]:
    """QConv2D (NHWC): per tile, blocks of `kernel.pixels` output pixels along the row, each handed
    with the tile's geometry to the micro-kernel; tiles in raster order (row_major), after
    `prologue` in each batch."""
    x, w, y = args.inputs[0], args.inputs[1], args.outputs[0]
    o, kh, kw, c = w.type.shape
    n, h, wd, _ = x.type.shape
    wins, tile_list = window_tiles(args, attrs)
    batch = Affine.var("n")
    stmts: list[Stmt] = list(prologue)
    for tile, tl in tile_list:
        stmts.append(Comment(tl.label))
        tap_loops, in_pos, w_tap, count = _merged_runs(tl, c, kw, wins[1].dilation == 1)
        geometry = TileGeometry(tuple(tile), tap_loops, w_tap, count, (kh, kw, c))

        def at(ip: Sequence[Affine], op: Sequence[Affine]) -> Pixel:
            x_at = (batch * (h * wd * c) + dot(ip, (wd * c, c))).expr()
            out_at = (batch * (y.type.size // n) + dot(op, (y.type.shape[2] * o, o))).expr()
            return x_at, out_at, tuple(p.expr() for p in (batch, *op))
        outer, out_pos = list(tl.outer), list(tl.out_pos)
        if tl.empty:
            _, out_at, coords = at(in_pos, out_pos)
            stmts += loops(outer, kernel.empty(graph, args, attrs, out_at, coords))
            continue

        def shifted(j: int) -> Pixel:
            return at([a.shifted("o1", j) for a in in_pos], [a.shifted("o1", j) for a in out_pos])
        per = kernel.pixels
        if per > 1 and outer and outer[-1][0] == "o1" and outer[-1][1] >= 2:  # pixels in blocks along the row
            e = outer[-1][1]
            whole = e - e % per if e >= per else 0
            inner: list[Stmt] = []
            if whole:
                inner.append(For("o1", whole, tuple(kernel.conv_pixels(
                    graph, args, attrs, geometry, [shifted(j) for j in range(per)])), step=per))
            if e - whole:
                inner.append(For("o1", 1, tuple(kernel.conv_pixels(
                    graph, args, attrs, geometry, [shifted(whole + j) for j in range(e - whole)]))))
            stmts += loops(outer[:-1], inner)
        else:
            stmts += loops(outer, kernel.conv_pixels(graph, args, attrs, geometry, [at(in_pos, out_pos)]))
    return [For("n", n, tuple(row_major(stmts)))]


def copy_values(dst: str, dst_at: Expr, src: str | None, src_at: Expr | None, n: int, fill: int = 0,
                widths: tuple[int, ...] = (16, 8, 4, 2, 1), flip: bool = False) -> list[Stmt]:
    """n int8 values from src (or `fill` where src is None) in pieces of `widths` values; with
    `flip`, each copied value's sign bit inverted (x + 128 read as unsigned)."""
    stmts: list[Stmt] = []
    done = 0
    for width in widths:
        while n - done >= width:
            value = (Load(src, plus(src_at, done), width=width, dtype="int8") if src is not None
                     else Const(fill, "int8", width))
            if flip and src is not None:
                value = Binary("^", value, Const(-128, "int8", width))
            stmts.append(Store(dst, plus(dst_at, done), value))
            done += width
    return stmts


def padding_runs(g: TileGeometry) -> list[tuple[int, int]]:
    """(offset, length) in a window of the runs this tile's taps leave out (they lie in the padding)."""
    kh, kw, c = g.kernel
    (s0, s1) = g.tile
    runs: list[tuple[int, int]] = []
    for ky in range(kh):
        if not s0.tap_start <= ky < s0.tap_start + s0.taps:
            runs.append((ky * kw * c, kw * c))
            continue
        for kx in range(kw):
            if not s1.tap_start <= kx < s1.tap_start + s1.taps:
                runs.append(((ky * kw + kx) * c, c))
    merged: list[tuple[int, int]] = []
    for at, n in runs:
        if merged and merged[-1][0] + merged[-1][1] == at:
            merged[-1] = (merged[-1][0], merged[-1][1] + n)
        else:
            merged.append((at, n))
    return merged


def fc_nest(graph, args, attrs, kernel: Int8MicroKernel) -> list[Stmt]:
    """QFullyConnected: each row of K inputs against the O weight rows, by the micro-kernel."""
    w, y = args.inputs[1], args.outputs[0]
    rows, o = y.type.shape
    k = w.type.shape[1]
    row = [(Binary("*", Var("r"), index(k)), Binary("*", Var("r"), index(o)), (Var("r"),))]
    return [For("r", rows, tuple(kernel.fc_rows(graph, args, attrs, row, k)))]


def is_pointwise(args, attrs) -> bool:
    """1x1 window, stride 1, no padding: a matrix product over the flattened pixels."""
    w = args.inputs[1]
    return (tuple(w.type.shape[1:3]) == (1, 1) and tuple(attrs["strides"]) == (1, 1)
            and not any(attrs["pads"]))


def pointwise_nest(args, per: int, run: Callable[[list[Pixel]], list[Stmt]]) -> list[Stmt]:
    """A pointwise QConv2D: the flattened pixels `per` at a time (the last few as one block), each
    block's statements from run(pixels), a pixel's C inputs and O outputs contiguous."""
    x, y = args.inputs[0], args.outputs[0]
    c, o = x.type.shape[3], y.type.shape[3]
    pixels = x.type.size // c

    def block(first: Expr, count: int) -> list[Stmt]:
        return run([(plus(Binary("*", first, index(c)), p * c), plus(Binary("*", first, index(o)), p * o), None)
                    for p in range(count)])
    stmts: list[Stmt] = []
    if pixels // per:
        stmts.append(For("px", pixels - pixels % per, tuple(block(Var("px"), per)), step=per))
    if pixels % per:
        stmts.append(For("pl", 1, tuple(block(plus(Var("pl"), pixels - pixels % per), pixels % per))))
    return stmts


# a depthwise window of up to this many taps runs straight-line (measured on the M4: 3x3 unrolled is
# faster than its loops)
UNROLL_TAPS = 9


def tap_offsets(tl: TileLoops) -> tuple[list[tuple[list[Affine], list[Affine]]], list[tuple[str, int]]]:
    """(input positions, weight positions) of each straight-line tap, and the tap loops left
    around them: tap loops unrolled from the innermost while the taps number at most UNROLL_TAPS."""
    positions = [(list(tl.in_pos), list(tl.tap))]
    left = list(tl.taps)
    while left and left[-1][1] * len(positions) <= UNROLL_TAPS:
        var, extent = left.pop()
        positions = [([a.substituted(var, Affine((), v)) for a in ip], [a.substituted(var, Affine((), v)) for a in tp])
                     for ip, tp in positions for v in range(extent)]
    return positions, left


# channels(graph, args, attrs, taps_at, tap_loops, out_at, coords): every channel of one output pixel
# from its taps' (input offset, weight offset) pairs, inside the tap loops left
DepthwiseChannels = Callable[..., list[Stmt]]


def depthwise_nest(graph, args, attrs, channels: DepthwiseChannels,
                   constant_at: Callable[[Expr], Expr] = lambda oc: oc) -> list[Stmt]:
    """QDepthwise (NHWC): per tile and output pixel, its taps' offsets handed to the micro-kernel's
    `channels`; a window wholly in the padding gives the bias alone (output channel oc's bias and
    requantization constants at constant_at(oc): a kernel may pack them). A tap's input offset is
    its pixel's first channel: with a depth multiplier m the micro-kernel reads channel oc / m there."""
    x, w, y = args.inputs[0], args.inputs[1], args.outputs[0]
    _, kh, kw, c = w.type.shape
    n, h, wd, ci = x.type.shape
    _, tile_list = window_tiles(args, attrs)
    batch = Affine.var("n")
    stmts: list[Stmt] = []
    for _, tl in tile_list:
        stmts.append(Comment(tl.label))
        out_at = (batch * (y.type.size // n) + dot(tl.out_pos, (y.type.shape[2] * c, c))).expr()
        coords = tuple(p.expr() for p in (batch, *tl.out_pos))
        if tl.empty:
            oc = Var("oc")
            body = [For("oc", c, (scalar.start_sum(args, attrs, constant_at(oc)),
                                  *scalar._finish(graph, args, attrs, constant_at(oc), Binary("+", out_at, oc),
                                                  coords + (oc,))))]
        else:
            positions, tap_loops = tap_offsets(tl)
            taps_at = [((batch * (h * wd * ci) + dot(ip, (wd * ci, ci))).expr(), dot(tp, (kw * c, c)).expr())
                       for ip, tp in positions]
            body = channels(graph, args, attrs, taps_at, tap_loops, out_at, coords)
        stmts += loops(tl.outer, body)
    return [For("n", n, tuple(row_major(stmts)))]


def model_layout(args):
    """The arguments with the weights' model shape ([O, KH, KW, C] or [O, K]), which the nests'
    geometry reads, for a kernel whose packed weights its micro-kernel addresses itself."""
    w = args.inputs[1]
    return replace(args, inputs=(args.inputs[0], TensorArg(w.name, args.prepared.inputs[1]), *args.inputs[2:]))
