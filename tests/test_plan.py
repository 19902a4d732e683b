"""Memory planning (codegen.plan): alignment, no sharing between values alive together, reuse where
lifetimes allow, and only intermediates in the workspace. Lifetimes are recomputed here from the
graph and the clusters, not taken from the planner."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from codegen.errors import SourceLoc
from codegen.ir import Constant, Graph, Node, TensorType
from codegen.pipeline import lower
from codegen.plan import ALIGNMENT, MemoryPlan, align, plan_memory
from codegen.schedule import schedule
from random_graphs import random_graph

GRAPHS = sorted((Path(__file__).parents[1] / "graphs").glob("*.yaml"))


def round16(n: int) -> int:
    return (n + 15) // 16 * 16


def workspace_values(graph: Graph) -> dict[str, tuple[int, int]]:
    """(first, last) cluster of every value that belongs in the workspace, from first principles:
    written by a node, and neither a graph input, a graph output nor a constant."""
    sched = schedule(graph)
    cluster = sched.cluster_of()
    result = {}
    for node in graph.nodes:
        for v in node.outputs:
            if v in graph.inputs or v in graph.outputs or v in graph.constants:
                continue
            readers = [cluster[n.name] for n in graph.nodes if v in n.inputs]
            result[v] = (cluster[node.name], max(readers + [cluster[node.name]]))
    return result


def check_plan(graph: Graph, plan: MemoryPlan) -> None:
    lives = workspace_values(graph)
    offsets = plan.offset_of()
    assert set(offsets) == set(lives)
    assert len(plan.placements) == len(lives)
    for p in plan.placements:
        v = p.lifetime.value
        assert p.offset % 16 == 0, v
        assert p.lifetime.nbytes >= graph.types[v].nbytes
        assert (p.lifetime.first, p.lifetime.last) == lives[v]
        assert p.offset + graph.types[v].nbytes <= plan.workspace_bytes
    placed = sorted(lives)
    for i, a in enumerate(placed):
        for b in placed[i + 1:]:
            (fa, la), (fb, lb) = lives[a], lives[b]
            if fa <= lb and fb <= la:  # alive in a common cluster: their bytes must be disjoint
                a0, a1 = offsets[a], offsets[a] + graph.types[a].nbytes
                b0, b1 = offsets[b], offsets[b] + graph.types[b].nbytes
                assert a1 <= b0 or b1 <= a0, (a, (a0, a1), b, (b0, b1))
    clusters = {c for f, l in lives.values() for c in range(f, l + 1)}
    bound = max((sum(round16(graph.types[v].nbytes) for v, (f, l) in lives.items() if f <= c <= l)
                 for c in clusters), default=0)
    assert plan.lower_bound_bytes == bound
    assert plan.workspace_bytes >= bound
    assert plan.workspace_bytes == max((p.offset + p.lifetime.nbytes for p in plan.placements), default=0)


@pytest.mark.parametrize("seed", range(200))
def test_random_graphs(seed):
    rng = random.Random(seed)
    g = random_graph(rng, rng.randint(1, 30))
    check_plan(g, plan_memory(g, schedule(g)))


@pytest.mark.parametrize("path", GRAPHS, ids=lambda p: p.stem)
def test_example_graphs(path):
    g = lower(path)
    plan = plan_memory(g, schedule(g))
    check_plan(g, plan)
    assert plan.workspace_bytes > 0


def chain(n: int, size: int) -> Graph:
    t = TensorType("float32", (size,))
    nodes = tuple(Node("Relu", f"r{i}", (f"v{i}",), (f"v{i + 1}",)) for i in range(n))
    return Graph("chain", ("v0",), (f"v{n}",), {f"v{i}": t for i in range(n + 1)}, {}, nodes)


def test_a_chain_reuses_memory():
    g = chain(6, 10)  # 40 bytes each, 5 intermediates v1..v5
    plan = plan_memory(g, schedule(g))
    check_plan(g, plan)
    sizes = sum(p.lifetime.nbytes for p in plan.placements)
    assert sizes == 5 * 48
    assert plan.workspace_bytes < sizes
    # never more than a reader and its writer alive: two slots, used in turn
    assert plan.workspace_bytes == plan.lower_bound_bytes == 96
    assert [plan.offset_of()[f"v{i}"] for i in range(1, 6)] == [0, 48, 0, 48, 0]


def test_values_alive_in_the_same_cluster_do_not_share():
    """Two branches run side by side: values written in one cluster and read in the next."""
    t = TensorType("float32", (4,))
    g = Graph("fork", ("x",), ("y",), {v: t for v in ("x", "a", "b", "y")}, {}, (
        Node("Relu", "left", ("x",), ("a",)),
        Node("Exp", "right", ("x",), ("b",)),
        Node("Add", "join", ("a", "b"), ("y",)),
    ))
    plan = plan_memory(g, schedule(g))
    check_plan(g, plan)
    assert plan.offset_of() == {"a": 0, "b": 16}
    assert plan.workspace_bytes == 32


def test_unread_intermediates_still_get_bytes():
    """A value nobody reads is still written by its kernel (e.g. an unused second output)."""
    t = TensorType("float32", (4,))
    g = Graph("g", ("x",), ("y",), {v: t for v in ("x", "a", "y")}, {}, (
        Node("Relu", "dead_end", ("x",), ("a",)),
        Node("Exp", "out", ("x",), ("y",)),
    ))
    plan = plan_memory(g, schedule(g))
    check_plan(g, plan)
    assert plan.offset_of() == {"a": 0}
    assert (plan.placements[0].lifetime.first, plan.placements[0].lifetime.last) == (0, 0)


def test_inputs_outputs_and_constants_stay_out_of_the_workspace():
    t = TensorType("float32", (4,))
    w = Constant("w", np.ones(4, np.float32), "test", SourceLoc("t", 1, 1))
    g = Graph("g", ("x",), ("y", "z"), {v: t for v in ("x", "w", "h", "y", "z", "folded")},
              {"w": w, "folded": Constant("folded", np.ones(4, np.float32), "fold", SourceLoc("t", 1, 1))}, (
        Node("Add", "a", ("x", "w"), ("y",)),      # y is an output that is read again
        Node("Mul", "b", ("y", "folded"), ("h",)),
        Node("Relu", "c", ("h",), ("z",)),
    ))
    plan = plan_memory(g, schedule(g))
    check_plan(g, plan)
    assert plan.offset_of() == {"h": 0}
    assert plan.workspace_bytes == 16


def test_no_intermediates_no_workspace():
    t = TensorType("float32", (3,))
    g = Graph("g", ("x",), ("y",), {"x": t, "y": t}, {}, (Node("Relu", "r", ("x",), ("y",)),))
    plan = plan_memory(g, schedule(g))
    assert plan == MemoryPlan((), 0, 0)


def test_sizes_round_up_to_the_alignment():
    assert ALIGNMENT == 16
    assert [align(n) for n in (0, 1, 15, 16, 17, 40, 48)] == [0, 16, 16, 16, 32, 48, 48]
    g = chain(2, 3)  # 12 bytes
    (p,) = plan_memory(g, schedule(g)).placements
    assert p.lifetime.nbytes == 16


def test_int64_intermediates_are_sized_by_their_element_type():
    t64 = TensorType("int64", (3,))
    g = Graph("g", ("x",), ("y",), {"x": t64, "i": t64, "y": t64}, {}, (
        Node("Identity", "a", ("x",), ("i",)),
        Node("Identity", "b", ("i",), ("y",)),
    ))
    (p,) = plan_memory(g, schedule(g)).placements
    assert p.lifetime.nbytes == 32  # 24 bytes, aligned
