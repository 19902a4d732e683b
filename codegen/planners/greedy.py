"""Greedy planners: buffers taken one at a time in some order, each put in a gap of the buffers
already placed that interfere with it. An order and a fit rule make a planner; every pair is
registered, first-fit before best-fit, in the order of ORDERS.
"""
from __future__ import annotations

from typing import Callable, Sequence

from tinsmith.planners.lifetime import Lifetime, register

OrderKey = Callable[[Lifetime], tuple]


def _by_size(lives: Sequence[Lifetime]) -> OrderKey:
    """tflite-micro's greedy planner (and the first Tinsmith plan): largest first."""
    return lambda l: (-l.nbytes, l.first, l.value)


def _by_first_use(lives: Sequence[Lifetime]) -> OrderKey:
    """ONE's FirstFit planner: in the order the buffers are claimed at run time."""
    return lambda l: (l.first, -l.nbytes, l.value)


def _by_interference(lives: Sequence[Lifetime]) -> OrderKey:
    """ONE's WIC planner (weighted interference colouring): largest first, and among equal sizes
    the buffer with the most interfering neighbours, the hardest to fit later."""
    degree = {l.value: sum(1 for m in lives if m is not l and m.overlaps(l)) for l in lives}
    return lambda l: (-l.nbytes, -degree[l.value], l.first, l.value)


def _by_conflict_weight(lives: Sequence[Lifetime]) -> OrderKey:
    """Colouring's most-constrained-first: the most bytes among a buffer and its neighbours."""
    weight = {l.value: sum(m.nbytes for m in lives if m.overlaps(l)) for l in lives}
    return lambda l: (-weight[l.value], -l.nbytes, l.first, l.value)


def _by_breadth(lives: Sequence[Lifetime]) -> OrderKey:
    """Greedy by breadth (Pisarchyk and Lee, 2020): the busiest cluster's buffers first, largest
    first within it, then the next busiest cluster's."""
    breadth: dict[int, int] = {}
    for l in lives:
        for c in range(l.first, l.last + 1):
            breadth[c] = breadth.get(c, 0) + l.nbytes
    busiest = {l.value: min(range(l.first, l.last + 1), key=lambda c: (-breadth[c], c)) for l in lives}
    return lambda l: (-breadth[busiest[l.value]], busiest[l.value], -l.nbytes, l.first, l.value)


def _by_duration(lives: Sequence[Lifetime]) -> OrderKey:
    """Longest-lived first: they constrain the most clusters."""
    return lambda l: (-(l.last - l.first), -l.nbytes, l.first, l.value)


ORDERS: dict[str, Callable[[Sequence[Lifetime]], OrderKey]] = {
    "size": _by_size, "first_use": _by_first_use, "interference": _by_interference,
    "conflict_weight": _by_conflict_weight, "breadth": _by_breadth, "duration": _by_duration,
}


def _gaps(nbytes: int, taken: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], int]:
    """Gaps of at least `nbytes` below the top of `taken` ((offset, size) sorted by offset), as
    (size, offset), and the top."""
    gaps, offset = [], 0
    for o, n in taken:
        if o - offset >= nbytes:
            gaps.append((o - offset, offset))
        offset = max(offset, o + n)
    return gaps, offset


def first_fit(nbytes: int, taken: list[tuple[int, int]]) -> int:
    """The lowest offset with room."""
    gaps, end = _gaps(nbytes, taken)
    return gaps[0][1] if gaps else end


def best_fit(nbytes: int, taken: list[tuple[int, int]]) -> int:
    """The smallest gap with room (the lowest among equals), else the top."""
    gaps, end = _gaps(nbytes, taken)
    return min(gaps)[1] if gaps else end


FITS = {"": first_fit, "_best_fit": best_fit}


def _blocked_offsets(life: Lifetime, near: Sequence[Lifetime], offsets: dict[str, int]) -> list[tuple[int, int]]:
    """The offsets `life` (a group) cannot take, as (start, length) intervals: those where one of its
    members would share bytes with a placed member alive in a common cluster."""
    blocked = []
    mine = life.pieces
    for p in near:
        base = offsets[p.value]
        for po, pn, pf, pl in p.pieces:
            for o, n, f, l in mine:
                if pf <= l and f <= pl:
                    blocked.append((base + po - o - n + 1, pn + n - 1))
    return sorted(blocked)


def greedy(order: Callable[[Sequence[Lifetime]], OrderKey],
           fit: Callable[[int, list[tuple[int, int]]], int]) -> Callable[[Sequence[Lifetime]], dict[str, int]]:
    """A planner placing buffers in `order`, each where `fit` says among those that interfere."""
    def plan(lives: Sequence[Lifetime]) -> dict[str, int]:
        offsets: dict[str, int] = {}
        placed: list[Lifetime] = []
        for life in sorted(lives, key=order(lives)):
            first, last = life.first, life.last
            near = [p for p in placed if p.first <= last and first <= p.last]  # p.overlaps(life), inlined
            if life.parts or any(p.parts for p in near):
                offsets[life.value] = fit(1, _blocked_offsets(life, near, offsets))
            else:
                offsets[life.value] = fit(life.nbytes, sorted((offsets[p.value], p.nbytes) for p in near))
            placed.append(life)
        return offsets
    return plan


for _fit_name, _fit in FITS.items():
    for _order_name, _order in ORDERS.items():
        register(f"greedy_by_{_order_name}{_fit_name}")(greedy(_order, _fit))
