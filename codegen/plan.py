"""Stage 5, plan memory: workspace offsets for intermediate values, from their lifetimes.

A value lives from the cluster that writes it to the last cluster that reads it,
inclusive; because a cluster's nodes may run in parallel, two values whose lifetimes
share a cluster never share bytes, with two exceptions: an elementwise node may write its
output over an input that dies at that node (in place), since its kernel reads element i
before it writes element i; and any kernel may write its output over part of an input that dies
at it where its access order, traced from its loop IR, reads every byte first (overlaps:
tinsmith.planners.overlap, docs/MEMORY.md). Values whose lifetimes do not overlap may share bytes.
Offsets are 16-byte aligned. Inputs and outputs belong to the caller, constants to flash.

Several planners (tinsmith.planners) place the buffers; the smallest plan wins.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Collection, Mapping, Sequence

from tinsmith.generate.functors.elementwise import BINARY_FORMULAS, UNARY_FORMULAS
from tinsmith.ir import Graph
from tinsmith.planners import PLANNERS, Lifetime, exact_search, peak, top
from tinsmith.planners import scratch_name  # noqa: F401  (re-exported: the plan's names of scratch buffers)
from tinsmith.schedule import Schedule

if TYPE_CHECKING:
    from tinsmith.planners.overlap import OverlapOption

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

    Values written in place (`in_place`: (output, input it overwrites) pairs, proven elementwise on
    the loop IR) or over part of an input (`overlaps`: (output, input, byte offset of the output
    from the input), proven on the kernel's access order) share bytes with that input; `variants`
    names the kernels (kernel, variant) that run an in-place variant of their functor to allow it.
    `lower_bound_bytes` is the most bytes alive in one cluster at the plan's granularity: a group
    of shared buffers counts the bytes its members alive there span, so no placement needs less.
    `operator_lower_bound_bytes` is the same count at operator granularity (every input and output
    of a kernel apart): what planning below the operator boundary is measured against.
    `in_place_lower_bound_bytes` is `lower_bound_bytes` (kept for its readers)."""

    placements: tuple[Placement, ...]
    workspace_bytes: int
    lower_bound_bytes: int
    planner: str = ""
    in_place: tuple[tuple[str, str], ...] = ()
    in_place_lower_bound_bytes: int = 0
    overlaps: tuple[tuple[str, str, int], ...] = ()
    variants: tuple[tuple[str, str], ...] = ()
    operator_lower_bound_bytes: int = 0

    def offset_of(self) -> dict[str, int]:
        return {p.lifetime.value: p.offset for p in self.placements}

    def in_place_of(self) -> dict[str, str]:
        """Map each value written in place to the input whose bytes it takes over."""
        return dict(self.in_place)

    def overlap_of(self) -> dict[str, str]:
        """Map each value written over part of an input to that input."""
        return {out: v for out, v, _ in self.overlaps}

    def variant_of(self) -> dict[str, str]:
        """The in-place variant each kernel runs, by kernel name."""
        return dict(self.variants)


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


def _buffers(lives: list[Lifetime], links: Mapping[str, tuple[str, int]]
             ) -> tuple[list[Lifetime], dict[str, str], dict[str, int]]:
    """One buffer per chain of shared bytes (`links`: output -> (input, byte offset of the output
    from the input)), named after the chain's first value, spanning every member's bytes and living
    from its first write to its last read, its members (`Lifetime.parts`) each alive in its own
    clusters; the buffer of every value and its offset in the buffer."""
    life = {l.value: l for l in lives}
    root, rel = {}, {}
    for l in lives:
        v, offset = l.value, 0
        while v in links:
            v, shift = links[v]
            offset += shift
        root[l.value], rel[l.value] = v, offset
    low: dict[str, int] = {}
    for l in lives:
        low[root[l.value]] = min(low.get(root[l.value], 0), rel[l.value])
    last: dict[str, int] = {}
    high: dict[str, int] = {}
    for l in lives:
        r = root[l.value]
        rel[l.value] -= low[r]
        last[r] = max(last.get(r, -1), l.last)
        high[r] = max(high.get(r, 0), rel[l.value] + l.nbytes)
    members: dict[str, list[tuple[int, int, int, int]]] = {}
    for l in lives:
        members.setdefault(root[l.value], []).append((rel[l.value], l.nbytes, l.first, l.last))
    buffers = [Lifetime(v, high[v], life[v].first, last[v],
                        tuple(sorted(members[v])) if len(members[v]) > 1 else ()) for v in life if root[v] == v]
    return buffers, root, rel


@functools.lru_cache(maxsize=256)
def _best(buffers: tuple[Lifetime, ...], floor: int) -> tuple[int, str, Mapping[str, int]]:
    """Size, planner name and offsets of the smallest placement; ties go to the earlier planner.
    `floor` is the buffers' peak. Kept for the next plan of the same buffers: the overlap search
    tries about half of its candidate plans on buffers it placed before (an option whose
    overlap another option already forces, say); the offsets are read-only."""
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


def _plan(lives: list[Lifetime], links: Mapping[str, tuple[str, int]],
          hopeless: Callable[[int], bool] | None = None):
    """Size, planner name, buffers and offsets of the best placement; None, without planning, when
    `hopeless(peak)` says a plan of at least that size is of no use to the caller."""
    buffers, root, rel = _buffers(lives, links)
    floor = peak(buffers)
    if hopeless is not None and hopeless(floor):
        return None
    size, name, offsets = _best(tuple(buffers), floor)
    return size, name, buffers, {l.value: offsets[root[l.value]] + rel[l.value] for l in lives}


def plan_memory(graph: Graph, sched: Schedule, in_place_ops: Collection[str] | None = None,
                scratch: Mapping[str, int] | None = None, overlaps: Sequence["OverlapOption"] | None = None
                ) -> MemoryPlan:
    """Place every workspace value with each planner, with and without in-place writes by
    `in_place_ops` (default: the elementwise ops); keep the smallest plan, in place on ties.
    `scratch` gives the bytes of each kernel's scratch buffers (by `scratch_name`); each lives in
    its kernel's cluster only. `overlaps` (tinsmith.planners.overlap.overlap_options) are the
    overlaps the kernels' access orders allow: given, the plan also tries them (and the in-place
    variants they need) and keeps them where they make the workspace smaller."""
    lives = lifetimes(graph, sched)
    cluster_of = sched.cluster_of()
    for name, nbytes in sorted((scratch or {}).items()):
        c = cluster_of[name.split(".", 1)[0]]
        lives.append(Lifetime(name, align(nbytes), c, c))
    pairs = in_place_pairs(graph, sched, elementwise_ops() if in_place_ops is None else in_place_ops)
    chosen = None
    for aliases in ([pairs, {}] if pairs else [{}]):
        size, name, buffers, offsets = _plan(lives, {o: (v, 0) for o, v in aliases.items()})
        if chosen is None or size < chosen[0]:
            chosen = (size, name, buffers, offsets, tuple(aliases.items()), ())
    if overlaps:
        found = choose_overlaps(lives, overlaps, cluster_of)
        if found is not None and found[0] < chosen[0]:
            chosen = found
    size, name, buffers, offsets, in_place, options = chosen
    variants = tuple(sorted({(o.kernel, o.variant) for o in options if o.variant}))
    with_variants = _with_variant_scratch(lives, options, cluster_of)
    placed = tuple(Placement(l, offsets[l.value]) for l in with_variants)
    return MemoryPlan(placed, size, peak(buffers), name, in_place, peak(buffers),
                      tuple((o.output, o.input, o.shift) for o in options), variants, lower_bound(lives))


def _with_variant_scratch(lives: list[Lifetime], options, cluster_of) -> list[Lifetime]:
    """The lifetimes with the scratch of each kernel running a variant replaced by the variant's."""
    varied = {o.kernel: o for o in options if o.variant}
    kept = [l for l in lives if "." not in l.value or l.value.split(".", 1)[0] not in varied]
    for kernel, o in sorted(varied.items()):
        c = cluster_of[kernel]
        kept += [Lifetime(name, align(nbytes), c, c) for name, nbytes in o.scratch]
    return kept


def choose_overlaps(lives: list[Lifetime], options, cluster_of):
    """The smallest plan found with some of the overlap `options`: each output starts with the
    option of smallest footprint, then each output in turn tries its other options and none, keeping
    what makes the workspace smaller. None when no option can be used."""
    nbytes = {l.value: l.nbytes for l in lives}
    by_output: dict[str, list] = {}
    for o in options:
        if o.output in nbytes and o.input in nbytes:
            by_output.setdefault(o.output, []).append(o)
    if not by_output:
        return None

    def cost(o) -> tuple:
        return (o.footprint(nbytes[o.input], nbytes[o.output]) + sum(align(n) for _, n in o.scratch),
                bool(o.variant), o.shift)

    def evaluate(choice: dict, to_beat: tuple[int, int] | None = None) -> tuple | None:
        """The plan with `choice`; None when it cannot rank below `to_beat`: no placement needs
        less than the peak, so a peak (with as many variants) not below it settles the question
        without running the planners (most of a large graph's trials end here)."""
        picked = [o for o in choice.values() if o is not None]
        lv = _with_variant_scratch(lives, picked, cluster_of)
        variants = sum(1 for o in picked if o.variant)
        planned = _plan(lv, {o.output: (o.input, o.shift) for o in picked},
                        None if to_beat is None else lambda floor: (floor, variants) >= to_beat)
        return None if planned is None else (*planned, (), tuple(picked))

    def rank(plan: tuple) -> tuple[int, int]:
        """Smaller first, then fewer variants: a variant is slower than the backend's kernel."""
        return plan[0], sum(1 for o in plan[5] if o.variant)

    choice = {out: min(opts, key=cost) for out, opts in sorted(by_output.items())}
    best = evaluate(choice)
    for out, opts in sorted(by_output.items()):
        for alternative in [*sorted((o for o in opts if not o.variant), key=cost), None,
                            *sorted((o for o in opts if o.variant), key=cost)]:
            if alternative is choice[out]:
                continue
            trial = evaluate({**choice, out: alternative}, rank(best))
            if trial is not None and rank(trial) < rank(best):
                best, choice = trial, {**choice, out: alternative}
    return best
