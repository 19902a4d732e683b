"""Stage 6, generate: one kernel per scheduled node, through the backend's functors and the loop IR."""
from __future__ import annotations

from dataclasses import dataclass, replace

from codegen.errors import GenerateError
from codegen.generate import functors  # noqa: F401  (registers the C++ backend's functors)
from codegen.generate.backend import CPP, Backend, KernelArgs, TensorArg
from codegen.generate.loop_ir import Comment, Kernel, Load, Param, Stmt, Store, For
from codegen.generate.render import render_kernel
from codegen.generate.simplify import simplify
from codegen.ir import Graph, Node
from codegen.ops import PRIMITIVES, InferArgs
from codegen.plan import MemoryPlan
from codegen.schedule import Schedule


@dataclass(frozen=True)
class KernelCode:
    """A generated kernel with what the call sequence and the report need to know of it."""

    node: Node
    cluster: int
    kernel: Kernel
    source: str
    call_args: tuple[str, ...]  # C++ argument expressions, in parameter order
    macs: int


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


def _params(graph: Graph, node: Node, body: tuple[Stmt, ...], backend: str) -> tuple[Param, ...]:
    """Kernel parameters: the node's inputs the body reads, then the outputs it writes."""
    loads: set[str] = set()
    stores: set[str] = set()
    _touched(body, loads, stores)
    # A functor (maybe a user's) touching other tensors would give C++ that does not compile;
    # say which functor and which tensor instead.
    what = f"the {backend} functor for '{node.op}' (node '{node.name}')"
    written_elsewhere = sorted(stores - set(node.outputs))
    if written_elsewhere:
        raise GenerateError(node.loc, f"{what} writes '{written_elsewhere[0]}', which is not an output "
                            f"of the node")
    read_elsewhere = sorted(loads - set(node.inputs) - stores)
    if read_elsewhere:
        raise GenerateError(node.loc, f"{what} reads '{read_elsewhere[0]}', which is neither an input of "
                            f"the node nor an output the kernel writes")
    ordered = [v for v in dict.fromkeys(node.inputs) if v in loads and v not in stores]
    ordered += [v for v in node.outputs if v in stores]
    return tuple(Param(v, graph.types[v].cpp_type, graph.types[v].size, v in stores) for v in ordered)


def _call_arg(graph: Graph, plan_offsets: dict[str, int], value: str) -> str:
    if value in graph.constants:
        return f"constants::{value}"
    if value in plan_offsets:
        offset = plan_offsets[value]
        return f"reinterpret_cast<{graph.types[value].cpp_type}*>(ws{f' + {offset}' if offset else ''})"
    return value  # a graph input or output: the caller's pointer


def _macs(graph: Graph, node: Node) -> int:
    prim = PRIMITIVES[node.op]
    args = InferArgs(tuple(graph.types[n] if n else None for n in node.inputs), node.attrs,
                     tuple(graph.constants[n].data if n in graph.constants else None for n in node.inputs))
    return int(prim.macs(args, [graph.types[o] for o in node.outputs]))


def generate(graph: Graph, sched: Schedule, plan: MemoryPlan, backend: Backend = CPP,
             constants_in_ram: bool = False) -> GeneratedModel:
    """Call the backend's functor for every node in schedule order and render the kernels."""
    node_ids = {node.name: i for i, node in enumerate(graph.nodes)}
    offsets = plan.offset_of()
    in_place = plan.in_place_of()
    kernels = []
    for node, cluster in zip(sched.nodes, sched.clusters):
        functor = backend.functors.get(node.op)
        if functor is None:
            raise GenerateError(node.loc, f"the {backend.name} backend has no functor for primitive "
                                f"'{node.op}' (node '{node.name}')",
                                f"register one with codegen.generate.{backend.name.upper()}"
                                f".register('{node.op}')")
        args = KernelArgs(
            tuple(TensorArg(n, graph.types[n]) if n else None for n in node.inputs),
            tuple(TensorArg(n, graph.types[n]) for n in node.outputs))
        body = tuple(functor(graph, node_ids[node.name], cluster, args, node.attrs))
        where = f"{node.loc}" if node.loc else "generated"
        # An output the plan puts over its input: the two parameters point at the same bytes.
        over = {o: in_place[o] for o in node.outputs if o in in_place}
        aliased = frozenset(over) | frozenset(over.values())
        kernel = simplify(Kernel(node.name, (), body, f"{node.name}: {node.op}, cluster {cluster}, from {where}"))
        # Parameters from the simplified body: a tensor simplification stopped reading would be an
        # unused parameter, a warning under -Wextra.
        kernel = replace(kernel, params=_params(graph, node, kernel.body, backend.name))
        for o, v in over.items():  # the plan goes by op; a user's functor may not be elementwise
            if not _reads_only_where_it_writes(kernel.body, v, o):
                raise GenerateError(node.loc, f"the {backend.name} functor for '{node.op}' (node "
                                    f"'{node.name}') reads '{v}' at elements other than the one it "
                                    f"writes, so it cannot write '{o}' in place of '{v}'",
                                    f"plan with plan_memory(..., in_place_ops=...) without '{node.op}'")
            kernel = replace(kernel, body=(Comment(f"in place: {o} takes over the bytes of {v}"),) + kernel.body)
        kernels.append(KernelCode(node, cluster, kernel, render_kernel(kernel, aliased),
                                  tuple(_call_arg(graph, offsets, p.buffer) for p in kernel.params),
                                  _macs(graph, node)))
    read = {p.buffer for k in kernels for p in k.kernel.params}
    constants = tuple(ConstantCode(c.name, c.data.nbytes, backend.load_functor(c, constants_in_ram))
                      for name, c in graph.constants.items() if name in read)
    return GeneratedModel(graph, sched, plan, tuple(kernels), constants)


__all__ = ["CPP", "Backend", "KernelArgs", "TensorArg", "GeneratedModel", "KernelCode", "generate"]
