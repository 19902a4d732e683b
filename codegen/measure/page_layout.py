"""Where the boxes of the report page's graph go: laid out by Graphviz's `dot` (through the
`graphviz` package), one row per layer: the schedule's steps, with the graph's inputs above and
its outputs below.

Rows are `rank=same` groups chained in order by invisible edges, so `dot` keeps the schedule's
rows (the memory chart beside the graph lines up with them) and only decides the order within a
row and the routes of the edges. `dot` sees box sizes and made-up ids, never a name from the
model: nothing untrusted reaches its input. Only geometry comes out, so the page template decides
what to write where.

Without Graphviz's programs (or for graphs too large to lay out quickly) the boxes sit in their
rows in schedule order and edges are straight lines; the page says so.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Hashable, Sequence

Id = Hashable

POINTS_PER_INCH = 72  # dot's unit; one point is drawn as one pixel
MOST_DRAWN = 800      # more boxes than this are placed in rows without dot (its time grows fast)
# Above this many boxes dot's network simplex (placing ranks and x positions) runs a bounded
# number of passes per node (nslimit, nslimit1): unbounded, it took 20 s of CPU on an LSTM's 622
# boxes and minutes on a 3 MB landmark model, bounded 1 s; the layout stays deterministic and
# the pages of smaller graphs keep dot's full search.
BOUNDED_ABOVE = 100
SIMPLEX_PASSES = 2    # dot's nslimit and nslimit1: passes per node


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
    engine: str  # "dot", or "rows" when Graphviz did not lay it out


def layered_layout(boxes: Sequence[Box], edges: Sequence[tuple[Id, Id]], *, hgap: float = 24,
                   vgap: float = 34, margin: float = 12) -> Layout:
    """Place `boxes` (given in their preferred order within each row) and route `edges`
    (src, dst), which go from a row to a later one."""
    if len(boxes) <= MOST_DRAWN:
        try:
            return _dot_layout(boxes, edges, hgap, vgap, margin)
        except ImportError:
            pass  # the graphviz package is a dependency; a broken install still gets a page
        except Exception as e:  # graphviz.ExecutableNotFound, CalledProcessError: no usable dot
            if type(e).__module__.split(".")[0] != "graphviz":
                raise
    return _row_layout(boxes, edges, hgap, vgap, margin)


def _rows(boxes: Sequence[Box]) -> list[list[Box]]:
    rows: list[list[Box]] = [[] for _ in range(max((b.row for b in boxes), default=-1) + 1)]
    for b in boxes:
        rows[b.row].append(b)
    return rows


def _dot_source(boxes: Sequence[Box], edges: Sequence[tuple[Id, Id]], hgap: float, vgap: float) -> tuple[str, dict]:
    """The graph in dot's language, and the made-up id of each box."""
    ids = {b.id: f"b{i}" for i, b in enumerate(boxes)}
    inch = POINTS_PER_INCH
    bounded = f", nslimit={SIMPLEX_PASSES}, nslimit1={SIMPLEX_PASSES}" if len(boxes) > BOUNDED_ABOVE else ""
    lines = ["digraph layout {",
             f"  graph [rankdir=TB, nodesep={hgap / inch:.4f}, ranksep={vgap / inch:.4f}, splines=spline{bounded}];",
             '  node [shape=box, fixedsize=true, label=""];',
             "  edge [dir=none, tailport=s, headport=n];"]
    rows = _rows(boxes)
    for r, row in enumerate(rows):
        members = " ".join(f"{ids[b.id]} [width={b.width / inch:.4f}, height={b.height / inch:.4f}];" for b in row)
        lines.append(f"  {{ rank=same; r{r} [style=invis, width=0.01, height=0.01]; {members} }}")
    if len(rows) > 1:  # the rows' order: a chain of invisible anchors
        lines.append("  " + " -> ".join(f"r{r}" for r in range(len(rows))) + " [style=invis];")
    lines += [f"  {ids[s]} -> {ids[d]};" for s, d in edges]
    lines.append("}")
    return "\n".join(lines) + "\n", ids


def _points(text: str) -> list[tuple[float, float]]:
    return [tuple(float(c) for c in p.split(",")[:2]) for p in text.split() if not p.startswith(("s,", "e,"))]


def _dot_layout(boxes, edges, hgap, vgap, margin) -> Layout:
    import graphviz

    source, ids = _dot_source(boxes, edges, hgap, vgap)
    drawn = json.loads(graphviz.pipe("dot", "json", source.encode("ascii"), quiet=True))
    x0, y0, x1, y1 = (float(v) for v in drawn["bb"].split(","))

    def at(x: float, y: float) -> tuple[float, float]:  # dot's y grows upwards
        return x - x0 + margin, y1 - y + margin

    objects = {o["name"]: o for o in drawn.get("objects", []) if "pos" in o}
    placed = {}
    for b in boxes:
        cx, cy = at(*_points(objects[ids[b.id]]["pos"])[0])
        placed[b.id] = Placed(b.id, cx - b.width / 2, cy - b.height / 2, b.width, b.height)
    names = {o["_gvid"]: o["name"] for o in drawn.get("objects", [])}
    curves = {(names[e["tail"]], names[e["head"]]): e["pos"] for e in drawn.get("edges", []) if "pos" in e}
    routes = []
    for s, d in edges:
        pts = [at(*p) for p in _points(curves[(ids[s], ids[d])])]
        path = [f"M{pts[0][0]:.1f},{pts[0][1]:.1f}"]
        path += [f"C{a[0]:.1f},{a[1]:.1f} {b[0]:.1f},{b[1]:.1f} {c[0]:.1f},{c[1]:.1f}"
                 for a, b, c in zip(pts[1::3], pts[2::3], pts[3::3])]
        routes.append(Route(s, d, " ".join(path)))
    rows = tuple((min(placed[b.id].y for b in row), max(placed[b.id].bottom for b in row)) if row else (0.0, 0.0)
                 for row in _rows(boxes))
    return Layout(placed, tuple(routes), rows, x1 - x0 + 2 * margin, y1 - y0 + 2 * margin, "dot")


def _row_layout(boxes, edges, hgap, vgap, margin) -> Layout:
    """Each row's boxes side by side in the given order, rows one under another, edges straight."""
    placed, spans, y, width = {}, [], margin, 0.0
    for row in _rows(boxes):
        height = max((b.height for b in row), default=0.0)
        x = margin
        for b in row:
            placed[b.id] = Placed(b.id, x, y + (height - b.height) / 2, b.width, b.height)
            x += b.width + hgap
        width = max(width, x - hgap + margin)
        spans.append((y, y + height))
        y += height + vgap
    routes = tuple(Route(s, d, f"M{placed[s].cx:.1f},{placed[s].bottom:.1f} L{placed[d].cx:.1f},{placed[d].y:.1f}")
                   for s, d in edges)
    return Layout(placed, routes, tuple(spans), width, y - vgap + margin if spans else 2 * margin, "rows")
