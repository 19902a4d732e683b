"""Buffers with lifetimes, the measures of a placement, and the registry of offset planners: what
every planner of this package shares."""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cached_property
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

    @cached_property
    def pieces(self) -> tuple[tuple[int, int, int, int], ...]:
        """(offset in the group, bytes, first, last cluster) of each member; one for a plain buffer."""
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
    counts the bytes its members alive there span together). A plain buffer adds its bytes at
    its first cluster and gives them back after its last, so one sweep over those points sums
    them; the sum is highest at some buffer's first cluster or where a group's members change
    (the planner asks this of every candidate plan: summing every buffer in every cluster was
    most of a large graph's planning time)."""
    change: dict[int, int] = {}  # cluster -> bytes plain buffers take (+) or give back (-) there
    grouped: dict[int, int] = {}  # cluster -> bytes the groups' members alive there span
    for l in lives:
        change.setdefault(l.first, 0)
        if not l.parts:
            change[l.first] += l.nbytes
            change[l.last + 1] = change.get(l.last + 1, 0) - l.nbytes
            continue
        for c in range(min(p[2] for p in l.parts), max(p[3] for p in l.parts) + 1):
            grouped[c] = grouped.get(c, 0) + _union_bytes([(o, o + n) for o, n, f, e in l.parts if f <= c <= e])
    spans = _merged(sorted((l.first, l.last) for l in lives))
    starts = [lo for lo, _ in spans]

    def in_some_lifetime(c: int) -> bool:
        i = bisect.bisect_right(starts, c) - 1
        return i >= 0 and c <= spans[i][1]
    candidates = {l.first for l in lives} | {c for c in grouped if in_some_lifetime(c)}
    most, alive = 0, 0
    for c in sorted(change.keys() | candidates):
        alive += change.get(c, 0)
        if c in candidates:
            most = max(most, alive + grouped.get(c, 0))
    return most


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted inclusive (first, last) spans merged where they overlap or touch."""
    out: list[tuple[int, int]] = []
    for lo, hi in spans:
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def scratch_name(kernel: str, buffer: str) -> str:
    """The plan's name for scratch buffer `buffer` of kernel `kernel` (never a value name: '.')."""
    return f"{kernel}.{buffer}"

