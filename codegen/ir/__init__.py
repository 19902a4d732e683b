"""The graph IR every stage passes along: typed values, constants, and primitive nodes.

Importing the package costs little: the graph's structures (tinsmith.ir.graph) hold NumPy dtypes
and are imported when first asked for, so a step that only needs names (the header check, which
knows the element types by name: tinsmith.ir.element_types) starts without NumPy."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tinsmith.ir.graph import Constant, Graph, Node, State, TensorType

__all__ = ["Constant", "Graph", "Node", "State", "TensorType"]


def __getattr__(name: str):
    """`from tinsmith.ir import Graph` imports tinsmith.ir.graph (and NumPy) only then."""
    if name in __all__:
        from tinsmith.ir import graph
        return getattr(graph, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
