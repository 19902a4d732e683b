"""A layered drawing of the graph for the HTML report: one row per layer (the schedule's clusters,
with the graph's inputs above and its outputs below), boxes ordered within a row so edges cross
little, and edges routed around the boxes of the rows they skip.

The schedule already gives each box its row, so what is left of a Sugiyama layout is small: an
edge that skips rows gets a thin placeholder in each row it passes, rows are reordered a few
times by the mean position of their neighbours (barycentre), and each box is centred under the
boxes it reads from, pushed right where boxes would overlap. Only geometry comes out: numbers,
never names, so the page template decides what to write where.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

Id = Hashable


@dataclass(frozen=True)
class Box:
    """Something to draw in a row: its id, row, and size in pixels."""

    id: Id
    row: int
    width: float
    height: float


@dataclass(frozen=True)
class Placed:
    id: Id
    x: float  # left
    y: float  # top
    width: float
    height: float

    @property
    def cx(self) -> float:
        return self.x + self.width / 2

    @property
    def bottom(self) -> float:
        return self.y + self.height


@dataclass(frozen=True)
class Route:
    """An edge's path: SVG path data from the bottom of `src` to the top of `dst`."""

    src: Id
    dst: Id
    path: str


@dataclass(frozen=True)
class Layout:
    boxes: dict
    routes: tuple[Route, ...]
    rows: tuple[tuple[float, float], ...]  # (top, bottom) of each row, gaps excluded
    width: float
    height: float


_SWEEPS = 4


@dataclass(frozen=True)
class _Dummy:
    """Where an edge that skips rows passes through one of them."""

    edge: int
    row: int


def _order(rows: list[list[Id]], preds: dict, succs: dict) -> list[list[Id]]:
    """Rows reordered by the barycentre of each item's neighbours in the row above (down sweeps)
    and below (up sweeps); items without neighbours there keep their place."""
    for sweep in range(_SWEEPS):
        down = sweep % 2 == 0
        indices = range(1, len(rows)) if down else range(len(rows) - 2, -1, -1)
        for r in indices:
            ref = {item: i for i, item in enumerate(rows[r - 1 if down else r + 1])}
            def key(pair):
                i, item = pair
                near = [ref[n] for n in (preds if down else succs).get(item, ()) if n in ref]
                return sum(near) / len(near) if near else i
            rows[r] = [item for _, item in sorted(enumerate(rows[r]), key=key)]
    return rows


def _spread(items: list[Id], want: dict, size: dict, gap: float) -> dict:
    """Centres for one row's items, in order: each at its wanted centre where it has one, pushed
    right where it would overlap its left neighbour, then the row shifted so that on average the
    items sit where they want to be."""
    centre: dict = {}
    cursor = None
    for item in items:
        half = size[item] / 2
        lowest = -float("inf") if cursor is None else cursor + gap + half
        c = want.get(item)
        c = lowest if c is None else max(c, lowest)
        if c == -float("inf"):
            c = half
        centre[item] = c
        cursor = c + half
    wanted = [item for item in items if want.get(item) is not None]
    if wanted:
        shift = sum(want[i] - centre[i] for i in wanted) / len(wanted)
        centre = {i: c + shift for i, c in centre.items()}
    return centre


def _path(points: list[tuple[float, float]], straight: set[int]) -> str:
    """SVG path through `points`: straight where a segment's start index is in `straight` (inside
    a row the edge passes through), else a vertical S-curve."""
    (x0, y0), parts = points[0], []
    parts.append(f"M{x0:.1f},{y0:.1f}")
    for i in range(1, len(points)):
        (xa, ya), (xb, yb) = points[i - 1], points[i]
        if i - 1 in straight:
            parts.append(f"L{xb:.1f},{yb:.1f}")
        else:
            dy = (yb - ya) / 2
            parts.append(f"C{xa:.1f},{ya + dy:.1f} {xb:.1f},{yb - dy:.1f} {xb:.1f},{yb:.1f}")
    return " ".join(parts)


def layered_layout(boxes: Sequence[Box], edges: Sequence[tuple[Id, Id]], *, hgap: float = 24,
                   vgap: float = 34, margin: float = 12, lane: float = 10) -> Layout:
    """Place `boxes` (given in their preferred order within each row) and route `edges`
    (src, dst), which go from a row to a later one."""
    by_id = {b.id: b for b in boxes}
    nrows = max((b.row for b in boxes), default=-1) + 1
    rows: list[list[Id]] = [[] for _ in range(nrows)]
    for b in boxes:
        rows[b.row].append(b.id)
    size = {b.id: b.width for b in boxes}
    preds: dict = {}
    succs: dict = {}
    chains: list[list[Id]] = []
    for e, (src, dst) in enumerate(edges):
        chain = [src]
        for r in range(by_id[src].row + 1, by_id[dst].row):
            d = _Dummy(e, r)
            rows[r].append(d)
            size[d] = lane
            chain.append(d)
        chain.append(dst)
        chains.append(chain)
        for a, b in zip(chain, chain[1:]):
            preds.setdefault(b, []).append(a)
            succs.setdefault(a, []).append(b)
    rows = _order(rows, preds, succs)

    heights = [max((by_id[i].height for i in row if i in by_id), default=0) for row in rows]
    tops, y = [], margin
    for h in heights:
        tops.append(y)
        y += h + vgap
    centre: dict = {}
    for r, row in enumerate(rows):
        want = {}
        for item in row:
            above = [centre[p] for p in preds.get(item, ()) if p in centre]
            if above:
                want[item] = sum(above) / len(above)
        centre.update(_spread(row, want, size, hgap))
    # rows that read nothing (the graph's inputs) sit above what reads them
    for r in range(nrows - 2, -1, -1):
        if all(not preds.get(i) for i in rows[r]):
            want = {}
            for item in rows[r]:
                below = [centre[s] for s in succs.get(item, ()) if s in centre]
                if below:
                    want[item] = sum(below) / len(below)
            centre.update(_spread(rows[r], want, size, hgap))
    left = min((centre[i] - size[i] / 2 for row in rows for i in row), default=0)
    shift = margin - left
    placed = {}
    for r, row in enumerate(rows):
        for item in row:
            if item in by_id:
                b = by_id[item]
                placed[item] = Placed(item, centre[item] + shift - b.width / 2,
                                      tops[r] + (heights[r] - b.height) / 2, b.width, b.height)
    routes = []
    for chain in chains:
        src, dst = placed[chain[0]], placed[chain[-1]]
        points, straight = [(src.cx, src.bottom)], set()
        for d in chain[1:-1]:
            x = centre[d] + shift
            straight.add(len(points))
            points += [(x, tops[d.row]), (x, tops[d.row] + heights[d.row])]
        points.append((dst.cx, dst.y))
        routes.append(Route(chain[0], chain[-1], _path(points, straight)))
    width = max((centre[i] + shift + size[i] / 2 for row in rows for i in row), default=0) + margin
    height = (tops[-1] + heights[-1] + margin) if rows else 2 * margin
    return Layout(placed, tuple(routes), tuple((t, t + h) for t, h in zip(tops, heights)), width, height)
