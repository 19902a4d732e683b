"""Stage 4, schedule: a linear order of the nodes plus cluster ids.

A node's cluster is one more than the largest cluster of the nodes it reads from, so
nodes in one cluster never depend on each other, and cluster x-1 is complete before
cluster x starts. The linear order runs clusters in turn, file order within a cluster.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from tinsmith.ir import Graph, Node


@dataclass(frozen=True)
class Schedule:
    """Nodes in execution order with the cluster of each (parallel tuples). `fused` pairs each
    kernel head with the nodes computed inside its kernel (tinsmith.fuse); they follow it in
    `nodes`, in its cluster."""

    nodes: tuple[Node, ...]
    clusters: tuple[int, ...]
    fused: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def fused_into(self) -> dict[str, str]:
        """Map each fused node's name to its kernel's head."""
        return {m: head for head, ms in self.fused for m in ms}

    def fused_values(self) -> frozenset[str]:
        """Values computed and consumed inside one kernel: never stored. (A chain's values but its
        last; a row pipeline's values read by none of the kernels after it.)"""
        kernel_of = {n.name: n.name for n in self.nodes} | self.fused_into()
        made_by: dict[str, str] = {}
        read_by: dict[str, set[str]] = {}
        for node in self.nodes:
            for v in node.outputs:
                if v:
                    made_by[v] = kernel_of[node.name]
            for v in node.inputs:
                if v:
                    read_by.setdefault(v, set()).add(kernel_of[node.name])
        return frozenset(v for v, k in made_by.items()
                         if k in dict(self.fused) and read_by.get(v) == {k})

    def kernel_heads(self) -> list[tuple[Node, int]]:
        """(node, cluster) of each kernel: every node not fused into another's kernel."""
        inner = self.fused_into()
        return [(n, c) for n, c in zip(self.nodes, self.clusters) if n.name not in inner]

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


def dependency_order(graph: Graph) -> list[int]:
    """Node indices in an order where producers come before readers, file order where free
    (so an already topological graph keeps its order); a cycle is a ValueError."""
    producer = graph.producers()
    waiting = [len({producer[v] for v in node.inputs if v in producer}) for node in graph.nodes]
    readers: dict[int, set[int]] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v in producer:
                readers.setdefault(producer[v], set()).add(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for r in readers.get(i, ()):
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(ready, r)
    if len(order) != len(graph.nodes):
        stuck = ", ".join(graph.nodes[i].name for i in range(len(graph.nodes)) if waiting[i])
        raise ValueError(f"graph '{graph.name}' has a cycle through nodes {stuck}")
    return order


def schedule(graph: Graph) -> Schedule:
    """Assign each node the earliest cluster its inputs allow."""
    producer = graph.producers()
    cluster: dict[int, int] = {}
    for i in dependency_order(graph):
        deps = [cluster[producer[v]] for v in graph.nodes[i].inputs if v in producer]
        cluster[i] = 1 + max(deps, default=-1)
    order = sorted(cluster, key=lambda i: (cluster[i], i))
    return Schedule(tuple(graph.nodes[i] for i in order), tuple(cluster[i] for i in order))
