"""Stage 4, schedule: a linear order of the nodes plus cluster ids.

A node's cluster is one more than the largest cluster of the nodes it reads from, so
nodes in one cluster never depend on each other, and cluster x-1 is complete before
cluster x starts. The linear order runs clusters in turn, file order within a cluster.
"""
from __future__ import annotations

from dataclasses import dataclass

from codegen.ir import Graph, Node


@dataclass(frozen=True)
class Schedule:
    """Nodes in execution order with the cluster of each (parallel tuples)."""

    nodes: tuple[Node, ...]
    clusters: tuple[int, ...]

    @property
    def cluster_count(self) -> int:
        return max(self.clusters, default=-1) + 1

    def cluster_members(self) -> list[list[Node]]:
        """The nodes of each cluster, in order."""
        members: list[list[Node]] = [[] for _ in range(self.cluster_count)]
        for node, cluster in zip(self.nodes, self.clusters):
            members[cluster].append(node)
        return members

    def cluster_of(self) -> dict[str, int]:
        """Map node name to cluster id."""
        return {node.name: c for node, c in zip(self.nodes, self.clusters)}


def schedule(graph: Graph) -> Schedule:
    """Assign each node the earliest cluster its inputs allow (graph nodes are topologically ordered)."""
    producer = graph.producers()
    cluster: list[int] = []
    for node in graph.nodes:
        deps = [cluster[producer[v]] for v in node.inputs if v in producer]
        cluster.append(1 + max(deps, default=-1))
    order = sorted(range(len(graph.nodes)), key=lambda i: (cluster[i], i))
    return Schedule(tuple(graph.nodes[i] for i in order), tuple(cluster[i] for i in order))
