"""Buffers with lifetimes, the measures of a placement, and the registry of offset planners: what
every planner of this package shares."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass(frozen=True)
class Lifetime:
    """A workspace buffer: its size and first/last cluster (inclusive). A group of buffers kept at
    fixed offsets from each other (an output written over part of its input) is one Lifetime with
    `parts`: (offset in the group, bytes, first, last cluster) of each member, so that it holds
    only the bytes of the members alive in each cluster."""

    value: str
    nbytes: int
    first: int
    last: int
    parts: tuple[tuple[int, int, int, int], ...] = ()

    def overlaps(self, other: "Lifetime") -> bool:
        return self.first <= other.last and other.first <= self.last

    def pieces(self) -> tuple[tuple[int, int, int, int], ...]:
        return self.parts or ((0, self.nbytes, self.first, self.last),)


def _union_bytes(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for lo, hi in sorted(intervals):
        if end is None or lo >= end:
            total, end = total + hi - lo, hi
        elif hi > end:
            total, end = total + hi - end, hi
    return total


# lifetimes -> offset of every lifetime's value
Planner = Callable[[Sequence[Lifetime]], dict[str, int]]

PLANNERS: dict[str, Planner] = {}  # in tie-break order: on equal sizes the earlier one wins


def register(name: str) -> Callable[[Planner], Planner]:
    """Add a planner under `name`; registration order is the tie-break order."""
    def add(planner: Planner) -> Planner:
        if name in PLANNERS:
            raise ValueError(f"planner '{name}' is registered twice")
        PLANNERS[name] = planner
        return planner
    return add


def top(lives: Sequence[Lifetime], offsets: dict[str, int]) -> int:
    """The bytes a placement needs: the highest end of any buffer."""
    return max((offsets[l.value] + l.nbytes for l in lives), default=0)


def peak(lives: Sequence[Lifetime]) -> int:
    """The most bytes alive in any one cluster: no placement of these buffers needs less (a group
    counts the bytes its members alive there span together)."""
    clusters = {c for life in lives for c in range(life.first, life.last + 1)}

    def alive(l: Lifetime, c: int) -> int:
        if not l.parts:
            return l.nbytes if l.first <= c <= l.last else 0
        return _union_bytes([(o, o + n) for o, n, f, e in l.parts if f <= c <= e])
    return max((sum(alive(l, c) for l in lives) for c in clusters), default=0)


def scratch_name(kernel: str, buffer: str) -> str:
    """The plan's name for scratch buffer `buffer` of kernel `kernel` (never a value name: '.')."""
    return f"{kernel}.{buffer}"

