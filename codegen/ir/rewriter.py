"""The state a graph pass builds a new node list in: the types and constants so far, names taken."""
from __future__ import annotations

from tinsmith.ir.graph import Graph, Node
from tinsmith.ir.names import numbered


class GraphRewriter:
    """A pass's working copy of `graph`: it appends the new nodes, adds types and constants, and
    takes fresh names that clash with no value, constant or node of the graph."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.types = dict(graph.types)
        self.consts = dict(graph.constants)
        self.taken = set(self.types) | set(self.consts) | {n.name for n in graph.nodes}
        self.nodes: list[Node] = []

    def fresh(self, base: str) -> str:
        name = numbered(base, self.taken)
        self.taken.add(name)
        return name
