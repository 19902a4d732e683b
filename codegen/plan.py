"""Stage 5, plan memory: workspace offsets for intermediate values, from their lifetimes.

A value lives from the cluster that writes it to the last cluster that reads it,
inclusive; because a cluster's nodes may run in parallel, two values whose lifetimes
share a cluster never share bytes, with one exception: an elementwise node may write its
output over an input that dies at that node (in place), since its kernel reads element i
before it writes element i. Values whose lifetimes do not overlap may share bytes.
Offsets are 16-byte aligned. Inputs and outputs belong to the caller, constants to flash.

Several planners (codegen.planners) place the buffers; the smallest plan wins.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Mapping

from codegen.ir import Graph
from codegen.planners import PLANNERS, Lifetime, exact_search, peak, top
from codegen.schedule import Schedule

ALIGNMENT = 16
EXACT_SEARCH = "exact_search"  # the planner name when the bounded search beat every greedy planner


def align(n: int) -> int:
    """Round up to the workspace alignment."""
    return -(-n // ALIGNMENT) * ALIGNMENT


@dataclass(frozen=True)
class Placement:
    lifetime: Lifetime
    offset: int


@dataclass(frozen=True)
class MemoryPlan:
    """Where each intermediate lives in the workspace, and how big the workspace is.

    `lower_bound_bytes` is the most bytes of values alive in one cluster; values written in place
    (`in_place`: (output, input it overwrites) pairs) share bytes, so the workspace may be smaller,
    down to `in_place_lower_bound_bytes`, the same count with each such pair counted once."""

    placements: tuple[Placement, ...]
    workspace_bytes: int
    lower_bound_bytes: int
    planner: str = ""
    in_place: tuple[tuple[str, str], ...] = ()
    in_place_lower_bound_bytes: int = 0

    def offset_of(self) -> dict[str, int]:
        return {p.lifetime.value: p.offset for p in self.placements}

    def in_place_of(self) -> dict[str, str]:
        """Map each value written in place to the input whose bytes it takes over."""
        return dict(self.in_place)


def lifetimes(graph: Graph, sched: Schedule) -> list[Lifetime]:
    """Lifetime of every value that needs workspace, in schedule order of first write."""
    cluster_of = sched.cluster_of()
    fused = sched.fused_values()  # computed and consumed inside one kernel: no bytes at all
    last_read: dict[str, int] = {}
    for node in sched.nodes:
        for v in node.inputs:
            if v:
                last_read[v] = max(last_read.get(v, -1), cluster_of[node.name])
    result = []
    for node in sched.nodes:
        for v in node.outputs:
            if v and graph.is_intermediate(v) and v not in fused:
                first = cluster_of[node.name]
                result.append(Lifetime(v, align(graph.types[v].nbytes), first,
                                       max(first, last_read.get(v, first))))
    return result


def lower_bound(lives: list[Lifetime]) -> int:
    """The most bytes alive in any one cluster: no plan without in-place writes can use less."""
    return peak(lives)


def elementwise_ops() -> frozenset[str]:
    """Ops whose C++ kernels may write in place: one loop storing y[i] after loading x[i]."""
    # Imported here: the generator imports this module, so a module-level import would be circular.
    from codegen.generate.functors.elementwise import BINARY_FORMULAS, UNARY_FORMULAS
    return frozenset(UNARY_FORMULAS) | frozenset(BINARY_FORMULAS)


def in_place_pairs(graph: Graph, sched: Schedule, ops: Collection[str]) -> dict[str, str]:
    """Output -> input each node of `ops` may write over: the first input that is a workspace value
    of the output's type, dies at that node, and is read by no other node of its cluster (they may
    run at the same time)."""
    cluster_of = sched.cluster_of()
    readers: dict[str, list[str]] = {}
    for node in sched.nodes:
        for v in dict.fromkeys(node.inputs):
            if v:
                readers.setdefault(v, []).append(node.name)
    produced = {v for node in sched.nodes for v in node.outputs}
    in_fused_kernels = set(sched.fused_into()) | {head for head, _ in sched.fused}
    pairs: dict[str, str] = {}
    for node in sched.nodes:
        if node.name in in_fused_kernels:
            continue  # a fused kernel's element order is its head's, not one elementwise loop
        if node.op not in ops or len(node.outputs) != 1 or not graph.is_intermediate(node.outputs[0]):
            continue
        out, c = node.outputs[0], cluster_of[node.name]
        for v in dict.fromkeys(node.inputs):
            if (v in produced and graph.is_intermediate(v) and graph.types[v] == graph.types[out]
                    and all(cluster_of[r] < c or r == node.name for r in readers[v])):
                pairs[out] = v
                break
    return pairs


def _buffers(lives: list[Lifetime], pairs: dict[str, str]) -> tuple[list[Lifetime], dict[str, str]]:
    """One buffer per chain of in-place writes, named after the chain's first value, living from its
    first write to its last read; and the buffer of every value."""
    life = {l.value: l for l in lives}
    root = {}
    for l in lives:
        v = l.value
        while v in pairs:
            v = pairs[v]
        root[l.value] = v
    last: dict[str, int] = {}
    for l in lives:
        last[root[l.value]] = max(last.get(root[l.value], -1), l.last)
    buffers = [Lifetime(v, life[v].nbytes, life[v].first, last[v]) for v in life if root[v] == v]
    return buffers, root


def _best(buffers: list[Lifetime]) -> tuple[int, str, dict[str, int]]:
    """Size, planner name and offsets of the smallest placement; ties go to the earlier planner."""
    floor = peak(buffers)
    best = None
    for name, planner in PLANNERS.items():
        offsets = planner(buffers)
        size = top(buffers, offsets)
        if best is None or size < best[0]:
            best = (size, name, offsets)
        if size <= floor:
            break  # optimal: no later planner can win the tie
    exact = exact_search(buffers, best[0])
    if exact is not None:
        best = (top(buffers, exact), EXACT_SEARCH, exact)
    return best


def scratch_name(kernel: str, buffer: str) -> str:
    """The plan's name for scratch buffer `buffer` of kernel `kernel` (never a value name: '.')."""
    return f"{kernel}.{buffer}"


def plan_memory(graph: Graph, sched: Schedule, in_place_ops: Collection[str] | None = None,
                scratch: Mapping[str, int] | None = None) -> MemoryPlan:
    """Place every workspace value with each planner, with and without in-place writes by
    `in_place_ops` (default: the elementwise ops); keep the smallest plan, in place on ties.
    `scratch` gives the bytes of each kernel's scratch buffers (by `scratch_name`); each lives in
    its kernel's cluster only."""
    lives = lifetimes(graph, sched)
    cluster_of = sched.cluster_of()
    for name, nbytes in sorted((scratch or {}).items()):
        c = cluster_of[name.split(".", 1)[0]]
        lives.append(Lifetime(name, align(nbytes), c, c))
    pairs = in_place_pairs(graph, sched, elementwise_ops() if in_place_ops is None else in_place_ops)
    chosen = None
    for aliases in ([pairs, {}] if pairs else [{}]):
        buffers, root = _buffers(lives, aliases)
        size, name, offsets = _best(buffers)
        if chosen is None or size < chosen[0]:
            chosen = (size, name, aliases, buffers, root, offsets)
    size, name, aliases, buffers, root, offsets = chosen
    placed = tuple(Placement(l, offsets[root[l.value]]) for l in lives)
    return MemoryPlan(placed, size, lower_bound(lives), name,
                      tuple((out, v) for out, v in aliases.items()), peak(buffers))
