"""Stage 6, generate: the loop IR of every kernel the memory plan may choose among, built once per
compile before memory planning, then rendered with the plan.

`generate` selects the backend's functor for every kernel (a node and the consumers fused into it)
of the schedules the plan chooses between, and builds its loop IR, that of the in-place variant
that applies to it and that of each row pipeline; the memory planner reads their access order from
that loop IR (tinsmith.planners.overlap). `render_model` then renders the kernels the plan chose,
calling them with its offsets."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from tinsmith.errors import GenerateError
from tinsmith.generate import functors  # noqa: F401  (registers the C++ backend's functors)
from tinsmith.generate.backend import (CPP, PORTABLE_CAPS, Backend, Capabilities, KernelArgs, TensorArg, kernel_args,
                                      kernel_refusal, prepare_node)
from tinsmith.generate.epilogue import NotFusable, elementwise_template, fuse_epilogue
from tinsmith.generate.functors import inplace  # noqa: F401  (registers its variant)
from tinsmith.generate.functors.variants import applicable_variants, variant_functor
from tinsmith.generate.functors.row_pipeline import Pipeline, pipeline_kernel
from tinsmith.generate.loop_ir import (Comment, For, If, Kernel, Load, Param, Scratch, Stmt, Store, annotate,
                                      walk_exprs, walk_stmts)
from tinsmith.generate.parallel import SPLIT_WORK, render_parts, split_chains, split_groups
from tinsmith.generate.render import STORAGE_NAMES, TYPE_NAMES
from tinsmith.generate.simplify import simplify
from tinsmith.ir import Constant, Graph, Node
from tinsmith.ir.graph import DTYPES
from tinsmith.ops import PRIMITIVES, InferArgs
from tinsmith.planners.lifetime import scratch_name
from tinsmith.schedule import Schedule

if TYPE_CHECKING:
    from tinsmith.plan import MemoryPlan

ROW_PIPELINE = "row_pipeline"  # the variant a row pipeline's kernel runs as (MemoryPlan.variants)


@dataclass(frozen=True)
class KernelCode:
    """A generated kernel with what the call sequence and the report need to know of it."""

    node: Node
    cluster: int
    kernel: Kernel
    source: str
    call_args: tuple[str, ...]  # C++ argument expressions, in parameter order
    macs: int  # of the kernel: its node's and its fused nodes'
    fused: tuple[Node, ...] = ()  # nodes computed inside this kernel, in order
    node_macs: tuple[int, ...] = ()  # MACs of the node, then of each fused node
    parts_source: str = ""  # the kernel computing one part of its outputs (tinsmith.generate.parallel), if split

    @property
    def work(self) -> int:
        """Rough cost, for choosing what worker threads run: MACs plus elements stored."""
        return self.macs + sum(p.size for p in self.kernel.params if p.writes)


@dataclass(frozen=True)
class ConstantCode:
    name: str
    nbytes: int
    source: str  # C++ definition


@dataclass(frozen=True)
class GeneratedModel:
    """Everything assembly needs: the graph, its schedule and plan, kernels and constants."""

    graph: Graph
    schedule: Schedule
    plan: MemoryPlan
    kernels: tuple[KernelCode, ...]
    constants: tuple[ConstantCode, ...]
    prelude: str = ""  # C++ the kernels need before them (the backend renderer's vector helpers)
    threads: int = 1  # threads call() may run on: above 1, clusters run on the host's worker pool


def _touched(stmts: tuple[Stmt, ...], loads: set[str], stores: set[str]) -> None:
    stores.update(s.buffer for s in walk_stmts(stmts) if isinstance(s, Store))
    loads.update(e.buffer for e in walk_exprs(stmts) if isinstance(e, Load))


def _load_indices(e, buffer: str) -> list:
    found = [e.index] if isinstance(e, Load) and e.buffer == buffer else []
    if hasattr(e, "__dataclass_fields__"):
        for v in vars(e).values():
            found += _load_indices(v, buffer)
    return found


def _reads_only_where_it_writes(stmts: tuple[Stmt, ...], x: str, y: str) -> bool:
    """True when `x` is read only by stores to `y`, at the very index stored: then writing `y` over
    `x` is safe, element i being read just before it is overwritten (each stored once)."""
    for s in stmts:
        if isinstance(s, (For, If)):
            if not _reads_only_where_it_writes(s.body, x, y) or \
                    (isinstance(s, If) and _load_indices(s.cond, x)):
                return False
        elif isinstance(s, Store):
            indices = _load_indices(s.value, x) + _load_indices(s.index, x)
            if indices and (s.buffer != y or any(i != s.index for i in indices)):
                return False
        elif any(_load_indices(e, x) for e in vars(s).values()):
            return False
    return True


def _params(graph: Graph, node: Node, inputs: Sequence[str], outputs: Sequence[str], body: tuple[Stmt, ...],
            backend: str, scratch: frozenset[str]) -> tuple[Param, ...]:
    """Kernel parameters: the kernel's inputs the body reads, then the outputs it writes."""
    loads: set[str] = set()
    stores: set[str] = set()
    _touched(body, loads, stores)
    loads -= scratch
    stores -= scratch
    # A functor (maybe a user's) touching other tensors would give C++ that does not compile;
    # say which functor and which tensor instead.
    what = f"the {backend} functor for '{node.op}' (node '{node.name}')"
    written_elsewhere = sorted(stores - set(outputs))
    if written_elsewhere:
        raise GenerateError(node.loc, f"{what} writes '{written_elsewhere[0]}', which is not an output "
                            f"of the node")
    read_elsewhere = sorted(loads - set(inputs) - stores)
    if read_elsewhere:
        raise GenerateError(node.loc, f"{what} reads '{read_elsewhere[0]}', which is neither an input of "
                            f"the node nor an output the kernel writes")
    ordered = [v for v in dict.fromkeys(inputs) if v in loads and v not in stores]
    ordered += [v for v in outputs if v in stores]
    return tuple(Param(v, graph.types[v].dtype, graph.types[v].size, v in stores) for v in ordered)


def _call_arg(graph: Graph, plan_offsets: dict[str, int], value: str, dtype: str | None = None) -> str:
    if value in graph.constants:
        return f"constants::{value}"
    if value in plan_offsets:
        offset = plan_offsets[value]
        ctype = (STORAGE_NAMES.get(dtype) or TYPE_NAMES[dtype]) if dtype else graph.types[value].cpp_type
        return f"reinterpret_cast<{ctype}*>(ws{f' + {offset}' if offset else ''})"
    return value  # a graph input or output: the caller's pointer


def kernel_state_storage(kernel: str, buffer: Scratch) -> str:
    """The C++ name of a kept scratch buffer's static storage (assembly declares it, see kernel_states):
    one namespace per kernel, so that no kernel's buffer name meets another's or a value's."""
    return f"kernel_state::{kernel}::{buffer.name}"


@dataclass(frozen=True)
class KernelState:
    """A kernel's kept scratch buffer (loop_ir.Scratch.kept): static storage zeroed by reset_state()."""

    kernel: str
    buffer: str
    dtype: str
    ctype: str  # the C++ element type the kernel's parameter has
    size: int  # elements
    nbytes: int


def kernel_states(kernels: Sequence[KernelCode]) -> tuple[KernelState, ...]:
    """Every kernel's state buffer, in kernel order."""
    return tuple(KernelState(k.kernel.name, s.name, s.dtype, STORAGE_NAMES.get(s.dtype) or TYPE_NAMES[s.dtype],
                             s.size, s.size * DTYPES[s.dtype][0].itemsize)
                 for k in kernels for s in k.kernel.scratch if s.kept)


def _macs(graph: Graph, node: Node) -> int:
    prim = PRIMITIVES[node.op]
    args = InferArgs(tuple(graph.types[n] if n else None for n in node.inputs), node.attrs,
                     tuple(graph.constants[n].data if n in graph.constants else None for n in node.inputs))
    return int(prim.macs(args, [graph.types[o] for o in node.outputs]))


def _find(backend: Backend, graph: Graph, node: Node, caps: Capabilities, prepared=None):
    """The functor, traits and arguments for a node; `prepared`: the primitive's facts, when they
    come from the model's own layouts rather than from `graph`'s packed constants."""
    if prepared is None:
        args = kernel_args(graph, node, caps)
    else:
        args = KernelArgs(tuple(TensorArg(n, graph.types[n]) if n else None for n in node.inputs),
                          tuple(TensorArg(n, graph.types[n]) for n in node.outputs), prepared, caps)
    found = backend.lookup(node.op, args, node.attrs)
    if found is None:
        raise kernel_refusal(backend, node, args)
    return found[0], found[1], args


def scratch_bytes(graph: Graph, sched: Schedule, backend: Backend, caps: Capabilities = PORTABLE_CAPS
                  ) -> dict[str, int]:
    """Bytes of every kernel's scratch buffers, by plan name, as its functor declares them (no loop IR
    built): what plan_memory needs to place them, known before generation for the row-pipeline choice."""
    result = {}
    for node, _ in sched.kernel_heads():
        found = backend.lookup(node.op, kernel_args(graph, node, caps), node.attrs)
        if found is not None and found[1].scratch is not None:
            for buf in found[1].scratch(prepare_node(graph, node), caps):
                if buf.kept:
                    continue  # the kernel's state: static storage, not the workspace (see kernel_states)
                result[scratch_name(node.name, buf.name)] = buf.size * DTYPES[buf.dtype][0].itemsize \
                    if buf.dtype in DTYPES else buf.size * 4
    return result


# --- constants in the layout kernels ask for ------------------------------------------------------
Packing = Mapping[str, tuple[tuple[int, Constant], ...]]  # kernel head -> (input index, constant as packed)


def _packing(graph: Graph, heads: Sequence[Node], backend: Backend, caps: Capabilities) -> Packing:
    """The constants each kernel's functor asks to be packed (Traits.pack), in their new layout: named
    as the model's constant when only that node reads it, else after the node (a copy)."""
    readers = graph.consumers()
    result = {}
    for node in heads:
        found = backend.lookup(node.op, kernel_args(graph, node, caps), node.attrs)
        if found is None or found[1].pack is None:
            continue
        packed = []
        for i, fn in found[1].pack(kernel_args(graph, node, caps), node.attrs).items():
            name = node.inputs[i]
            old = graph.constants[name]
            new_name = name if len(readers.get(name, [])) == 1 else f"{name}_{node.name}"
            packed.append((i, Constant(new_name, np.ascontiguousarray(fn(old.data)),
                                       f"{old.source}, packed for node '{node.name}'", old.loc)))
        result[node.name] = tuple(packed)
    return result


def packed_graph(graph: Graph, heads: Sequence[Node], packing: Packing, unpacked: frozenset[str] = frozenset()
                 ) -> Graph:
    """The graph with the constants of kernels `heads` (in this order) packed as `packing` says; kernels
    in `unpacked` (an in-place variant, a row pipeline) read the model's layouts."""
    constants, types, nodes = dict(graph.constants), dict(graph.types), list(graph.nodes)
    index_of = {n.name: i for i, n in enumerate(graph.nodes)}
    changed = False
    for node in heads:
        if node.name in unpacked or node.name not in packing:
            continue
        inputs = list(node.inputs)
        for i, constant in packing[node.name]:
            constants[constant.name] = constant
            types[constant.name] = constant.type
            inputs[i] = constant.name
            changed = True
        nodes[index_of[node.name]] = replace(node, inputs=tuple(inputs))
    if not changed:
        return graph
    return replace(graph, constants=constants, types=types, nodes=tuple(nodes))


# --- loop IR, before the plan ---------------------------------------------------------------------
@dataclass(frozen=True)
class BuiltKernel:
    """A kernel's loop IR before memory planning: simplified, its parameters read off its body. The
    order of its loads and stores is the access order the memory planner traces."""

    node: Node  # the kernel's head as its kernel reads it (constants packed, or in the model's layout)
    members: tuple[Node, ...]  # the nodes fused into it, in order
    outputs: tuple[str, ...]  # the values it stores
    kernel: Kernel


KernelKey = tuple[str, tuple[str, ...], str]  # (head, names of the fused nodes, variant: "" for the backend's)


@dataclass(frozen=True)
class Kernels:
    """Every kernel the memory plan may choose among, built once (`built`), and what rendering the
    chosen ones needs: the scheduled graph (constants in the model's layout), its packing, the backend."""

    graph: Graph
    backend: Backend
    caps: Capabilities
    packing: Packing
    variants: Mapping[str, str]  # kernel head -> the in-place variant that applies to it
    built: Mapping[KernelKey, BuiltKernel]

    def kernel(self, sched: Schedule, head: str, variant: str = "") -> BuiltKernel:
        """The kernel `head` of `sched` running `variant` (the backend's functor: "")."""
        return self.built[(head, tuple(dict(sched.fused).get(head, ())), variant)]

    def variant_of(self, sched: Schedule, head: str) -> str:
        """The variant kernel `head` of `sched` always runs: its row pipeline, else the backend's ("")."""
        return ROW_PIPELINE if (head, tuple(dict(sched.fused).get(head, ())), ROW_PIPELINE) in self.built else ""


@dataclass(frozen=True)
class _Build:
    """What building a kernel reads: the graph as its kernel reads it, the scheduled graph, the backend."""

    graph: Graph
    original: Graph
    backend: Backend
    caps: Capabilities
    node_ids: Mapping[str, int]  # the position of every node in both graphs (packing keeps it)
    fused_values: frozenset[str]  # values computed and consumed inside one kernel of the schedule


def generate(graph: Graph, schedules: Sequence[tuple[Schedule, Mapping[str, Pipeline]]], backend: Backend = CPP,
             caps: Capabilities = PORTABLE_CAPS) -> Kernels:
    """Select the backend's functor for every kernel of each schedule the plan may choose (with the row
    pipelines its kernels run, by head) and build its loop IR, and that of the in-place variant that
    applies to it: once per compile, before memory planning."""
    heads = list({n.name: n for s, _ in schedules for n, _ in s.kernel_heads()}.values())
    packing = _packing(graph, heads, backend, caps)
    variants = applicable_variants(graph, schedules[0][0], backend, caps)  # the others merge some of its kernels
    own_layout = frozenset(variants) | frozenset(h for _, pipes in schedules for h in pipes)
    node_ids = {node.name: i for i, node in enumerate(graph.nodes)}
    as_packed, as_given = packed_graph(graph, heads, packing), packed_graph(graph, heads, packing, own_layout)
    built: dict[KernelKey, BuiltKernel] = {}
    for sched, pipes in schedules:
        fused = sched.fused_values()
        packed = _Build(as_packed, graph, backend, caps, node_ids, fused)
        unpacked = _Build(as_given, graph, backend, caps, node_ids, fused)
        for head, cluster in sched.kernel_heads():
            members = tuple(dict(sched.fused).get(head.name, ()))
            choices = [(ROW_PIPELINE, unpacked)] if head.name in pipes else \
                [("", packed)] + ([(variants[head.name], unpacked)] if head.name in variants else [])
            for variant, build in choices:
                if (head.name, members, variant) not in built:
                    built[(head.name, members, variant)] = _build_kernel(build, head, members, cluster, variant,
                                                                         pipes.get(head.name))
    return Kernels(graph, backend, caps, packing, variants, built)


def _build_kernel(build: _Build, scheduled: Node, member_names: tuple[str, ...], cluster: int, variant: str,
                  pipeline: Pipeline | None) -> BuiltKernel:
    """One kernel's loop IR: its functor's (the backend's, an in-place variant's or a row pipeline's), the
    fused nodes as its epilogue, simplified, with the parameters its body reads and writes."""
    graph = build.graph
    node = graph.nodes[build.node_ids[scheduled.name]]  # with its packed constants
    functor, traits, args = _find(build.backend, graph, node, build.caps, prepare_node(build.original, scheduled))
    if variant and pipeline is None:
        functor, traits = variant_functor(variant)
    members = [graph.nodes[build.node_ids[m]] for m in member_names]
    if pipeline is not None:  # several convolutions row by row: their own kernel, no epilogues
        body = tuple(pipeline_kernel(pipeline))
        outputs = [v for n in [node] + members for v in n.outputs if v and v not in build.fused_values]
        scratch = tuple(pipeline.scratch())
    else:
        body = tuple(functor(graph, build.node_ids[node.name], cluster, args, node.attrs))
        body = _fuse_members(build, node, members, cluster, body)
        outputs = list(members[-1].outputs) if members else list(node.outputs)
        scratch = tuple(traits.scratch(args.prepared, build.caps)) if traits.scratch else ()
    if members:  # said first in the body: the doc line ends with the node's location
        body = (Comment("fused: " + ", ".join(f"{m.name} ({m.op}, {m.loc or 'generated'})"
                                              for m in members) + "; their inputs are never stored"),) + body
    inputs = [v for n in [node] + members for v in n.inputs if v and v not in build.fused_values]
    kernel = simplify(Kernel(node.name, (), body, "", scratch))
    # Parameters from the simplified body: a tensor simplification stopped reading would be an
    # unused parameter, a warning under -Wextra.
    kernel = replace(kernel, params=_params(graph, node, inputs, outputs, kernel.body, build.backend.name,
                                            frozenset(s.name for s in scratch)))
    # Typed: whoever reads the body before rendering (the overlap planner traces it) sees the width
    # of every value, a vector local's too (untyped, a store of one counts as one element).
    return BuiltKernel(node, tuple(members), tuple(outputs), annotate(kernel))


def _fuse_members(build: _Build, node: Node, members: Sequence[Node], cluster: int, body: tuple[Stmt, ...]
                  ) -> tuple[Stmt, ...]:
    """`body` with each fused node computed as an epilogue of the value it reads, in order."""
    if not members:
        return body
    graph = build.graph
    body = annotate(Kernel(node.name, (), body)).body  # fusion reads the width of the values stored
    serial = [0]
    value = node.outputs[0] if node.outputs else ""
    for m in members:
        m_fn, _, m_args = _find(build.backend, graph, m, build.caps)
        out = m.outputs[0]
        shape = graph.types[out].shape
        try:
            template = elementwise_template(m_fn(graph, build.node_ids[m.name], cluster, m_args, m.attrs), out, shape)
            contiguous = lambda u, shape=shape: (u in graph.types and graph.types[u].rank > 0
                                                 and graph.types[u].shape[-1] == shape[-1] and shape[-1] != 1)
            body = fuse_epilogue(body, value, out, shape, graph.types[value].dtype, template, contiguous, serial)
        except NotFusable as e:
            raise GenerateError(m.loc, f"cannot fuse node '{m.name}' ({m.op}) into the kernel of "
                                f"'{node.name}' ({node.op}): {e}",
                                "register the producer's functor without epilogue=True") from None
        value = out
    return body


# --- rendering, with the plan ----------------------------------------------------------------------
def render_model(kernels: Kernels, sched: Schedule, plan: MemoryPlan, constants_in_ram: bool = False,
                 with_constants: bool = True) -> GeneratedModel:
    """Render the kernels of `sched` that `plan` chose (the backend's functor, an in-place variant, a row
    pipeline) in schedule order with the plan's offsets, and the constants they read (unless not
    `with_constants`: checking the plan needs only the kernels)."""
    backend = kernels.backend
    variants = plan.variant_of()
    chosen = {n.name: kernels.variant_of(sched, n.name) or variants.get(n.name, "") for n, _ in sched.kernel_heads()}
    graph = packed_graph(kernels.graph, [n for n, _ in sched.kernel_heads()], kernels.packing,
                         frozenset(h for h, v in chosen.items() if v))
    codes = tuple(_render_kernel(kernels, graph, plan, node, cluster, kernels.kernel(sched, node.name, chosen[node.name]))
                  for node, cluster in sched.kernel_heads())
    if kernels.caps.threads > 1:
        split = split_chains([(k.kernel.name, k.work, bool(k.parts_source), {p.buffer for p in k.kernel.params if not p.writes},
                               {p.buffer for p in k.kernel.params if p.writes}) for k in codes])
        codes = tuple(k if k.kernel.name in split else replace(k, parts_source="") for k in codes)
    read = {p.buffer for k in codes for p in k.kernel.params}
    load = backend.loader()
    constants = tuple(ConstantCode(c.name, c.data.nbytes, load(c, constants_in_ram))
                      for name, c in graph.constants.items() if name in read and with_constants)
    return GeneratedModel(graph, sched, plan, codes, constants, backend.renderer.prelude([k.kernel for k in codes]),
                          kernels.caps.threads)


def _render_kernel(kernels: Kernels, graph: Graph, plan: MemoryPlan, scheduled: Node, cluster: int,
                   built: BuiltKernel) -> KernelCode:
    """One kernel as C++: in place or overlapping where the plan says so, called with the plan's offsets."""
    node, backend = built.node, kernels.backend
    where = f"{node.loc}" if node.loc else "generated"
    kernel = replace(built.kernel, doc=f"{node.name}: {node.op}, cluster {cluster}, from {where}")
    # An output the plan puts over its input: the two parameters point at the same bytes.
    over = {o: plan.in_place_of()[o] for o in built.outputs if o in plan.in_place_of()}
    # An output over part of an input, proven safe on the kernel's access order by the plan.
    partly = {o: plan.overlap_of()[o] for o in built.outputs if o in plan.overlap_of()}
    aliased = frozenset(over) | frozenset(over.values()) | frozenset(partly) | frozenset(partly.values())
    for o, v in over.items():  # the plan goes by op; a user's functor may not be elementwise
        if not _reads_only_where_it_writes(kernel.body, v, o):
            raise GenerateError(node.loc, f"the {backend.name} functor for '{node.op}' (node "
                                f"'{node.name}') reads '{v}' at elements other than the one it "
                                f"writes, so it cannot write '{o}' in place of '{v}'",
                                f"plan with plan_memory(..., in_place_ops=...) without '{node.op}'")
        kernel = replace(kernel, body=(Comment(f"in place: {o} takes over the bytes of {v}"),) + kernel.body)
    for o, v in partly.items():
        kernel = replace(kernel, body=(Comment(f"overlapping: {o} is written over part of {v}, each byte "
                                               f"after its last read"),) + kernel.body)
    offsets = plan.offset_of()  # (the body is typed: _build_kernel annotates it)
    call_args = tuple(_call_arg(graph, offsets, p.buffer) for p in kernel.params) + tuple(
        kernel_state_storage(kernel.name, s) if s.kept
        else _call_arg(graph, offsets, scratch_name(node.name, s.name), s.dtype) for s in kernel.scratch)
    node_macs = tuple(_macs(kernels.graph, n) for n in [scheduled, *built.members])
    code = KernelCode(node, cluster, kernel, backend.renderer.kernel(kernel, aliased, sum(node_macs)), call_args,
                      sum(node_macs), built.members, node_macs)
    if kernels.caps.threads > 1 and code.work >= SPLIT_WORK:
        # an output in place of an input, or over it at the same offset with elements of the same size: each
        # element of the input must be read by the part that writes it (split_groups checks); any other
        # overlap was proven safe for the kernel's own order only
        shifts = {out: shift for out, _, shift in plan.overlaps}
        same = {v: o for o, v in (over | partly).items()
                if not shifts.get(o) and DTYPES[graph.types[o].dtype][0].itemsize == DTYPES[graph.types[v].dtype][0].itemsize}
        other = {o: v for o, v in (over | partly).items() if v not in same}
        groups = split_groups(kernel, frozenset(other) | frozenset(other.values()), same)
        if groups:
            code = replace(code, parts_source=render_parts(backend.renderer, kernel, groups, aliased, code.macs))
    return code


__all__ = ["CPP", "ROW_PIPELINE", "Backend", "BuiltKernel", "Capabilities", "KernelArgs", "Kernels", "TensorArg",
           "GeneratedModel", "KernelCode", "KernelState", "kernel_states",
           "generate", "packed_graph", "render_model", "scratch_bytes"]
