"""Functors for Conv and ConvTranspose, and the sliding-window loops the pools share.

Every geometry is static, so padding is resolved when the code is generated: along each spatial
axis the output positions are cut into segments whose windows see the same taps. Inside the
input (the interior) the loops read every tap with no test; at the edges a segment either runs
only over the taps that land inside the input (exact) or, where that would need many copies of
the loop nest, runs over all taps and tests the input bounds (checked). Bounds tests therefore
appear only where padding can occur, and the interior, where the work is, has none.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from tinsmith.generate.backend import CPP, KernelArgs, same
from tinsmith.generate.loop_ir import (Assign, Binary, Comment, Expr, For, Load, Local, Select, Stmt, Store,
                                      Var, const, index)
from tinsmith.ops.conv import ConvGeometry, TransposedAxis, Window
from tinsmith.ops.registry import InferArgs

# Edge segments in a row beyond this many are merged into one checked segment: each exact segment
# is one more copy of the loop nest (flash), while a checked one costs a test per tap at the edge.
EXACT_EDGE_RUN = 2


def infer_args(graph, args: KernelArgs, attrs) -> InferArgs:
    """What the op's shape functions see, rebuilt from the kernel's arguments."""
    types = tuple(a.type if a is not None else None for a in args.inputs)
    values = tuple(graph.constants[a.name].data if a is not None and a.name in graph.constants else None
                   for a in args.inputs)
    return InferArgs(types, attrs, values)


def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a C-order tensor of `shape`."""
    return tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))


# --- integer index arithmetic ---------------------------------------------------------------
@dataclass(frozen=True)
class Affine:
    """An integer index sum(coefficient * loop variable) + constant, kept in this form so that every
    offset folds into one constant when the code is generated."""

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    @staticmethod
    def var(name: str | None, offset: int = 0) -> Affine:
        """The loop variable `name` (none: just the constant) plus `offset`."""
        return Affine(((name, 1),) if name else (), offset)

    def __add__(self, other: Affine | int) -> Affine:
        if isinstance(other, int):
            return Affine(self.terms, self.const + other)
        merged = dict(self.terms)
        for name, c in other.terms:
            merged[name] = merged.get(name, 0) + c
        return Affine(tuple((n, c) for n, c in merged.items() if c), self.const + other.const)

    def __mul__(self, k: int) -> Affine:
        return Affine(tuple((n, c * k) for n, c in self.terms if c * k), self.const * k)

    def shifted(self, var: str, by: int) -> Affine:
        """This index with loop variable `var` replaced by var + by."""
        return self + dict(self.terms).get(var, 0) * by

    def substituted(self, var: str, new: Affine) -> Affine:
        """This index with loop variable `var` replaced by the index `new`."""
        coeff = dict(self.terms).get(var, 0)
        return Affine(tuple((n, c) for n, c in self.terms if n != var), self.const) + new * coeff

    def _sum(self, const: int = 0) -> Expr | None:
        """The terms (added ones first, so no expression starts with a minus) plus `const`."""
        ordered = sorted(self.terms, key=lambda t: t[1] < 0)
        result: Expr | None = index(const) if const and (not ordered or ordered[0][1] < 0) else None
        if result is not None:
            const = 0
        for name, c in ordered:
            term = Var(name) if abs(c) == 1 else Binary("*", Var(name), index(abs(c)))
            if result is None:
                result = term if c > 0 else Binary("-", index(0), term)
            else:
                result = Binary("+" if c > 0 else "-", result, term)
        if result is not None and const:
            result = Binary("+" if const > 0 else "-", result, index(abs(const)))
        return result

    def expr(self) -> Expr:
        """The index as loop IR: added terms, subtracted terms, then the constant."""
        total = self._sum(self.const)
        return index(self.const) if total is None else total

    def at_least(self, bound: int) -> Expr | None:
        """`self >= bound` with the constant moved to the right; None when always true."""
        total = self._sum()
        if total is None:
            return None if self.const >= bound else Binary("<", index(0), index(0))
        return Binary(">=", total, index(bound - self.const))

    def below(self, bound: int) -> Expr | None:
        """`self < bound` with the constant moved to the right; None when always true."""
        total = self._sum()
        if total is None:
            return None if self.const < bound else Binary("<", index(0), index(0))
        return Binary("<", total, index(bound - self.const))


def all_of(conds: Sequence[Expr | None]) -> Expr | None:
    """The conjunction of the conditions that are not None (None if there are none)."""
    present = [c for c in conds if c is not None]
    if not present:
        return None
    result = present[0]
    for c in present[1:]:
        result = Binary("&&", result, c)
    return result


# --- segments of one axis -------------------------------------------------------------------
@dataclass(frozen=True)
class Segment:
    """Output positions start .. start+count-1 of one axis whose windows read taps
    tap_start .. tap_start+taps-1. Exact segments read only positions inside the input; checked
    ones test the low and/or high input bound at each tap. `counted` is the taps AveragePool
    divides by (exact segments only); `full` marks the interior (every tap, no test)."""

    start: int
    count: int
    tap_start: int
    taps: int
    counted: int = 0
    check_low: bool = False
    check_high: bool = False
    full: bool = False

    @property
    def checked(self) -> bool:
        return self.check_low or self.check_high


def _taps_inside(win: Window, q: int, limit_low: int, limit_high: int) -> tuple[int, int]:
    """The taps of output q whose input position lies in limit_low .. limit_high-1, as (first, count)."""
    base = q * win.stride - win.pad_begin
    d = win.dilation
    first = max(0, -((base - limit_low) // d))
    last = min(win.kernel - 1, (limit_high - 1 - base) // d)
    return first, max(0, last - first + 1)


def plan_axis(win: Window, exact_only: bool = False, include_pad: bool = False) -> tuple[Segment, ...]:
    """Cut one axis into segments (see the module doc). With `exact_only` no segment is checked;
    `include_pad` counts padding taps in `counted` (AveragePool's count_include_pad)."""
    runs: list[Segment] = []
    q = 0
    while q < win.out_size:
        first, taps = _taps_inside(win, q, 0, win.in_size)
        if taps == 0 and exact_only:  # a window wholly in the padding is an empty tile: where its
            first = 0                   # taps would start does not matter (_checked reads it otherwise)
        if include_pad:
            counted = _taps_inside(win, q, -win.pad_begin, win.in_size + win.pad_end)[1]
        else:
            counted = taps
        # Outputs whose whole window lies in the input form one run: step over it at once, so a
        # long axis costs its edges, not its length.
        count = 1
        if taps == win.kernel > 0:
            interior_end = (win.in_size - 1 - (win.kernel - 1) * win.dilation + win.pad_begin) // win.stride
            count = max(1, min(interior_end, win.out_size - 1) - q + 1)
        key = (first, taps, counted)
        last = runs[-1] if runs else None
        if last is not None and (last.tap_start, last.taps, last.counted) == key:
            runs[-1] = Segment(last.start, last.count + count, first, taps, counted, full=last.full)
        else:
            runs.append(Segment(q, count, first, taps, counted, full=taps == win.kernel))
        q += count
    if exact_only:
        return tuple(runs)
    merged: list[Segment] = []
    for full, group in itertools.groupby(runs, key=lambda s: s.full):
        group = list(group)
        if full or len(group) <= EXACT_EDGE_RUN:
            merged += group
        else:
            merged.append(_checked(win, group))
    return tuple(merged)


def _checked(win: Window, segments: Sequence[Segment]) -> Segment:
    """One checked segment over consecutive segments: every tap, tested where some of them fall outside."""
    start, end = segments[0].start, segments[-1].start + segments[-1].count
    return Segment(start, end - start, 0, win.kernel,
                   check_low=any(s.check_low or s.tap_start > 0 for s in segments),
                   check_high=any(s.check_high or s.tap_start + s.taps < win.kernel for s in segments))


def whole_axis(win: Window, segments: Sequence[Segment]) -> Segment:
    """The whole axis as one segment (exact if it already was one)."""
    return segments[0] if len(segments) == 1 else _checked(win, segments)


def tiles(wins: Sequence[Window], exact_only: bool = False, include_pad: bool = False
          ) -> list[tuple[Segment, ...]]:
    """The output split into tiles, one segment per axis. The interior of an axis splits the next
    axis again; an edge segment takes the next axes whole (checked where they have edges), so a
    2-D kernel with one edge position per side is five loop nests, not nine. With `exact_only`
    every combination of segments is a tile."""
    plans = [plan_axis(w, exact_only, include_pad) for w in wins]

    def split(axis: int) -> list[tuple[Segment, ...]]:
        if axis == len(wins):
            return [()]
        result = []
        for seg in plans[axis]:
            if exact_only or seg.full:
                result += [(seg,) + rest for rest in split(axis + 1)]
            else:
                result.append((seg,) + tuple(whole_axis(w, p) for w, p in zip(wins[axis + 1:],
                                                                                  plans[axis + 1:])))
        return result
    return split(0)


# --- the loops of one tile ------------------------------------------------------------------
@dataclass(frozen=True)
class Axis:
    """One spatial axis of a kernel's loops: the window over the input, and where output step q
    and tap j land in the output and the weights (o = q * out_scale + out_offset,
    k = tap_base + j * tap_step). Conv is the identity; ConvTranspose's phases are not."""

    window: Window
    out_scale: int = 1
    out_offset: int = 0
    tap_base: int = 0
    tap_step: int = 1


@dataclass(frozen=True)
class TileLoops:
    """One tile's loops and the positions they address (affine in the loop variables), per axis."""

    outer: tuple[tuple[str, int], ...]  # (variable, extent) of the output loops, outermost first
    taps: tuple[tuple[str, int], ...]  # (variable, extent) of the tap loops
    out_pos: tuple[Affine, ...]
    in_pos: tuple[Affine, ...]
    tap: tuple[Affine, ...]
    in_bounds: Expr | None  # a tap reads the input only where this holds (None: everywhere)
    empty: bool  # some axis has no taps at all: the window lies in the padding
    counted: int  # AveragePool's divisor (product of the segments' counted taps)
    label: str

    def position(self, var: str, at: Affine) -> tuple[tuple[Affine, ...], tuple[Affine, ...]]:
        """(input, output) positions with output loop variable `var` replaced by `at`."""
        return (tuple(p.substituted(var, at) for p in self.in_pos), tuple(p.substituted(var, at) for p in self.out_pos))

    def neighbours(self, var: str, count: int, step: int = 1) -> list[tuple[tuple[Affine, ...], tuple[Affine, ...]]]:
        """(input, output) positions of `count` outputs `step` apart along output loop variable `var`,
        the first at var itself: the positions one register block computes."""
        return [(tuple(p.shifted(var, j * step) for p in self.in_pos), tuple(p.shifted(var, j * step) for p in self.out_pos))
                for j in range(count)]


def tile_loops(axes: Sequence[Axis], tile: Sequence[Segment]) -> TileLoops:
    """Loop variables o<d> (outputs) and k<d> (taps), omitted where the extent is one."""
    outer, taps, out_pos, in_pos, tap_pos, conds, ranges = [], [], [], [], [], [], []
    for d, (axis, seg) in enumerate(zip(axes, tile)):
        win = axis.window
        q = Affine.var(f"o{d}" if seg.count > 1 else None, seg.start)
        j = Affine.var(f"k{d}" if seg.taps > 1 else None, seg.tap_start)
        if seg.count > 1:
            outer.append((f"o{d}", seg.count))
        if seg.taps > 1:
            taps.append((f"k{d}", seg.taps))
        out_pos.append(q * axis.out_scale + axis.out_offset)
        pos = q * win.stride + j * win.dilation + (-win.pad_begin)
        in_pos.append(pos)
        tap_pos.append(j * axis.tap_step + axis.tap_base)
        if seg.check_low:
            conds.append(pos.at_least(0))
        if seg.check_high:
            conds.append(pos.below(win.in_size))
        last = seg.start + seg.count - 1
        ranges.append(f"{seg.start}" if seg.count == 1 else f"{seg.start}..{last}")
    if all(s.full for s in tile):
        what = "every tap inside the input"
    elif any(s.checked for s in tile):
        what = "edge, bounds tested"
    else:
        what = "edge, taps clipped to the input"
    return TileLoops(tuple(outer), tuple(taps), tuple(out_pos), tuple(in_pos), tuple(tap_pos),
                     all_of(conds), any(s.taps == 0 for s in tile), math.prod(s.counted for s in tile),
                     f"outputs [{', '.join(ranges)}]: {what}")


# --- what every convolution kernel of the family reads -------------------------------------
@dataclass(frozen=True)
class ConvAxes:
    """The spatial axes a convolution kernel loops over and the row-major strides that turn
    positions into offsets: the model's windows or, `flat`, a pointwise convolution's positions as
    one axis (a matrix product of positions by channels, whose long axis blocks well)."""

    windows: tuple[Window, ...]
    in_strides: tuple[int, ...]
    out_strides: tuple[int, ...]
    tap_strides: tuple[int, ...]
    out_spatial: tuple[int, ...]  # the output's own spatial shape: where a flat position lands
    flat: bool = False

    @staticmethod
    def of(geometry: ConvGeometry, flatten_pointwise: bool = False) -> ConvAxes:
        """The geometry's axes; with `flatten_pointwise` a pointwise convolution's as one axis."""
        if flatten_pointwise and geometry.pointwise:
            return ConvAxes((Window(geometry.in_size, geometry.out_size, 1),), (1,), (1,), (0,),
                            geometry.out_spatial, True)
        return ConvAxes(geometry.windows, row_major_strides(geometry.in_spatial),
                        row_major_strides(geometry.out_spatial), row_major_strides(geometry.kernel),
                        geometry.out_spatial)

    @property
    def axes(self) -> list[Axis]:
        return [Axis(win) for win in self.windows]

    @property
    def row(self) -> str:
        """The output loop variable of the innermost axis (positions along a row)."""
        return f"o{len(self.windows) - 1}"

    def coords(self, out_pos: Sequence[Affine]) -> tuple[Expr, ...]:
        """An output position as one index per spatial axis of the output (a flat one unflattened)."""
        if not self.flat:
            return tuple(p.expr() for p in out_pos)
        flat, result = out_pos[0].expr(), []
        for d, size in enumerate(self.out_spatial):
            inner = math.prod(self.out_spatial[d + 1:])
            at = flat if inner == 1 else Binary("/", flat, index(inner))
            result.append(at if d == 0 else Binary("%", at, index(size)))
        return tuple(result)


@dataclass(frozen=True)
class ConvOperands:
    """One convolution kernel's tensors (value names), its geometry as `prepare` resolved it, the
    axes its loops run over, and the serial numbers that keep each register block's locals apart
    (a block without loops of its own shares its scope with the next)."""

    x: str
    w: str
    y: str
    bias: str | None
    geometry: ConvGeometry
    space: ConvAxes
    weights_packed: bool  # the weights were laid out for the kernel at build time
    serials: Iterator[int] = field(default_factory=itertools.count, compare=False)

    @staticmethod
    def of(args: KernelArgs, flatten_pointwise: bool = False) -> ConvOperands:
        geometry = args.prepared["geometry"]
        b = args.inputs[2] if len(args.inputs) > 2 else None
        w = args.inputs[1]
        return ConvOperands(args.inputs[0].name, w.name, args.outputs[0].name, b.name if b is not None else None,
                            geometry, ConvAxes.of(geometry, flatten_pointwise),
                            w.type.shape != args.prepared.inputs[1].shape)

    def serial(self) -> int:
        """A number no other register block of this kernel has."""
        return next(self.serials)


def blocked_row(tl: TileLoops, blocks: int, block: Callable[[list, int], list[Stmt]], width: int = 1,
                leftover_loop: bool = True) -> list[Stmt]:
    """The tile's innermost output loop in steps of `blocks` x `width` positions, each step one
    register block `block(positions, width)`; the positions left over run one at a time in a loop
    of their own (`leftover_loop`) or as one smaller block."""
    var, count = tl.outer[-1]
    step = width * blocks
    main = count - count % step
    stmts: list[Stmt] = []
    if main:
        stmts += loops(tl.outer[:-1], [For(var, main, tuple(block(tl.neighbours(var, blocks, width), width)), step)])
    if count - main and leftover_loop:
        positions = [tl.position(var, Affine.var(var + "r", main))]
        stmts += loops(tl.outer[:-1], [For(var + "r", count - main, tuple(block(positions, 1)))])
    elif count - main:
        positions = [tl.position(var, Affine((), main + j)) for j in range(count - main)]
        stmts += loops(tl.outer[:-1], block(positions, 1))
    return stmts


def channel_blocks(channels: int, block: int) -> list[tuple[Affine, int, int]]:
    """Output channels in blocks of `block` and one narrower block for the rest: (first channel,
    channels in the block, how many such blocks run in an `mb` loop)."""
    full = channels - channels % block
    parts = [(Affine.var("mb") * block if full > block else Affine(), block, full // block)] if full else []
    if channels - full:
        parts.append((Affine((), full), channels - full, 1))
    return parts


def loops(extents: Sequence[tuple[str, int]], body: Sequence[Stmt]) -> tuple[Stmt, ...]:
    """`body` inside For loops over `extents`, the first outermost."""
    stmts = tuple(body)
    for var, extent in reversed(list(extents)):
        stmts = (For(var, extent, stmts),)
    return stmts


def dot(positions: Sequence[Affine], strides: Sequence[int]) -> Affine:
    """The flat offset of per-axis positions under row-major strides."""
    total = Affine()
    for p, s in zip(positions, strides):
        total = total + p * s
    return total


def window_nests(axes: Sequence[Axis], tile_list: Sequence[tuple[Segment, ...]],
                 body: Callable[[TileLoops, str], list[Stmt]], tag: str = "") -> list[Stmt]:
    """Each tile's comment and output loops around `body(tile, suffix)`; `suffix` makes the names of
    the body's locals unique where a tile has no output loop of its own to scope them (`tag` tells
    apart several calls whose nests share one scope, such as ConvTranspose's phases)."""
    stmts: list[Stmt] = []
    for t, tile in enumerate(tile_list):
        tl = tile_loops(axes, tile)
        stmts.append(Comment(tl.label))
        stmts += loops(tl.outer, body(tl, "" if tl.outer else f"{tag}{t}"))
    return stmts


def accumulate(acc: str, value: Expr) -> Assign:
    return Assign(acc, Binary("+", Var(acc), value))


# --- Conv -----------------------------------------------------------------------------------
def _conv_nests(axes: Sequence[Axis], tile_list, x: str, w: str, y: str, *, in_base: Affine,
                in_strides, in_channel: Affine, w_base: Affine, w_channel: int, k_strides,
                out_base: Affine, out_strides, init: Expr, channels: int,
                out_coords: tuple[Affine, ...] | None = None, tag: str = "") -> list[Stmt]:
    """acc = init; acc += x * w over the input channels (loop c) and taps of each tile; store.
    `out_coords` (batch, channel): the stores also say where they write, for fusion; `tag`
    keeps locals apart where several nests share one scope (see window_nests)."""
    def body(tl: TileLoops, suffix: str) -> list[Stmt]:
        out_at = (out_base + dot(tl.out_pos, out_strides)).expr()
        coords = None if out_coords is None else tuple(a.expr() for a in (*out_coords, *tl.out_pos))
        if tl.empty:
            return [Store(y, out_at, init, coords)]
        acc = f"acc{suffix}"
        c = Affine.var("c")
        x_at = in_base + c * in_channel + dot(tl.in_pos, in_strides)
        w_at = w_base + c * w_channel + dot(tl.tap, k_strides)
        value: Expr = Load(x, x_at.expr())
        if tl.in_bounds is not None:
            value = Select(tl.in_bounds, value, const(0))
        reduce = loops((("c", channels),) + tl.taps, [accumulate(acc, Binary("*", value, Load(w, w_at.expr())))])
        return [Local(acc, init), *reduce, Store(y, out_at, Var(acc), coords)]
    return window_nests(axes, tile_list, body, tag)


def _bias_init(b, channel: Expr) -> tuple[list[Stmt], Expr]:
    """The accumulator's start: the bias of the output channel, loaded once per channel, or 0."""
    if b is None:
        return [], const(0)
    return [Local("bias", Load(b.name, channel))], Var("bias")


@CPP.register("Conv", family="convolution", types=same("float32", 3, acc="float32"), layout="nchw",
               epilogue=True)
def conv(graph, node_id, cluster_id, args, attrs):
    """Direct convolution: per output channel and position, a dot product over the group's input
    channels and the kernel taps (innermost), the taps clipped or tested only at the edges."""
    ops = ConvOperands.of(args)
    geo, space = ops.geometry, ops.space
    cg, mg, in_size, out_size = geo.in_per_group, geo.out_per_group, geo.in_size, geo.out_size
    n, g, m = Affine.var("n"), Affine.var("g"), Affine.var("m")
    oc = g * mg + m
    prelude, init = _bias_init(args.inputs[2] if len(args.inputs) > 2 else None, oc.expr())
    nests = _conv_nests(space.axes, tiles(space.windows), ops.x, ops.w, ops.y,
                        in_base=n * (geo.channels * in_size) + g * (cg * in_size), in_strides=space.in_strides,
                        in_channel=in_size, w_base=oc * (cg * geo.kernel_size), w_channel=geo.kernel_size,
                        k_strides=space.tap_strides, out_base=n * (geo.out_channels * out_size) + oc * out_size,
                        out_strides=space.out_strides, init=init, channels=cg, out_coords=(n, oc))
    return loops((("g", geo.group), ("m", mg)), prelude + [For("n", geo.batch, tuple(nests))])


# --- ConvTranspose --------------------------------------------------------------------------
def transposed_phases(a: TransposedAxis) -> list[Axis | None]:
    """ConvTranspose along one axis as `stride` ordinary windows, one per phase r: the outputs
    o = q * stride + r - pad_begin gather from taps k with k * dilation = r (mod stride), and those
    taps read inputs at unit stride, so no output tests divisibility or wastes a multiply by zero.
    Phases with no output are None; a phase no tap reaches has a window of zero taps."""
    s, d = a.stride, a.dilation
    result: list[Axis | None] = []
    for r in range(s):
        q_lo = -((r - a.pad_begin) // s)  # first q with o >= 0
        q_hi = (a.out_size - 1 + a.pad_begin - r) // s
        if q_hi < q_lo:
            result.append(None)
            continue
        ks = [k for k in range(a.kernel) if (k * d - r) % s == 0]
        step = ks[1] - ks[0] if len(ks) > 1 else 1
        # tap j reads kernel index ks[-1] - j * step, at input q + (r - ks[-1] * d) / s + j * step * d / s
        first_in = q_lo + (r - ks[-1] * d) // s if ks else 0
        win = Window(a.in_size, q_hi - q_lo + 1, len(ks), 1, max(1, step * d // s), -first_in)
        result.append(Axis(win, s, q_lo * s + r - a.pad_begin, ks[-1] if ks else 0, -step))
    return result


@CPP.register("ConvTranspose", family="convolution", types=same("float32", 3, acc="float32"), layout="nchw")
def conv_transpose(graph, node_id, cluster_id, args, attrs):
    """Transposed convolution written as gathers: one ordinary convolution per combination of
    phases (see transposed_phases), each a dot product over input channels and taps."""
    x, w, y = args.inputs[0], args.inputs[1], args.outputs[0]
    b = args.inputs[2] if len(args.inputs) > 2 else None
    group, axes = args.prepared["group"], args.prepared["axes"]
    batch, channels = x.type.shape[:2]
    mg = w.type.shape[1]
    cg, out_channels = channels // group, mg * group
    in_size, out_size, k_size = x.type.size // (batch * channels), y.type.size // (batch * out_channels), \
        math.prod(w.type.shape[2:])
    n, g, m = Affine.var("n"), Affine.var("g"), Affine.var("m")
    prelude, init = _bias_init(b, (g * mg + m).expr())
    nests: list[Stmt] = []
    for index, phase in enumerate(itertools.product(*[transposed_phases(a) for a in axes])):
        if any(p is None for p in phase):
            continue
        if any(a.stride > 1 for a in axes):
            nests.append(Comment("phase: output positions " + " x ".join(
                f"{p.out_offset} + {p.out_scale} * o{d}" for d, p in enumerate(phase))))
        nests += _conv_nests(phase, tiles([p.window for p in phase]), x.name, w.name, y.name,
                             in_base=n * (channels * in_size) + g * (cg * in_size),
                             in_strides=row_major_strides(x.type.shape[2:]), in_channel=in_size,
                             w_base=g * (cg * mg * k_size) + m * k_size, w_channel=mg * k_size,
                             k_strides=row_major_strides(w.type.shape[2:]),
                             out_base=n * (out_channels * out_size) + (g * mg + m) * out_size,
                             out_strides=row_major_strides(y.type.shape[2:]), init=init, channels=cg,
                             tag=f"p{index}_")  # the phases' nests share the batch loop's scope
    return loops((("g", group), ("m", mg)), prelude + [For("n", batch, tuple(nests))])
