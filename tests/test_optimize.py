"""Optimization passes (codegen.optimize): each pass's result against an expected graph built by hand."""
from __future__ import annotations

import textwrap

import numpy as np

from codegen.errors import SourceLoc
from codegen.expand import expand_graph
from codegen.ir import Constant, Graph, Node, TensorType
from codegen.load import load_graph_spec
from codegen.optimize import DEFAULT_PASSES, drop_dead_nodes, fold_constants, optimize

LOC = SourceLoc("test.yaml", 1, 1)


def T(*shape, dtype="float32") -> TensorType:
    return TensorType(dtype, tuple(shape))


def N(op, name, inputs, outputs, **attrs) -> Node:
    return Node(op, name, tuple(inputs), tuple(outputs), attrs)


def C(name, data) -> Constant:
    return Constant(name, np.asarray(data), "test", LOC)


def make_graph(inputs, outputs, types, constants, nodes) -> Graph:
    """A graph by hand: `types` lists every non-constant value; constant types come from their data."""
    consts = {c.name: c for c in constants}
    all_types = dict(types)
    all_types.update({c.name: c.type for c in constants})
    return Graph("g", tuple(inputs), tuple(outputs), all_types, consts, tuple(nodes))


def assert_same_graph(actual: Graph, expected: Graph) -> None:
    """Graph equality ignores constants, so compare their names, types and data as well."""
    assert actual.nodes == expected.nodes
    assert dict(actual.types) == dict(expected.types)
    assert (actual.inputs, actual.outputs) == (expected.inputs, expected.outputs)
    assert set(actual.constants) == set(expected.constants)
    for name, c in expected.constants.items():
        got = actual.constants[name]
        assert got.data.dtype == c.data.dtype, name
        assert got.data.shape == c.data.shape, name
        np.testing.assert_array_equal(got.data, c.data)
        assert got.type == actual.types[name], name
    assert actual == expected


# --- fold_constants -------------------------------------------------------------------------
W = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5


def test_transpose_of_a_constant_becomes_a_constant():
    g = make_graph(["x"], ["y"], {"x": T(4, 3), "wt": T(3, 2), "y": T(4, 2)}, [C("w", W)], [
        N("Transpose", "t", ["w"], ["wt"], perm=(1, 0)),
        N("MatMul", "mm", ["x", "wt"], ["y"]),
    ])
    folded = fold_constants(g)
    wt = np.array([[-2.5, 0.5], [-1.5, 1.5], [-0.5, 2.5]], dtype=np.float32)
    expected = make_graph(["x"], ["y"], {"x": T(4, 3), "wt": T(3, 2), "y": T(4, 2)},
                          [C("w", W), C("wt", wt)], [N("MatMul", "mm", ["x", "wt"], ["y"])])
    assert_same_graph(folded, expected)
    assert folded.constants["wt"].source == "folded from node 't'"
    assert folded.constants["wt"].data.flags["C_CONTIGUOUS"]
    # and the weight it came from is dead now
    assert_same_graph(drop_dead_nodes(folded), make_graph(
        ["x"], ["y"], {"x": T(4, 3), "wt": T(3, 2), "y": T(4, 2)}, [C("wt", wt)],
        [N("MatMul", "mm", ["x", "wt"], ["y"])]))


def test_chains_fold_in_one_pass():
    shape = np.array([1, 6], dtype=np.int64)
    g = make_graph(["x"], ["y"], {"x": T(1, 6), "wt": T(3, 2), "flat": T(1, 6), "y": T(1, 6)},
                   [C("w", W), C("shape", shape)], [
        N("Transpose", "t", ["w"], ["wt"], perm=(1, 0)),
        N("Reshape", "r", ["wt", "shape"], ["flat"], allowzero=0),
        N("Add", "add", ["x", "flat"], ["y"]),
    ])
    flat = np.array([[-2.5, 0.5, -1.5, 1.5, -0.5, 2.5]], dtype=np.float32)
    expected = make_graph(["x"], ["y"], {"x": T(1, 6), "wt": T(3, 2), "flat": T(1, 6), "y": T(1, 6)},
                          [C("w", W), C("shape", shape), C("wt", W.T.copy()), C("flat", flat)],
                          [N("Add", "add", ["x", "flat"], ["y"])])
    assert_same_graph(fold_constants(g), expected)
    assert_same_graph(optimize(g), make_graph(
        ["x"], ["y"], {"x": T(1, 6), "flat": T(1, 6), "y": T(1, 6)}, [C("flat", flat)],
        [N("Add", "add", ["x", "flat"], ["y"])]))


def test_nodes_writing_graph_outputs_stay():
    """An output is written by a kernel into the caller's buffer, so its node is kept."""
    g = make_graph([], ["y"], {"y": T(2, 3)}, [C("w", W)], [N("Relu", "r", ["w"], ["y"])])
    assert_same_graph(fold_constants(g), g)


def test_nodes_reading_inputs_stay():
    g = make_graph(["x"], ["y"], {"x": T(2, 3), "h": T(2, 3), "y": T(2, 3)}, [C("w", W)], [
        N("Add", "a", ["x", "w"], ["h"]),
        N("Relu", "r", ["h"], ["y"]),
    ])
    assert_same_graph(fold_constants(g), g)


def test_folded_scalar_keeps_rank_0():
    a = np.array([1.0, 2.0, 3.0], np.float32)
    g = make_graph(["x"], ["y"], {"x": T(), "d": T(), "y": T()}, [C("a", a)], [
        N("MatMul", "dot", ["a", "a"], ["d"]),
        N("Mul", "m", ["x", "d"], ["y"]),
    ])
    folded = fold_constants(g)
    assert folded.constants["d"].data.shape == ()
    assert folded.constants["d"].data == np.float32(14.0)
    assert_same_graph(folded, make_graph(["x"], ["y"], {"x": T(), "d": T(), "y": T()},
                                         [C("a", a), C("d", np.float32(14.0))],
                                         [N("Mul", "m", ["x", "d"], ["y"])]))


def test_folded_int64_values_stay_int64():
    g = make_graph(["x"], ["y"], {"x": T(6), "s": T(2, dtype="int64"), "y": T(2, 3)},
                   [C("a", np.array([2], np.int64)), C("b", np.array([3], np.int64))], [
        N("Concat", "cat", ["a", "b"], ["s"], axis=0),
        N("Reshape", "r", ["x", "s"], ["y"], allowzero=0),
    ])
    folded = fold_constants(g)
    assert folded.nodes == (N("Reshape", "r", ["x", "s"], ["y"], allowzero=0),)
    assert folded.constants["s"].data.dtype == np.int64
    assert folded.constants["s"].data.tolist() == [2, 3]


def test_omitted_optional_inputs_do_not_block_folding():
    a = np.array([[1.0, 2.0]], np.float32)
    b = np.array([[3.0], [4.0]], np.float32)
    g = make_graph(["x"], ["y"], {"x": T(1, 1), "p": T(1, 1), "y": T(1, 1)}, [C("a", a), C("b", b)], [
        N("Gemm", "gemm", ["a", "b", ""], ["p"], alpha=2.0, beta=1.0, transA=0, transB=0),
        N("Add", "add", ["x", "p"], ["y"]),
    ])
    folded = fold_constants(g)
    assert folded.nodes == (N("Add", "add", ["x", "p"], ["y"]),)
    assert folded.constants["p"].data.tolist() == [[22.0]]


def test_linear_weight_transpose_is_folded(tmp_path):
    """Through the frontend: Linear with transB on a constant weight leaves no Transpose behind."""
    path = tmp_path / "g.yaml"
    path.write_text(textwrap.dedent("""\
        graph: g
        inputs:
          x: {dtype: float32, shape: [1, 3]}
        outputs: [y]
        constants:
          w: {value: [[1, 2, 3], [4, 5, 6]]}
        nodes:
          - {op: Linear, name: fc, inputs: [x, w], outputs: [y], attrs: {transB: 1}}
    """))
    g = optimize(expand_graph(load_graph_spec(path)))
    assert g.nodes == (N("MatMul", "fc_matmul", ["x", "fc_transpose_out"], ["y"]),)
    assert set(g.constants) == {"fc_transpose_out"}
    assert g.constants["fc_transpose_out"].data.tolist() == [[1, 4], [2, 5], [3, 6]]
    assert dict(g.types) == {"x": T(1, 3), "fc_transpose_out": T(3, 2), "y": T(1, 2)}


# --- drop_dead_nodes ------------------------------------------------------------------------
def test_dead_branches_and_their_constants_go():
    g = make_graph(["x", "unused"], ["y"],
                   {"x": T(2, 3), "unused": T(1), "h": T(2, 3), "y": T(2, 3), "e": T(2, 3), "dead": T(2, 3)},
                   [C("w", W), C("c", W + 1)], [
        N("Exp", "grow", ["x"], ["e"]),
        N("Add", "bias", ["x", "w"], ["h"]),
        N("Add", "waste", ["e", "c"], ["dead"]),
        N("Relu", "act", ["h"], ["y"]),
    ])
    expected = make_graph(["x", "unused"], ["y"], {"x": T(2, 3), "unused": T(1), "h": T(2, 3), "y": T(2, 3)},
                          [C("w", W)], [
        N("Add", "bias", ["x", "w"], ["h"]),
        N("Relu", "act", ["h"], ["y"]),
    ])
    assert_same_graph(drop_dead_nodes(g), expected)


def test_live_multi_output_nodes_keep_all_outputs(tmp_path):
    """LayerNormalization with only Y used: the InvStdDev branch goes, Mean (used by Y) stays."""
    path = tmp_path / "g.yaml"
    path.write_text(textwrap.dedent("""\
        graph: g
        inputs:
          x: {dtype: float32, shape: [2, 4]}
          s: {dtype: float32, shape: [4]}
        outputs: [y]
        nodes:
          - {op: LayerNormalization, name: ln, inputs: [x, s], outputs: [y]}
    """))
    g = expand_graph(load_graph_spec(path))
    assert g.nodes[-1].name == "ln_div_2"  # 1 / std, the unused InvStdDev
    live = drop_dead_nodes(g)
    assert live.nodes == g.nodes[:-1]
    assert set(live.constants) == {"ln_c"}
    assert set(live.types) == set(g.types) - {"ln_div_2_out", "ln_c_2"}


def test_everything_live_is_unchanged():
    g = make_graph(["x"], ["y", "z"], {"x": T(2, 3), "y": T(2, 3), "z": T(2, 3)}, [], [
        N("Relu", "r", ["x"], ["y"]),
        N("Exp", "e", ["y"], ["z"]),
    ])
    assert_same_graph(drop_dead_nodes(g), g)


def test_default_passes():
    assert tuple(DEFAULT_PASSES) == (fold_constants, drop_dead_nodes)
