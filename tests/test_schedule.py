"""Scheduling (tinsmith.schedule): linear order and clusters, on the example graphs and random DAGs."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from tinsmith.ir import Graph, Node, TensorType
from tinsmith.pipeline import lower
from tinsmith.schedule import Schedule, dependency_order, schedule
from random_graphs import random_graph

GRAPH_DIR = Path(__file__).resolve().parents[1] / "graphs"
GRAPHS = sorted(GRAPH_DIR.glob("*.yaml"))


def check_clusters(graph: Graph, sched: Schedule) -> None:
    """The cluster contract, checked from the graph's own wiring."""
    assert sorted(n.name for n in sched.nodes) == sorted(n.name for n in graph.nodes)
    assert len(sched.nodes) == len(sched.clusters)
    cluster = sched.cluster_of()
    producer = {out: node.name for node in graph.nodes for out in node.outputs}
    # ids run 0..k-1, every cluster has a node, and the linear order runs cluster after cluster
    assert sorted(set(sched.clusters)) == list(range(sched.cluster_count))
    assert list(sched.clusters) == sorted(sched.clusters)
    for node in graph.nodes:
        deps = {producer[v] for v in node.inputs if v in producer}
        for dep in deps:
            # producers are in earlier clusters, so no node depends on one of its own cluster
            assert cluster[dep] < cluster[node.name], (dep, node.name)
        # and each node runs as early as its inputs allow
        assert cluster[node.name] == 1 + max((cluster[d] for d in deps), default=-1)
    # within a cluster, graph order is kept
    position = {node.name: i for i, node in enumerate(graph.nodes)}
    for members in sched.cluster_members():
        assert [position[n.name] for n in members] == sorted(position[n.name] for n in members)


def test_branches_clusters():
    g = lower(GRAPH_DIR / "branches.yaml")
    sched = schedule(g)
    check_clusters(g, sched)
    assert [[n.name for n in c] for c in sched.cluster_members()] == [
        ["gate", "squash", "grow"],
        ["gated", "ratio", "square"],
        ["diff", "smooth"],
        ["join"],
        ["flatten", "mean_rows"],
        ["merge_out"],
    ]
    assert sched.cluster_count == 6
    assert max(len(c) for c in sched.cluster_members()) > 1


def test_encoder_projections_share_a_cluster():
    g = lower(GRAPH_DIR / "encoder.yaml")
    sched = schedule(g)
    check_clusters(g, sched)
    cluster = sched.cluster_of()
    assert cluster["query"] == cluster["key"] == cluster["value"]
    assert cluster["scores"] > cluster["key_t"] > cluster["key"]


@pytest.mark.parametrize("path", GRAPHS, ids=lambda p: p.stem)
def test_example_graphs(path):
    g = lower(path)
    check_clusters(g, schedule(g))


def test_empty_graph():
    sched = schedule(Graph("g", (), (), {}, {}, ()))
    assert sched == Schedule((), ())
    assert sched.cluster_count == 0 and sched.cluster_members() == []


@pytest.mark.parametrize("seed", range(300))
def test_random_dags(seed):
    rng = random.Random(seed)
    g = random_graph(rng, rng.randint(1, 40))
    check_clusters(g, schedule(g))


@pytest.mark.parametrize("seed", range(50))
def test_node_order_does_not_matter(seed):
    """A graph whose nodes are not listed producers first gets the same clusters."""
    rng = random.Random(seed)
    g = random_graph(rng, rng.randint(2, 30))
    shuffled = list(g.nodes)
    rng.shuffle(shuffled)
    h = Graph(g.name, g.inputs, g.outputs, g.types, g.constants, tuple(shuffled))
    assert schedule(h).cluster_of() == schedule(g).cluster_of()
    order = dependency_order(h)
    seen = set(h.inputs) | set(h.constants)
    for i in order:
        assert all(v in seen for v in h.nodes[i].inputs)
        seen.update(h.nodes[i].outputs)


def test_topological_graphs_keep_their_order():
    g = random_graph(random.Random(7), 30)
    assert dependency_order(g) == list(range(30))


def test_a_cycle_is_an_error():
    t = TensorType("float32", (1,))
    g = Graph("loop", ("x",), ("b",), {"x": t, "a": t, "b": t}, {}, (
        Node("Add", "first", ("x", "b"), ("a",)),
        Node("Relu", "second", ("a",), ("b",)),
    ))
    with pytest.raises(ValueError, match="graph 'loop' has a cycle through nodes first, second"):
        schedule(g)


def test_a_chain_is_one_node_per_cluster():
    t = TensorType("float32", (3,))
    nodes = tuple(Node("Relu", f"r{i}", (f"v{i}",), (f"v{i + 1}",)) for i in range(5))
    g = Graph("chain", ("v0",), ("v5",), {f"v{i}": t for i in range(6)}, {}, nodes)
    sched = schedule(g)
    assert sched.nodes == nodes and sched.clusters == (0, 1, 2, 3, 4)
