"""In-place variants: kernels that read their input in an order letting the output take over its
bytes, at some cost in speed. The memory plan runs one only where it makes the workspace smaller
(tinsmith.planners.overlap traces each variant's access order; tinsmith.plan chooses), and the
generator then calls it instead of the backend's functor. The variants: inplace.py's NCHW
pointwise convolution, host_conv.py's channels-last convolution with positions outside channels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tinsmith.generate.backend import KernelArgs, Traits, kernel_args


@dataclass(frozen=True)
class Variant:
    """An in-place kernel for `op`, where `applies(args, attrs)` holds; `traits` as a registration's."""

    name: str
    op: str
    applies: Callable[[KernelArgs, Mapping[str, Any]], bool]
    traits: Traits


VARIANTS: dict[str, Variant] = {}


def register_variant(name: str, op: str, applies, scratch, epilogue: bool = True):
    """Decorator: the functor is in-place variant `name` of `op`."""
    def add(fn):
        if name in VARIANTS:
            raise ValueError(f"in-place variant '{name}' is registered twice")
        VARIANTS[name] = Variant(name, op, applies, Traits(fn, epilogue, scratch))
        return fn
    return add


def applicable_variants(graph, sched, backend, caps) -> dict[str, str]:
    """Kernel head -> the first registered variant that applies to it."""
    found = {}
    for node, _ in sched.kernel_heads():
        for v in VARIANTS.values():
            if v.op == node.op and v.applies(kernel_args(graph, node, caps), node.attrs):
                found[node.name] = v.name
                break
    return found


def variant_functor(name: str) -> tuple[Callable, Traits]:
    v = VARIANTS[name]
    return v.traits.fn, v.traits


__all__ = ["VARIANTS", "Variant", "register_variant", "applicable_variants", "variant_functor"]
