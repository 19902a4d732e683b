"""Every primitive, compiled and run: small generated graphs (one per op, one output per case)
built by ONE SCons run (-j2), executed by their host runners and compared with NumPy
written here, independently of tinsmith.ops' references.

Tolerance rtol=1e-5, atol=1e-6: the kernels compute in float32, the expectations in float64
from the same float32 inputs; each output is at most a 5-term dot product or a single
transcendental function away from its inputs, a few float32 roundings (6e-8 each).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest
import yaml

from oracle import erf

RTOL, ATOL = 1e-5, 1e-6


@dataclass
class OpGraph:
    """A graph for one op: inputs (name -> (shape, kind)), nodes, and per output the NumPy
    function of the inputs it must equal."""

    name: str
    inputs: dict[str, tuple[tuple[int, ...], str]]
    nodes: list[dict]
    expected: dict[str, Callable[[dict[str, np.ndarray]], np.ndarray]]
    constants: dict[str, dict] = field(default_factory=dict)

    def yaml(self) -> str:
        doc = {"graph": self.name,
               "inputs": {n: {"dtype": "float32", "shape": list(s)} for n, (s, _) in self.inputs.items()},
               "outputs": list(self.expected)}
        if self.constants:
            doc["constants"] = self.constants
        doc["nodes"] = self.nodes
        return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None)

    def make_inputs(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(zlib.crc32(self.name.encode()))
        draw = {"normal": lambda s: rng.standard_normal(s),
                "wide": lambda s: 3 * rng.standard_normal(s),  # reaches the tails of exp, tanh, erf
                "positive": lambda s: rng.uniform(0.5, 2.0, s)}
        return {n: draw[kind](shape).astype(np.float32) for n, (shape, kind) in self.inputs.items()}


def node(op, inputs, output, **attrs) -> dict:
    n = {"op": op, "name": output, "inputs": list(inputs), "outputs": [output]}
    if attrs:
        n["attrs"] = attrs
    return n


def f64(v) -> np.ndarray:
    return np.asarray(v, np.float32).astype(np.float64)


def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def gemm(a, b, c=None, alpha=1.0, beta=1.0, transA=0, transB=0):
    a = a.T if transA else a
    b = b.T if transB else b
    return alpha * (a @ b) + (beta * c if c is not None else 0.0)


def _graphs() -> list[OpGraph]:
    graphs = [
        OpGraph("op_matmul",
                {"a": ((3, 4), "normal"), "b": ((4, 5), "normal"), "p": ((2, 3, 4), "normal"),
                 "q": ((2, 4, 5), "normal"), "v": ((4,), "normal")},
                [node("MatMul", ["a", "b"], "plain"), node("MatMul", ["p", "q"], "batched"),
                 node("MatMul", ["p", "b"], "broadcast_b"), node("MatMul", ["v", "b"], "vector_matrix"),
                 node("MatMul", ["a", "v"], "matrix_vector")],
                {"plain": lambda i: i["a"] @ i["b"], "batched": lambda i: i["p"] @ i["q"],
                 "broadcast_b": lambda i: i["p"] @ i["b"], "vector_matrix": lambda i: i["v"] @ i["b"],
                 "matrix_vector": lambda i: i["a"] @ i["v"]}),
        OpGraph("op_gemm",
                {"a": ((3, 4), "normal"), "at": ((4, 3), "normal"), "b": ((4, 5), "normal"),
                 "bt": ((5, 4), "normal"), "c_row": ((5,), "normal"), "c_full": ((3, 5), "normal"),
                 "c_col": ((3, 1), "normal")},
                [node("Gemm", ["a", "b", "c_row"], "plain"),
                 node("Gemm", ["at", "b", "c_row"], "trans_a", transA=1),
                 node("Gemm", ["a", "bt", "c_full"], "trans_b", transB=1),
                 node("Gemm", ["a", "b", "c_full"], "alpha_beta", alpha=0.5, beta=-2.0),
                 node("Gemm", ["at", "bt", "c_col"], "both_trans", transA=1, transB=1, alpha=1.5),
                 node("Gemm", ["a", "b"], "no_c"),
                 node("Gemm", ["a", "b", "c_scalar"], "const_c", beta=0.5)],
                {"plain": lambda i: gemm(i["a"], i["b"], i["c_row"]),
                 "trans_a": lambda i: gemm(i["at"], i["b"], i["c_row"], transA=1),
                 "trans_b": lambda i: gemm(i["a"], i["bt"], i["c_full"], transB=1),
                 "alpha_beta": lambda i: gemm(i["a"], i["b"], i["c_full"], alpha=0.5, beta=-2.0),
                 "both_trans": lambda i: gemm(i["at"], i["bt"], i["c_col"], alpha=1.5, transA=1, transB=1),
                 "no_c": lambda i: gemm(i["a"], i["b"]),
                 "const_c": lambda i: gemm(i["a"], i["b"], np.array([0.75]), beta=0.5)},
                {"c_scalar": {"value": [0.75]}}),
    ]
    binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power}
    for op, fn in binary.items():
        # Div divides by, and Pow raises, values kept away from zero
        second = "positive" if op == "Div" else "normal"
        first = "positive" if op == "Pow" else "normal"
        k = 2.0 if op == "Pow" else 1.5
        graphs.append(OpGraph(
            f"op_{op.lower()}",
            {"x": ((2, 3, 4), first), "y": ((2, 3, 4), second), "r": ((4,), second),
             "c": ((3, 1), second), "cx": ((3, 1), first)},
            [node(op, ["x", "y"], "same_shape"), node(op, ["x", "r"], "row"),
             node(op, ["x", "c"], "column"), node(op, ["cx", "r"], "outer"),
             node(op, ["x", "k"], "constant"), node(op, ["r", "x"], "left_broadcast")
             if op != "Pow" else node(op, ["x", "half"], "square_root")],
            {"same_shape": lambda i, fn=fn: fn(i["x"], i["y"]),
             "row": lambda i, fn=fn: fn(i["x"], i["r"]),
             "column": lambda i, fn=fn: fn(i["x"], i["c"]),
             "outer": lambda i, fn=fn: fn(i["cx"], i["r"]),
             "constant": lambda i, fn=fn, k=k: fn(i["x"], k),
             **({"left_broadcast": lambda i, fn=fn: fn(i["r"], i["x"])} if op != "Pow"
                else {"square_root": lambda i: np.power(i["x"], 0.5)})},
            {"k": {"value": k}, **({"half": {"value": 0.5}} if op == "Pow" else {})}))
    graphs += [
        OpGraph("op_unary", {"x": ((3, 5), "wide"), "p": ((3, 5), "positive")},
                [node("Relu", ["x"], "relu"), node("Sigmoid", ["x"], "sigmoid"),
                 node("Tanh", ["x"], "tanh"), node("Exp", ["x"], "exp"),
                 node("Erf", ["x"], "erf"), node("Sqrt", ["p"], "sqrt")],
                {"relu": lambda i: np.maximum(i["x"], 0.0),
                 "sigmoid": lambda i: 1.0 / (1.0 + np.exp(-i["x"])),
                 "tanh": lambda i: np.tanh(i["x"]), "exp": lambda i: np.exp(i["x"]),
                 "erf": lambda i: erf(i["x"]), "sqrt": lambda i: np.sqrt(i["p"])}),
        OpGraph("op_softmax", {"x": ((3, 4, 5), "wide")},
                [node("Softmax", ["x"], "axis_0", axis=0), node("Softmax", ["x"], "axis_1", axis=1),
                 node("Softmax", ["x"], "axis_last", axis=-1), node("Softmax", ["x"], "no_axis")],
                {"axis_0": lambda i: softmax(i["x"], 0), "axis_1": lambda i: softmax(i["x"], 1),
                 "axis_last": lambda i: softmax(i["x"], -1), "no_axis": lambda i: softmax(i["x"], -1)}),
        OpGraph("op_reducemean", {"x": ((2, 3, 4), "normal")},
                [node("ReduceMean", ["x"], "middle_keep", axes=[1], keepdims=1),
                 node("ReduceMean", ["x"], "middle_drop", axes=[1], keepdims=0),
                 node("ReduceMean", ["x"], "outer_drop", axes=[0, 2], keepdims=0),
                 node("ReduceMean", ["x"], "last_keep", axes=[-1]),  # keepdims defaults to 1
                 node("ReduceMean", ["x"], "all_keep"),  # no axes: every axis
                 node("ReduceMean", ["x"], "all_drop", keepdims=0)],
                {"middle_keep": lambda i: i["x"].mean(axis=1, keepdims=True),
                 "middle_drop": lambda i: i["x"].mean(axis=1),
                 "outer_drop": lambda i: i["x"].mean(axis=(0, 2)),
                 "last_keep": lambda i: i["x"].mean(axis=-1, keepdims=True),
                 "all_keep": lambda i: i["x"].mean(keepdims=True),
                 "all_drop": lambda i: i["x"].mean()}),
        OpGraph("op_reshape", {"x": ((2, 3, 4), "normal")},
                [node("Reshape", ["x", "s_matrix"], "matrix"), node("Reshape", ["x", "s_keep"], "keep_first"),
                 node("Reshape", ["x", "s_flat"], "flat"), node("Reshape", ["x", "s_4d"], "rank_4")],
                {"matrix": lambda i: i["x"].reshape(4, 6), "keep_first": lambda i: i["x"].reshape(2, 12),
                 "flat": lambda i: i["x"].reshape(24), "rank_4": lambda i: i["x"].reshape(2, 3, 2, 2)},
                {"s_matrix": {"value": [4, 6], "dtype": "int64"},
                 "s_keep": {"value": [0, -1], "dtype": "int64"},  # 0 copies the input's dimension
                 "s_flat": {"value": [-1], "dtype": "int64"},
                 "s_4d": {"value": [2, 3, 2, -1], "dtype": "int64"}}),
        OpGraph("op_transpose", {"x": ((2, 3, 4), "normal"), "m": ((3, 5), "normal")},
                [node("Transpose", ["x"], "rotate", perm=[2, 0, 1]),
                 node("Transpose", ["x"], "swap_outer", perm=[1, 0, 2]),
                 node("Transpose", ["x"], "reverse"),  # no perm: reverse the axes
                 node("Transpose", ["m"], "matrix", perm=[1, 0])],
                {"rotate": lambda i: i["x"].transpose(2, 0, 1), "swap_outer": lambda i: i["x"].transpose(1, 0, 2),
                 "reverse": lambda i: i["x"].transpose(), "matrix": lambda i: i["m"].T}),
        OpGraph("op_concat",
                {"a": ((2, 3), "normal"), "b": ((1, 3), "normal"), "c": ((2, 2), "normal"),
                 "d": ((2, 3), "normal"), "p": ((2, 1, 4), "normal"), "q": ((2, 3, 4), "normal")},
                [node("Concat", ["a", "b"], "rows", axis=0), node("Concat", ["a", "c"], "columns", axis=1),
                 node("Concat", ["a", "c", "d"], "three_last", axis=-1),
                 node("Concat", ["a", "b", "d"], "three_rows", axis=0),
                 node("Concat", ["p", "q"], "middle", axis=1)],
                {"rows": lambda i: np.concatenate([i["a"], i["b"]], 0),
                 "columns": lambda i: np.concatenate([i["a"], i["c"]], 1),
                 "three_last": lambda i: np.concatenate([i["a"], i["c"], i["d"]], -1),
                 "three_rows": lambda i: np.concatenate([i["a"], i["b"], i["d"]], 0),
                 "middle": lambda i: np.concatenate([i["p"], i["q"]], 1)}),
        OpGraph("op_identity", {"x": ((2, 3), "normal")},
                [node("Identity", ["x"], "of_input"), node("Relu", ["x"], "r"),
                 node("Identity", ["r"], "of_intermediate")],
                {"of_input": lambda i: i["x"], "of_intermediate": lambda i: np.maximum(i["x"], 0.0)}),
    ]
    return graphs


GRAPHS = _graphs()
CASES = [(g.name, out) for g in GRAPHS for out in g.expected]


@dataclass
class Compiled:
    values: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]  # (graph, output) -> (got, want)
    log: str  # SCons's stderr: why a graph did not build


@pytest.fixture(scope="module")
def compiled(tmp_path_factory, scons_cmd, runner_io) -> Compiled:
    """Build every op graph with one SCons run (-k: one broken graph fails only its own tests)
    and run each runner once."""
    src = tmp_path_factory.mktemp("op_graphs")
    build = tmp_path_factory.mktemp("op_build")
    paths = []
    for g in GRAPHS:
        (src / f"{g.name}.yaml").write_text(g.yaml())
        paths.append(str(src / f"{g.name}.yaml"))
    proc = scons_cmd("-Q", "-k", "-j2", f"graphs={','.join(paths)}", f"build_dir={build}", check=False)
    values = {}
    for g in GRAPHS:
        runner = build / g.name / f"{g.name}_runner"
        if not runner.exists():
            continue
        inputs = g.make_inputs()
        want = {out: np.asarray(fn({n: f64(v) for n, v in inputs.items()}), np.float64)
                for out, fn in g.expected.items()}
        got = runner_io(runner, list(inputs.values()), [(w.shape, np.float32) for w in want.values()], src)
        for out, value in zip(want, got):
            values[g.name, out] = (value, want[out])
    return Compiled(values, proc.stderr)


@pytest.mark.parametrize("graph, output", CASES, ids=[f"{g}.{o}" for g, o in CASES])
def test_compiled_op_matches_numpy(compiled, graph, output):
    if (graph, output) not in compiled.values:
        pytest.fail(f"{graph} did not build:\n{compiled.log}")
    got, want = compiled.values[graph, output]
    assert got.shape == want.shape
    assert np.all(np.isfinite(want))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_every_primitive_is_covered():
    ops = {n["op"] for g in GRAPHS for n in g.nodes}
    assert ops == {"MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Pow", "Relu", "Sigmoid", "Tanh", "Exp",
                   "Erf", "Sqrt", "Softmax", "ReduceMean", "Reshape", "Transpose", "Concat", "Identity"}
