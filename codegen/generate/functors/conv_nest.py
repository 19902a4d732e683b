"""The float convolution family's one loop nest: every float convolution kernel (Conv, ConvNHWC and
ConvTranspose; regular, depthwise, pointwise, grouped; 1-D and 2-D) is `convolution(nest,
schedule, micro)`.

The nest, outermost first:

    groups (NCHW; a channels-last depthwise kernel's groups are its channel vectors)
      channel blocks (`schedule.channels` accumulator rows of `schedule.lanes` channels; a loop
                      over the full blocks, then one block of what is left)
        batch
          spaces (one; ConvTranspose's phases are one each)
            tiles (conv.tiles: checked or exact edges; a narrow row as one block)
              output loops, the innermost in register blocks of `schedule.positions` positions
              (times `schedule.row_lanes` lanes along the row), leftovers in a loop of their
              own or as one smaller block
                the micro-kernel: accumulate over input channels and taps, store

`schedule.order` is the loop order; the nest above is "channels". The others move the channel
blocks inward:

- "tiles": each tile in the channel-block and batch loops (what GCC hoists out of them, pointers,
  then lives in one tile's loops only: the Cortex-M's stack);
- "positions": every channel block inside each register block of positions, after the
  micro-kernel's `gather` of those positions (the in-place pointwise variant, inplace.py: all
  output channels of a block of positions are stored after its inputs were copied);
- "rows": each channel block's loop around each part of a row (the blocked positions, then the
  rest), one row of one layer at a time (the row pipeline, row_pipeline.py).

A *micro-kernel* writes one register block: `block(tl, channel block, positions, width, scope)`
accumulates and stores the block's channels x positions, `padding(tl, channel block)` stores what a
window wholly in the padding gives (the bias), `prelude(channel block)` what a channel block
computes once. The micro-kernels are conv_portable.ScalarDot (portable, bounds tested at the edges;
quantized_onnx.IntegerDot is it in int32 for ConvInteger and QLinearConv), fast.RegisterBlock (NCHW
accumulators over positions: scalar, or GCC vectors along the row), fast.ChannelVectors (NCHW,
vectors over output channels), host_conv.NhwcConv (channels last), inplace.PixelBlock (from a
scratch copy of the positions) and row_pipeline.RowBlock (one row, in ring buffers). The schedules
are chosen where each kernel is registered (conv_portable.py, fast.py, cortex_m.py, host_conv.py,
inplace.py, row_pipeline.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from tinsmith.generate.functors.conv import (Affine, Axis, ConvOperands, Segment, TileLoops, loops, plan_axis,
                                            tile_loops, tiles, whole_axis)
from tinsmith.generate.loop_ir import Comment, For, Stmt


# --- channel blocks -------------------------------------------------------------------------
def channel_vectors(count: int, lanes: int) -> list[tuple[int, int]]:
    """(offset, width) of the vectors covering `count` channels: `lanes` wide while they fit, then
    the widest power of two of at least 4 that fits, then single channels."""
    out, offset = [], 0
    while offset < count:
        width = lanes
        while width > 1 and (width > count - offset or width < 4):
            width //= 2
        width = width if width >= 4 else 1
        out.append((offset, width))
        offset += width
    return out


@dataclass(frozen=True)
class ChannelBlock:
    """The output channels one register block computes: from `first` (affine in the block loop's
    variable), one accumulator row per (offset from first, lanes) in `vectors`; the block runs
    `repeat` times, in a loop that counts blocks or (`step`) channels."""

    first: Affine
    repeat: int
    vectors: tuple[tuple[int, int], ...]
    var: str = "mb"
    step: int = 0

    def loop(self, body: Sequence[Stmt]) -> tuple[Stmt, ...]:
        """`body` in the block's loop (none for a block that runs once)."""
        if self.repeat == 1:
            return tuple(body)
        if self.step:
            return (For(self.var, self.repeat * self.step, tuple(body), self.step),)
        return (For(self.var, self.repeat, tuple(body)),)

    @property
    def channels(self) -> list[Affine]:
        """The first channel of each accumulator row."""
        return [self.first + off for off, _ in self.vectors]


def channel_blocks(count: int, lanes: int, per_block: int, var: str = "mb", stepped: bool = False
                   ) -> list[ChannelBlock]:
    """Full blocks of `per_block` vectors of `lanes` channels, repeated (`stepped`: the loop
    variable counts channels), then one block of what is left (narrower vectors, then single
    channels)."""
    vectors = channel_vectors(count, lanes)
    full = [v for v in vectors if v[1] == lanes]
    blocks = len(full) // per_block
    parts = []
    if blocks:
        width = per_block * lanes
        first = Affine.var(var if blocks > 1 else None) * (1 if stepped else width)
        parts.append(ChannelBlock(first, blocks, tuple((i * lanes, lanes) for i in range(per_block)), var,
                                  width if stepped else 0))
    rest = vectors[blocks * per_block:]
    if rest:
        start = rest[0][0]
        parts.append(ChannelBlock(Affine((), start), 1, tuple((off - start, w) for off, w in rest), var))
    return parts


# --- what the nest runs over ----------------------------------------------------------------
@dataclass(frozen=True)
class ConvSpace:
    """One set of output loops: the spatial axes, a comment before them and a tag that keeps the
    names of locals apart where several spaces share a scope (ConvTranspose's phases); `flat`: a
    pointwise convolution's positions as one axis."""

    axes: tuple[Axis, ...]
    label: str | None = None
    tag: str = ""
    flat: bool = False

    @property
    def row(self) -> str:
        """The output loop variable of the innermost axis (positions along a row)."""
        return f"o{len(self.axes) - 1}"


@dataclass(frozen=True)
class ConvNest:
    """What the loops run over: batch, the group loop's extent, the output channels the channel
    blocks cover (per group) and the spaces."""

    batch: int
    groups: int
    channels: int
    spaces: tuple[ConvSpace, ...]

    @staticmethod
    def of(ops: ConvOperands, grouped: bool = True) -> ConvNest:
        """A Conv's nest; `grouped`: a loop over groups (NCHW), else channels span them (NHWC)."""
        geo = ops.geometry
        space = ConvSpace(tuple(ops.space.axes), flat=ops.space.flat)
        if grouped:
            return ConvNest(geo.batch, geo.group, geo.out_per_group, (space,))
        return ConvNest(geo.batch, 1, geo.out_channels, (space,))


@dataclass(frozen=True)
class ConvSchedule:
    """How the nest is cut (see the module doc). `along`: which output loop the register blocks
    step along ("row": the innermost spatial axis only; "innermost": whatever loop is innermost in
    the tile, a column of edge positions too; "none": one position per block); `exact`: tiles clip
    their taps instead of testing them; `narrow_row`: a row of at most this many outputs (and
    taps) is one block; `narrow_positions`: positions per block for a channel block narrower
    than `lanes` (registers left over); `order`: "channels", "tiles", "positions" or "rows" (the
    module doc)."""

    channels: int = 1
    lanes: int = 1
    positions: int = 1
    row_lanes: int = 1
    along: str = "row"
    exact: bool = False
    narrow_row: int = 0
    narrow_positions: int = 0
    leftover_loop: bool = True
    order: str = "channels"
    channel_var: str = "mb"
    channel_steps: bool = False  # the channel-block loop counts channels (mb += 4), not blocks

    def positions_for(self, block: ChannelBlock) -> int:
        if self.narrow_positions and block.vectors[0][1] != self.lanes:
            return self.narrow_positions
        return self.positions


class MicroKernel(Protocol):
    """One register block of a convolution (see the module doc)."""

    def prelude(self, block: ChannelBlock) -> list[Stmt]: ...

    def padding(self, tl: TileLoops, block: ChannelBlock) -> list[Stmt]: ...

    def block(self, tl: TileLoops, block: ChannelBlock, positions, width: int, scope: str) -> list[Stmt]: ...

    # a micro-kernel of a positions-outer schedule: what a block of positions does first
    def gather(self, tl: TileLoops, positions) -> list[Stmt]: ...


# --- the nest -------------------------------------------------------------------------------
def blocked_row(tl: TileLoops, blocks: int, block: Callable[[list, int], list[Stmt]], width: int = 1,
                leftover_loop: bool = True, parts: str = "main rest") -> list[Stmt]:
    """The tile's innermost output loop in steps of `blocks` x `width` positions, each step one
    register block `block(positions, width)`; the positions left over run one at a time in a loop
    of their own (`leftover_loop`) or as one smaller block. `parts`: the main loop, the rest or both."""
    var, count = tl.outer[-1]
    step = width * blocks
    main = count - count % step
    stmts: list[Stmt] = []
    if main and "main" in parts:
        stmts += loops(tl.outer[:-1], [For(var, main, tuple(block(tl.neighbours(var, blocks, width), width)), step)])
    if count - main and "rest" not in parts:
        return stmts
    if count - main and leftover_loop:
        positions = [tl.position(var, Affine.var(var + "r", main))]
        stmts += loops(tl.outer[:-1], [For(var + "r", count - main, tuple(block(positions, 1)))])
    elif count - main:
        positions = [tl.position(var, Affine((), main + j)) for j in range(count - main)]
        stmts += loops(tl.outer[:-1], block(positions, 1))
    return stmts


def _narrow(schedule: ConvSchedule, space: ConvSpace) -> bool:
    wins = [a.window for a in space.axes]
    return (schedule.narrow_row > 0 and not space.flat and wins[-1].out_size <= schedule.narrow_row
            and wins[-1].kernel <= 8)


def space_tiles(schedule: ConvSchedule, space: ConvSpace) -> list[tuple[Segment, ...]]:
    """The space's tiles: checked or exact edges; a narrow row whole (its other axes exact)."""
    wins = [a.window for a in space.axes]
    if _narrow(schedule, space):
        row = whole_axis(wins[-1], plan_axis(wins[-1], exact_only=True))
        return [lead + (row,) for lead in tiles(wins[:-1], exact_only=True)]
    return tiles(wins, exact_only=schedule.exact)


def _register_blocks(micro: MicroKernel, tl: TileLoops, blocks: Sequence[ChannelBlock], scope: str, gather: bool
                     ) -> Callable[[list, int], list[Stmt]]:
    """What one register block of positions writes: each channel block's channels, in the block's
    loop where there are several (positions outside channels), after the micro-kernel's gather of
    the positions (`gather`)."""
    if len(blocks) == 1 and not gather:
        (block,) = blocks
        return lambda positions, width: micro.block(tl, block, positions, width, scope)

    def every_block(positions, width: int) -> list[Stmt]:
        stmts = micro.gather(tl, positions) if gather else []
        for block in blocks:
            stmts += block.loop(micro.block(tl, block, positions, width, scope))
        return stmts
    return every_block


def _positions(schedule: ConvSchedule, space: ConvSpace, tl: TileLoops, block: ChannelBlock
               ) -> Callable[[Callable[[list, int], list[Stmt]], str], list[Stmt]]:
    """The tile's output loops around a register block `emit(positions, width)`: a narrow row as one
    block, one position per block where the tile's innermost loop is not the one the schedule
    blocks along (or taps are tested), else blocked_row (`parts` of it)."""
    if _narrow(schedule, space):  # the whole row is one block
        count = dict(tl.outer).get(space.row, 1)
        positions = [tl.position(space.row, Affine((), j)) for j in range(count)]
        others = [o for o in tl.outer if o[0] != space.row]
        return lambda emit, parts: list(loops(others, emit(positions, 1))) if "main" in parts else []
    innermost = tl.outer[-1][0] if tl.outer else None
    along = schedule.along == "innermost" or (schedule.along == "row" and innermost == space.row)
    if innermost is None or not along or tl.in_bounds is not None:  # one position per block
        return lambda emit, parts: list(loops(tl.outer, emit([(tl.in_pos, tl.out_pos)], 1))) if "main" in parts else []
    count = tl.outer[-1][1]
    stride = dict(tl.in_pos[-1].terms).get(innermost, 0)
    width = schedule.row_lanes if stride in (1, 2) and count >= schedule.row_lanes else 1
    per_row = max(1, min(schedule.positions_for(block), count // width))  # a short row: fewer per block
    return lambda emit, parts: blocked_row(tl, per_row, emit, width, schedule.leftover_loop, parts)


def _tile(schedule: ConvSchedule, micro: MicroKernel, space: ConvSpace, tl: TileLoops,
          blocks: Sequence[ChannelBlock], scope: str) -> list[Stmt]:
    """One tile: its comment, then its output loops in register blocks; with order "rows" each
    channel block's loop around each part of the row (the blocked positions, then the rest)."""
    stmts: list[Stmt] = [Comment(tl.label)]
    if tl.empty:  # the window lies in the padding
        padding = [s for b in blocks for s in (micro.padding(tl, b) if len(blocks) == 1
                                                else b.loop(micro.padding(tl, b)))]
        return stmts + list(loops(tl.outer, padding))
    positions = _positions(schedule, space, tl, blocks[0])
    if schedule.order != "rows":
        return stmts + positions(_register_blocks(micro, tl, blocks, scope, schedule.order == "positions"), "main rest")
    for part in ("main", "rest"):
        for b in blocks:
            stmts += b.loop(positions(_register_blocks(micro, tl, [b], scope, False), part))
    return stmts


def _space(schedule: ConvSchedule, micro: MicroKernel, space: ConvSpace, blocks: Sequence[ChannelBlock]
           ) -> list[list[Stmt]]:
    """Each tile of one space, as statements; positions outside channels in raster order."""
    result = []
    for t, tile in enumerate(space_tiles(schedule, space)):
        tl = tile_loops(space.axes, tile)
        result.append(_tile(schedule, micro, space, tl, blocks, "" if tl.outer else f"{space.tag}{t}"))
    return _in_raster_order(result) if schedule.order == "positions" else result


def _in_raster_order(tiles: list[list[Stmt]]) -> list[list[Stmt]]:
    """Consecutive tiles that run down the same rows (a row's left edge, middle and right edge) as
    one loop over those rows, each tile's part inside it: outputs are written row by row, so an
    in-place kernel's output may follow its input a few rows behind. The tiles write disjoint
    outputs from inputs alone, so their order is free."""
    def rows_of(tile: list[Stmt]) -> For | None:
        body = tile[1:] if tile and isinstance(tile[0], Comment) else tile
        return body[0] if len(body) == 1 and isinstance(body[0], For) else None

    def header(loop: For | None):
        return None if loop is None else (loop.var, loop.extent, loop.step)

    groups: list[list[list[Stmt]]] = []
    for tile in tiles:
        if groups and header(rows_of(tile)) is not None and header(rows_of(groups[-1][0])) == header(rows_of(tile)):
            groups[-1].append(tile)
        else:
            groups.append([tile])
    merged = []
    for group in groups:
        if len(group) == 1:
            merged.append(group[0])
            continue
        first = rows_of(group[0])
        inside = [s for tile in group for s in (*tile[:-1], *rows_of(tile).body)]  # each tile's label, then its row
        merged.append([For(first.var, first.extent, tuple(inside), first.step)])
    return merged


def _spaces(schedule: ConvSchedule, micro: MicroKernel, nest: ConvNest, blocks: Sequence[ChannelBlock]) -> list[Stmt]:
    """Every space's comment and tiles."""
    body: list[Stmt] = []
    for space in nest.spaces:
        body += [Comment(space.label)] if space.label else []
        body += [s for tile in _space(schedule, micro, space, blocks) for s in tile]
    return body


def convolution(nest: ConvNest, schedule: ConvSchedule, micro: MicroKernel) -> list[Stmt]:
    """The family's loop nest (see the module doc)."""
    blocks = channel_blocks(nest.channels, schedule.lanes, schedule.channels, schedule.channel_var,
                            schedule.channel_steps)
    if schedule.order in ("positions", "rows"):  # every channel block inside the tiles' loops
        return list(loops((("g", nest.groups),), [For("n", nest.batch, tuple(_spaces(schedule, micro, nest, blocks)))]))
    stmts: list[Stmt] = []
    for block in blocks:
        def batch(body: Sequence[Stmt]) -> tuple[Stmt, ...]:
            return block.loop(micro.prelude(block) + [For("n", nest.batch, tuple(body))])
        if schedule.order == "tiles":
            for space in nest.spaces:
                stmts += [s for tile in _space(schedule, micro, space, [block]) for s in batch(tile)]
        else:
            stmts += batch(_spaces(schedule, micro, nest, [block]))
    return list(loops((("g", nest.groups),), stmts))
