"""ONNX import (tinsmith.load.onnx_model, tinsmith.load.write_yaml): names, constants, attributes,
static shapes, errors located at nodes, build-time folding of shape computations, unsupported
operators, the imported graph file, and compiled models against ONNX Runtime.

Models are made here with onnx.helper. Compiled outputs are compared with ONNX Runtime at
rtol=1e-5, atol=1e-6: the models are a few layers deep, each output a short float32 sum.
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tinsmith.cli import main
from tinsmith.errors import GraphError, TinsmithError
from tinsmith.expand import expand_graph
from tinsmith.load import graph_name, load_graph_spec
from tinsmith.load.onnx_model import read_onnx, sanitize, unique_names
from tinsmith.load.write_yaml import import_onnx
from tinsmith.ops.shape_ops import TensorValue
from tinsmith.pipeline import compile_graph, lower

RTOL, ATOL = 1e-5, 1e-6
ROOT = Path(__file__).resolve().parents[1]


def f32(*shape, seed=0, scale=1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def init(name, data) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(data), name)


def make_model(nodes, inputs, outputs, initializers=(), opset=18) -> onnx.ModelProto:
    """inputs/outputs: (name, shape) pairs of float32 tensors (a shape may hold symbolic dims)."""
    graph = helper.make_graph(
        nodes, "main_graph",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="tinsmith-tests")
    model.ir_version = 8  # what the installed ONNX Runtime reads
    return model


def save(model, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def error_of(path) -> GraphError:
    with pytest.raises(GraphError) as info:
        expand_graph(load_graph_spec(path))
    return info.value


# --- names ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, expected", [
    ("input.1", "input_1"), ("/conv1/Conv", "conv1_Conv"), ("/conv1/Conv_output_0", "conv1_Conv_output_0"),
    ("onnx::Gemm_12", "onnx_Gemm_12"), ("0", "v0"), ("12.weight", "v12_weight"), ("_v_7", "v_7"),
    ("float", "float_"), ("call", "call_"), ("a__b", "a_b"), ("", "v"), ("ü", "v"),
])
def test_sanitize(name, expected):
    assert sanitize(name, "v") == expected


def test_valid_names_stay_and_clashes_are_numbered_in_order():
    names = unique_names(["a.b", "a_b", "x", "a-b", "x"], "v")
    assert names == {"a_b": "a_b", "x": "x", "a.b": "a_b_2", "a-b": "a_b_3"}
    assert unique_names(["float", "float."], "v") == {"float": "float_", "float.": "float_2"}  # never '__'


# --- structure of the GraphSpec -------------------------------------------------------------
def tiny_mlp(tmp_path) -> Path:
    w1, b1 = f32(4, 8, seed=1), f32(8, seed=2)
    w2 = f32(3, 8, seed=3)
    nodes = [
        helper.make_node("MatMul", ["input.1", "fc1.weight"], ["/fc1/MatMul_output_0"], name="/fc1/MatMul"),
        helper.make_node("Add", ["/fc1/MatMul_output_0", "fc1.bias"], ["/fc1/Add_output_0"], name="/fc1/Add"),
        helper.make_node("Relu", ["/fc1/Add_output_0"], ["/act/Relu_output_0"], name="/act/Relu"),
        helper.make_node("Gemm", ["/act/Relu_output_0", "fc2.weight"], ["logits"], name="/fc2/Gemm",
                         transB=1, alpha=0.5),
        helper.make_node("Softmax", ["logits"], ["probs"], name="/Softmax", axis=-1),
    ]
    inits = [init("fc1.weight", w1), init("fc1.bias", b1), init("fc2.weight", w2), init("unused", f32(2))]
    return save(make_model(nodes, [("input.1", ["batch", 4])], [("probs", ["batch", 3])], inits),
                tmp_path / "tiny_mlp.onnx")


def test_names_initializers_and_attributes(tmp_path):
    imported = read_onnx(tiny_mlp(tmp_path))
    spec = imported.spec
    assert spec.name == "tiny_mlp"
    assert [(v.name, str(v.type)) for v in spec.inputs] == [("input_1", "float32[1, 4]")]  # batch set to 1
    assert imported.batch_inputs == ("input_1",)
    assert [v.name for v in spec.outputs] == ["probs"]
    # initializers nodes read are constants (the unused one is left out), not graph inputs
    assert [c.name for c in spec.constants] == ["fc1_weight", "fc1_bias", "fc2_weight"]
    assert spec.constants[0].source.endswith("tiny_mlp.onnx initializer 'fc1.weight'")
    np.testing.assert_array_equal(spec.constants[0].data, f32(4, 8, seed=1))
    assert [(n.op, n.name, n.inputs, n.outputs) for n in spec.nodes] == [
        ("MatMul", "fc1_MatMul", ("input_1", "fc1_weight"), ("fc1_MatMul_output_0",)),
        ("Add", "fc1_Add", ("fc1_MatMul_output_0", "fc1_bias"), ("fc1_Add_output_0",)),
        ("Relu", "act_Relu", ("fc1_Add_output_0",), ("act_Relu_output_0",)),
        ("Gemm", "fc2_Gemm", ("act_Relu_output_0", "fc2_weight"), ("logits",)),
        ("Softmax", "Softmax", ("logits",), ("probs",))]
    assert spec.nodes[3].attrs == {"transB": 1, "alpha": 0.5}
    assert imported.values["input_1"] == "input.1"
    assert imported.nodes[0] == "/fc1/MatMul"
    assert str(spec.nodes[3].loc) == f"{spec.path}: node '/fc2/Gemm' (Gemm)"


def test_attribute_kinds(tmp_path):
    nodes = [
        helper.make_node("LeakyRelu", ["x"], ["a"], name="leaky", alpha=0.1),
        helper.make_node("Pad", ["a", "pads"], ["p"], name="pad", mode="reflect"),
        helper.make_node("Transpose", ["p"], ["t"], name="perm", perm=[0, 2, 1]),
        helper.make_node("ConstantOfShape", ["shape"], ["filled"], name="fill",
                         value=numpy_helper.from_array(np.array([2.5], np.float32))),
        helper.make_node("Add", ["t", "filled"], ["y"], name="add"),
    ]
    model = make_model(nodes, [("x", [1, 2, 3])], [("y", [1, 3, 4])],
                       [init("pads", np.array([0, 1, 0, 0, 1, 0], np.int64)),
                        init("shape", np.array([1, 3, 4], np.int64))])
    spec = read_onnx(save(model, tmp_path / "attrs.onnx")).spec
    attrs = {n.name: n.attrs for n in spec.nodes}
    assert attrs["leaky"] == {"alpha": 0.1}  # the float32 0.1, spelt as written
    assert attrs["pad"] == {"mode": "reflect"}
    assert attrs["perm"] == {"perm": [0, 2, 1]}
    value = attrs["fill"]["value"]
    assert value.dtype == np.float32 and value.tolist() == [2.5]
    g = expand_graph(spec)
    # ConstantOfShape folded at build time; its tensor attribute checked as a TensorValue
    assert [n.op for n in g.nodes] == ["LeakyRelu", "Pad", "Transpose", "Add"]
    np.testing.assert_array_equal(g.constants["filled"].data, np.full((1, 3, 4), 2.5, np.float32))
    assert TensorValue.of(np.array([2.5], np.float32)) == TensorValue("float32", (1,), (2.5,))


def test_initializers_listed_as_inputs_are_constants(tmp_path):
    """Models from before IR version 4 list initializers among the graph inputs too."""
    w = f32(3, 2)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                       [("x", [1, 3]), ("w", [3, 2])], [("y", [1, 2])], [init("w", w)])
    spec = read_onnx(save(model, tmp_path / "old.onnx")).spec
    assert [v.name for v in spec.inputs] == ["x"]
    assert [c.name for c in spec.constants] == ["w"]


def test_constant_nodes_become_constants(tmp_path):
    nodes = [helper.make_node("Constant", [], ["k"], name="/Constant", value_floats=[1.0, 2.0]),
             helper.make_node("Constant", [], ["n"], value=numpy_helper.from_array(np.array(3, np.int64))),
             helper.make_node("Mul", ["x", "k"], ["y"], name="mul")]
    imported = read_onnx(save(make_model(nodes, [("x", [2])], [("y", [2])]), tmp_path / "c.onnx"))
    consts = {c.name: c for c in imported.spec.constants}
    assert consts["k"].data.tolist() == [1.0, 2.0] and consts["k"].data.dtype == np.float32
    assert consts["n"].data.dtype == np.int64 and consts["n"].data.shape == ()
    assert imported.constant_origins == {"k": "Constant node '/Constant'", "n": "Constant node #1"}
    assert [n.op for n in imported.spec.nodes] == ["Mul"]


def test_omitted_optional_outputs_get_names(tmp_path):
    nodes = [helper.make_node("Dropout", ["x"], ["d"], name="drop"),  # mask omitted
             helper.make_node("Relu", ["d"], ["y"], name="relu")]
    g = lower(save(make_model(nodes, [("x", [2, 3])], [("y", [2, 3])]), tmp_path / "drop.onnx"))
    assert "y" in g.types


# --- shapes -----------------------------------------------------------------------------------
def test_dynamic_dimension_is_an_error_naming_the_input(tmp_path):
    model = make_model([helper.make_node("Relu", ["tokens"], ["y"], name="r")],
                       [("tokens", [1, "seq_len", 8])], [("y", [1, "seq_len", 8])])
    e = error_of(save(model, tmp_path / "dyn.onnx"))
    assert str(e) == (
        f"{e.loc.path}: input 'tokens': error: input 'tokens' has a dynamic dimension 1 ('seq_len') in shape "
        f"[1, 'seq_len', 8]; Tinsmith compiles static shapes only\n"
        f"{e.loc.path}: input 'tokens': note: fix the shape before importing, e.g. with "
        f"onnx.tools.update_model_dims.update_inputs_outputs_dims(model, {{'tokens': [1, 1, 8]}}, {{...}})")


def test_shape_computations_fold_at_build_time(tmp_path):
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters write x.view(x.size(0), -1)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsqueeze"),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="reshape"),
        helper.make_node("Size", ["x"], ["count"], name="size"),
        helper.make_node("Cast", ["count"], ["count_f"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Range", ["r0", "r1", "r2"], ["steps"], name="range"),
        helper.make_node("Cast", ["steps"], ["steps_f"], name="cast2", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["flat", "count_f"], ["scaled"], name="mul"),
        helper.make_node("Add", ["scaled", "steps_f"], ["y"], name="add"),
    ]
    inits = [init("zero", np.array(0, np.int64)), init("axes", np.array([0], np.int64)),
             init("minus_one", np.array([-1], np.int64)), init("r0", np.array(0, np.int64)),
             init("r1", np.array(12, np.int64)), init("r2", np.array(1, np.int64))]
    g = lower(save(make_model(nodes, [("x", ["N", 3, 4])], [("y", [1, 12])], inits), tmp_path / "chain.onnx"))
    assert [n.op for n in g.nodes] == ["Reshape", "Mul", "Add"]
    assert g.constants["target"].data.tolist() == [1, -1]
    assert g.constants["count_f"].data.tolist() == 12.0
    assert g.constants["steps_f"].data.tolist() == list(range(12))


# --- errors -----------------------------------------------------------------------------------
def test_two_unsupported_operators_fail_with_one_message(tmp_path):
    nodes = [helper.make_node("RandomUniformLike", ["boxes"], ["picked"], name="/random"),
             helper.make_node("FusedConv", ["x", "w"], ["a"], name="fused1", domain="com.microsoft"),
             helper.make_node("FusedConv", ["a", "w"], ["b"], name="fused2", domain="com.microsoft"),
             helper.make_node("Relu", ["b"], ["y"], name="relu")]
    model = make_model(nodes, [("x", [1, 1, 4, 4]), ("boxes", [1, 3, 4])],
                       [("y", [1, 1, 4, 4]), ("picked", [1, 3, 4])], [init("w", f32(1, 1, 1, 1))])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    path = save(model, tmp_path / "unsupported.onnx")
    e = error_of(path)
    assert e.message == ("the graph uses 2 operators Tinsmith does not support: RandomUniformLike (node 'random'); "
                         "com.microsoft.FusedConv (nodes 'fused1', 'fused2')")
    assert e.hint == ("`python -m tinsmith ops` lists the supported ops; to add one, register a primitive "
                      "(tinsmith.ops.registry.define) with a functor (tinsmith.generate.CPP.register), or a "
                      "builder composing supported ops (tinsmith.builders.builder)")
    assert str(e.loc).endswith("unsupported.onnx: node '/random' (RandomUniformLike)")
    # the import reports the same, and writes nothing
    assert main(["import-onnx", str(path), "-o", str(tmp_path / "out" / "unsupported.yaml")]) == 1
    assert not (tmp_path / "out").exists()


def test_unknown_ops_in_a_graph_file_are_listed_together(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(textwrap.dedent("""\
        graph: g
        inputs:
          x: {dtype: float32, shape: [2]}
        outputs: [y]
        nodes:
          - {op: Frobnicate, inputs: [x], outputs: [a]}
          - {op: Twiddle, inputs: [a], outputs: [b]}
          - {op: Frobnicate, inputs: [b], outputs: [y]}
    """))
    e = error_of(path)
    assert (e.loc.line, e.loc.col) == (6, 10)  # the first unknown op
    assert e.message == ("the graph uses 2 operators Tinsmith does not support: Frobnicate (nodes 'frobnicate_a', "
                         "'frobnicate_y'); Twiddle (node 'twiddle_b')")


def test_constants_a_graph_file_cannot_hold(tmp_path):
    """An empty shape (Reshape to a scalar) compiles from the model, but graph files hold no empty data."""
    nodes = [helper.make_node("Reshape", ["x", "scalar"], ["s"], name="reshape"),
             helper.make_node("Mul", ["s", "x"], ["y"], name="mul")]
    model = make_model(nodes, [("x", [1])], [("y", [1])], [init("scalar", np.zeros(0, np.int64))])
    path = save(model, tmp_path / "scalar.onnx")
    assert [n.op for n in lower(path).nodes] == ["Reshape", "Mul"]
    with pytest.raises(TinsmithError) as info:
        import_onnx(path, tmp_path / "scalar.yaml")
    assert str(info.value.loc).endswith("scalar.onnx: initializer 'scalar'")  # the first one
    assert info.value.message == "constants a graph file cannot hold: 'scalar' (empty)"
    assert info.value.hint == "compile the model file directly instead of importing it"


def test_errors_point_at_the_node(tmp_path, capsys):
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="/model/Reshape")]
    model = make_model(nodes, [("x", [2, 3])], [("y", [4, 2])], [init("shape", np.array([4, 2], np.int64))])
    path = save(model, tmp_path / "bad.onnx")
    assert main(["show", str(path)]) == 1
    err = capsys.readouterr().err
    where = f"{read_onnx(path).spec.path}:1:1"  # a binary file: line 1, column 1, and the node
    assert err.startswith(f"{where}: error: node '/model/Reshape' (Reshape): Reshape node 'model_Reshape': "
                          f"cannot reshape [2, 3] (6 elements) "
                          f"to [4, 2] (8 elements)")


def test_not_an_onnx_file(tmp_path):
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\x00\x01garbage")
    e = error_of(path)
    assert e.message.startswith("not a valid ONNX model")
    assert str(e.loc) == e.loc.path


def test_names_in_comments_cannot_break_generated_code(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="evil */ int x; /*\nnewline")]
    path = save(make_model(nodes, [("x", [2])], [("y", [2])]), tmp_path / "evil.onnx")
    cpp = compile_graph(path).files["evil.cpp"]
    comment = next(line for line in cpp.splitlines() if "evil" in line and line.startswith("// evil"))
    assert comment.startswith("// evil_int_x_newline: Relu, cluster 0, from ")
    assert "node 'evil *\\/ int x; /\\*\\x0anewline' (Relu)" in comment


# --- graph files: import and the `onnx` loader -------------------------------------------------
def differing_lines(a: str, b: str) -> list[tuple[str, str]]:
    """Lines that differ, other than those naming where code came from (the model file or the
    graph file: comments and the report's "source" fields)."""
    provenance = re.compile(r'^\s*(//|/\*|"source":)')
    a_lines, b_lines = a.splitlines(), b.splitlines()
    assert len(a_lines) == len(b_lines)
    return [(x, y) for x, y in zip(a_lines, b_lines)
            if x != y and not (provenance.match(x) and provenance.match(y))]


def test_imported_graph_file_compiles_to_the_same_code(tmp_path):
    model = tiny_mlp(tmp_path)
    written = import_onnx(model, tmp_path / "graphs" / "tiny_mlp.yaml")
    assert written == [tmp_path / "graphs" / "tiny_mlp.yaml", tmp_path / "graphs" / "tiny_mlp.npz"]
    direct, imported = compile_graph(model).files, compile_graph(written[0]).files
    assert set(direct) == set(imported)
    for name in direct:
        assert differing_lines(direct[name], imported[name]) == [], name


def test_imported_graph_file_reads_like_one_written_by_hand(tmp_path):
    written = import_onnx(tiny_mlp(tmp_path), tmp_path / "mlp.yaml")
    text = written[0].read_text()
    assert text.startswith("# Imported from tiny_mlp.onnx (opset 18; produced by tinsmith-tests)\n")
    body = text[text.index("graph:"):]
    assert body == textwrap.dedent("""\
        graph: mlp
        version: 1
        inputs:
          input_1: {dtype: float32, shape: [1, 4]}  # ONNX 'input.1', batch dimension set to 1
        outputs: [probs]
        constants:
          fc1_weight: {file: mlp.npz, key: fc1_weight}  # float32[4, 8], ONNX 'fc1.weight'
          fc1_bias: {file: mlp.npz, key: fc1_bias}  # float32[8], ONNX 'fc1.bias'
          fc2_weight: {file: mlp.npz, key: fc2_weight}  # float32[3, 8], ONNX 'fc2.weight'
        nodes:
          - op: MatMul
            name: fc1_MatMul  # ONNX '/fc1/MatMul' -> '/fc1/MatMul_output_0'
            inputs: [input_1, fc1_weight]
            outputs: [fc1_MatMul_output_0]
          - op: Add
            name: fc1_Add  # ONNX '/fc1/Add' -> '/fc1/Add_output_0'
            inputs: [fc1_MatMul_output_0, fc1_bias]
            outputs: [fc1_Add_output_0]
          - op: Relu
            name: act_Relu  # ONNX '/act/Relu' -> '/act/Relu_output_0'
            inputs: [fc1_Add_output_0]
            outputs: [act_Relu_output_0]
          - op: Gemm
            name: fc2_Gemm  # ONNX '/fc2/Gemm'
            inputs: [act_Relu_output_0, fc2_weight]
            outputs: [logits]
            attrs: {alpha: 0.5, transB: 1}
          - op: Softmax
            name: Softmax  # ONNX '/Softmax'
            inputs: [logits]
            outputs: [probs]
            attrs: {axis: -1}
        """)
    # the weights file is the same bytes every time
    first = written[1].read_bytes()
    written[1].unlink()
    import_onnx(tmp_path / "tiny_mlp.onnx", tmp_path / "mlp.yaml")
    assert written[1].read_bytes() == first


def test_cli_import_onnx(tmp_path, capsys):
    model = tiny_mlp(tmp_path)
    out = tmp_path / "graphs" / "kws.yaml"
    assert main(["import-onnx", str(model), "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\nwrote {out.with_suffix('.npz')}\n"
    assert graph_name(out) == "kws"
    assert graph_name(model) == "tiny_mlp"


def test_onnx_initializer_loader(tmp_path):
    tiny_mlp(tmp_path)  # writes tiny_mlp.onnx beside the graph file
    path = tmp_path / "g.yaml"
    path.write_text(textwrap.dedent("""\
        graph: g
        inputs:
          x: {dtype: float32, shape: [1, 4]}
        outputs: [y]
        constants:
          w: {onnx: tiny_mlp.onnx, initializer: fc1.weight}
        nodes:
          - {op: MatMul, inputs: [x, w], outputs: [y]}
    """))
    spec = load_graph_spec(path)
    np.testing.assert_array_equal(spec.constants[0].data, f32(4, 8, seed=1))
    assert spec.constants[0].source == "tiny_mlp.onnx initializer 'fc1.weight'"
    path.write_text(path.read_text().replace("initializer: fc1.weight", "initializer: fc9.weight"))
    with pytest.raises(GraphError) as info:
        load_graph_spec(path)
    assert info.value.message == "constant 'w': 'tiny_mlp.onnx' has no initializer 'fc9.weight'"


def test_old_opsets_are_upgraded(tmp_path):
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], name="mean", axes=[2], keepdims=1),
             helper.make_node("Squeeze", ["m"], ["y"], name="squeeze", axes=[2])]
    imported = read_onnx(save(make_model(nodes, [("x", [1, 3, 4])], [("y", [1, 3])], opset=11),
                              tmp_path / "old11.onnx"))
    assert (imported.upgraded_from, imported.opset) == (11, 18)
    names = [n.name for n in imported.spec.nodes]
    assert "mean" in names and "squeeze" in names  # node names survive the upgrade
    g = lower(tmp_path / "old11.onnx")
    assert [n.op for n in g.nodes] == ["ReduceMean", "Squeeze"]


# --- compiled models against ONNX Runtime ---------------------------------------------------
def _conv_bn_model():
    c = 4
    rng = np.random.default_rng(11)
    nodes = [
        helper.make_node("Conv", ["image", "conv.weight"], ["c1"], name="/conv/Conv", pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c1", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["b1"],
                         name="/bn/BatchNormalization", epsilon=1e-3),
        helper.make_node("Relu", ["b1"], ["r1"], name="/relu/Relu"),
        helper.make_node("Conv", ["r1", "dw.weight", "dw.bias"], ["c2"], name="/dw/Conv", group=c,
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c2", "bn2.scale", "bn2.bias", "bn2.mean", "bn2.var"], ["b2"],
                         name="/bn2/BatchNormalization"),
        helper.make_node("GlobalAveragePool", ["b2"], ["pooled"], name="/pool"),
        helper.make_node("Flatten", ["pooled"], ["flat"], name="/flatten"),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["fc"], name="/fc/Gemm", transB=1),
        helper.make_node("BatchNormalization", ["fc", "bn3.scale", "bn3.bias", "bn3.mean", "bn3.var"], ["out"],
                         name="/bn3/BatchNormalization"),
    ]

    def bn(prefix, n):
        return [init(f"{prefix}.scale", rng.uniform(0.5, 1.5, n).astype(np.float32)),
                init(f"{prefix}.bias", rng.standard_normal(n).astype(np.float32)),
                init(f"{prefix}.mean", rng.standard_normal(n).astype(np.float32)),
                init(f"{prefix}.var", rng.uniform(0.5, 2.0, n).astype(np.float32))]
    inits = [init("conv.weight", f32(c, 3, 3, 3, seed=12, scale=0.3)), *bn("bn", c),
             init("dw.weight", f32(c, 1, 3, 3, seed=13, scale=0.3)), init("dw.bias", f32(c, seed=14)), *bn("bn2", c),
             init("fc.weight", f32(5, c, seed=15)), init("fc.bias", f32(5, seed=16)), *bn("bn3", 5)]
    return make_model(nodes, [("image", ["N", 3, 8, 8])], [("out", ["N", 5])], inits)


def _reshape_chain_model():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="/Shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="/Gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="/Unsqueeze"),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], name="/Concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="/Reshape"),
        helper.make_node("MatMul", ["flat", "w"], ["h"], name="/fc/MatMul"),
        helper.make_node("Relu", ["h"], ["y"], name="/Relu"),
    ]
    inits = [init("zero", np.array(0, np.int64)), init("axes", np.array([0], np.int64)),
             init("minus_one", np.array([-1], np.int64)), init("w", f32(12, 5, seed=21))]
    return make_model(nodes, [("x", [2, 3, 4])], [("y", [2, 5])], inits)


def _opset10_model():
    """Softmax before opset 13 flattens to 2-D at `axis`, Clip before opset 11 takes attributes:
    the upgrade must keep their meaning."""
    nodes = [helper.make_node("Softmax", ["x"], ["s"], name="softmax", axis=1),
             helper.make_node("ReduceMean", ["s"], ["m"], name="mean", axes=[2], keepdims=0),
             helper.make_node("Clip", ["x"], ["c"], name="clip", min=-0.5, max=0.5)]
    return make_model(nodes, [("x", [2, 3, 4])], [("m", [2, 3]), ("c", [2, 3, 4])], opset=10)


def _einsum_model():
    """Attention scores as exporters write them, through the Einsum builder."""
    nodes = [helper.make_node("Einsum", ["q", "k"], ["scores"], name="/attn/Einsum", equation="bhid,bhjd->bhij"),
             helper.make_node("Softmax", ["scores"], ["attn"], name="/attn/Softmax", axis=-1),
             helper.make_node("Einsum", ["attn", "v"], ["out"], name="/attn/Einsum_1", equation="bhij,bhjd->bhid"),
             helper.make_node("Einsum", ["out"], ["trace"], name="/trace", equation="bhii->bh")]
    return make_model(nodes, [("q", [1, 2, 3, 4]), ("k", [1, 2, 3, 4]), ("v", [1, 2, 3, 3])],
                      [("out", [1, 2, 3, 3]), ("trace", [1, 2])], opset=12)


def _shape_output_model():
    """A build-time op writing a graph output: its value is copied there."""
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu"),
             helper.make_node("Shape", ["x"], ["shape"], name="shape")]
    model = make_model(nodes, [("x", [2, 3])], [("y", [2, 3])])
    model.graph.output.append(helper.make_tensor_value_info("shape", TensorProto.INT64, [2]))
    return model


MODELS = {"conv_bn": _conv_bn_model, "reshape_chain": _reshape_chain_model, "opset10": _opset10_model,
          "einsum": _einsum_model, "shape_output": _shape_output_model}


@pytest.fixture(scope="module")
def built(tmp_path_factory, scons_cmd):
    """Every model saved as NAME.onnx and built by one SCons run; returns (folder, build dir)."""
    folder = tmp_path_factory.mktemp("onnx_models")
    paths = [save(make(), folder / f"{name}.onnx") for name, make in MODELS.items()]
    paths.append(save(onnx.load(str(tiny_mlp(folder))), folder / "mlp.onnx"))
    build = folder / "build"
    scons_cmd("-Q", "-j2", f"graphs={','.join(str(p) for p in paths)}", f"build_dir={build}")
    return folder, build


@pytest.mark.parametrize("name", [*MODELS, "mlp"])
def test_compiled_model_matches_onnx_runtime(built, name, runner_io, tmp_path):
    import onnxruntime as ort
    folder, build = built
    path = folder / f"{name}.onnx"
    graph = lower(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: f32(*graph.types[v].shape, seed=31)
             for i, v in zip(session.get_inputs(), graph.inputs)}
    want = session.run(None, feeds)
    got = runner_io(build / name / f"{name}_runner", list(feeds.values()),
                    [(graph.types[o].shape, graph.types[o].numpy_dtype) for o in graph.outputs], tmp_path)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def test_batch_norms_are_folded_in_the_compiled_model(built):
    folder, _ = built
    g = lower(folder / "conv_bn.onnx")
    assert "BatchNormalization" not in [n.op for n in g.nodes]
    assert [n.op for n in g.nodes] == ["Conv", "Relu", "Conv", "GlobalAveragePool", "Flatten", "Gemm"]


@pytest.mark.parametrize("name", list(MODELS))
def test_imported_models_compile_to_the_same_code(built, name, tmp_path):
    folder, _ = built
    written = import_onnx(folder / f"{name}.onnx", tmp_path / f"{name}.yaml")
    direct, imported = compile_graph(folder / f"{name}.onnx").files, compile_graph(written[0]).files
    for file in direct:
        assert differing_lines(direct[file], imported[file]) == [], file
