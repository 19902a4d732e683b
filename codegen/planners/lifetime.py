"""Buffers with lifetimes, the measures of a placement, and the registry of offset planners: what
every planner of this package shares."""
from __future__ import annotations

import functools
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


@functools.lru_cache(maxsize=4096)
def _group_changes(parts: tuple[tuple[int, int, int, int], ...]) -> tuple[tuple[int, int], ...]:
    """(cluster, change) of the bytes a group's members span together: a constant between the
    clusters where members start or end. Kept for the groups the next candidate plan has too
    (the overlap search's plans differ in a few groups)."""
    changes, before = [], 0
    for c in sorted({f for _, _, f, _ in parts} | {e + 1 for _, _, _, e in parts}):
        spanned = _union_bytes([(o, o + n) for o, n, f, e in parts if f <= c <= e])
        changes.append((c, spanned - before))
        before = spanned
    return tuple(changes)


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
    counts the bytes its members alive there span together). Bytes alive change only where a
    buffer or a group's member starts or ends: one sweep over those points sums them (the planner
    asks this of every candidate plan). A sum rises only where a buffer or member starts (a
    member's end never widens its group's span), so the highest is at one of those points."""
    change: dict[int, int] = {}  # cluster -> bytes taken (+) or given back (-) there
    starts: set[int] = set()
    for l in lives:
        if not l.parts:
            change[l.first] = change.get(l.first, 0) + l.nbytes
            change[l.last + 1] = change.get(l.last + 1, 0) - l.nbytes
            starts.add(l.first)
            continue
        for c, delta in _group_changes(l.parts):
            change[c] = change.get(c, 0) + delta
        starts.update(f for _, _, f, _ in l.parts)
    most, alive = 0, 0
    for c in sorted(change):
        alive += change[c]
        if c in starts:
            most = max(most, alive)
    return most


def scratch_name(kernel: str, buffer: str) -> str:
    """The plan's name for scratch buffer `buffer` of kernel `kernel` (never a value name: '.')."""
    return f"{kernel}.{buffer}"

