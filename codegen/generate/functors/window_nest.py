"""The window family's one loop nest: every pool kernel (MaxPool, AveragePool, LpPool, their
Global* forms, MaxPoolIndices, the channels-last AveragePoolNHWC and MaxPoolNHWC, TFLite's QAvgPool
and QMaxPool, ONNX's QLinearAveragePool and QLinearGlobalAveragePool) and LRN (a window across the
channels, seen as the one spatial axis of a channels-last nest) is `window(nest, schedule, micro)`.

The nest, outermost first:

    batch and channels (`schedule.channels`: "planes", one loop i over the N x C planes; "outer",
                        loops n and c; "inner", a loop n here and the channels innermost)
      the output positions, by `schedule.taps`:
        "tiles"    conv.tiles: along each axis the segments whose windows see the same taps, the
                   taps clipped at generation time (`schedule.exact`) or, at edges that would
                   need many copies, tested at run time; a window wholly in the padding is empty
        "clamped"  every position and every tap, the input index clamped into the input and the
                   tap's test handed to the micro-kernel (TFLite's and ONNX Runtime's form)
        "whole"    one window over every position of a plane (the Global pools)
          the channels, for "inner": vectors of `schedule.lanes` channels (conv_nest's
          channel_vectors), or a loop over them ("clamped", or "tiles" with `channel_loop`)
            the micro-kernel: `start` its accumulator, `step` it at each tap, `finish` (store)

Geometry (windows, pads, strides, dilations, output sizes, the layout and the count rule) is what
the primitive's `prepare` computed (codegen/ops/pooling.py: pool_facts), read once by
`WindowNest.of`. The micro-kernels are where the kernels are registered: pooling.py (MaxSelect,
WindowSum: float NCHW, and MaxPool's integers), pool_indices.py (MaxWithPosition),
host_pool.py (LaneReduce: channels-last vectors), quantized.py (QuantizedMax, RoundedAverage:
TFLite's int8 and int16) and quantized_onnx.py (QLinearAverage, QLinearGlobalAverage).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from tinsmith.generate.backend import KernelArgs
from tinsmith.generate.functors.conv import Affine, Axis, TileLoops, dot, loops, row_major_strides, tile_loops, tiles
from tinsmith.generate.functors.conv_nest import channel_vectors
from tinsmith.generate.loop_ir import Binary, Comment, Expr, For, Load, Select, Stmt, Var, flat_index, index
from tinsmith.ops.conv import SpatialWindows, Window


@dataclass(frozen=True)
class WindowNest(SpatialWindows):
    """What the loops run over: the tensors, batch and channels, one window per spatial axis (a
    Global pool's covers its axis), the layout and whether padding taps count (AveragePool's
    count_include_pad)."""

    x: str
    y: str
    x_shape: tuple[int, ...]
    y_shape: tuple[int, ...]
    batch: int
    channels: int
    windows: tuple[Window, ...]
    channels_last: bool = False
    include_pad: bool = False

    @staticmethod
    def of(args: KernelArgs) -> WindowNest:
        """The nest of a pool node, from its prepared facts."""
        x, y, facts = args.inputs[0], args.outputs[0], args.prepared
        last = facts["channels_last"]
        batch, channels = (x.type.shape[0], x.type.shape[-1]) if last else x.type.shape[:2]
        return WindowNest(x.name, y.name, x.type.shape, y.type.shape, batch, channels, tuple(facts["windows"]),
                          last, facts["count_include_pad"])


@dataclass(frozen=True)
class WindowSchedule:
    """How the nest is cut (see the module doc): "tiles" runs over planes or with the channels
    inner, "clamped" with them outer or inner, "whole" over planes or with them outer (SCHEDULES).
    The loop variables' names are the schedule's too (None: o0, o1, ... for outputs, k0, k1, ...
    for taps)."""

    taps: str = "tiles"
    exact: bool = False
    channels: str = "planes"
    lanes: int = 0
    out_vars: tuple[str, ...] | None = None
    tap_vars: tuple[str, ...] | None = None
    channel_var: str = "c"
    position_var: str = "j"
    channel_loop: bool = False  # "tiles" with channels "inner": a loop over single channels, not vectors


@dataclass(frozen=True)
class WindowTap:
    """One tap of a window: the input element `value` (`width` lanes), where it lies in the input
    under other spatial strides (`at`), and the test it must pass (None: it lies in the input)."""

    x: str
    offset: Callable[[Sequence[int]], Expr]
    strides: tuple[int, ...]
    inside: Expr | None
    width: int = 1

    @property
    def value(self) -> Expr:
        return Load(self.x, self.offset(self.strides), self.width)

    def at(self, strides: Sequence[int]) -> Expr:
        """The tap's offset with the spatial axes under `strides` (MaxPoolIndices' storage order)."""
        return self.offset(strides)


@dataclass(frozen=True)
class WindowOutput:
    """Where a window's result goes (`at`, and `coords` for fusion), `width` lanes, and the taps an
    average divides by (None: counted at run time, the taps passing their test)."""

    y: str
    at: Expr
    coords: tuple[Expr, ...]
    counted: int | None
    width: int = 1


class WindowMicroKernel(Protocol):
    """One window's accumulator (see the module doc); `scope` keeps its locals' names apart where
    several windows share a scope. Only "tiles" has empty windows (wholly in the padding): what
    `empty` stores for them."""

    def start(self, scope: str, out: WindowOutput) -> list[Stmt]: ...

    def step(self, scope: str, tap: WindowTap) -> list[Stmt]: ...

    def finish(self, scope: str, out: WindowOutput) -> list[Stmt]: ...

    def empty(self, scope: str, out: WindowOutput) -> list[Stmt]: ...


def plane_coords(batch: int, channels: int) -> tuple[Expr, Expr]:
    """(batch, channel) of plane i, where one loop runs over both."""
    if batch == 1:
        return index(0), Var("i")
    return Binary("/", Var("i"), index(channels)), Binary("%", Var("i"), index(channels))


def _reduce(micro: WindowMicroKernel, scope: str, taps: Sequence[tuple[str, int]], tap: WindowTap,
            out: WindowOutput, empty: bool = False) -> list[Stmt]:
    """One window: start, every tap, finish; a window wholly in the padding as the micro-kernel says."""
    if empty:
        return micro.empty(scope, out)
    return [*micro.start(scope, out), *loops(taps, micro.step(scope, tap)), *micro.finish(scope, out)]


# --- "tiles" ---------------------------------------------------------------------------------
def _plane_windows(nest: WindowNest, micro: WindowMicroKernel, tl: TileLoops, t: int) -> list[Stmt]:
    """A tile's window in plane i (N x C planes in one loop)."""
    plane = Affine.var("i")
    in_size, out_size = math.prod(nest.in_spatial), math.prod(nest.out_spatial)
    out = WindowOutput(nest.y, (plane * out_size + dot(tl.out_pos, row_major_strides(nest.out_spatial))).expr(),
                       (*plane_coords(nest.batch, nest.channels), *(p.expr() for p in tl.out_pos)), tl.counted)
    tap = WindowTap(nest.x, lambda strides: (plane * in_size + dot(tl.in_pos, strides)).expr(),
                    row_major_strides(nest.in_spatial), tl.in_bounds)
    return _reduce(micro, "" if tl.outer else str(t), tl.taps, tap, out, tl.empty)


def _channel_windows(nest: WindowNest, schedule: WindowSchedule, micro: WindowMicroKernel, tl: TileLoops,
                     t: int) -> list[Stmt]:
    """A tile's window for every vector of channels at one position (channels last, batch n)."""
    n, c = Affine.var("n"), nest.channels
    in_size, out_size = math.prod(nest.in_spatial), math.prod(nest.out_spatial)
    out_strides = row_major_strides(nest.out_spatial)
    blocks = [(Affine.var(schedule.channel_var), 1)] if schedule.channel_loop else \
        [(Affine((), off), width) for off, width in channel_vectors(c, schedule.lanes)]
    stmts: list[Stmt] = []
    for i, (off, width) in enumerate(blocks):
        out_at = n * (out_size * c) + dot(tl.out_pos, out_strides) * c + off
        out = WindowOutput(nest.y, out_at.expr(), (n.expr(), *(p.expr() for p in tl.out_pos), off.expr()),
                           tl.counted, width)
        tap = WindowTap(nest.x, lambda strides, off=off: (n * (in_size * c) + dot(tl.in_pos, strides) * c + off).expr(),
                        row_major_strides(nest.in_spatial), tl.in_bounds, width)
        scope = "" if schedule.channel_loop else f"{t}_{i}"  # a window in a loop of its own shares no scope
        stmts += _reduce(micro, scope, tl.taps, tap, out, tl.empty)
    return list(loops(((schedule.channel_var, c),), stmts)) if schedule.channel_loop else stmts


def _tiled(nest: WindowNest, schedule: WindowSchedule, micro: WindowMicroKernel) -> list[Stmt]:
    """Each tile's comment and output loops around its windows, in the batch and channel loops."""
    axes = [Axis(w) for w in nest.windows]
    stmts: list[Stmt] = []
    for t, tile in enumerate(tiles(nest.windows, exact_only=schedule.exact, include_pad=nest.include_pad)):
        tl = tile_loops(axes, tile)
        body = _plane_windows(nest, micro, tl, t) if schedule.channels == "planes" else \
            _channel_windows(nest, schedule, micro, tl, t)
        stmts += [Comment(tl.label), *loops(tl.outer, body)]
    if schedule.channels == "planes":
        return [For("i", nest.batch * nest.channels, tuple(stmts))]
    return list(loops((("n", nest.batch),), stmts))


# --- "clamped" -------------------------------------------------------------------------------
def clamp_into(pos: Expr, size: int, padded: bool) -> tuple[Expr, Expr | None]:
    """An input coordinate clamped into 0..size-1 where padding can reach it, and the test that it
    was inside (None: always), so no load ever leaves the buffer."""
    if not padded:
        return pos, None
    inside = Binary("&&", Binary(">=", pos, index(0)), Binary("<", pos, index(size)))
    clamped = Select(Binary("<", pos, index(0)), index(0), Select(Binary(">=", pos, index(size)), index(size - 1), pos))
    return clamped, inside


def both(a: Expr | None, b: Expr | None) -> Expr | None:
    """The conjunction of two tests, either of which may be None (always true)."""
    if a is None or b is None:
        return a or b
    return Binary("&&", a, b)


def clamped_tap(out: Expr, tap: Expr, win: Window) -> tuple[Expr, Expr | None]:
    """The input coordinate of output `out` at tap `tap`, clamped (clamp_into), and its test."""
    pos = Binary("+", Binary("-", Binary("*", out, index(win.stride)), index(win.pad_begin)),
                 tap if win.dilation == 1 else Binary("*", tap, index(win.dilation)))
    return clamp_into(pos, win.in_size, bool(win.pad_begin or win.pad_end))


def _clamped(nest: WindowNest, schedule: WindowSchedule, micro: WindowMicroKernel) -> list[Stmt]:
    """Every output position and channel, every tap of its window, indices clamped into the input."""
    rank = len(nest.windows)
    out_vars = schedule.out_vars or tuple(f"o{d}" for d in range(rank))
    tap_vars = schedule.tap_vars or tuple(f"k{d}" for d in range(rank))
    at: list[Expr] = []
    inside: Expr | None = None
    for o, k, win in zip(out_vars, tap_vars, nest.windows):
        pos, test = clamped_tap(Var(o), Var(k), win)
        at.append(pos)
        inside = both(inside, test)
    n, c, outs = Var("n"), Var(schedule.channel_var), tuple(Var(o) for o in out_vars)
    last = nest.channels_last
    x_at, coords = ((n, *at, c), (n, *outs, c)) if last else ((n, c, *at), (n, c, *outs))
    tap = WindowTap(nest.x, lambda strides: flat_index(x_at, nest.x_shape), (), inside)
    counted = None if inside is not None else math.prod(w.kernel for w in nest.windows)
    out = WindowOutput(nest.y, flat_index(coords, nest.y_shape), coords, counted)
    body = _reduce(micro, "", tuple(zip(tap_vars, (w.kernel for w in nest.windows))), tap, out)
    positions = list(zip(out_vars, nest.out_spatial))
    order = [*positions, (c.name, nest.channels)] if last else [(c.name, nest.channels), *positions]
    return list(loops([("n", nest.batch), *order], body))


# --- "whole" ---------------------------------------------------------------------------------
def _whole(nest: WindowNest, schedule: WindowSchedule, micro: WindowMicroKernel) -> list[Stmt]:
    """One window over every position of each plane (planes in one loop i, or in loops n and c)."""
    size, c = math.prod(nest.in_spatial), nest.channels
    p, ones = Var(schedule.position_var), (index(0),) * len(nest.windows)
    if schedule.channels == "planes":
        plane: Expr = Var("i")
        coords, outer = (*plane_coords(nest.batch, c), *ones), (("i", nest.batch * c),)
    else:
        n, ch = Var("n"), Var(schedule.channel_var)
        plane = Binary("+", Binary("*", n, index(c)), ch)
        coords = (n, *ones, ch) if nest.channels_last else (n, ch, *ones)
        outer = (("n", nest.batch), (ch.name, c))
    if nest.channels_last:  # channel c of position p at p * C + c
        at = Binary("+", Binary("*", Binary("+", Binary("*", Var("n"), index(size)), p), index(c)), coords[-1])
    else:
        at = Binary("+", Binary("*", plane, index(size)), p)
    tap = WindowTap(nest.x, lambda strides: at, (), None)
    body = _reduce(micro, "", ((p.name, size),), tap, WindowOutput(nest.y, plane, coords, size))
    return list(loops(outer, body))


NESTS = {"tiles": _tiled, "clamped": _clamped, "whole": _whole}
SCHEDULES = {("tiles", "planes"), ("tiles", "inner"), ("clamped", "outer"), ("clamped", "inner"),
             ("whole", "planes"), ("whole", "outer")}


def window(nest: WindowNest, schedule: WindowSchedule, micro: WindowMicroKernel) -> list[Stmt]:
    """The family's loop nest (see the module doc)."""
    if (schedule.taps, schedule.channels) not in SCHEDULES:
        raise ValueError(f"no window nest runs taps {schedule.taps!r} with channels {schedule.channels!r}")
    return NESTS[schedule.taps](nest, schedule, micro)
