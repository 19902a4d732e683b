"""Stage 6, generate: one kernel per scheduled kernel head (a node and the consumers fused into it),
through the backend's functors and the loop IR."""
from __future__ import annotations

from dataclasses import dataclass, replace

from codegen.errors import GenerateError
from codegen.generate import functors  # noqa: F401  (registers the C++ backend's functors)
from typing import Sequence

from codegen.generate.backend import (CPP, PORTABLE_CAPS, Backend, Capabilities, KernelArgs, TensorArg, kernel_args,
                                      kernel_refusal, prepare_node)
from codegen.generate.epilogue import NotFusable, elementwise_template, fuse_epilogue
from codegen.generate.functors.inplace import variant_functor
from codegen.generate.functors.row_pipeline import pipeline_kernel
from codegen.generate.loop_ir import Comment, For, Kernel, Load, Param, Stmt, Store, annotate
from codegen.generate.render import STORAGE_NAMES, TYPE_NAMES
from codegen.generate.simplify import simplify
import numpy as np

from codegen.ir import Constant, Graph, Node
from codegen.ir.graph import DTYPES
from codegen.ops import PRIMITIVES, InferArgs
from codegen.plan import MemoryPlan, scratch_name
from codegen.schedule import Schedule


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


def _touched(stmts: tuple[Stmt, ...], loads: set[str], stores: set[str]) -> None:
    for s in stmts:
        if isinstance(s, For):
            _touched(s.body, loads, stores)
        elif isinstance(s, Store):
            stores.add(s.buffer)
            _collect_loads(s.value, loads)
            _collect_loads(s.index, loads)
        else:
            for e in vars(s).values():
                _collect_loads(e, loads)


def _collect_loads(e, loads: set[str]) -> None:
    if isinstance(e, Load):
        loads.add(e.buffer)
    if hasattr(e, "__dataclass_fields__"):
        for v in vars(e).values():
            _collect_loads(v, loads)
    elif isinstance(e, tuple):  # an intrinsic Call's arguments
        for v in e:
            _collect_loads(v, loads)


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
        if isinstance(s, For):
            if not _reads_only_where_it_writes(s.body, x, y):
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
    """Bytes of every kernel's scratch buffers, by plan name: what plan_memory needs to place them."""
    result = {}
    for node, _ in sched.kernel_heads():
        found = backend.lookup(node.op, kernel_args(graph, node, caps), node.attrs)
        if found is not None and found[1].scratch is not None:
            for buf in found[1].scratch(prepare_node(graph, node), caps):
                result[scratch_name(node.name, buf.name)] = buf.size * DTYPES[buf.dtype][0].itemsize \
                    if buf.dtype in DTYPES else buf.size * 4
    return result


def _pack_constants(graph: Graph, sched: Schedule, backend: Backend, caps: Capabilities,
                    unpacked: frozenset[str] = frozenset()) -> Graph:
    """The graph with the constants kernels asked to be packed (Traits.pack) in their new layout: in
    place when only that node reads the constant, else as a copy named after the node. Kernels in
    `unpacked` (running an in-place variant) read the model's layouts."""
    readers = graph.consumers()
    constants, types, nodes = dict(graph.constants), dict(graph.types), list(graph.nodes)
    index_of = {n.name: i for i, n in enumerate(graph.nodes)}
    changed = False
    for node, _ in sched.kernel_heads():
        found = backend.lookup(node.op, kernel_args(graph, node, caps), node.attrs)
        if found is None or found[1].pack is None or node.name in unpacked:
            continue
        inputs = list(node.inputs)
        for i, fn in found[1].pack(kernel_args(graph, node, caps), node.attrs).items():
            name = inputs[i]
            old = graph.constants[name]
            new_name = name if len(readers.get(name, [])) == 1 else f"{name}_{node.name}"
            constants[new_name] = Constant(new_name, np.ascontiguousarray(fn(old.data)),
                                           f"{old.source}, packed for node '{node.name}'", old.loc)
            types[new_name] = constants[new_name].type
            inputs[i] = new_name
            changed = True
        nodes[index_of[node.name]] = replace(node, inputs=tuple(inputs))
    if not changed:
        return graph
    return replace(graph, constants=constants, types=types, nodes=tuple(nodes))


def generate(graph: Graph, sched: Schedule, plan: MemoryPlan, backend: Backend = CPP,
             constants_in_ram: bool = False, caps: Capabilities = PORTABLE_CAPS,
             with_constants: bool = True) -> GeneratedModel:
    """Call the backend's functor for every kernel (a node and the consumers fused into it) in schedule
    order, fuse, simplify and render (the constants too, unless not `with_constants`: the memory plan
    needs only the kernels)."""
    original = graph
    from codegen.planners.rows import pipeline_of  # here: the row planner uses this package (scratch_bytes)
    variants = plan.variant_of()  # kernels running an in-place variant of their functor
    pipelines = {n.name: p for n, _ in sched.kernel_heads() if (p := pipeline_of(graph, sched, n.name))}
    graph = _pack_constants(graph, sched, backend, caps, frozenset(variants) | frozenset(pipelines))
    node_ids = {node.name: i for i, node in enumerate(graph.nodes)}
    by_name = {node.name: node for node in graph.nodes}
    fused_members = dict(sched.fused)
    fused_values = sched.fused_values()
    offsets = plan.offset_of()
    in_place = plan.in_place_of()
    overlap = plan.overlap_of()
    kernels = []
    for scheduled, cluster in sched.kernel_heads():
        node = by_name[scheduled.name]  # with its packed constants
        functor, traits, args = _find(backend, graph, node, caps, prepare_node(original, scheduled))
        if node.name in variants and node.name not in pipelines:
            functor, traits = variant_functor(variants[node.name])
        where = f"{node.loc}" if node.loc else "generated"
        members = [by_name[m] for m in fused_members.get(node.name, ())]
        if node.name in pipelines:  # several convolutions row by row: their own kernel, no epilogues
            body = tuple(pipeline_kernel(pipelines[node.name]))
        else:
            body = tuple(functor(graph, node_ids[node.name], cluster, args, node.attrs))
        if members and node.name not in pipelines:  # fusion reads the width of the values stored
            body = annotate(Kernel(node.name, (), body)).body
        serial = [0]
        value = node.outputs[0] if node.outputs else ""
        for m in members if node.name not in pipelines else ():
            m_fn, _, m_args = _find(backend, graph, m, caps)
            out = m.outputs[0]
            shape = graph.types[out].shape
            try:
                template = elementwise_template(m_fn(graph, node_ids[m.name], cluster, m_args, m.attrs), out, shape)
                contiguous = lambda u, shape=shape: (u in graph.types and graph.types[u].rank > 0
                                                     and graph.types[u].shape[-1] == shape[-1] and shape[-1] != 1)
                body = fuse_epilogue(body, value, out, shape, graph.types[value].dtype, template, contiguous, serial)
            except NotFusable as e:
                raise GenerateError(m.loc, f"cannot fuse node '{m.name}' ({m.op}) into the kernel of "
                                    f"'{node.name}' ({node.op}): {e}",
                                    "register the producer's functor without epilogue=True") from None
            value = out
        inputs = [v for n in [node] + members for v in n.inputs if v and v not in fused_values]
        outputs = list(members[-1].outputs) if members else list(node.outputs)
        scratch = tuple(traits.scratch(args.prepared, caps)) if traits.scratch else ()
        if node.name in pipelines:
            outputs = [v for n in [node] + members for v in n.outputs if v and v not in fused_values]
            scratch = tuple(pipelines[node.name].scratch())
        doc = f"{node.name}: {node.op}, cluster {cluster}, from {where}"
        if members:  # said first in the body: the doc line ends with the node's location
            body = (Comment("fused: " + ", ".join(f"{m.name} ({m.op}, {m.loc or 'generated'})"
                                                  for m in members) + "; their inputs are never stored"),) + body
        # An output the plan puts over its input: the two parameters point at the same bytes.
        over = {o: in_place[o] for o in outputs if o in in_place}
        # An output over part of an input, proven safe on the kernel's access order by the plan.
        partly = {o: overlap[o] for o in outputs if o in overlap}
        aliased = frozenset(over) | frozenset(over.values()) | frozenset(partly) | frozenset(partly.values())
        kernel = simplify(Kernel(node.name, (), body, doc, scratch))
        # Parameters from the simplified body: a tensor simplification stopped reading would be an
        # unused parameter, a warning under -Wextra.
        kernel = replace(kernel, params=_params(graph, node, inputs, outputs, kernel.body, backend.name,
                                                frozenset(s.name for s in scratch)))
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
        kernel = annotate(kernel)
        call_args = tuple(_call_arg(graph, offsets, p.buffer) for p in kernel.params) + tuple(
            _call_arg(graph, offsets, scratch_name(node.name, s.name), s.dtype) for s in scratch)
        macs = _macs(original, scheduled) + sum(_macs(original, m) for m in members)
        kernels.append(KernelCode(node, cluster, kernel, backend.renderer.kernel(kernel, aliased, macs), call_args,
                                  macs, tuple(members), tuple(_macs(original, n) for n in [scheduled] + members)))
    read = {p.buffer for k in kernels for p in k.kernel.params}
    load = backend.loader()
    constants = tuple(ConstantCode(c.name, c.data.nbytes, load(c, constants_in_ram))
                      for name, c in graph.constants.items() if name in read and with_constants)
    return GeneratedModel(graph, sched, plan, tuple(kernels), constants,
                          backend.renderer.prelude([k.kernel for k in kernels]))


__all__ = ["CPP", "Backend", "Capabilities", "KernelArgs", "TensorArg", "GeneratedModel", "KernelCode", "generate",
           "scratch_bytes"]
