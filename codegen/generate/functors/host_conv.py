"""Channels-last convolution (ConvNHWC): the family's loop nest (conv_nest.py) with vectors over
output channels, register-blocked (the micro-kernel `NhwcConv` and its schedule).

Output y[n, oh, ow, m] is computed in blocks of MB channel vectors (V lanes, the target's width)
times NB output positions along the row: MB * NB accumulators stay in registers.

- regular (group 1): for each tap and input channel c, each position's input x[.., c] is one
  scalar broadcast to all lanes and each weight vector w[tap, c, m..m+V] feeds NB accumulators;
  a pointwise convolution (1x1, stride 1, no padding) is this over one axis of H*W positions,
  a matrix product of [H*W, C] by [C, M] with rows of C contiguous;
- depthwise (group = C = M): for each tap, the input vector x[.., m..m+V] of each position
  times the tap's weight vector.

Channels that do not fill a V-lane vector take the widest power-of-two vector of 4 lanes or more
that fits, then scalars, so every channel count runs (odd ones included). Positions at the edges
of the window use the tiles of conv.tiles with exact segments: each tile's taps are clipped to
the input, so no load is tested. A row of positions not divisible by NB ends with one narrower
block. The bias starts the accumulators; every store is a vector along the channel axis (the
tensor's last), so fused ReLU, clip or residual adds run as vector code. Each accumulator adds
its terms in the reference's order (bias, then taps, then input channels). With input_nchw the
input is read in the model's layout (a network's first convolution reading its image): the
scalar broadcasts of a regular convolution cost the same either way.
"""
from __future__ import annotations

from dataclasses import dataclass

from tinsmith.generate.backend import CPP, same
from tinsmith.generate.functors.conv import Affine, ConvOperands, TileLoops, dot, loops
from tinsmith.generate.functors.conv_nest import ChannelBlock, ConvNest, ConvSchedule, convolution
from tinsmith.generate.functors.variants import register_variant
from tinsmith.generate.loop_ir import Assign, Binary, Broadcast, Const, Expr, Load, Local, Stmt, Store, Var, const

FLOAT = "float32"


def _blocking(caps, depthwise: bool, vectors: int) -> tuple[int, int]:
    """(MB, NB): channel vectors and positions per block, from the registers the target has."""
    regs = max(caps.vector_register_count, 8)
    if depthwise:  # accumulators, a row of taps' weights and the row of inputs they share
        return 1, max(1, min(8, (regs - 5) // 2))
    mb = max(1, min(vectors, 2 if regs < 32 else 4))
    return mb, max(1, min(8, (regs - mb - 2) // mb))


@dataclass(frozen=True)
class NhwcConv:
    """The channels-last micro-kernel: its operands, whether it is depthwise (each channel its own
    input) and whether the input is read in the model's layout (input_nchw); a block is the
    channel block's vectors x the positions (see _block)."""

    ops: ConvOperands
    depthwise: bool
    input_nchw: bool

    def store(self, m: Affine, out_pos, value: Expr) -> Store:
        """y[n, position, m..] = value, saying where it writes (for fusion)."""
        geo, space = self.ops.geometry, self.ops.space
        at = N * (geo.out_size * geo.out_channels) + dot(out_pos, space.out_strides) * geo.out_channels + m
        return Store(self.ops.y, at.expr(), value, (N.expr(), *space.coords(out_pos), m.expr()))

    def bias(self, m: Affine, width: int) -> Expr:
        """The bias of channels m.. (or 0) as the accumulators' start."""
        if self.ops.bias is None:
            return Const(0, FLOAT, width) if width > 1 else const(0)
        return Load(self.ops.bias, m.expr(), width)

    def input_at(self, pixel: Affine, c: Affine) -> Affine:
        """Where channel c of input position `pixel` is (in either input layout)."""
        geo = self.ops.geometry
        rest = c * geo.in_size + pixel if self.input_nchw else pixel * geo.channels + c
        return N * (geo.in_size * geo.channels) + rest

    def prelude(self, block: ChannelBlock) -> list[Stmt]:
        return []

    def gather(self, tl: TileLoops, positions) -> list[Stmt]:
        return []  # positions outside channels (conv_nhwc_positions) read the input in place

    def padding(self, tl: TileLoops, block: ChannelBlock) -> list[Stmt]:
        """A window wholly in the padding: the bias alone."""
        return [self.store(block.first + off, tl.out_pos, self.bias(block.first + off, width))
                for off, width in block.vectors]

    def block(self, tl: TileLoops, block: ChannelBlock, positions, width: int, scope: str) -> list[Stmt]:
        return _block(self, tl, block.first, block.vectors, positions)


N = Affine.var("n")


def _inputs(k: NhwcConv, positions, at_tap, m: Affine, i: int, width: int, t: int, names: dict,
            body: list[Stmt]) -> list[str]:
    """Each position's input at one tap (channels m.. for a depthwise block, else channel c) as a
    local added to `body`, loaded once however many positions read it."""
    c = Affine.var(None if k.depthwise else "c")
    xs = []
    for in_pos, _ in positions:
        pixel = dot(tuple(at_tap(p) for p in in_pos), k.ops.space.in_strides)
        at = k.input_at(pixel, c) + (m if k.depthwise else Affine())
        key = (i, tuple(sorted(at.terms)), at.const)
        if key not in names:
            names[key] = f"x{t}_{len(names)}"
            body.append(Local(names[key], Load(k.ops.x, at.expr(), width), FLOAT, width))
        xs.append(names[key])
    return xs


def _products(k: NhwcConv, accs, xs, tap: Affine, m0: Affine, i: int, off: int, width: int, wname: str) -> list[Stmt]:
    """The weight vector of channels m0+off.. at this tap (and input channel c) as a local, times
    each position's input: a vector of channels (depthwise) or one channel broadcast."""
    geo = k.ops.geometry
    if k.depthwise:
        w_at = tap * geo.out_channels + m0 + off
    else:
        w_at = (tap * geo.in_per_group + Affine.var("c")) * geo.out_channels + m0 + off
    body: list[Stmt] = [Local(wname, Load(k.ops.w, w_at.expr(), width), FLOAT, width)]
    for j, x in enumerate(xs):
        if k.depthwise:
            product = Binary("*", Var(x, FLOAT, width), Var(wname))
        else:
            xj: Expr = Var(x, FLOAT)
            product = Binary("*", Var(wname), Broadcast(xj, width) if width > 1 else xj)
        body.append(Assign(accs[i][j], Binary("+", Var(accs[i][j]), product)))
    return body


def _block(k: NhwcConv, tl: TileLoops, m0: Affine, vectors, positions) -> list[Stmt]:
    """Accumulate and store the channel vectors x positions of one tile. The innermost tap loop is
    unrolled: position j at tap k reads what position j+1 reads at tap k-stride, so each input is
    loaded once per block and row of taps."""
    t = k.ops.serial()
    accs = [[f"acc{t}_{i}_{j}" for j in range(len(positions))] for i in range(len(vectors))]
    stmts: list[Stmt] = [Local(accs[i][j], k.bias(m0 + off, width), FLOAT, width)
                         for i, (off, width) in enumerate(vectors) for j in range(len(positions))]
    taps = tl.taps
    unroll = bool(taps) and taps[-1][0] == f"k{len(k.ops.space.windows) - 1}" and taps[-1][1] <= 12
    body: list[Stmt] = []
    names: dict = {}
    for tv in (range(taps[-1][1]) if unroll else [None]):
        def at_tap(a: Affine, tv=tv) -> Affine:
            return a if tv is None else a.substituted(taps[-1][0], Affine((), tv))
        tap = dot(tuple(at_tap(p) for p in tl.tap), k.ops.space.tap_strides)
        suffix = "" if tv is None else f"_{tv}"
        for i, (off, width) in enumerate(vectors if k.depthwise else [(0, 1)]):
            xs = _inputs(k, positions, at_tap, m0 + off, i, width, t, names, body)
            if k.depthwise:
                body += _products(k, accs, xs, tap, m0, i, off, width, f"w{t}_{i}{suffix}")
        if not k.depthwise:
            for i, (off, width) in enumerate(vectors):
                body += _products(k, accs, xs, tap, m0, i, off, width, f"w{t}_{i}{suffix}")
    reduce_loops = taps[:-1] if unroll else taps
    stmts += loops(reduce_loops if k.depthwise else reduce_loops + (("c", k.ops.geometry.in_per_group),), body)
    return stmts + [k.store(m0 + off, out_pos, Var(accs[i][j], FLOAT, width))
                    for i, (off, width) in enumerate(vectors) for j, (_, out_pos) in enumerate(positions)]


def _conv_nhwc(args, attrs, order: str) -> list[Stmt]:
    """The nest channels last: MB channel vectors x NB positions along the innermost output loop
    (a column of edge positions runs down its rows), exact tiles, the rest of a loop one narrower
    block; a block narrower than the target's vectors has registers left for more positions."""
    ops = ConvOperands.of(args, flatten_pointwise=True)
    geo = ops.geometry
    k = NhwcConv(ops, geo.group > 1, bool(attrs.get("input_nchw")))
    v = args.caps.lanes(4)
    mb, nb = _blocking(args.caps, k.depthwise, max(1, geo.out_channels // v))
    schedule = ConvSchedule(channels=mb, lanes=v, positions=nb, narrow_positions=min(8, nb * 2), along="innermost",
                            exact=True, leftover_loop=False, order=order)
    return convolution(ConvNest.of(ops, grouped=False), schedule, k)


@CPP.register("ConvNHWC", family="convolution", types=same("float32", 3, acc="float32"), layout="nhwc", epilogue=True)
def conv_nhwc(graph, node_id, cluster_id, args, attrs):
    """Each channel block over every position: a block's weights stay in cache for the whole layer."""
    return _conv_nhwc(args, attrs, "channels")


def _on_a_small_core(args, attrs) -> bool:
    """Where RAM is what runs out first: every target but the host's (whose workspace is cheap next
    to the speed the channel-block order keeps)."""
    return args.caps.backend != "host" and args.prepared is not None and args.inputs[0].type.dtype == FLOAT


@register_variant("nhwc_positions_outer", "ConvNHWC", _on_a_small_core, scratch=lambda prepared, caps: [])
def conv_nhwc_positions(graph, node_id, cluster_id, args, attrs):
    """In-place variant (inplace.py): every channel block of a register block of positions before
    the next positions. A position's inputs are read, by every channel block, before any later
    position's output is stored, so the output may start a few positions (or rows, for a window)
    below the input: a chain of channels-last layers needs little more than its largest tensor."""
    return _conv_nhwc(args, attrs, "positions")
