"""Backends: data plus overrides. A backend is a renderer (how the loop IR is spelled), the target's
capabilities (what the machine can do), and functors by primitive name that fall back to a parent
backend where this one has no better kernel of its own.

A functor is called as `functor(graph, node_id, cluster_id, args, attrs)` and returns the kernel
body as loop IR statements; `args` holds the node's tensors, the primitive's `Prepared` facts and
the target's `Capabilities`. The generator names the kernel after the node and derives its
parameters from the tensors the body loads and stores.

A functor registered with `epilogue=True` promises that every Store to its outputs carries `at`
(the logical coordinates) and that it never reads its outputs back: then elementwise and broadcast
consumers may be fused into it (codegen/generate/fuse.py). `scratch` declares the per-kernel
buffers it needs, from the node's Prepared facts and the capabilities, before memory planning.
`pack` asks for constant inputs (weights) in the layout the kernel reads best, made at build time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from codegen.generate.loop_ir import Scratch, Stmt
from codegen.generate.render import PORTABLE, Renderer
from codegen.ir import Constant, Graph, Node, TensorType
from codegen.ops import PRIMITIVES, InferArgs
from codegen.ops.registry import Prepared
from codegen.targets import Capabilities  # what kernels may use, from the target file


PORTABLE_CAPS = Capabilities()


@dataclass(frozen=True)
class TensorArg:
    """A tensor a functor works on: value name and type."""

    name: str
    type: TensorType


@dataclass(frozen=True)
class KernelArgs:
    """The node's inputs (None where an optional input is omitted) and outputs, the facts its
    primitive prepared, and the target's capabilities."""

    inputs: tuple[TensorArg | None, ...]
    outputs: tuple[TensorArg, ...]
    prepared: Prepared | None = None
    caps: Capabilities = PORTABLE_CAPS


def prepare_node(graph: Graph, node: Node) -> Prepared:
    """The primitive's Prepared facts for one node."""
    args = InferArgs(tuple(graph.types[n] if n else None for n in node.inputs), node.attrs,
                     tuple(graph.constants[n].data if n in graph.constants else None for n in node.inputs))
    return PRIMITIVES[node.op].prepare(args, [graph.types[o] for o in node.outputs])


def kernel_args(graph: Graph, node: Node, caps: Capabilities = PORTABLE_CAPS) -> KernelArgs:
    """What a functor receives for one node."""
    return KernelArgs(tuple(TensorArg(n, graph.types[n]) if n else None for n in node.inputs),
                      tuple(TensorArg(n, graph.types[n]) for n in node.outputs),
                      prepare_node(graph, node), caps)


Functor = Callable[[Graph, int, int, KernelArgs, Mapping[str, Any]], Sequence[Stmt]]
LoadFunctor = Callable[[Constant, bool], str]  # (constant, copy to RAM?) -> C++ definition
ScratchRule = Callable[[Prepared, Capabilities], Sequence[Scratch]]


@dataclass(frozen=True)
class Traits:
    """What the generator may assume of a registered functor (see the module doc)."""

    fn: Functor | None = None  # the functor these traits were registered with
    epilogue: bool = False
    scratch: ScratchRule | None = None
    # The functor applies only where this holds (e.g. float data, a shape the fast kernel handles);
    # elsewhere the lookup goes on to the parent backend.
    when: Callable[[KernelArgs, Mapping[str, Any]], bool] | None = None
    # Constant inputs the kernel wants in another layout, computed at build time: input index ->
    # function of the array. The functor then sees the packed constant (its type says the layout).
    pack: Callable[[KernelArgs, Mapping[str, Any]], Mapping[int, Callable]] | None = None


NO_TRAITS = Traits()


@dataclass
class Backend:
    """A code generator target: functors by primitive name (with their traits), a parent for the
    ops it does not override, a renderer, and the load functor for constants."""

    name: str
    functors: dict[str, Functor] = field(default_factory=dict)
    load_functor: LoadFunctor | None = None
    parent: "Backend | None" = None
    renderer: Renderer = PORTABLE
    traits: dict[str, Traits] = field(default_factory=dict)

    def register(self, *ops: str, epilogue: bool = False, scratch: ScratchRule | None = None,
                 when=None, pack=None) -> Callable[[Functor], Functor]:
        """Decorator: use the function as the functor for each of `ops` (replacing any before)."""
        def add(fn: Functor) -> Functor:
            for op in ops:
                self.functors[op] = fn
                self.traits[op] = Traits(fn, epilogue, scratch, when, pack)
            return fn
        return add

    def register_loader(self, fn: LoadFunctor) -> LoadFunctor:
        """Decorator: use the function to emit constant data."""
        self.load_functor = fn
        return fn

    def lookup(self, op: str, args: KernelArgs | None = None, attrs: Mapping[str, Any] | None = None
               ) -> tuple[Functor, Traits] | None:
        """The functor for `op` and its traits: this backend's if it has one that applies to these
        arguments, else its parent's; None if no backend in the chain has one."""
        fn = self.functors.get(op)
        registered = self.traits.get(op)
        # a functor put into `functors` by hand has no traits: nothing is assumed of it
        traits = registered if registered is not None and registered.fn is fn else NO_TRAITS
        if fn is not None and (traits.when is None or args is None or traits.when(args, attrs or {})):
            return fn, traits
        return self.parent.lookup(op, args, attrs) if self.parent is not None else None

    def loader(self) -> LoadFunctor | None:
        if self.load_functor is not None:
            return self.load_functor
        return self.parent.loader() if self.parent is not None else None

    def chain(self) -> list[str]:
        """Names of this backend and its ancestors, nearest first."""
        return [self.name] + (self.parent.chain() if self.parent is not None else [])


# The portable C++ backend: scalar kernels that compile anywhere. Every other backend descends from it.
CPP = Backend("cpp")
