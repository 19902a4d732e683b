"""Optimization passes (tinsmith.optimize): each pass's result against an expected graph built by hand."""
from __future__ import annotations

import textwrap

import numpy as np

from tinsmith.errors import SourceLoc
from tinsmith.expand import expand_graph
from tinsmith.ir import Constant, Graph, Node, TensorType
from tinsmith.load import load_graph_spec
from tinsmith.optimize import DEFAULT_PASSES, drop_dead_nodes, fold_batch_norm, fold_constants, optimize
from tinsmith.reference import evaluate

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
    from tinsmith.optimize import gemm_weights_by_row
    from tinsmith.quant.onnx_fast import qlinear_on_int8_kernels
    assert tuple(DEFAULT_PASSES) == (fold_constants, fold_batch_norm, qlinear_on_int8_kernels, drop_dead_nodes,
                                     gemm_weights_by_row)


def test_gemm_weights_by_row_transposes_a_constant_only_that_gemm_reads():
    from tinsmith.optimize import gemm_weights_by_row
    from tinsmith.reference import evaluate
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 5)).astype(np.float32)
    types = {"x": TensorType("float32", (2, 5)), "w": TensorType("float32", (3, 5)),
             "h": TensorType("float32", (2, 3)), "y": TensorType("float32", (2, 3)),
             "v": TensorType("float32", (3, 5))}
    consts = {"w": Constant("w", w, "test", None), "v": Constant("v", w.copy(), "test", None)}
    nodes = (Node("Gemm", "fc", ("x", "w"), ("h",), {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 1}),
             Node("Gemm", "fc2", ("x", "v"), ("y",), {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 1}),
             Node("Add", "keep", ("v", "v"), ("vv",)))
    g = Graph("g", ("x",), ("h", "y"), {**types, "vv": types["v"]}, consts, nodes)
    out = gemm_weights_by_row(g)
    assert out.nodes[0].attrs["transB"] == 0 and out.types["w"].shape == (5, 3)
    np.testing.assert_array_equal(out.constants["w"].data, w.T)
    assert out.nodes[1].attrs["transB"] == 1 and out.types["v"].shape == (3, 5)  # v has another reader
    x = rng.standard_normal((2, 5)).astype(np.float32)
    for name in ("h", "y"):
        np.testing.assert_allclose(evaluate(out, {"x": x})[name], evaluate(g, {"x": x})[name], rtol=1e-6)


# --- fold_batch_norm -----------------------------------------------------------------------
# The folded weights are computed here in float64 from the ONNX definition
# y = (x - mean) / sqrt(var + epsilon) * scale + B, written independently of tinsmith.optimize.
EPS = 1e-3
BN_ATTRS = {"epsilon": EPS, "momentum": 0.9, "training_mode": 0}
CONV_ATTRS = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None, "pads": (1, 1, 1, 1),
              "strides": None}
GEMM_ATTRS = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}


def bn_params(c: int, seed: int = 3) -> list[Constant]:
    rng = np.random.default_rng(seed)
    return [C("scale", rng.uniform(0.5, 2, c).astype(np.float32)),
            C("shift", rng.standard_normal(c).astype(np.float32)),
            C("mean", rng.standard_normal(c).astype(np.float32)),
            C("var", rng.uniform(0.1, 3, c).astype(np.float32))]


def bn_factors(params: list[Constant]) -> tuple[np.ndarray, np.ndarray]:
    """Per channel: y = x * a + b for the BatchNormalization with these parameters."""
    scale, shift, mean, var = (p.data.astype(np.float64) for p in params)
    a = scale / np.sqrt(var + np.float64(np.float32(EPS)))
    return a, shift - mean * a


def BN(x, y) -> Node:
    return N("BatchNormalization", "bn", [x, "scale", "shift", "mean", "var"], [y], **BN_ATTRS)


def assert_same_numbers(folded: Graph, original: Graph, seed: int = 0) -> None:
    """Both graphs compute the same outputs (NumPy references), to float32 rounding."""
    rng = np.random.default_rng(seed)
    inputs = {n: rng.standard_normal(original.types[n].shape).astype(np.float32) for n in original.inputs}
    want, got = evaluate(original, inputs), evaluate(folded, inputs)
    for name in original.outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


def test_batch_norm_folds_into_conv_with_bias():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    params = bn_params(4)
    types = {"x": T(1, 3, 5, 5), "h": T(1, 4, 5, 5), "y": T(1, 4, 5, 5)}
    g = make_graph(["x"], ["y"], types, [C("w", w), C("b", b), *params], [
        N("Conv", "conv", ["x", "w", "b"], ["h"], **CONV_ATTRS), BN("h", "y")])
    a, c = bn_factors(params)
    w2 = (w.astype(np.float64) * a[:, None, None, None]).astype(np.float32)
    b2 = (b.astype(np.float64) * a + c).astype(np.float32)
    expected = make_graph(["x"], ["y"], {"x": T(1, 3, 5, 5), "y": T(1, 4, 5, 5)},
                          [C("w", w), C("b", b), *params, C("conv_weight", w2), C("conv_bias", b2)],
                          [N("Conv", "conv", ["x", "conv_weight", "conv_bias"], ["y"], **CONV_ATTRS)])
    folded = fold_batch_norm(g)
    assert_same_graph(folded, expected)
    assert folded.constants["conv_weight"].source == \
        "weight of node 'conv' with BatchNormalization 'bn' folded in"
    assert_same_numbers(folded, g)
    # the old parameters are dead now
    assert set(drop_dead_nodes(folded).constants) == {"conv_weight", "conv_bias"}


def test_batch_norm_folds_into_depthwise_conv_without_bias():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((3, 1, 3, 3)).astype(np.float32)
    params = bn_params(3)
    attrs = {**CONV_ATTRS, "group": 3}
    types = {"x": T(1, 3, 4, 4), "h": T(1, 3, 4, 4), "y": T(1, 3, 4, 4)}
    g = make_graph(["x"], ["y"], types, [C("w", w), *params],
                   [N("Conv", "dw", ["x", "w"], ["h"], **attrs), BN("h", "y")])
    a, c = bn_factors(params)
    expected = make_graph(["x"], ["y"], {"x": T(1, 3, 4, 4), "y": T(1, 3, 4, 4)}, [
        C("w", w), *params, C("dw_weight", (w.astype(np.float64) * a[:, None, None, None]).astype(np.float32)),
        C("dw_bias", c.astype(np.float32))], [N("Conv", "dw", ["x", "dw_weight", "dw_bias"], ["y"], **attrs)])
    folded = fold_batch_norm(g)
    assert_same_graph(folded, expected)
    assert_same_numbers(folded, g)


def test_batch_norm_folds_into_gemm():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((5, 6)).astype(np.float32)  # transB: [out, in]
    bias = rng.standard_normal(5).astype(np.float32)
    params = bn_params(5)
    attrs = {**GEMM_ATTRS, "beta": 0.5, "transB": 1}
    g = make_graph(["x"], ["y"], {"x": T(2, 6), "h": T(2, 5), "y": T(2, 5)}, [C("w", w), C("c", bias), *params],
                   [N("Gemm", "fc", ["x", "w", "c"], ["h"], **attrs), BN("h", "y")])
    a, c = bn_factors(params)
    w2 = (w.astype(np.float64) * a[:, None]).astype(np.float32)
    c2 = (0.5 * bias.astype(np.float64) * a + c).astype(np.float32)
    expected = make_graph(["x"], ["y"], {"x": T(2, 6), "y": T(2, 5)},
                          [C("w", w), C("c", bias), *params, C("fc_weight", w2), C("fc_bias", c2)],
                          [N("Gemm", "fc", ["x", "fc_weight", "fc_bias"], ["y"], **{**attrs, "beta": 1.0})])
    folded = fold_batch_norm(g)
    assert_same_graph(folded, expected)
    assert_same_numbers(folded, g)


def test_batch_norm_folds_into_gemm_without_c():
    rng = np.random.default_rng(4)
    w = rng.standard_normal((6, 5)).astype(np.float32)
    params = bn_params(5)
    g = make_graph(["x"], ["y"], {"x": T(2, 6), "h": T(2, 5), "y": T(2, 5)}, [C("w", w), *params],
                   [N("Gemm", "fc", ["x", "w"], ["h"], **GEMM_ATTRS), BN("h", "y")])
    a, c = bn_factors(params)
    expected = make_graph(["x"], ["y"], {"x": T(2, 6), "y": T(2, 5)}, [
        C("w", w), *params, C("fc_weight", (w.astype(np.float64) * a[None, :]).astype(np.float32)),
        C("fc_bias", c.astype(np.float32))], [N("Gemm", "fc", ["x", "fc_weight", "fc_bias"], ["y"], **GEMM_ATTRS)])
    folded = fold_batch_norm(g)
    assert_same_graph(folded, expected)
    assert_same_numbers(folded, g)


def test_batch_norm_folds_into_matmul_and_add():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, 5)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    params = bn_params(5)
    g = make_graph(["x"], ["y"], {"x": T(3, 6), "m": T(3, 5), "h": T(3, 5), "y": T(3, 5)},
                   [C("w", w), C("b", bias), *params], [
        N("MatMul", "mm", ["x", "w"], ["m"]), N("Add", "add", ["b", "m"], ["h"]), BN("h", "y")])
    a, c = bn_factors(params)
    expected = make_graph(["x"], ["y"], {"x": T(3, 6), "m": T(3, 5), "y": T(3, 5)}, [
        C("w", w), C("b", bias), *params,
        C("mm_weight", (w.astype(np.float64) * a[None, :]).astype(np.float32)),
        C("add_bias", (bias.astype(np.float64) * a + c).astype(np.float32))], [
        N("MatMul", "mm", ["x", "mm_weight"], ["m"]), N("Add", "add", ["add_bias", "m"], ["y"])])
    folded = fold_batch_norm(g)
    assert_same_graph(folded, expected)
    assert_same_numbers(folded, g)


def test_batch_norm_after_a_bare_matmul_becomes_an_add():
    rng = np.random.default_rng(6)
    w = rng.standard_normal((6, 5)).astype(np.float32)
    params = bn_params(5)
    g = make_graph(["x"], ["y"], {"x": T(3, 6), "m": T(3, 5), "y": T(3, 5)}, [C("w", w), *params], [
        N("MatMul", "mm", ["x", "w"], ["m"]), BN("m", "y")])
    a, c = bn_factors(params)
    expected = make_graph(["x"], ["y"], {"x": T(3, 6), "m": T(3, 5), "y": T(3, 5)}, [
        C("w", w), *params, C("mm_weight", (w.astype(np.float64) * a[None, :]).astype(np.float32)),
        C("bn_shift", c.astype(np.float32))], [
        N("MatMul", "mm", ["x", "mm_weight"], ["m"]), N("Add", "bn", ["m", "bn_shift"], ["y"])])
    folded = fold_batch_norm(g)
    assert_same_graph(folded, expected)
    assert_same_numbers(folded, g)


def test_batch_norms_in_a_row_fold_one_after_the_other():
    rng = np.random.default_rng(7)
    w = rng.standard_normal((2, 2, 1, 1)).astype(np.float32)
    p1, p2 = bn_params(2, 1), bn_params(2, 2)
    p2 = [C(f"{c.name}2", c.data) for c in p2]
    types = {"x": T(1, 2, 2, 2), "h": T(1, 2, 2, 2), "k": T(1, 2, 2, 2), "y": T(1, 2, 2, 2)}
    g = make_graph(["x"], ["y"], types, [C("w", w), *p1, *p2], [
        N("Conv", "conv", ["x", "w"], ["h"], **{**CONV_ATTRS, "pads": None}), BN("h", "k"),
        N("BatchNormalization", "bn2", ["k", "scale2", "shift2", "mean2", "var2"], ["y"], **BN_ATTRS)])
    folded = fold_batch_norm(g)
    assert [n.op for n in folded.nodes] == ["Conv"]
    assert folded.nodes[0].inputs == ("x", "conv_weight_2", "conv_bias_2")
    assert folded.nodes[0].outputs == ("y",)
    assert_same_numbers(folded, g)


def test_batch_norm_stays_when_folding_would_change_other_readers():
    rng = np.random.default_rng(8)
    w = rng.standard_normal((2, 2, 1, 1)).astype(np.float32)
    params = bn_params(2)
    t = T(1, 2, 3, 3)
    conv = N("Conv", "conv", ["x", "w"], ["h"], **{**CONV_ATTRS, "pads": None})
    shared = make_graph(["x"], ["y", "z"], {"x": t, "h": t, "y": t, "z": t}, [C("w", w), *params],
                        [conv, BN("h", "y"), N("Relu", "r", ["h"], ["z"])])
    assert_same_graph(fold_batch_norm(shared), shared)
    as_output = make_graph(["x"], ["y", "h"], {"x": t, "h": t, "y": t}, [C("w", w), *params], [conv, BN("h", "y")])
    assert_same_graph(fold_batch_norm(as_output), as_output)
    runtime_weight = make_graph(["x", "w"], ["y"], {"x": t, "w": T(2, 2, 1, 1), "h": t, "y": t}, params,
                                [conv, BN("h", "y")])
    assert_same_graph(fold_batch_norm(runtime_weight), runtime_weight)
    after_relu = make_graph(["x"], ["y"], {"x": t, "y": t, "r": t}, params,
                            [N("Relu", "r", ["x"], ["r"]), BN("r", "y")])
    assert_same_graph(fold_batch_norm(after_relu), after_relu)
    rank3 = make_graph(["x"], ["y"], {"x": T(2, 3, 6), "m": T(2, 3, 3), "y": T(2, 3, 3)},
                       [C("w", rng.standard_normal((6, 3)).astype(np.float32)), *bn_params(3)],
                       [N("MatMul", "mm", ["x", "w"], ["m"]), BN("m", "y")])  # channels are not W's columns
    assert_same_graph(fold_batch_norm(rank3), rank3)


def test_optimize_folds_batch_norm_through_the_frontend(tmp_path):
    """Conv -> BatchNormalization -> Relu written in a graph file compiles to Conv -> Relu."""
    path = tmp_path / "g.yaml"
    path.write_text(textwrap.dedent("""\
        graph: g
        inputs:
          x: {dtype: float32, shape: [1, 2, 4, 4]}
        outputs: [y]
        constants:
          w: {random: normal, shape: [3, 2, 3, 3], seed: 1}
          s: {value: [1.0, 2.0, 0.5]}
          b: {value: [0.1, 0.2, 0.3]}
          m: {value: [0.0, -1.0, 1.0]}
          v: {value: [1.0, 4.0, 0.25]}
        nodes:
          - {op: Conv, name: conv, inputs: [x, w], outputs: [h], attrs: {pads: [1, 1, 1, 1]}}
          - {op: BatchNormalization, name: bn, inputs: [h, s, b, m, v], outputs: [n]}
          - {op: Relu, name: act, inputs: [n], outputs: [y]}
    """))
    expanded = expand_graph(load_graph_spec(path))
    g = optimize(expanded)
    assert [(n.op, n.inputs, n.outputs) for n in g.nodes] == [
        ("Conv", ("x", "conv_weight", "conv_bias"), ("n",)), ("Relu", ("n",), ("y",))]
    assert set(g.constants) == {"conv_weight", "conv_bias"}
    assert_same_numbers(g, expanded)
