"""A bounded exact search for the smallest placement, for graphs small enough to afford it.

Any placement can be pushed down until every buffer sits at offset 0 or right on top of a buffer
it interferes with, without growing. Listing the buffers of such a placement by offset, each one
sits at 0 or on the end of one listed before it. So a search that places buffers in increasing
offset order, each at 0 or at the end of a placed neighbour, reaches an optimal placement; it
stops early at a node budget (then the best placement found so far stands).
"""
from __future__ import annotations

from typing import Sequence

from tinsmith.planners.lifetime import Lifetime, peak

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
    search = _Search(lives, upper, floor, budget)
    try:
        search.run((-1, -1), 0, len(search.bufs))
    except _OutOfBudget:
        pass
    if search.best_offsets is None:
        return None
    return {b.value: o for b, o in zip(search.bufs, search.best_offsets)}


class _Search:
    """The branch-and-bound state: buffers in search order, the offsets placed so far, the best found."""

    def __init__(self, lives: Sequence[Lifetime], upper: int, floor: int, budget: int):
        # larger buffers first among equal offsets: the same order the search lists its choices in
        self.bufs = bufs = sorted(lives, key=lambda l: (-l.nbytes, l.first, l.value))
        n = len(bufs)
        self.size = [b.nbytes for b in bufs]
        self.neighbours = [[j for j in range(n) if j != i and bufs[j].overlaps(bufs[i])] for i in range(n)]
        clusters = sorted({c for b in bufs for c in range(b.first, b.last + 1)})
        index = {c: k for k, c in enumerate(clusters)}
        self.spans = [[index[c] for c in range(b.first, b.last + 1)] for b in bufs]
        self.unplaced_bytes = [0] * len(clusters)  # per cluster: bytes of buffers still to place there
        for i in range(n):
            for k in self.spans[i]:
                self.unplaced_bytes[k] += self.size[i]
        self.offset: list[int | None] = [None] * n
        self.best, self.best_offsets = upper, None
        self.floor, self.budget, self.nodes = floor, budget, 0

    def place(self, i: int, o: int | None) -> None:
        sign = -1 if o is not None else 1
        self.offset[i] = o
        for k in self.spans[i]:
            self.unplaced_bytes[k] += sign * self.size[i]

    def bound(self, last: tuple[int, int], height: int) -> int:
        """No placement below this search node needs fewer bytes: every buffer still to place goes at or
        above the last offset, those of one cluster stacked in what placed buffers leave free there."""
        above = [0] * len(self.unplaced_bytes)
        for j, o in enumerate(self.offset):
            if o is not None and o + self.size[j] > last[0]:
                for k in self.spans[j]:
                    above[k] += o + self.size[j] - max(o, last[0])
        return max(height, last[0] + max(u + a for u, a in zip(self.unplaced_bytes, above)))

    def choices(self, last: tuple[int, int]) -> list[tuple[int, int]]:
        """(offset, buffer) pairs to try next, after `last`: each unplaced buffer at 0 or on the end of a
        placed neighbour, where it fits and stays below the best found."""
        found = []
        for i, placed in enumerate(self.offset):
            if placed is not None:
                continue
            taken = [(self.offset[j], self.size[j]) for j in self.neighbours[i] if self.offset[j] is not None]
            for o in {0} | {po + ps for po, ps in taken}:
                if (o, i) > last and o + self.size[i] < self.best and \
                        all(o + self.size[i] <= po or po + ps <= o for po, ps in taken):
                    found.append((o, i))
        return sorted(found)

    def run(self, last: tuple[int, int], height: int, left: int) -> None:
        self.nodes += 1
        if self.nodes > self.budget:
            raise _OutOfBudget
        if left == 0:
            self.best, self.best_offsets = height, list(self.offset)
            return
        if self.bound(last, height) >= self.best:
            return
        for o, i in self.choices(last):
            self.place(i, o)
            self.run((o, i), max(height, o + self.size[i]), left - 1)
            self.place(i, None)
            if self.best <= self.floor:
                return
