"""A bounded exact search for the smallest placement, for graphs small enough to afford it.

Any placement can be pushed down until every buffer sits at offset 0 or right on top of a buffer
it interferes with, without growing. Listing the buffers of such a placement by offset, each one
sits at 0 or on the end of one listed before it. So a search that places buffers in increasing
offset order, each at 0 or at the end of a placed neighbour, reaches an optimal placement; it
stops early at a node budget (then the best placement found so far stands).
"""
from __future__ import annotations

from typing import Sequence

from codegen.planners import Lifetime, peak

NODE_BUDGET = 4000  # search nodes, each costing about buffers x neighbours steps
MAX_BUFFERS = 48  # beyond this a node costs too much for the budget to keep planning quick


class _OutOfBudget(Exception):
    pass


def exact_search(lives: Sequence[Lifetime], upper: int, budget: int = NODE_BUDGET) -> dict[str, int] | None:
    """Offsets needing fewer than `upper` bytes, the fewest found within `budget` search nodes;
    None when none was found."""
    floor = peak(lives)
    if upper <= floor or len(lives) > MAX_BUFFERS or any(l.parts for l in lives):  # groups: greedy only
        return None
    # larger buffers first among equal offsets: the same order the search lists its choices in
    bufs = sorted(lives, key=lambda l: (-l.nbytes, l.first, l.value))
    n = len(bufs)
    size = [b.nbytes for b in bufs]
    neighbours = [[j for j in range(n) if j != i and bufs[j].overlaps(bufs[i])] for i in range(n)]
    clusters = sorted({c for b in bufs for c in range(b.first, b.last + 1)})
    index = {c: k for k, c in enumerate(clusters)}
    spans = [[index[c] for c in range(b.first, b.last + 1)] for b in bufs]
    unplaced_bytes = [0] * len(clusters)  # per cluster: bytes of buffers still to place there
    for i in range(n):
        for k in spans[i]:
            unplaced_bytes[k] += size[i]
    offset: list[int | None] = [None] * n
    best = [upper, None]
    nodes = [0]

    def place(i: int, o: int | None) -> None:
        sign = -1 if o is not None else 1
        offset[i] = o
        for k in spans[i]:
            unplaced_bytes[k] += sign * size[i]

    def search(last: tuple[int, int], height: int, left: int) -> None:
        nodes[0] += 1
        if nodes[0] > budget:
            raise _OutOfBudget
        if left == 0:
            best[0], best[1] = height, list(offset)
            return
        # every buffer still to place goes at or above the last offset, those of one cluster stacked
        # in what placed buffers leave free there
        above = [0] * len(clusters)
        for j in range(n):
            if offset[j] is not None and offset[j] + size[j] > last[0]:
                for k in spans[j]:
                    above[k] += offset[j] + size[j] - max(offset[j], last[0])
        if max(height, last[0] + max(u + a for u, a in zip(unplaced_bytes, above))) >= best[0]:
            return
        choices = []
        for i in range(n):
            if offset[i] is not None:
                continue
            taken = [(offset[j], size[j]) for j in neighbours[i] if offset[j] is not None]
            for o in {0} | {po + ps for po, ps in taken}:
                if (o, i) > last and o + size[i] < best[0] and \
                        all(o + size[i] <= po or po + ps <= o for po, ps in taken):
                    choices.append((o, i))
        for o, i in sorted(choices):
            place(i, o)
            search((o, i), max(height, o + size[i]), left - 1)
            place(i, None)
            if best[0] <= floor:
                return

    try:
        search((-1, -1), 0, n)
    except _OutOfBudget:
        pass
    if best[1] is None:
        return None
    return {b.value: o for b, o in zip(bufs, best[1])}
