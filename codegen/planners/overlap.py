"""Where a kernel's output may overlap an input that dies at it, from the kernel's access order.

Placing output y at byte offset `shift` from input x is safe when every byte of x that y covers is
read for the last time before y's first write to it (tinsmith.planners.access gives both times per
element). The smallest footprint max(x end, y end) - min(x start, y start) wins: a depthwise
convolution working channel by channel may put its output one channel block below its input, a
kernel reading x[i] just before writing y[i] exactly over it. Offsets are multiples of the
workspace alignment; the check itself is exact, element by element.

`overlap_options` asks this of every kernel of a schedule, for the backend's own functors and for
the in-place variants (tinsmith.generate.functors.inplace) that apply, which trade speed for a
smaller footprint, reading the loop IR generated for them before planning (tinsmith.generate.Kernels);
the memory plan picks among the options (tinsmith.plan).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tinsmith.ir import Graph
from tinsmith.planners.access import Access, Untraceable, itemsize as dtype_bytes, trace
from tinsmith.planners.lifetime import scratch_name
from tinsmith.schedule import Schedule

BLOCK = 16  # the workspace alignment: offsets are multiples of it


@dataclass(frozen=True)
class OverlapOption:
    """Kernel `kernel` may write `output` at `shift` bytes from the start of `input` (negative: below
    it), using its in-place `variant` ("" for the backend's own functor) whose scratch buffers need
    `scratch` bytes (by plan name)."""

    kernel: str
    output: str
    input: str
    shift: int
    variant: str = ""
    scratch: tuple[tuple[str, int], ...] = ()

    def footprint(self, in_bytes: int, out_bytes: int) -> int:
        return max(in_bytes, self.shift + out_bytes) - min(0, self.shift)


def _units(times: np.ndarray, itemsize: int, unit: int) -> np.ndarray:
    return np.repeat(times, itemsize // unit)


def safe_shift(read: Access, in_itemsize: int, write: Access, out_itemsize: int) -> int | None:
    """The byte offset of the output from the input (a multiple of BLOCK) with the smallest footprint
    at which no byte of the input is overwritten before its last read; None when every overlap is
    unsafe. Bytes are compared in units of the smaller common element size."""
    unit = math.gcd(in_itemsize, out_itemsize, BLOCK)
    last_read = _units(read.last_read, in_itemsize, unit)
    first_write = _units(write.first_write, out_itemsize, unit)
    n_in, n_out, step = last_read.size, first_write.size, BLOCK // unit
    in_span, out_span = -(-n_in // step) * step, -(-n_out // step) * step  # as the plan aligns them
    shifts = np.arange(-(out_span // step) + 1, in_span // step, dtype=np.int64) * step
    footprint = np.maximum(in_span, shifts + out_span) - np.minimum(0, shifts)
    order = np.lexsort((shifts, np.abs(shifts), footprint))
    shifts = shifts[order][footprint[order] < in_span + out_span]  # only overlaps that save bytes
    if shifts.size == 0 or n_out == 0:
        return None
    # a sample of output elements rejects most shifts at once; only the full comparison accepts one
    sample = np.unique(np.linspace(0, n_out - 1, 257).astype(np.int64))
    for chunk in range(0, shifts.size, 4096):  # (a bounded block of shifts at a time: large buffers)
        block = shifts[chunk:chunk + 4096]
        j = block[:, None] + sample[None, :]
        inside = (j >= 0) & (j < n_in)
        clash = inside & (first_write[sample][None, :] <= last_read[np.clip(j, 0, max(n_in - 1, 0))])
        for s in block[~clash.any(axis=1)].tolist():
            lo, hi = max(0, -s), min(n_out, n_in - s)
            if np.all(first_write[lo:hi] > last_read[lo + s:hi + s]):
                return s * unit
    return None


def kernel_options(kernel, output: str, inputs, itemsize, variant: str = "",
                   scratch: tuple[tuple[str, int], ...] = ()) -> list[OverlapOption]:
    """The options of one generated kernel: for each input in `inputs` (that dies at it) the safest
    smallest shift of `output`; none when the kernel cannot be traced."""
    try:
        t = trace(kernel)
    except Untraceable:
        return []
    options = []
    for v in inputs:
        if v in t.buffers and output in t.buffers:
            shift = safe_shift(t.buffers[v], itemsize[v], t.buffers[output], itemsize[output])
            if shift is not None:
                options.append(OverlapOption(kernel.name, output, v, shift, variant, scratch))
    return options


def dying_inputs(graph: Graph, sched: Schedule) -> dict[str, list[str]]:
    """Kernel head -> the workspace values it reads that die at it: read by no node of a later
    cluster and by no other kernel of its own cluster (kernels of one cluster may run together)."""
    cluster_of = sched.cluster_of()
    members = {head.name: [head.name, *dict(sched.fused).get(head.name, ())] for head, _ in sched.kernel_heads()}
    kernel_of = {m: head for head, ms in members.items() for m in ms}
    readers: dict[str, set[str]] = {}
    for node in sched.nodes:
        for v in node.inputs:
            if v:
                readers.setdefault(v, set()).add(node.name)
    produced = {v for node in sched.nodes for v in node.outputs}
    fused = sched.fused_values()
    result: dict[str, list[str]] = {}
    for head, ms in members.items():
        c = cluster_of[head]
        nodes = {n.name: n for n in sched.nodes}
        seen = []
        for m in ms:
            for v in nodes[m].inputs:
                if (v and v in produced and v not in fused and graph.is_intermediate(v) and v not in seen
                        and all(cluster_of[r] < c or kernel_of.get(r) == head for r in readers[v])):
                    seen.append(v)
        result[head] = seen
    return result


def overlap_options(graph, sched, kernels) -> list[OverlapOption]:
    """Every overlap the kernels of `sched` allow between their output and an input that dies at
    them, with the backend's functors (or the row pipelines `sched` runs), then with each in-place
    variant that applies, read off the loop IR generated for them (tinsmith.generate.Kernels)."""
    dying = dying_inputs(graph, sched)
    itemsize = {v: t.nbytes // max(t.size, 1) for v, t in graph.types.items()}
    heads = [n.name for n, _ in sched.kernel_heads() if n.name in dying]
    own = [(name, kernels.variant_of(sched, name), "") for name in heads]
    variants = [(name, kernels.variants[name], kernels.variants[name]) for name in heads
                if name in kernels.variants and not kernels.variant_of(sched, name)]
    options: list[OverlapOption] = []
    for name, variant, label in own + variants:
        k = kernels.kernel(sched, name, variant).kernel
        output = [p.buffer for p in k.params if p.writes]
        if len(output) != 1 or not graph.is_intermediate(output[0]):
            continue
        scratch = tuple((scratch_name(name, s.name), s.size * dtype_bytes(s.dtype)) for s in k.scratch)
        options += kernel_options(k, output[0], dying[name], itemsize, label, scratch)
    if kernels.caps.threads > 1:
        # parts of a kernel run at once on the worker pool: an output over its input at an offset is
        # safe only in the kernel's own order, one at the same offset when each element is read by
        # the part that writes it (tinsmith.generate.parallel); the others cost workspace instead
        options = [o for o in options if o.shift == 0]
    return options
