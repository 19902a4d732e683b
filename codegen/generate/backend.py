"""The strategy table: every kernel Tinsmith can generate, as data.

A *registration* says, for one primitive, which function builds its kernel and what that kernel
takes:

- `family`: the kind of loop nest (FAMILIES: convolution, matrix product, window, ...);
- `types`: the element types of each input and output and the accumulator (`ElementTypes`); a node
  whose types the registration does not list never reaches its function;
- `layout`: the data layout it reads and writes ("any" for row-major data of the primitive's own
  shape, "nhwc", "nchw");
- `when`: further conditions on shapes and attributes (a shape the fast kernel handles);
- `priority`: among a kernel set's registrations that apply, the highest wins;
- traits the generator relies on: `epilogue`, `scratch`, `pack` (see `Registration`).

Registrations live in *kernel sets* (`Backend`), one per instruction-set feature: `cpp` (portable
scalar C++, every primitive), `vectors` (GCC vector extensions), `fpu-registers` (kernels
register-blocked for a 32-register scalar FPU), `arm-dsp` (the Armv7E-M DSP extension). A set
states the capabilities it needs (`requires`) and the intrinsics it may call, which the renderer
spells. A target's backend draws on several sets in order (its `parents`), e.g. the Cortex-M4:
arm-dsp, fpu-registers, cpp. `lookup` is total: a registration, or `refusal` says before any C++
is written why no kernel takes the node.

A functor is called as `functor(graph, node_id, cluster_id, args, attrs)` and returns the kernel
body as loop IR statements; `args` holds the node's tensors, the primitive's `Prepared` facts and
the target's `Capabilities`. The generator names the kernel after the node and derives its
parameters from the tensors the body loads and stores.

A functor registered with `epilogue=True` promises that every Store to its outputs carries `at`
(the logical coordinates) and that it never reads its outputs back: then elementwise and broadcast
consumers may be fused into it (codegen/fuse.py). `scratch` declares the per-kernel buffers it
needs, from the node's Prepared facts and the capabilities, before memory planning. `pack` asks for
constant inputs (weights) in the layout the kernel reads best, made at build time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from tinsmith.errors import GenerateError
from tinsmith.generate.loop_ir import Scratch, Stmt
from tinsmith.generate.render import PORTABLE, Renderer
from tinsmith.ir import Constant, Graph, Node, TensorType
from tinsmith.ir.graph import DTYPES
from tinsmith.ops import PRIMITIVES, InferArgs
from tinsmith.ops.registry import Prepared
from tinsmith.targets import Capabilities  # what kernels may use, from the target file


PORTABLE_CAPS = Capabilities()

# The loop-nest families (docs/KERNELS.md): what kind of kernel a registration builds.
FAMILIES = ("convolution", "matrix", "window", "elementwise", "reduction", "table", "movement", "sampling",
            "sequence")
LAYOUTS = ("any", "nchw", "nhwc")


# --- element types --------------------------------------------------------------------------
TypeSet = frozenset  # of dtype names; None in a position stands for any type
ALL_TYPES = frozenset(DTYPES)
FLOATS = frozenset({"float32", "float64", "float16", "bfloat16"})
SIGNED = frozenset({"int8", "int16", "int32", "int64"})
UNSIGNED = frozenset({"uint8", "uint16", "uint32", "uint64"})
INTEGERS = SIGNED | UNSIGNED
NUMBERS = FLOATS | INTEGERS  # what arithmetic takes (bool and the storage-only narrow types excluded)
INDICES = frozenset({"int32", "int64"})


def _type_set(spec) -> TypeSet | None:
    if spec is None:
        return None
    found = frozenset((spec,) if isinstance(spec, str) else spec)
    unknown = sorted(found - ALL_TYPES - {"string"})
    if unknown:
        raise ValueError(f"unknown element type(s) {', '.join(unknown)}")
    return found


@dataclass(frozen=True)
class ElementTypes:
    """The element types a kernel takes: one set per input position (the last one repeats for
    variadic primitives; an omitted optional input always matches), one per output, and the type
    it accumulates in (documentation and the reports' word for it)."""

    inputs: tuple[TypeSet | None, ...]
    outputs: tuple[TypeSet | None, ...] = (None,)
    accumulator: str | None = None
    # all inputs and outputs that are not None in `inputs`/`outputs` share one element type
    uniform: bool = False

    def accepts(self, inputs: Sequence[str | None], outputs: Sequence[str]) -> bool:
        """True when every given input and output type lies in its position's set."""
        def fits(sets, given) -> bool:
            for i, dtype in enumerate(given):
                if dtype is None:
                    continue
                allowed = sets[min(i, len(sets) - 1)] if sets else None
                if allowed is not None and dtype not in allowed:
                    return False
            return True
        if not (fits(self.inputs, inputs) and fits(self.outputs, outputs)):
            return False
        if self.uniform:
            seen = {t for t, s in zip(inputs, self.inputs + (self.inputs[-1:] * len(inputs))) if t and s is not None}
            seen |= {t for t, s in zip(outputs, self.outputs + (self.outputs[-1:] * len(outputs))) if s is not None}
            return len(seen) <= 1
        return True

    def describe(self) -> str:
        """The declaration in words, e.g. '(int8, int8, int32) -> int8, accumulating in int32'."""
        def words(s: TypeSet | None) -> str:
            if s is None:
                return "any"
            if s == NUMBERS:
                return "any number type"
            if s == FLOATS:
                return "float"
            return "|".join(sorted(s))
        text = f"({', '.join(words(s) for s in self.inputs)}) -> {', '.join(words(s) for s in self.outputs)}"
        if self.uniform:
            text += ", all one type"
        return text + (f", accumulating in {self.accumulator}" if self.accumulator else "")


def takes(*inputs, out=None, acc: str | None = None) -> ElementTypes:
    """ElementTypes from one spec per input and `out` (a spec, or a tuple of specs for several
    outputs); a spec is a dtype name, an iterable of names or None (any)."""
    outs = out if isinstance(out, tuple) and out and not isinstance(out[0], str) else (out,)
    if isinstance(out, list):
        outs = tuple(out)
    return ElementTypes(tuple(_type_set(s) for s in inputs), tuple(_type_set(s) for s in outs), acc)


def same(types: Iterable[str] | None, inputs: int = 1, outputs: int = 1, acc: str | None = None) -> ElementTypes:
    """Every input and output of one type from `types` (an elementwise op over numbers, say)."""
    s = _type_set(types)
    return ElementTypes((s,) * inputs, (s,) * outputs, acc, uniform=True)


ANY_TYPES = ElementTypes((None,), (None,))  # data movement that copies elements whatever they are


# --- arguments ------------------------------------------------------------------------------
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

    def input_types(self) -> tuple[str | None, ...]:
        """The node's input element types, as the model has them (a packed constant's layout may
        widen it: the prepared facts keep the model's)."""
        types = self.prepared.inputs if self.prepared is not None else [a.type if a else None for a in self.inputs]
        return tuple(t.dtype if t is not None else None for t in types)

    def output_types(self) -> tuple[str, ...]:
        return tuple(a.type.dtype for a in self.outputs)


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


# --- registrations --------------------------------------------------------------------------
@dataclass(frozen=True)
class Registration:
    """One row of the strategy table (see the module doc)."""

    fn: Functor | None = None
    epilogue: bool = False
    scratch: ScratchRule | None = None
    # The kernel applies only where this holds (a shape the fast kernel handles); elsewhere the
    # lookup goes on to the next registration, kernel set or parent.
    when: Callable[[KernelArgs, Mapping[str, Any]], bool] | None = None
    # Constant inputs the kernel wants in another layout, computed at build time: input index ->
    # function of the array. The functor then sees the packed constant (its type says the layout).
    pack: Callable[[KernelArgs, Mapping[str, Any]], Mapping[int, Callable]] | None = None
    family: str = "elementwise"
    types: ElementTypes = ANY_TYPES
    layout: str = "any"
    priority: int = 0
    # False for an elementwise kernel whose loop body is more than one store (locals first, as a
    # fixed-point requantization's): fusion cannot compute it in its producer's loop
    inlined: bool = True

    def applies(self, args: KernelArgs | None, attrs: Mapping[str, Any] | None) -> bool:
        """Whether this kernel takes a node with these arguments (None: no node in view)."""
        if args is None:
            return True
        return (self.types.accepts(args.input_types(), args.output_types())
                and (self.when is None or bool(self.when(args, attrs or {})))
                and self._packs_only_constants(args, attrs or {}))

    def _packs_only_constants(self, args: KernelArgs, attrs: Mapping[str, Any]) -> bool:
        """A kernel that reads inputs packed at build time takes them only when they are constants
        (weights that are a graph input cannot be packed)."""
        if self.pack is None or args.prepared is None or not args.prepared.constant:
            return True
        return all(args.prepared.constant[i] for i in self.pack(args, attrs))


Traits = Registration  # what the generator may assume of a functor: the registration itself
NO_TRAITS = Registration()


def _always(caps: Capabilities) -> bool:
    return True


@dataclass
class Backend:
    """A kernel set: registrations by primitive name, the capabilities they need (`requires`), the
    intrinsics their kernels may call, and parents (other kernel sets) that the lookup goes on to.
    A target's backend is a kernel set with a renderer whose parents are the sets it draws on."""

    name: str
    functors: dict[str, Functor] = field(default_factory=dict, repr=False)
    load_functor: LoadFunctor | None = field(default=None, repr=False)
    parents: tuple["Backend", ...] = ()
    renderer: Renderer = field(default=PORTABLE, repr=False)
    traits: dict[str, list[Registration]] = field(default_factory=dict, repr=False)
    requires: Callable[[Capabilities], bool] = _always
    needs: str = ""  # `requires` in words, for errors and docs
    intrinsics: Mapping[str, str] = field(default_factory=dict)  # name -> C++ format over {0}, {1}, ...
    helpers: tuple[str, ...] = ()  # C++ lines the intrinsics' spellings need
    # Micro-kernels: named steps a family's loop nest calls (saturate an int8 result, ...), which
    # a kernel set may spell with its own instructions; see tinsmith.generate.kernel_sets.micro_kernel.
    micro: dict[str, Callable] = field(default_factory=dict, repr=False)

    def register(self, *ops: str, family: str = "elementwise", types: ElementTypes = ANY_TYPES,
                 layout: str = "any", priority: int = 0, epilogue: bool = False,
                 scratch: ScratchRule | None = None, when=None, pack=None, inlined: bool = True
                 ) -> Callable[[Functor], Functor]:
        """Decorator: add the function to the table for each of `ops`, ahead of the earlier rows of
        its priority (a user's kernel for a builtin wins); one of the same priority and element types
        as an earlier one replaces it."""
        if family not in FAMILIES:
            raise ValueError(f"unknown kernel family {family!r}; one of {', '.join(FAMILIES)}")
        if layout not in LAYOUTS:
            raise ValueError(f"unknown layout {layout!r}; one of {', '.join(LAYOUTS)}")

        def add(fn: Functor) -> Functor:
            for op in ops:
                row = Registration(fn, epilogue, scratch, when, pack, family, types, layout, priority, inlined)
                kept = [r for r in self.traits.get(op, []) if (r.priority, r.types) != (priority, types)]
                self.traits[op] = sorted([row] + kept, key=lambda r: -r.priority)  # stable: the newest first
                self.functors[op] = fn
            return fn
        return add

    def micro_kernel(self, name: str) -> Callable[[Callable], Callable]:
        """Decorator: this set's spelling of the micro-kernel `name`."""
        def add(fn: Callable) -> Callable:
            self.micro[name] = fn
            return fn
        return add

    def register_loader(self, fn: LoadFunctor) -> LoadFunctor:
        """Decorator: use the function to emit constant data."""
        self.load_functor = fn
        return fn

    def _own(self, op: str) -> list[Registration]:
        fn = self.functors.get(op)
        if fn is None:
            return []
        rows = self.traits.get(op, [])
        # a functor put into `functors` by hand has no registration: nothing is assumed of it
        return rows if any(r.fn is fn for r in rows) else [Registration(fn)]

    def lookup(self, op: str, args: KernelArgs | None = None, attrs: Mapping[str, Any] | None = None
               ) -> tuple[Functor, Registration] | None:
        """The functor for `op` and its registration: the first of this set's registrations that
        takes these arguments, else the first parent's that does; None if none does."""
        if args is None or self.requires(args.caps):
            for row in self._own(op):
                if row.applies(args, attrs):
                    return row.fn, row
        for parent in self.parents:
            found = parent.lookup(op, args, attrs)
            if found is not None:
                return found
        return None

    def registrations(self, op: str) -> list[tuple["Backend", Registration]]:
        """Every registration for `op` this backend and its parents hold, in lookup order."""
        rows = [(self, r) for r in self._own(op)]
        for parent in self.parents:
            rows += parent.registrations(op)
        return rows

    def refusal(self, op: str, args: KernelArgs) -> str:
        """Why no kernel takes a node with these arguments, in words (lookup returned None)."""
        rows = self.registrations(op)
        if not rows:
            return f"no kernel set of the {self.name} backend has a kernel for primitive '{op}'"
        got = ", ".join(t or "-" for t in args.input_types()) + " -> " + ", ".join(args.output_types())
        offered = sorted({r.types.describe() for _, r in rows if r.when is None}
                         or {r.types.describe() for _, r in rows})
        return (f"no kernel for primitive '{op}' takes element types ({got}) on the {self.name} backend; "
                f"its kernels take {'; '.join(offered)}")

    def loader(self) -> LoadFunctor | None:
        if self.load_functor is not None:
            return self.load_functor
        for parent in self.parents:
            found = parent.loader()
            if found is not None:
                return found
        return None

    def chain(self) -> list[str]:
        """Names of this backend and the kernel sets it draws on, in lookup order."""
        names = [self.name]
        for parent in self.parents:
            names += [n for n in parent.chain() if n not in names]
        return names

    def all_intrinsics(self) -> dict[str, str]:
        """The intrinsics of this set and every parent: what its renderer must spell."""
        found: dict[str, str] = {}
        for parent in reversed(self.parents):
            found.update(parent.all_intrinsics())
        found.update(self.intrinsics)
        return found

    def all_helpers(self) -> tuple[str, ...]:
        lines: list[str] = []
        for parent in self.parents:
            lines += [h for h in parent.all_helpers() if h not in lines]
        return tuple(lines + [h for h in self.helpers if h not in lines])


def kernel_refusal(backend: Backend, node: Node, args: KernelArgs) -> GenerateError:
    """The error for a node no kernel of `backend` takes: which node, which element types, and
    what the kernels for its primitive take instead."""
    if not backend.registrations(node.op):
        return GenerateError(node.loc, f"the {backend.name} backend has no kernel for primitive '{node.op}' "
                             f"(node '{node.name}')",
                             f"register one with tinsmith.generate.CPP.register('{node.op}', family=..., types=...)")
    return GenerateError(node.loc, f"node '{node.name}': {backend.refusal(node.op, args)}",
                         "convert the model's element types to ones listed (a Cast before and after the node), "
                         "or register a kernel for these types")


def check_kernels(graph: Graph, backend: Backend, caps: Capabilities = PORTABLE_CAPS) -> None:
    """Refuse the graph, before anything is planned or written, when a node has no kernel on this
    backend for its element types (the lookup is total: a kernel, or this named error)."""
    for node in graph.nodes:
        args = kernel_args(graph, node, caps)
        if backend.lookup(node.op, args, node.attrs) is None:
            raise kernel_refusal(backend, node, args)


# The portable C++ kernel set: scalar kernels that compile anywhere. Every backend draws on it last.
CPP = Backend("cpp")
