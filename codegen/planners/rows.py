"""Row pipelines in the schedule: a run of convolution kernels that the plan may merge into one
kernel computing them row by row (tinsmith.generate.functors.row_pipeline), so that the values
passed between them live in ring buffers of a few rows instead of whole.

`pipeline_of` reads a pipeline off a schedule (a kernel whose fused nodes include convolutions);
`candidates` lists the runs of kernels that may become one; `with_pipeline` regroups a schedule
around one; `best_candidate` picks the run whose pipeline needs the least workspace, before the
kernels are generated (tinsmith.generate builds its kernel with the others); `plan_with_rows` plans
the schedule as it is and with that candidate, reading the generated kernels' access order, and
keeps the smaller workspace (the schedule as it is on ties: the pipeline's kernels are slower).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from tinsmith.generate import ROW_PIPELINE
from tinsmith.generate.backend import prepare_node
from tinsmith.generate.functors.row_pipeline import Layer, Pipeline
from tinsmith.ir import Graph, Node
from tinsmith.plan import MemoryPlan, plan_memory
from tinsmith.planners.lifetime import scratch_name
from tinsmith.planners.overlap import overlap_options
from tinsmith.schedule import Schedule

VARIANT = ROW_PIPELINE  # the name the plan gives a pipeline's kernel in MemoryPlan.variants


def _layer(graph: Graph, head: Node, members: list[Node]) -> Layer | None:
    """The layer of a kernel (a Conv head, then an optional Add and an optional Relu), or None."""
    if head.op != "Conv" or len(head.inputs) < 2 or head.inputs[1] not in graph.constants:
        return None
    x, w = head.inputs[0], head.inputs[1]
    b = head.inputs[2] if len(head.inputs) > 2 and head.inputs[2] else None
    if b is not None and b not in graph.constants:
        return None
    tx, ty = graph.types[x], graph.types[head.outputs[0]]
    if tx.rank != 4 or tx.shape[0] != 1 or tx.dtype != "float32" or ty.dtype != "float32":
        return None
    prepared = prepare_node(graph, head)
    wins = prepared["windows"]
    if prepared["group"] != 1 or len(wins) != 2 or any(v.dilation != 1 for v in wins):
        return None
    value, residual, relu = head.outputs[0], None, False
    for m in members:
        if m.op == "Add" and residual is None and not relu and len(m.inputs) == 2 and value in m.inputs:
            other = m.inputs[1] if m.inputs[0] == value else m.inputs[0]
            if other == value or graph.types.get(other) != graph.types[value] or other in graph.constants:
                return None
            residual = other
        elif m.op == "Relu" and not relu:
            relu = True
        else:
            return None
        value = m.outputs[0]
    hy, wy = wins
    return Layer(head.name, x, w, b, value, tx.shape[1], ty.shape[1], hy.in_size, wy.in_size, hy.out_size,
                 wy.out_size, hy.kernel, wy.kernel, hy.stride, wy.stride, hy.pad_begin, wy.pad_begin,
                 residual, relu)


def _pipeline(graph: Graph, kernels: list[tuple[Node, list[Node]]], readers_outside) -> Pipeline | None:
    layers = []
    for head, members in kernels:
        layer = _layer(graph, head, members)
        if layer is None:
            return None
        layers.append(layer)
    produced = {l.out for l in layers}
    if any(l.x not in produced for l in layers[1:]):
        return None  # every layer but the first reads rows the pipeline makes
    if any(not graph.is_intermediate(v) and not readers_outside(v) for v in produced):
        return None  # the caller's output read only inside: the generator would not store it
    stored = frozenset(v for v in produced if readers_outside(v) or not graph.is_intermediate(v))
    shapes = {}
    for l in layers:
        shapes[l.x] = (l.cin, l.hin, l.win)
        shapes[l.out] = (l.cout, l.hout, l.wout)
    if any(l.residual is not None and l.residual not in shapes for l in layers):
        return None  # a residual made before the run, other than its input: the kernel cannot read it
    return Pipeline(tuple(layers), stored, shapes)


def pipeline_of(graph: Graph, sched: Schedule, head: str) -> Pipeline | None:
    """The pipeline kernel `head` runs, if its fused nodes include convolutions."""
    by_name = {n.name: n for n in sched.nodes}
    members = [by_name[m] for m in dict(sched.fused).get(head, ())]
    if not any(m.op == "Conv" for m in members):
        return None
    groups: list[tuple[Node, list[Node]]] = [(by_name[head], [])]
    for m in members:
        if m.op == "Conv":
            groups.append((m, []))
        else:
            groups[-1][1].append(m)
    inside = {head} | {m.name for m in members}
    consumers = graph.consumers()
    outside = lambda v: any(graph.nodes[i].name not in inside for i in consumers.get(v, []))
    return _pipeline(graph, groups, outside)


def _kernels(sched: Schedule) -> list[tuple[Node, list[Node], int]]:
    by_name = {n.name: n for n in sched.nodes}
    fused = dict(sched.fused)
    return [(n, [by_name[m] for m in fused.get(n.name, ())], c) for n, c in sched.kernel_heads()]


def candidates(graph: Graph, sched: Schedule) -> list[tuple[str, ...]]:
    """Runs of two or more consecutive kernels (by head) that one pipeline can compute: each a
    convolution layer, all but the first reading a value of the run, the inputs from outside it ready
    before the first runs."""
    kernels = _kernels(sched)
    producer_cluster = {v: c for n, ms, c in kernels for v in [*n.outputs, *(o for m in ms for o in m.outputs)]}
    found = []
    for i, (head, _, c0) in enumerate(kernels):
        if _layer(graph, head, kernels[i][1]) is None:
            continue
        made = {o for o in [*head.outputs, *(o for m in kernels[i][1] for o in m.outputs)]}
        for j in range(i + 1, len(kernels)):
            n, ms, _ = kernels[j]
            layer = _layer(graph, n, ms)
            if layer is None or layer.x not in made:
                break
            if layer.residual is not None and layer.residual not in made and \
                    producer_cluster.get(layer.residual, -1) >= c0:
                break
            made |= {o for o in [*n.outputs, *(o for m in ms for o in m.outputs)]}
            found.append(tuple(k[0].name for k in kernels[i:j + 1]))
    return found


def with_pipeline(sched: Schedule, heads: tuple[str, ...]) -> Schedule:
    """The schedule with the kernels `heads` merged into the first one's, clusters recomputed over
    kernels (a kernel runs one cluster after the last kernel it reads from)."""
    kernels = _kernels(sched)
    first = heads[0]
    merged: list[tuple[Node, list[Node]]] = []
    for n, ms, _ in kernels:
        if n.name == first:
            merged.append((n, list(ms)))
        elif n.name in heads:
            merged[[k[0].name for k in merged].index(first)][1].extend([n, *ms])
        else:
            merged.append((n, list(ms)))
    kernel_of_value = {}
    cluster = {}
    for n, ms in merged:
        reads = [v for x in [n, *ms] for v in x.inputs if v]
        cluster[n.name] = 1 + max((cluster[kernel_of_value[v]] for v in reads if v in kernel_of_value), default=-1)
        for x in [n, *ms]:
            for v in x.outputs:
                kernel_of_value[v] = n.name
    order = sorted(range(len(merged)), key=lambda i: (cluster[merged[i][0].name], i))
    nodes, clusters = [], []
    for i in order:
        n, ms = merged[i]
        nodes += [n, *ms]
        clusters += [cluster[n.name]] * (1 + len(ms))
    fused = tuple((n.name, tuple(m.name for m in ms)) for n, ms in (merged[i] for i in order) if ms)
    return replace(sched, nodes=tuple(nodes), clusters=tuple(clusters), fused=fused)


@dataclass(frozen=True)
class RowCandidate:
    """The schedule with the kernels `heads` merged into one row pipeline, and the workspace a plan
    without overlaps gives it (`quick_bytes`) with `scratch`, its kernels' scratch and the rings."""

    heads: tuple[str, ...]
    schedule: Schedule
    pipeline: Pipeline
    scratch: dict[str, int]
    quick_bytes: int


def best_candidate(graph: Graph, sched: Schedule, scratch: Mapping[str, int]) -> RowCandidate | None:
    """The run of kernels whose pipeline gives the smallest workspace planned without overlaps (the
    shorter run on ties), from the scratch bytes the kernels of `sched` declare (by plan name)."""
    best = None
    for heads in candidates(graph, sched):
        s = with_pipeline(sched, heads)
        pipe = pipeline_of(graph, s, heads[0])
        if pipe is None:
            continue
        kept = {h.name for h, _ in s.kernel_heads()} - {heads[0]}
        needs = {k: v for k, v in scratch.items() if k.split(".", 1)[0] in kept}
        needs |= {scratch_name(heads[0], r.name): r.size * 4 for r in pipe.scratch()}  # the rings
        trial = RowCandidate(heads, s, pipe, needs, plan_memory(graph, s, scratch=needs).workspace_bytes)
        if best is None or (trial.quick_bytes, len(heads)) < (best.quick_bytes, len(best.heads)):
            best = trial
    return best


def schedules_to_generate(sched: Schedule, candidate: RowCandidate | None) -> list[tuple[Schedule, dict]]:
    """The schedules the plan chooses between, each with the row pipelines its kernels run: what
    tinsmith.generate builds kernels for."""
    return [(sched, {})] + ([(candidate.schedule, {candidate.heads[0]: candidate.pipeline})] if candidate else [])


def plan_with_rows(graph: Graph, sched: Schedule, kernels, scratch: Mapping[str, int],
                   candidate: RowCandidate | None, always: bool = False) -> tuple[Schedule, MemoryPlan]:
    """(schedule, plan): the schedule as it is, or with the `candidate` pipeline where that makes the
    workspace smaller; each planned with the overlaps its kernels (tinsmith.generate.Kernels) allow.
    `always`: take the pipeline even where it saves nothing (tests run the kernel on shapes too small
    to gain)."""
    best = plan_memory(graph, sched, scratch=scratch, overlaps=overlap_options(graph, sched, kernels))
    if candidate is None or (candidate.quick_bytes >= best.workspace_bytes and not always):
        return sched, best
    s = candidate.schedule
    plan = plan_memory(graph, s, scratch=candidate.scratch, overlaps=overlap_options(graph, s, kernels))
    if plan.workspace_bytes >= best.workspace_bytes and not always:
        return sched, best
    # the operator-granularity figure stays the schedule's own: what the pipeline is measured against
    return s, replace(plan, variants=tuple(sorted({*plan.variants, (candidate.heads[0], VARIANT)})),
                      operator_lower_bound_bytes=best.operator_lower_bound_bytes)


def pipeline_report(graph: Graph, sched: Schedule) -> list[dict]:
    """What the report says of each row pipeline: its layers, its rings, and the MACs it computes
    more than the layers apart would (none: every row is computed once, rings keep the rows still
    needed instead of recomputing them)."""
    found = []
    for head, _ in sched.kernel_heads():
        p = pipeline_of(graph, sched, head.name)
        if p is None:
            continue
        rings = p.ring_rows()
        found.append({"kernel": head.name, "layers": [l.name for l in p.layers],
                      "stored": sorted(p.stored),
                      "rings": [{"value": v, "rows": n, "bytes": n * p.shapes[v][0] * p.shapes[v][2] * 4}
                                for v, n in sorted(rings.items())],
                      "steps": len(p.steps()), "recomputed_macs": 0})
    return found


__all__ = ["VARIANT", "RowCandidate", "best_candidate", "candidates", "pipeline_report", "pipeline_of", "plan_with_rows",
           "schedules_to_generate", "with_pipeline"]
