"""Memory planning (tinsmith.plan, tinsmith.planners): alignment, no sharing between values alive
together except an output written in place over an input that dies at its node, reuse where
lifetimes allow, only intermediates in the workspace, and plans within 5% of the lower bound on the
example graphs. Lifetimes and in-place eligibility are recomputed here from the graph and the
clusters, not taken from the planner. In-place kernels are compiled and run against NumPy."""
from __future__ import annotations

import dataclasses
import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tinsmith.assemble import assemble
from tinsmith.errors import SourceLoc
from tinsmith.generate.functors.elementwise import BINARY_FORMULAS, UNARY_FORMULAS
from tinsmith.ir import Constant, Graph, Node, TensorType
from tinsmith.pipeline import generate_model, lower, write_files
from tinsmith.plan import ALIGNMENT, EXACT_SEARCH, MemoryPlan, align, plan_memory
from tinsmith.planners import PLANNERS, Lifetime, exact_search
from tinsmith.schedule import schedule
from tinsmith.verify import RUNTIME_INCLUDE
from random_graphs import random_graph

ROOT = Path(__file__).resolve().parents[1]
GRAPHS = sorted((ROOT / "graphs").glob("*.yaml"))
ELEMENTWISE = set(UNARY_FORMULAS) | set(BINARY_FORMULAS)
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


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


def may_write_over(graph: Graph, out: str, inp: str) -> bool:
    """`out` may take over `inp`'s bytes: an elementwise node writes `out` from `inp`, both are
    workspace values of one type (so no broadcasting), and no other node reads `inp` in that node's
    cluster or later (nodes of one cluster may run at the same time)."""
    cluster = schedule(graph).cluster_of()
    ws = workspace_values(graph)
    (node,) = [n for n in graph.nodes if out in n.outputs]
    others = [n for n in graph.nodes if inp in n.inputs and n is not node]
    return (node.op in ELEMENTWISE and inp in node.inputs and inp in ws and out in ws
            and graph.types[inp] == graph.types[out]
            and all(cluster[n.name] < cluster[node.name] for n in others))


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
    # in place: an eligible pair at one offset, each input taken over at most once
    over = plan.in_place_of()
    assert len(over) == len(plan.in_place) and len(set(over.values())) == len(over)
    for out, inp in over.items():
        assert may_write_over(graph, out, inp), (out, inp)
        assert offsets[out] == offsets[inp]
    placed = sorted(lives)
    for i, a in enumerate(placed):
        for b in placed[i + 1:]:
            (fa, la), (fb, lb) = lives[a], lives[b]
            if fa <= lb and fb <= la:  # alive in a common cluster: disjoint bytes, or written in place
                a0, a1 = offsets[a], offsets[a] + graph.types[a].nbytes
                b0, b1 = offsets[b], offsets[b] + graph.types[b].nbytes
                assert a1 <= b0 or b1 <= a0 or over.get(a) == b or over.get(b) == a, (a, (a0, a1), b, (b0, b1))
    clusters = {c for f, l in lives.values() for c in range(f, l + 1)}
    alive = {c: sum(round16(graph.types[v].nbytes) for v, (f, l) in lives.items() if f <= c <= l)
             for c in clusters}
    assert plan.operator_lower_bound_bytes == max(alive.values(), default=0)
    # an input and the output written over it are one buffer in the cluster where one ends and the
    # other begins
    shared = {c: sum(round16(graph.types[inp].nbytes) for out, inp in over.items() if lives[out][0] == c)
              for c in clusters}
    in_place_bound = max((alive[c] - shared[c] for c in clusters), default=0)
    assert plan.in_place_lower_bound_bytes == plan.lower_bound_bytes == in_place_bound
    assert plan.workspace_bytes >= in_place_bound
    assert plan.workspace_bytes == max((p.offset + p.lifetime.nbytes for p in plan.placements), default=0)
    assert plan.planner in PLANNERS or plan.planner == EXACT_SEARCH


@pytest.mark.parametrize("seed", range(200))
def test_random_graphs(seed):
    rng = random.Random(seed)
    g = random_graph(rng, rng.randint(1, 30))
    sched = schedule(g)
    plan = plan_memory(g, sched)
    check_plan(g, plan)
    assert plan_memory(g, sched) == plan  # deterministic
    check_plan(g, plan_memory(g, sched, in_place_ops=()))


@pytest.mark.parametrize("path", GRAPHS, ids=lambda p: p.stem)
def test_example_graphs(path):
    g = lower(path)
    plan = plan_memory(g, schedule(g))
    check_plan(g, plan)
    assert plan.workspace_bytes > 0


@pytest.mark.parametrize("path", GRAPHS, ids=lambda p: p.stem)
def test_example_graphs_are_within_5_percent_of_the_lower_bound(path):
    g = lower(path)
    plan = plan_memory(g, schedule(g))
    assert plan.workspace_bytes <= 1.05 * plan.lower_bound_bytes, (plan.workspace_bytes, plan.lower_bound_bytes)


def test_branches_reaches_the_lower_bound_even_without_in_place_writes():
    """The greedy-by-size plan took 672 bytes; greedy by first use packs the same values in 496."""
    g = lower(ROOT / "graphs" / "branches.yaml")
    plan = plan_memory(g, schedule(g), in_place_ops=())
    check_plan(g, plan)
    assert plan.workspace_bytes == plan.lower_bound_bytes == 496
    assert plan.in_place == ()


def chain(n: int, size: int) -> Graph:
    t = TensorType("float32", (size,))
    nodes = tuple(Node("Relu", f"r{i}", (f"v{i}",), (f"v{i + 1}",)) for i in range(n))
    return Graph("chain", ("v0",), (f"v{n}",), {f"v{i}": t for i in range(n + 1)}, {}, nodes)


def test_a_chain_reuses_memory():
    g = chain(6, 10)  # 40 bytes each, 5 intermediates v1..v5
    plan = plan_memory(g, schedule(g), in_place_ops=())
    check_plan(g, plan)
    sizes = sum(p.lifetime.nbytes for p in plan.placements)
    assert sizes == 5 * 48
    assert plan.workspace_bytes < sizes
    # never more than a reader and its writer alive: two slots, used in turn
    assert plan.workspace_bytes == plan.lower_bound_bytes == 96
    assert [plan.offset_of()[f"v{i}"] for i in range(1, 6)] == [0, 48, 0, 48, 0]


def test_a_chain_of_elementwise_nodes_runs_in_place():
    g = chain(6, 10)
    plan = plan_memory(g, schedule(g))
    check_plan(g, plan)
    assert plan.in_place == (("v2", "v1"), ("v3", "v2"), ("v4", "v3"), ("v5", "v4"))
    assert [plan.offset_of()[f"v{i}"] for i in range(1, 6)] == [0] * 5
    assert plan.workspace_bytes == plan.in_place_lower_bound_bytes == 48
    assert plan.lower_bound_bytes == 48  # at the plan's granularity: a pair is one buffer
    assert plan.operator_lower_bound_bytes == 96  # both values of a pair are alive in its cluster


def t4(n: int = 4) -> TensorType:
    return TensorType("float32", (n,))


def test_who_may_be_written_over():
    """Only a workspace input of the output's shape, read by no other node of its cluster or later."""
    one = Constant("one", np.ones(4, np.float32), "test", SourceLoc("t", 1, 1))
    types = {v: t4() for v in ("x", "one", "h", "a", "b", "s", "m", "k", "c", "d", "y")}
    types.update(s=t4(1), c=t4(8))
    g = Graph("g", ("x",), ("y",), types, {"one": one}, (
        Node("Relu", "h_from_x", ("x",), ("h",)),          # x is a graph input: not taken over
        Node("Exp", "a_from_h", ("h",), ("a",)),           # h is also read by b_from_h (same cluster)
        Node("Tanh", "b_from_h", ("h",), ("b",)),
        Node("ReduceMean", "s_from_a", ("a",), ("s",), {"axes": [0], "keepdims": 1}),
        Node("Mul", "m_from_s_b", ("s", "b"), ("m",)),     # s broadcasts: only b may be taken over
        Node("Add", "k_from_a_m", ("a", "m"), ("k",)),     # a is read again later, m dies here: m
        Node("Concat", "c_from_k", ("k", "one"), ("c",), {"axis": 0}),  # not elementwise
        Node("Softmax", "d_from_k", ("k",), ("d",), {"axis": 0}),       # not elementwise
        Node("Add", "y_from_d", ("d", "a"), ("y",)),       # y is a graph output
    ))
    sched = schedule(g)
    plan = plan_memory(g, sched)
    check_plan(g, plan)
    assert plan.in_place_of() == {"m": "b", "k": "m"}
    assert plan.offset_of()["m"] == plan.offset_of()["b"] == plan.offset_of()["k"]
    assert plan_memory(g, sched, in_place_ops={"Mul"}).in_place_of() == {"m": "b"}


def test_of_two_inputs_that_may_be_written_over_the_first_is():
    g = Graph("g", ("x", "z"), ("y",), {v: t4() for v in ("x", "z", "a", "b", "c", "y")}, {}, (
        Node("Relu", "ra", ("x",), ("a",)),
        Node("Relu", "rb", ("z",), ("b",)),
        Node("Sub", "sub", ("b", "a"), ("c",)),
        Node("Exp", "out", ("c",), ("y",)),
    ))
    plan = plan_memory(g, schedule(g))
    check_plan(g, plan)
    assert plan.in_place_of() == {"c": "b"}


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
    assert (plan.placements, plan.workspace_bytes, plan.lower_bound_bytes, plan.in_place) == ((), 0, 0, ())


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


# --- the planners on their own: lifetimes in, offsets out --------------------------------------
def random_lifetimes(rng: random.Random) -> list[Lifetime]:
    lives = []
    for i in range(rng.randint(1, 25)):
        first = rng.randint(0, 12)
        lives.append(Lifetime(f"v{i}", 16 * rng.randint(1, 8), first, first + rng.randint(0, 4)))
    return lives


def check_offsets(lives: list[Lifetime], offsets: dict[str, int]) -> int:
    """Every buffer placed, aligned, apart from those it interferes with; returns the bytes used."""
    assert set(offsets) == {l.value for l in lives}
    for i, a in enumerate(lives):
        assert offsets[a.value] >= 0 and offsets[a.value] % 16 == 0
        for b in lives[i + 1:]:
            if a.first <= b.last and b.first <= a.last:
                assert (offsets[a.value] + a.nbytes <= offsets[b.value] or
                        offsets[b.value] + b.nbytes <= offsets[a.value]), (a, b)
    used = max(offsets[l.value] + l.nbytes for l in lives)
    peak = max(sum(l.nbytes for l in lives if l.first <= c <= l.last) for c in range(0, 17))
    assert used >= peak
    return used


def test_the_planners():
    assert {"greedy_by_size", "greedy_by_first_use", "greedy_by_first_use_best_fit",
            "greedy_by_interference", "greedy_by_breadth"} <= set(PLANNERS)
    assert next(iter(PLANNERS)) == "greedy_by_size"  # wins ties, as the only planner once did


@pytest.mark.parametrize("seed", range(40))
def test_every_planner_keeps_interfering_buffers_apart(seed):
    lives = random_lifetimes(random.Random(seed))
    used = {name: check_offsets(lives, planner(lives)) for name, planner in PLANNERS.items()}
    best = min(used.values())
    found = exact_search(lives, best)
    if found is not None:
        assert check_offsets(lives, found) < best


def test_the_search_finds_what_every_greedy_order_misses():
    lives = [Lifetime("a", 48, 0, 1), Lifetime("b", 32, 2, 4), Lifetime("c", 32, 3, 3),
             Lifetime("d", 48, 4, 6), Lifetime("e", 32, 1, 3)]  # b, c and e: 96 bytes in cluster 3
    assert min(check_offsets(lives, planner(lives)) for planner in PLANNERS.values()) == 112
    found = exact_search(lives, 112)
    assert check_offsets(lives, found) == 96
    assert exact_search(lives, 96) is None  # nothing below the peak
    assert exact_search(lives, 112, budget=1) is None  # out of budget: the greedy plan stands


def test_the_plan_names_the_planner_that_won():
    g = lower(ROOT / "graphs" / "branches.yaml")
    assert plan_memory(g, schedule(g), in_place_ops=()).planner == "greedy_by_first_use"
    assert plan_memory(chain(6, 10), schedule(chain(6, 10))).planner == "greedy_by_size"  # first of a tie


# --- in place in generated code ---------------------------------------------------------------
def test_an_in_place_kernel_does_not_declare_its_pair_restrict():
    g = lower(ROOT / "graphs" / "branches.yaml")
    sched = schedule(g)
    plan = plan_memory(g, sched)
    assert plan.in_place_of()["gt"] == "g"  # gated: gt = g * t, over g
    model = generate_model(g, sched, plan)
    (gated,) = [k for k in model.kernels if k.node.name == "gated"]
    signature = gated.source.splitlines()[0]
    assert signature == ("void gated(const float* t_g, const float* __restrict t_t, float* t_gt) "
                         "noexcept {")
    assert gated.call_args[0] == gated.call_args[2]  # the same workspace bytes
    for k in model.kernels:
        if not any(o in plan.in_place_of() for o in k.node.outputs):
            assert k.source.splitlines()[0].count("__restrict") == len(k.kernel.params), k.node.name


def test_a_user_functor_that_is_not_elementwise_cannot_run_in_place():
    from tinsmith.errors import GenerateError
    from tinsmith.generate import CPP, Backend
    from tinsmith.generate.loop_ir import Binary, Const, For, Load, Store, Var

    def reversed_relu(graph, node_id, cluster_id, args, attrs):
        n = args.outputs[0].type.size
        return [For("i", n, (Store(args.outputs[0].name, Var("i"),
                                   Load(args.inputs[0].name, Binary("-", Const(n - 1, False), Var("i")))),))]
    g = chain(3, 4)
    sched = schedule(g)
    backend = Backend("cpp", {**CPP.functors, "Relu": reversed_relu}, CPP.load_functor)
    with pytest.raises(GenerateError, match="reads 'v1' at elements other than the one it writes, so it "
                                            "cannot write 'v2' in place of 'v1'"):
        generate_model(g, sched, plan_memory(g, sched), backend)
    generate_model(g, sched, plan_memory(g, sched, in_place_ops=()), backend)  # fine when asked not to


# Independent NumPy for the ops the compiled graphs below use, in float64 from float32 inputs.
NUMPY = {
    "Relu": lambda x: np.maximum(x, 0), "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Exp": np.exp,
    "Tanh": np.tanh, "Identity": lambda x: x, "Sqrt": lambda x: np.sqrt(np.abs(x)),
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
    "Softmax": lambda x: np.exp(x - x.max()) / np.exp(x - x.max()).sum(),
    "Concat": lambda *xs: np.concatenate(xs),
}


def evaluate(graph: Graph, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    env = {n: v.astype(np.float64) for n, v in inputs.items()}
    env.update({n: c.data.astype(np.float64) for n, c in graph.constants.items()})
    for node in graph.nodes:
        env[node.outputs[0]] = NUMPY[node.op](*(env[v] for v in node.inputs))
    return {n: env[n] for n in graph.outputs}


def in_place_graph() -> Graph:
    """Chains of in-place writes, over the first or the second input, beside broadcasting and a
    value that two nodes of one cluster read (which must not be written over)."""
    t = TensorType("float32", (3, 5))
    row = Constant("row", np.linspace(0.5, 1.5, 5, dtype=np.float32), "test", SourceLoc("t", 1, 1))
    types = {v: t for v in ("x", "a", "b", "c", "d", "e", "f", "g", "h", "k", "out")}
    types.update(y=TensorType("float32", (5,)), yr=TensorType("float32", (5,)), row=row.type)
    nodes = (
        Node("Exp", "n_a", ("x",), ("a",)),
        Node("Relu", "n_yr", ("y",), ("yr",)),
        Node("Sigmoid", "n_b", ("a",), ("b",)),        # over a
        Node("Mul", "n_c", ("b", "row"), ("c",)),      # over b; the constant broadcasts
        Node("Add", "n_d", ("c", "c"), ("d",)),        # over c, read twice
        Node("Sub", "n_e", ("yr", "d"), ("e",)),       # over d, the second input; yr broadcasts
        Node("Identity", "n_f", ("e",), ("f",)),       # over e
        Node("Tanh", "n_g", ("f",), ("g",)),           # over f
        Node("Relu", "n_h", ("g",), ("h",)),           # g is read by n_h and n_k: not written over
        Node("Div", "n_k", ("g", "x"), ("k",)),
        Node("Add", "n_out", ("h", "k"), ("out",)),
    )
    return Graph("in_place", ("x", "y"), ("out",), types, {"row": row}, nodes)


def compile_and_run(graphs: list[Graph], inputs: list[dict[str, np.ndarray]], tmp_path: Path, runner_io):
    """Generate each graph, compile its runner with g++ -O3 (vectorised: where __restrict would be a
    lie, it shows) under -Wall -Wextra -Werror, two at a time, and run it; returns outputs and plans."""
    jobs, plans = [], []
    for g in graphs:
        sched = schedule(g)
        plan = plan_memory(g, sched)
        plans.append(plan)
        folder = tmp_path / g.name
        write_files(assemble(generate_model(g, sched, plan)), folder)
        cmd = ["g++", "-std=c++17", "-O3", "-Wall", "-Wextra", "-Werror", f"-I{RUNTIME_INCLUDE}",
               str(folder / f"{g.name}.cpp"), str(folder / f"{g.name}_runner.cpp"),
               str(ROOT / "runtime_cpp" / "src" / "host_io.cpp"), "-o", str(folder / "runner")]
        jobs.append(cmd)
    running: list[subprocess.Popen] = []
    for cmd in jobs:
        if len(running) == 2:
            running.pop(0).wait()
        running.append(subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True))
    for p in running:
        p.wait()
    results = []
    for g, ins in zip(graphs, inputs):
        runner = tmp_path / g.name / "runner"
        assert runner.exists(), f"{g.name} did not compile"
        outs = runner_io(runner, [ins[n] for n in g.inputs],
                         [(g.types[n].shape, np.float32) for n in g.outputs], tmp_path)
        results.append(dict(zip(g.outputs, outs)))
    return results, plans


@needs_gxx
def test_in_place_kernels_compute_what_numpy_does(tmp_path, runner_io):
    """Tolerance rtol=1e-5, atol=1e-6 for the hand-made graph (a few float32 roundings per element);
    rtol=1e-4, atol=1e-5 for random graphs, whose chains run up to 30 ops deep. A kernel writing over
    bytes another kernel still needs would be off by far more."""
    rng = np.random.default_rng(0)
    graphs = [in_place_graph()]
    inputs = [{"x": rng.standard_normal((3, 5)).astype(np.float32),
               "y": rng.standard_normal(5).astype(np.float32)}]
    for seed in range(6):
        r = random.Random(1000 + seed)
        g = dataclasses.replace(random_graph(r, 30), name=f"rand{seed}")
        graphs.append(g)
        inputs.append({n: rng.standard_normal(g.types[n].shape).astype(np.float32) for n in g.inputs})
    results, plans = compile_and_run(graphs, inputs, tmp_path, runner_io)
    assert dict(plans[0].in_place) == {"b": "a", "c": "b", "d": "c", "e": "d", "f": "e", "g": "f"}
    assert sum(len(p.in_place) for p in plans[1:]) >= 20  # the random graphs write in place too
    for i, (g, ins, got) in enumerate(zip(graphs, inputs, results)):
        rtol, atol = (1e-5, 1e-6) if i == 0 else (1e-4, 1e-5)
        want = evaluate(g, ins)
        for n in g.outputs:
            np.testing.assert_allclose(got[n], want[n], rtol=rtol, atol=atol, err_msg=f"{g.name}: {n}")


def _peak_by_every_cluster(lives) -> int:
    """The peak as its definition reads: in every cluster, the plain buffers alive there plus, for
    each group, the bytes its members alive there span together."""
    def spanned(group, c):
        covered = set()
        for o, n, f, e in group.parts:
            if f <= c <= e:
                covered.update(range(o, o + n))
        return len(covered)
    last = max((e for l in lives for _, _, _, e in l.pieces), default=-1)
    return max((sum(spanned(l, c) if l.parts else l.nbytes * (l.first <= c <= l.last) for l in lives)
                for c in range(last + 1)), default=0)


@pytest.mark.parametrize("seed", range(40))
def test_peak_is_the_most_bytes_alive_in_any_cluster(seed):
    """peak() sums only where buffers and group members start and end; the sum over every
    cluster gives the same, for plain buffers, groups with gaps and overlapping members."""
    from tinsmith.planners import peak
    rng = random.Random(seed)
    lives = []
    for i in range(rng.randint(1, 12)):
        first = rng.randint(0, 20)
        if rng.random() < 0.4:
            parts = []
            for _ in range(rng.randint(1, 5)):
                f = rng.randint(first, first + 10)
                parts.append((rng.randint(0, 40), rng.randint(1, 30), f, rng.randint(f, f + 8)))
            parts[0] = (parts[0][0], parts[0][1], first, parts[0][3])
            lives.append(Lifetime(f"g{i}", max(o + n for o, n, _, _ in parts), first,
                                  max(e for _, _, _, e in parts), tuple(sorted(parts))))
        else:
            lives.append(Lifetime(f"v{i}", rng.randint(1, 64), first, rng.randint(first, first + 10)))
    assert peak(lives) == _peak_by_every_cluster(lives)
