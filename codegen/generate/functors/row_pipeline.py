"""Row pipeline: several convolutions run as one kernel, row by row (MCUNetV2's patch-based
inference, with rows as patches and ring buffers instead of recomputation).

The kernel produces the rows of every layer in a wavefront: at each step, each layer computes the
rows whose inputs are all there. A value read only inside the pipeline lives in a ring buffer of a
few rows (a scratch buffer, placed by the memory plan); a value read after it is stored whole, in
the model's layout. Every row is computed once: nothing is recomputed. The steps are one loop, a
few steps per repetition; each kind of row of a layer (its taps: the first and last rows read
padding) is in the loop body once per step of a repetition, under the condition of the
repetitions that make it, so the pipeline's first and last steps, where layers start and finish,
cost no code of their own and the code stays the size of a few kernels. Ring slots are
`row % rows_in_ring`.

`Pipeline` describes the layers (tinsmith.planners.rows finds them in a schedule); `pipeline_kernel`
gives the loop IR, which the plan checker traces like any kernel's: each row of each layer is the
convolution family's loop nest (conv_nest.py) over the row's columns, in the "rows" order, with
the micro-kernel `RowBlock`.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from tinsmith.generate.functors.conv import Affine, Axis, TileLoops
from tinsmith.generate.functors.conv_nest import ChannelBlock, ConvNest, ConvSchedule, ConvSpace, convolution
from tinsmith.generate.loop_ir import Assign, Binary, For, If, Load, Local, Scratch, Store, Var, const, index
from tinsmith.ops.conv import Window

CHANNELS, POSITIONS = 4, 2  # output channels times positions kept in registers (8 accumulators)


@dataclass(frozen=True)
class Layer:
    """One convolution (batch 1, float32, no groups or dilation) and what is fused after it: adding
    `residual` (a value of the output's shape), then `relu`. It writes `out`."""

    name: str
    x: str
    w: str
    b: str | None
    out: str
    cin: int
    cout: int
    hin: int
    win: int
    hout: int
    wout: int
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    residual: str | None = None
    relu: bool = False

    def rows_read(self, r: int) -> list[int]:
        """The input rows output row r reads (padding rows left out)."""
        return [r * self.sh - self.ph + k for k in range(self.kh) if 0 <= r * self.sh - self.ph + k < self.hin]


@dataclass(frozen=True)
class Pipeline:
    """Layers in the order they run within a step; `stored`: values the pipeline writes whole (the
    rest live in rings); `shapes`: (channels, height, width) of every value the layers touch."""

    layers: tuple[Layer, ...]
    stored: frozenset[str]
    shapes: dict = field(hash=False, compare=False, default_factory=dict)

    def producer(self) -> dict[str, Layer]:
        return {l.out: l for l in self.layers}

    def steps(self) -> list[list[tuple[Layer, int]]]:
        """(layer, row) produced at each step: a row as soon as the rows it reads are, and one step
        after the layer's row before."""
        made: dict[tuple[str, int], int] = {}
        prod = self.producer()
        for l in self.layers:
            for r in range(l.hout):
                deps = [made[(l.x, i)] for i in l.rows_read(r) if l.x in prod]
                if l.residual is not None and l.residual in prod:
                    deps.append(made[(l.residual, r)])
                if r:  # one row of a layer per step: a ring then holds the rows its readers span
                    deps.append(made[(l.out, r - 1)] + 1)
                made[(l.out, r)] = max(deps) if deps else r
        count = max(made.values()) + 1
        steps: list[list[tuple[Layer, int]]] = [[] for _ in range(count)]
        for l in self.layers:
            for r in range(l.hout):
                steps[made[(l.out, r)]].append((l, r))
        order = {l.name: i for i, l in enumerate(self.layers)}
        return [sorted(s, key=lambda item: (order[item[0].name], item[1])) for s in steps]

    def ring_rows(self) -> dict[str, int]:
        """Rows of each ring: row r takes the slot of row r - R, which must be read for the last
        time in an earlier step."""
        steps = self.steps()
        made = {(l.out, r): t for t, s in enumerate(steps) for l, r in s}
        last: dict[tuple[str, int], int] = {}
        for t, s in enumerate(steps):
            for l, r in s:
                for i in l.rows_read(r):
                    last[(l.x, i)] = t
                if l.residual is not None:
                    last[(l.residual, r)] = t
        rings = {}
        for l in self.layers:
            if l.out in self.stored:
                continue
            size = 1
            while any(last.get((l.out, r - size), -1) >= made[(l.out, r)] for r in range(size, l.hout)):
                size += 1
            rings[l.out] = min(size, l.hout)
        return rings

    def scratch(self) -> list[Scratch]:
        rings = self.ring_rows()
        return [Scratch(f"ring_{v}", "float32", n * self.shapes[v][0] * self.shapes[v][2])
                for v, n in sorted(rings.items())]


@dataclass(frozen=True)
class _Run:
    """Rows of one layer with the same taps, made one per repetition of the step loop, at sub-step
    `phase` of repetitions first .. first + count - 1: row r0 + (u - first) * advance at repetition u."""

    layer: Layer
    phase: int
    first: int
    count: int
    r0: int
    advance: int


def _taps(l: Layer, r: int) -> tuple[int, ...]:
    """The kernel rows output row r of layer l reads inside its input (its code's shape)."""
    return tuple(k for k in range(l.kh) if 0 <= r * l.sh - l.ph + k < l.hin)


def _runs(steps: list[list[tuple[Layer, int]]], period: int) -> list[_Run]:
    """The rows of `steps` as runs of a loop whose body is `period` steps: per layer and sub-step,
    rows with the same taps, one repetition apart and the same number of rows further each time."""
    runs: list[_Run] = []
    made: dict[tuple[str, int], list[tuple[int, int]]] = {}  # (layer, phase) -> (repetition, row)
    layers: dict[str, Layer] = {}
    for t, step in enumerate(steps):
        for l, r in step:
            layers[l.name] = l
            made.setdefault((l.name, t % period), []).append((t // period, r))
    for (name, phase), rows in made.items():
        l = layers[name]
        i = 0
        while i < len(rows):
            (u0, r0), n = rows[i], 1
            advance = rows[i + 1][1] - r0 if i + 1 < len(rows) else 0
            while i + n < len(rows) and rows[i + n][0] == u0 + n and rows[i + n][1] == r0 + n * advance and \
                    _taps(l, rows[i + n][1]) == _taps(l, r0):
                n += 1
            runs.append(_Run(l, phase, u0, n, r0, advance if n > 1 else 0))
            i += n
    return runs


PERIODS = (1, 2, 3, 4)  # sub-steps per repetition tried: a strided layer makes a row every other step


def pipeline_kernel(p: Pipeline) -> list:
    """The loop IR of the whole pipeline: one loop over its steps (`period` of them per repetition,
    the period that needs the fewest runs), each run of rows under the condition of the
    repetitions it covers. The code holds each kind of row of each layer once per sub-step."""
    rings = p.ring_rows()
    steps = p.steps()
    period, runs = min(((q, _runs(steps, q)) for q in PERIODS), key=lambda pr: (len(pr[1]), pr[0]))
    repetitions = -(-len(steps) // period)
    order = {l.name: i for i, l in enumerate(p.layers)}
    serials = itertools.count()  # rows of one loop body share a C++ scope: their locals' names differ
    body = []
    u = Var("u")
    for run in sorted(runs, key=lambda run: (run.phase, order[run.layer.name], run.first)):
        row = Affine(const=run.r0 - run.first * run.advance) + Affine.var("u") * run.advance
        stmts = tuple(_row(p, rings, run.layer, row, run.r0, serials))
        last = run.first + run.count
        if run.count == 1:
            cond = Binary("==", u, index(run.first))
        elif run.first == 0:
            cond = Binary("<", u, index(last))
        elif last == repetitions:
            cond = Binary(">=", u, index(run.first))
        else:
            cond = Binary("&&", Binary(">=", u, index(run.first)), Binary("<", u, index(last)))
        body += stmts if run.count == repetitions else (If(cond, stmts),)
    return [For("u", repetitions, tuple(body))]


def _at(p: Pipeline, rings, value: str, c, row: Affine, x):
    """Index of element (c, row, x) of `value`: whole in NCHW, or in its ring (row % R)."""
    channels, height, width = p.shapes[value]
    if value in rings:
        slot = row.expr() if rings[value] >= height else Binary("%", row.expr(), index(rings[value]))
        return f"ring_{value}", Binary("+", Binary("*", slot, index(channels * width)), (c * width + x).expr())
    return value, (c * (height * width) + row * width + x).expr()


def _row(p: Pipeline, rings, l: Layer, row: Affine, r0: int, serials: Iterator[int]) -> list:
    """Output row `row` of layer `l` (`r0`: its value at the first repetition, which has the same
    taps): the convolution nest over the row's columns, positions outside channels, with exact
    tiles (columns whose windows read the same taps) and the micro-kernel `RowBlock`."""
    kys = _taps(l, r0)
    columns = ConvSpace((Axis(Window(l.win, l.wout, l.kw, l.sw, 1, l.pw, l.pw)),))
    schedule = ConvSchedule(channels=CHANNELS, positions=POSITIONS, exact=True, leftover_loop=False,
                            order="rows", channel_steps=True)
    return convolution(ConvNest(1, 1, l.cout, (columns,)), schedule, RowBlock(p, rings, l, row, kys, serials))


@dataclass(frozen=True)
class RowBlock:
    """The micro-kernel of one output row of one layer: a channel block x positions along the row,
    accumulators that start at the bias, every tap of the row's input rows `kys` over the input
    channels, then the epilogue (residual, ReLU) and the stores, in rings or whole values."""

    p: Pipeline
    rings: dict
    l: Layer
    row: Affine
    kys: tuple[int, ...]
    serials: Iterator[int]

    def prelude(self, block: ChannelBlock) -> list:
        return []

    def gather(self, tl: TileLoops, positions) -> list:
        return []

    def padding(self, tl: TileLoops, block: ChannelBlock) -> list:
        return self._stores(block, [(tl.in_pos, tl.out_pos)], [[self._bias(m)] for m in block.channels])

    def _bias(self, m: Affine):
        return Load(self.l.b, m.expr()) if self.l.b else const(0)

    def block(self, tl: TileLoops, block: ChannelBlock, positions, width: int, scope: str) -> list:
        tag = next(self.serials)
        ms = block.channels
        acc = [[f"acc{tag}_{i}_{j}" for j in range(len(positions))] for i in range(len(ms))]
        inner = [Local(acc[i][j], self._bias(m)) for i, m in enumerate(ms) for j in range(len(positions))]
        inner.append(For("c", self.l.cin, tuple(self._taps(tl, ms, positions, tag, acc))))
        return inner + self._stores(block, positions, [[Var(a) for a in row] for row in acc])

    def _taps(self, tl: TileLoops, ms, positions, tag: int, acc) -> list:
        """One input channel's multiply-adds: per tap, the inputs under it, then each channel's
        weight times them (the tile's column taps unrolled)."""
        l, c = self.l, Affine.var("c")
        count = tl.taps[0][1] if tl.taps else 1
        stmts = []
        for ky in self.kys:
            iy = self.row * l.sh + (ky - l.ph)
            for tv in range(count):
                kx = tl.tap[0].substituted("k0", Affine((), tv)).const
                xs = []
                for j, (in_pos, _) in enumerate(positions):
                    buf, at = _at(self.p, self.rings, l.x, c, iy, in_pos[0].substituted("k0", Affine((), tv)))
                    xs.append(f"x{tag}_{ky}_{kx}_{j}")
                    stmts.append(Local(xs[-1], Load(buf, at)))
                for i, m in enumerate(ms):
                    wv = f"w{tag}_{ky}_{kx}_{i}"
                    stmts.append(Local(wv, Load(l.w, ((m * l.cin + c) * (l.kh * l.kw) + (ky * l.kw + kx)).expr())))
                    stmts += [Assign(acc[i][j], Binary("+", Var(acc[i][j]), Binary("*", Var(wv), Var(x))))
                              for j, x in enumerate(xs)]
        return stmts

    def _stores(self, block: ChannelBlock, positions, values) -> list:
        """Each value, plus the residual, through ReLU, to its output element."""
        stmts = []
        for i, m in enumerate(block.channels):
            for j, (_, out_pos) in enumerate(positions):
                value = values[i][j]
                if self.l.residual is not None:
                    buf, at = _at(self.p, self.rings, self.l.residual, m, self.row, out_pos[0])
                    value = Binary("+", value, Load(buf, at))
                if self.l.relu:
                    value = Binary("max", value, const(0))
                buf, at = _at(self.p, self.rings, self.l.out, m, self.row, out_pos[0])
                stmts.append(Store(buf, at, value))
        return stmts


__all__ = ["Layer", "Pipeline", "pipeline_kernel", "CHANNELS", "POSITIONS"]
