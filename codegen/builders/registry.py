"""Op builders: named composites that insert primitives (or other builders) into a graph.

A builder declares its attributes (name, kind, default) like a primitive does, and one
`insert` that adds nodes through a `GraphBuilder` (see tinsmith.expand). Builders add no new
kind of node: after expansion only primitives remain. The YAML frontend and importers
both call builders, so a composite is written once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from tinsmith.ops.registry import Attr

# insert(graph_builder, input value names, checked attributes) -> output value names
Insert = Callable[[Any, Sequence[str], Mapping[str, Any]], Sequence[str]]


@dataclass(frozen=True)
class Builder:
    """A composite op: arity, declared attributes and the insert that expands it."""

    name: str
    min_inputs: int
    max_inputs: int
    max_outputs: int
    attrs: tuple[Attr, ...]
    insert: Insert
    doc: str = ""


BUILDERS: dict[str, Builder] = {}


def builder(name: str, *, inputs: int | tuple[int, int], outputs: int = 1,
            attrs: Sequence[Attr] = ()) -> Callable[[Insert], Insert]:
    """Register the decorated function as the `insert` of builder `name`."""
    lo, hi = (inputs, inputs) if isinstance(inputs, int) else inputs

    def register(insert: Insert) -> Insert:
        if name in BUILDERS:
            raise ValueError(f"builder {name} registered twice")
        BUILDERS[name] = Builder(name, lo, hi, outputs, tuple(attrs), insert,
                                 (insert.__doc__ or "").strip())
        return insert
    return register
