"""A graph held in an attribute (ONNX If's branches, Loop's body), as the importer reads it:
formal inputs, nodes, outputs and constants, with value names already made identifiers. Control
flow builders expand one into the enclosing graph (codegen/builders/control_flow.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np


@dataclass(frozen=True)
class SubgraphNode:
    """One node of a subgraph: op (with its domain), value names, attributes (subgraphs nested)."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any]


@dataclass(frozen=True, eq=False)
class Subgraph:
    """A body: names it binds on entry (Loop's iteration, condition and carried values), its nodes
    in order, the names it returns, and the constants it defines (its Constant nodes, initializers)."""

    inputs: tuple[str, ...]
    nodes: tuple[SubgraphNode, ...]
    outputs: tuple[str, ...]
    constants: Mapping[str, np.ndarray]

    def __repr__(self) -> str:
        return f"<subgraph: {len(self.nodes)} nodes, outputs {list(self.outputs)}>"
