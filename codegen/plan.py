"""Stage 5, plan memory: workspace offsets for intermediate values, from their lifetimes.

A value lives from the cluster that writes it to the last cluster that reads it,
inclusive; because a cluster's nodes may run in parallel, two values whose lifetimes
share a cluster never share bytes. Values whose lifetimes do not overlap may.
Offsets are 16-byte aligned. Inputs and outputs belong to the caller, constants to flash.
"""
from __future__ import annotations

from dataclasses import dataclass

from codegen.ir import Graph
from codegen.schedule import Schedule

ALIGNMENT = 16


def align(n: int) -> int:
    """Round up to the workspace alignment."""
    return -(-n // ALIGNMENT) * ALIGNMENT


@dataclass(frozen=True)
class Lifetime:
    """A workspace value: its size and first/last cluster (inclusive)."""

    value: str
    nbytes: int
    first: int
    last: int

    def overlaps(self, other: "Lifetime") -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True)
class Placement:
    lifetime: Lifetime
    offset: int


@dataclass(frozen=True)
class MemoryPlan:
    """Where each intermediate lives in the workspace, and how big the workspace is."""

    placements: tuple[Placement, ...]
    workspace_bytes: int
    lower_bound_bytes: int

    def offset_of(self) -> dict[str, int]:
        return {p.lifetime.value: p.offset for p in self.placements}


def lifetimes(graph: Graph, sched: Schedule) -> list[Lifetime]:
    """Lifetime of every value that needs workspace, in schedule order of first write."""
    cluster_of = sched.cluster_of()
    last_read: dict[str, int] = {}
    for node in sched.nodes:
        for v in node.inputs:
            if v:
                last_read[v] = max(last_read.get(v, -1), cluster_of[node.name])
    result = []
    for node in sched.nodes:
        for v in node.outputs:
            if v and graph.is_intermediate(v):
                first = cluster_of[node.name]
                result.append(Lifetime(v, align(graph.types[v].nbytes), first,
                                       max(first, last_read.get(v, first))))
    return result


def lower_bound(lives: list[Lifetime]) -> int:
    """The most bytes alive in any one cluster: no plan can use less."""
    clusters = {c for life in lives for c in range(life.first, life.last + 1)}
    return max((sum(l.nbytes for l in lives if l.first <= c <= l.last) for c in clusters), default=0)


def plan_memory(graph: Graph, sched: Schedule) -> MemoryPlan:
    """Greedy by size: place the largest values first, each at the lowest offset that is free
    for its whole lifetime."""
    lives = lifetimes(graph, sched)
    placed: list[Placement] = []
    for life in sorted(lives, key=lambda l: (-l.nbytes, l.first, l.value)):
        offset = 0
        for p in sorted((p for p in placed if p.lifetime.overlaps(life)), key=lambda p: p.offset):
            if offset + life.nbytes <= p.offset:
                break
            offset = max(offset, p.offset + p.lifetime.nbytes)
        placed.append(Placement(life, offset))
    order = {life.value: i for i, life in enumerate(lives)}
    placed.sort(key=lambda p: order[p.lifetime.value])
    size = max((p.offset + p.lifetime.nbytes for p in placed), default=0)
    return MemoryPlan(tuple(placed), size, lower_bound(lives))
