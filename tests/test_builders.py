"""Op builders (tinsmith.builders): each expansion against an expected graph written by hand, and its
numbers (through tinsmith.reference) against the ONNX formula computed here in NumPy."""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tinsmith.builders import BUILDERS
from tinsmith.errors import GraphError
from tinsmith.expand import expand_graph
from tinsmith.ir import Graph, Node, TensorType
from tinsmith.load import load_graph_spec
from tinsmith.ops import check_attrs
from tinsmith.reference import evaluate

RTOL = 1e-5


def expand_yaml(tmp_path: Path, text: str) -> Graph:
    path = tmp_path / "g.yaml"
    path.write_text(textwrap.dedent(text))
    return expand_graph(load_graph_spec(path))


def expand_error(tmp_path: Path, text: str) -> GraphError:
    with pytest.raises(GraphError) as info:
        expand_yaml(tmp_path, text)
    return info.value


def N(op, name, inputs, outputs, **attrs) -> Node:
    return Node(op, name, tuple(inputs), tuple(outputs), attrs)


def assert_graph(graph: Graph, nodes: list[Node], literals: dict[str, float], user_constants=()):
    """Nodes in order (op, name, wiring, attributes) and the builder's scalar constants."""
    assert list(graph.nodes) == nodes
    assert set(graph.constants) == set(literals) | set(user_constants)
    for name, value in literals.items():
        c = graph.constants[name]
        assert c.source == "builder literal"
        assert c.data.dtype == np.float32 and c.data.size == 1
        assert c.data.reshape(()) == np.float32(value), name
    assert all(n.op not in BUILDERS for n in graph.nodes)


def close(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == np.float32
    assert actual.shape == expected.shape
    # atol: float32 rounding of values of order 1 (e.g. x - mean) near zero crossings
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=1e-6)


def gelu_erf(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


# --- Gelu -----------------------------------------------------------------------------------
GELU_YAML = """\
    graph: g
    inputs:
      x: {dtype: float32, shape: [2, 3]}
    outputs: [y]
    nodes:
      - {op: Gelu, name: act, inputs: [x], outputs: [y]%s}
"""


def test_gelu_erf_expansion(tmp_path):
    for attrs in ("", ", attrs: {approximate: none}"):  # the default is the exact form
        g = expand_yaml(tmp_path, GELU_YAML % attrs)
        assert_graph(g, [
            N("Div", "act_div", ["x", "act_c"], ["act_div_out"]),
            N("Erf", "act_erf", ["act_div_out"], ["act_erf_out"]),
            N("Mul", "act_mul", ["x", "act_c_2"], ["act_mul_out"]),
            N("Add", "act_add", ["act_erf_out", "act_c_3"], ["act_add_out"]),
            N("Mul", "act_mul_2", ["act_mul_out", "act_add_out"], ["y"]),
        ], {"act_c": math.sqrt(2), "act_c_2": 0.5, "act_c_3": 1.0})
        assert g.types["y"] == TensorType("float32", (2, 3))


def test_gelu_tanh_expansion(tmp_path):
    g = expand_yaml(tmp_path, GELU_YAML % ", attrs: {approximate: tanh}")
    assert_graph(g, [
        N("Mul", "act_mul", ["x", "x"], ["act_mul_out"]),
        N("Mul", "act_mul_2", ["act_mul_out", "x"], ["act_mul_2_out"]),
        N("Mul", "act_mul_3", ["act_mul_2_out", "act_c"], ["act_mul_3_out"]),
        N("Add", "act_add", ["x", "act_mul_3_out"], ["act_add_out"]),
        N("Mul", "act_mul_4", ["act_add_out", "act_c_2"], ["act_mul_4_out"]),
        N("Tanh", "act_tanh", ["act_mul_4_out"], ["act_tanh_out"]),
        N("Mul", "act_mul_5", ["x", "act_c_3"], ["act_mul_5_out"]),
        N("Add", "act_add_2", ["act_tanh_out", "act_c_4"], ["act_add_2_out"]),
        N("Mul", "act_mul_6", ["act_mul_5_out", "act_add_2_out"], ["y"]),
    ], {"act_c": 0.044715, "act_c_2": math.sqrt(2 / math.pi), "act_c_3": 0.5, "act_c_4": 1.0})


@pytest.mark.parametrize("approximate, formula", [("none", gelu_erf), ("tanh", gelu_tanh)])
def test_gelu_numbers(tmp_path, approximate, formula):
    g = expand_yaml(tmp_path, GELU_YAML.replace("[2, 3]", "[4, 25]") % f", attrs: {{approximate: {approximate}}}")
    x = np.linspace(-6, 6, 100, dtype=np.float32).reshape(4, 25)
    close(evaluate(g, {"x": x})["y"], formula(x))


# --- LayerNormalization ---------------------------------------------------------------------
def layer_norm(x, scale, bias, axis, eps):
    """ONNX LayerNormalization: outputs Y, Mean, InvStdDev."""
    x = x.astype(np.float64)
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(var + eps)
    y = (x - mean) * inv * scale
    if bias is not None:
        y = y + bias
    return y, mean, inv


def test_layer_norm_last_axis_with_bias(tmp_path):
    g = expand_yaml(tmp_path, """\
        graph: g
        inputs:
          x: {dtype: float32, shape: [2, 3, 4]}
          scale: {dtype: float32, shape: [4]}
          bias: {dtype: float32, shape: [4]}
        outputs: [y, mean, inv]
        nodes:
          - {op: LayerNormalization, name: ln, inputs: [x, scale, bias], outputs: [y, mean, inv],
             attrs: {axis: -1, epsilon: 0.001}}
    """)
    reduce = {"axes": (2,), "keepdims": 1, "noop_with_empty_axes": 0}
    assert_graph(g, [
        N("ReduceMean", "ln_reducemean", ["x"], ["mean"], **reduce),
        N("Sub", "ln_sub", ["x", "mean"], ["ln_sub_out"]),
        N("Mul", "ln_mul", ["ln_sub_out", "ln_sub_out"], ["ln_mul_out"]),
        N("ReduceMean", "ln_reducemean_2", ["ln_mul_out"], ["ln_reducemean_2_out"], **reduce),
        N("Add", "ln_add", ["ln_reducemean_2_out", "ln_c"], ["ln_add_out"]),
        N("Sqrt", "ln_sqrt", ["ln_add_out"], ["ln_sqrt_out"]),
        N("Div", "ln_div", ["ln_sub_out", "ln_sqrt_out"], ["ln_div_out"]),
        N("Mul", "ln_mul_2", ["ln_div_out", "scale"], ["ln_mul_2_out"]),
        N("Add", "ln_add_2", ["ln_mul_2_out", "bias"], ["y"]),
        N("Div", "ln_div_2", ["ln_c_2", "ln_sqrt_out"], ["inv"]),
    ], {"ln_c": 0.001, "ln_c_2": 1.0})
    assert [g.types[v].shape for v in ("y", "mean", "inv")] == [(2, 3, 4), (2, 3, 1), (2, 3, 1)]

    rng = np.random.default_rng(0)
    x = rng.normal(1.0, 3.0, (2, 3, 4)).astype(np.float32)
    scale, bias = rng.normal(size=(2, 4)).astype(np.float32)
    got = evaluate(g, {"x": x, "scale": scale, "bias": bias})
    for name, expected in zip(("y", "mean", "inv"), layer_norm(x, scale, bias, -1, 0.001)):
        close(got[name], expected)


def test_layer_norm_axis_1_without_bias(tmp_path):
    g = expand_yaml(tmp_path, """\
        graph: g
        inputs:
          x: {dtype: float32, shape: [2, 3, 4]}
        outputs: [y]
        constants:
          scale: {random: normal, shape: [3, 4], seed: 3}
        nodes:
          - {op: LayerNormalization, name: ln, inputs: [x, scale], outputs: [y], attrs: {axis: 1}}
    """)
    reduce = {"axes": (1, 2), "keepdims": 1, "noop_with_empty_axes": 0}
    assert_graph(g, [
        N("ReduceMean", "ln_reducemean", ["x"], ["ln_reducemean_out"], **reduce),
        N("Sub", "ln_sub", ["x", "ln_reducemean_out"], ["ln_sub_out"]),
        N("Mul", "ln_mul", ["ln_sub_out", "ln_sub_out"], ["ln_mul_out"]),
        N("ReduceMean", "ln_reducemean_2", ["ln_mul_out"], ["ln_reducemean_2_out"], **reduce),
        N("Add", "ln_add", ["ln_reducemean_2_out", "ln_c"], ["ln_add_out"]),
        N("Sqrt", "ln_sqrt", ["ln_add_out"], ["ln_sqrt_out"]),
        N("Div", "ln_div", ["ln_sub_out", "ln_sqrt_out"], ["ln_div_out"]),
        N("Mul", "ln_mul_2", ["ln_div_out", "scale"], ["y"]),
        N("Div", "ln_div_2", ["ln_c_2", "ln_sqrt_out"], ["ln_div_2_out"]),
    ], {"ln_c": 1e-5, "ln_c_2": 1.0}, user_constants={"scale"})
    assert g.types["ln_reducemean_out"].shape == (2, 1, 1)

    x = np.random.default_rng(1).normal(-2.0, 0.5, (2, 3, 4)).astype(np.float32)
    y, _, _ = layer_norm(x, g.constants["scale"].data, None, 1, 1e-5)
    close(evaluate(g, {"x": x})["y"], y)


def test_layer_norm_scale_must_keep_the_shape(tmp_path):
    e = expand_error(tmp_path, """\
        graph: g
        inputs:
          x: {dtype: float32, shape: [3, 4]}
          scale: {dtype: float32, shape: [2, 3, 4]}
        outputs: [y]
        nodes:
          - {op: LayerNormalization, name: ln, inputs: [x, scale], outputs: [y]}
    """)
    assert e.message == ("LayerNormalization node 'ln': scale of shape [2, 3, 4] does not broadcast "
                         "to the input's shape [3, 4]")
    assert (e.loc.line, e.loc.col) == (7, 52)  # the scale input


# --- Linear ---------------------------------------------------------------------------------
def test_linear_trans_b_gelu(tmp_path):
    g = expand_yaml(tmp_path, """\
        graph: g
        inputs:
          x: {dtype: float32, shape: [3, 4]}
        outputs: [y]
        constants:
          w: {random: normal, shape: [5, 4], seed: 1}
          b: {random: normal, shape: [5], seed: 2}
        nodes:
          - {op: Linear, name: up, inputs: [x, w, b], outputs: [y], attrs: {transB: 1, activation: gelu}}
    """)
    # the Transpose of the constant weight is folded while expanding: its output is a constant
    assert_graph(g, [
        N("MatMul", "up_matmul", ["x", "up_transpose_out"], ["up_matmul_out"]),
        N("Add", "up_add", ["up_matmul_out", "b"], ["up_add_out"]),
        # the Gelu builder, called by Linear, nests its names under Linear's
        N("Div", "up_gelu_div", ["up_add_out", "up_gelu_c"], ["up_gelu_div_out"]),
        N("Erf", "up_gelu_erf", ["up_gelu_div_out"], ["up_gelu_erf_out"]),
        N("Mul", "up_gelu_mul", ["up_add_out", "up_gelu_c_2"], ["up_gelu_mul_out"]),
        N("Add", "up_gelu_add", ["up_gelu_erf_out", "up_gelu_c_3"], ["up_gelu_add_out"]),
        N("Mul", "up_gelu_mul_2", ["up_gelu_mul_out", "up_gelu_add_out"], ["y"]),
    ], {"up_gelu_c": math.sqrt(2), "up_gelu_c_2": 0.5, "up_gelu_c_3": 1.0},
        user_constants={"b", "up_transpose_out"})  # w itself is read by no kernel any more
    assert g.types["up_transpose_out"] == TensorType("float32", (4, 5))
    w_seeded = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_array_equal(g.constants["up_transpose_out"].data, w_seeded.T)
    assert g.types["y"] == TensorType("float32", (3, 5))

    x = np.random.default_rng(2).normal(size=(3, 4)).astype(np.float32)
    w, b = w_seeded.astype(np.float64), g.constants["b"].data.astype(np.float64)
    close(evaluate(g, {"x": x})["y"], gelu_erf(x.astype(np.float64) @ w.T + b))


def test_linear_relu_without_bias(tmp_path):
    g = expand_yaml(tmp_path, """\
        graph: g
        inputs:
          x: {dtype: float32, shape: [2, 3, 4]}
          w: {dtype: float32, shape: [4, 5]}
        outputs: [y]
        nodes:
          - {op: Linear, name: fc, inputs: [x, w], outputs: [y], attrs: {activation: relu}}
    """)
    assert_graph(g, [
        N("MatMul", "fc_matmul", ["x", "w"], ["fc_matmul_out"]),
        N("Relu", "fc_relu", ["fc_matmul_out"], ["y"]),
    ], {})
    rng = np.random.default_rng(3)
    x, w = rng.normal(size=(2, 3, 4)).astype(np.float32), rng.normal(size=(4, 5)).astype(np.float32)
    close(evaluate(g, {"x": x, "w": w})["y"], np.maximum(x.astype(np.float64) @ w, 0))


def test_linear_defaults(tmp_path):
    g = expand_yaml(tmp_path, """\
        graph: g
        inputs:
          x: {dtype: float32, shape: [2, 4]}
          w: {dtype: float32, shape: [4, 5]}
          b: {dtype: float32, shape: [5]}
        outputs: [y]
        nodes:
          - {op: Linear, name: fc, inputs: [x, w, b], outputs: [y]}
    """)
    assert_graph(g, [
        N("MatMul", "fc_matmul", ["x", "w"], ["fc_matmul_out"]),
        N("Add", "fc_add", ["fc_matmul_out", "b"], ["y"]),
    ], {})
    rng = np.random.default_rng(4)
    x, w, b = (rng.normal(size=s).astype(np.float32) for s in ((2, 4), (4, 5), (5,)))
    close(evaluate(g, {"x": x, "w": w, "b": b})["y"], x.astype(np.float64) @ w + b)


def test_linear_omitted_bias_is_no_bias(tmp_path):
    g = expand_yaml(tmp_path, """\
        graph: g
        inputs:
          x: {dtype: float32, shape: [2, 4]}
          w: {dtype: float32, shape: [4, 5]}
        outputs: [y]
        nodes:
          - {op: Linear, name: fc, inputs: [x, w, ""], outputs: [y]}
    """)
    assert [n.op for n in g.nodes] == ["MatMul"]


# --- declared attributes --------------------------------------------------------------------
def test_builder_attribute_defaults():
    assert check_attrs(BUILDERS["Gelu"].attrs, {}, "Gelu") == {"approximate": "none"}
    assert check_attrs(BUILDERS["Linear"].attrs, {}, "Linear") == {"transB": 0, "activation": "none"}
    assert check_attrs(BUILDERS["LayerNormalization"].attrs, {}, "LayerNormalization") == \
        {"axis": -1, "epsilon": 1e-5, "stash_type": 1}


def test_builder_declarations():
    declared = {n: (b.min_inputs, b.max_inputs, b.max_outputs) for n, b in BUILDERS.items()}
    assert declared.items() >= \
        {"Gelu": (1, 1, 1), "Linear": (2, 3, 1), "LayerNormalization": (2, 3, 3), "Einsum": (1, -1, 1)}.items()
    assert all(b.doc for b in BUILDERS.values())


ATTR_YAML = """\
graph: g
inputs:
  x: {dtype: float32, shape: [2, 3, 4]}
  w: {dtype: float32, shape: [4, 4]}
  s: {dtype: float32, shape: [4]}
outputs: [y]
nodes:
  - op: %s
    name: n
    inputs: %s
    outputs: [y]
    attrs:
      %s: %s
"""


@pytest.mark.parametrize("op, inputs, attr, value, message", [
    ("Gelu", "[x]", "approx", "tanh", "Gelu node 'n' has no attribute 'approx' (it takes: approximate)"),
    ("Gelu", "[x]", "approximate", "fast",
     "attribute 'approximate' of Gelu node 'n' must be one of 'none', 'tanh', not 'fast'"),
    ("Linear", "[x, w]", "activation", "sigmoid",
     "attribute 'activation' of Linear node 'n' must be one of 'none', 'relu', 'gelu', not 'sigmoid'"),
    ("Linear", "[x, w]", "transB", "2", "attribute 'transB' of Linear node 'n' must be one of 0, 1, not 2"),
    ("LayerNormalization", "[x, s]", "epsilon", "small",
     "attribute 'epsilon' of LayerNormalization node 'n' must be a number, not 'small'"),
    ("LayerNormalization", "[x, s]", "stash_type", "0",
     "attribute 'stash_type' of LayerNormalization node 'n' must be one of 1, not 0"),
    ("LayerNormalization", "[x, s]", "axis", "3",
     "LayerNormalization node 'n': axis 3 is out of range for a tensor of rank 3 (expected -3..2)"),
])
def test_builder_attributes_are_validated(tmp_path, op, inputs, attr, value, message):
    e = expand_error(tmp_path, ATTR_YAML % (op, inputs, attr, value))
    assert e.message == message
    # at the value of a declared attribute; at the name of an unknown one
    col = 9 + len(attr) if attr != "approx" else 7
    assert (e.loc.line, e.loc.col) == (13, col)


def test_builder_arity_is_checked(tmp_path):
    e = expand_error(tmp_path, ATTR_YAML.replace("    attrs:\n      %s: %s\n", "") % ("Linear", "[x]"))
    assert e.message == "Linear node 'n' takes 2 to 3 inputs, got 1"
    e = expand_error(tmp_path, ATTR_YAML.replace("    attrs:\n      %s: %s\n", "") % ("Linear", "[x, '']"))
    assert e.message == "input 1 of Linear node 'n' is required and cannot be omitted"
