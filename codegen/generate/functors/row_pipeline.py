"""Row pipeline: several convolutions run as one kernel, row by row (MCUNetV2's patch-based
inference, with rows as patches and ring buffers instead of recomputation).

The kernel produces the rows of every layer in a wavefront: at each step, each layer computes the
rows whose inputs are all there. A value read only inside the pipeline lives in a ring buffer of a
few rows (a scratch buffer, placed by the memory plan); a value read after it is stored whole, in
the model's layout. Every row is computed once: nothing is recomputed. Steps that repeat with a
fixed stride of rows become one loop, so the code stays the size of a few kernels; ring slots are
`row % rows_in_ring`.

`Pipeline` describes the layers (tinsmith.planners.rows finds them in a schedule); `pipeline_kernel`
gives the loop IR, which the plan checker traces like any kernel's.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tinsmith.generate.functors.conv import Affine
from tinsmith.generate.loop_ir import Binary, For, Load, Local, Assign, Scratch, Store, Var, const, index

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


def _runs(steps: list[list[tuple[Layer, int]]]) -> list[tuple[int, int, int, tuple[int, ...]]]:
    """Steps grouped into loops: (first step, period, repetitions, row advance per repetition of each
    item). Steps repeat when the same layers produce rows reading the same taps, each row `advance`
    further on."""
    def signature(t):
        return tuple((l.name, tuple(k for k in range(l.kh) if 0 <= r * l.sh - l.ph + k < l.hin))
                     for l, r in steps[t])

    def rows(t):
        return [r for _, r in steps[t]]

    runs, t = [], 0
    while t < len(steps):
        best = (t, 1, 1, ())
        for period in (1, 2, 3, 4):
            if t + 2 * period > len(steps):
                break
            first = [signature(t + j) for j in range(period)]
            advance = tuple(b - a for j in range(period) for a, b in zip(rows(t + j), rows(t + period + j)))
            if [signature(t + period + j) for j in range(period)] != first:
                continue
            n = 1
            while t + (n + 1) * period <= len(steps) and all(
                    signature(t + n * period + j) == first[j] for j in range(period)) and tuple(
                    b - a for j in range(period) for a, b in
                    zip(rows(t + (n - 1) * period + j), rows(t + n * period + j))) == advance:
                n += 1
            if n >= 2 and n * period > best[1] * best[2]:
                best = (t, period, n, advance)
        runs.append(best)
        t += best[1] * best[2]
    return runs


def pipeline_kernel(p: Pipeline) -> list:
    """The loop IR of the whole pipeline."""
    rings = p.ring_rows()
    steps = p.steps()
    body = []
    names = [0]  # a serial for local names: rows of one loop body share a C++ scope
    for t, period, n, advance in _runs(steps):
        items = [item for j in range(period) for item in steps[t + j]]
        if n == 1:
            for l, r in items:
                body += _row(p, rings, l, Affine(const=r), r, names)
        else:
            stmts = []
            for (l, r), a in zip(items, advance):
                stmts += _row(p, rings, l, Affine(const=r) + Affine.var("u") * a, r, names)
            body.append(For("u", n, tuple(stmts)))
    return body


def _at(p: Pipeline, rings, value: str, c, row: Affine, x):
    """Index of element (c, row, x) of `value`: whole in NCHW, or in its ring (row % R)."""
    channels, height, width = p.shapes[value]
    if value in rings:
        slot = row.expr() if rings[value] >= height else Binary("%", row.expr(), index(rings[value]))
        return f"ring_{value}", Binary("+", Binary("*", slot, index(channels * width)), (c * width + x).expr())
    return value, (c * (height * width) + row * width + x).expr()


def _row(p: Pipeline, rings, l: Layer, row: Affine, r0: int, names: list[int]) -> list:
    """Output row `row` of layer `l` (`r0`: its value at the first repetition, which has the same taps)."""
    kys = [k for k in range(l.kh) if 0 <= r0 * l.sh - l.ph + k < l.hin]
    full = l.cout - l.cout % CHANNELS
    blocks = ([(Affine.var("mb") if full > CHANNELS else Affine(), CHANNELS)] if full else []) + \
        [(Affine(const=m), 1) for m in range(full, l.cout)]
    out = []
    for seg in _segments(l):
        taps = _column_taps(l, seg[0])
        pairs = len(seg) // POSITIONS * POSITIONS
        # positions POSITIONS at a time (a loop over the segment's interior), the one left on its own
        groups = ([(Affine.var("ox") + seg[0] if pairs > POSITIONS else Affine(const=seg[0]), POSITIONS, pairs)]
                  if pairs else []) + [(Affine(const=ox), 1, 1) for ox in seg[pairs:]]
        for ox, width, span in groups:
            for m, count in blocks:
                tag = names.pop()
                names.append(tag + 1)
                inner = _block(p, rings, l, row, kys, taps, ox, width, m, count, tag)
                block = [For("ox", span, tuple(inner), POSITIONS)] if span > width else inner
                if count == CHANNELS and full > CHANNELS:
                    block = [For("mb", full, tuple(block), CHANNELS)]
                out += block
    return out


def _column_taps(l: Layer, ox: int) -> tuple[int, ...]:
    """The window's columns that fall inside the input for output column `ox`."""
    return tuple(k for k in range(l.kw) if 0 <= ox * l.sw - l.pw + k < l.win)


def _segments(l: Layer) -> list[list[int]]:
    """Runs of output columns with the same taps: a loop over the interior, the edges on their own."""
    segments: list[list[int]] = []
    for ox in range(l.wout):
        if segments and _column_taps(l, segments[-1][0]) == _column_taps(l, ox):
            segments[-1].append(ox)
        else:
            segments.append([ox])
    return segments


def _block(p: Pipeline, rings, l: Layer, row: Affine, kys, taps, ox: Affine, width: int, m: Affine, count: int,
           tag: int) -> list:
    """`count` output channels from `m` times `width` positions from `ox`: accumulators that start
    at the bias, every tap over the input channels, then the epilogue and the stores."""
    acc = [[f"acc{tag}_{i}_{j}" for j in range(width)] for i in range(count)]
    inner = [Local(acc[i][j], Load(l.b, (m + i).expr()) if l.b else const(0))
             for i in range(count) for j in range(width)]
    inner.append(For("c", l.cin, tuple(_block_taps(p, rings, l, row, kys, taps, ox, width, m, count, tag, acc))))
    for i in range(count):
        for j in range(width):
            value = Var(acc[i][j])
            if l.residual is not None:
                buf, at = _at(p, rings, l.residual, m + i, row, ox + j)
                value = Binary("+", value, Load(buf, at))
            if l.relu:
                value = Binary("max", value, const(0))
            buf, at = _at(p, rings, l.out, m + i, row, ox + j)
            inner.append(Store(buf, at, value))
    return inner


def _block_taps(p: Pipeline, rings, l: Layer, row: Affine, kys, taps, ox: Affine, width: int, m: Affine,
                count: int, tag: int, acc) -> list:
    """One input channel's multiply-adds of a block: per tap, the inputs under it, then each
    channel's weight times them."""
    c = Affine.var("c")
    stmts = []
    for ky in kys:
        iy = row * l.sh + (ky - l.ph)
        for kx in taps:
            xs = []
            for j in range(width):
                buf, at = _at(p, rings, l.x, c, iy, (ox + j) * l.sw + (kx - l.pw))
                xs.append(f"x{tag}_{ky}_{kx}_{j}")
                stmts.append(Local(xs[-1], Load(buf, at)))
            for i in range(count):
                wv = f"w{tag}_{ky}_{kx}_{i}"
                stmts.append(Local(wv, Load(l.w, (((m + i) * l.cin + c) * (l.kh * l.kw) + (ky * l.kw + kx)).expr())))
                for j in range(width):
                    stmts.append(Assign(acc[i][j], Binary("+", Var(acc[i][j]), Binary("*", Var(wv), Var(xs[j])))))
    return stmts


__all__ = ["Layer", "Pipeline", "pipeline_kernel", "CHANNELS", "POSITIONS"]
