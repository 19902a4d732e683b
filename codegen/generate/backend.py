"""Backends: one functor per primitive, registered by op name, plus a load functor for constants.

A functor is called as `functor(graph, node_id, cluster_id, args, attrs)` and returns the
kernel body as loop IR statements; the generator names the kernel after the node and
derives its parameters from the tensors the body loads and stores.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from codegen.generate.loop_ir import Stmt
from codegen.ir import Constant, Graph, TensorType


@dataclass(frozen=True)
class TensorArg:
    """A tensor a functor works on: value name and type."""

    name: str
    type: TensorType


@dataclass(frozen=True)
class KernelArgs:
    """The node's inputs (None where an optional input is omitted) and outputs."""

    inputs: tuple[TensorArg | None, ...]
    outputs: tuple[TensorArg, ...]


Functor = Callable[[Graph, int, int, KernelArgs, Mapping[str, Any]], Sequence[Stmt]]
LoadFunctor = Callable[[Constant, bool], str]  # (constant, copy to RAM?) -> C++ definition


@dataclass
class Backend:
    """A code generator target: functors by primitive name and the constant load functor."""

    name: str
    functors: dict[str, Functor] = field(default_factory=dict)
    load_functor: LoadFunctor | None = None

    def register(self, *ops: str) -> Callable[[Functor], Functor]:
        """Decorator: use the function as the functor for each of `ops` (replacing any before)."""
        def add(fn: Functor) -> Functor:
            for op in ops:
                self.functors[op] = fn
            return fn
        return add

    def register_loader(self, fn: LoadFunctor) -> LoadFunctor:
        """Decorator: use the function to emit constant data."""
        self.load_functor = fn
        return fn


CPP = Backend("cpp")
