"""Every user error in a graph file is `path:line:col: error: message` (plus an optional note on the
same location), exit status 1, never a traceback.

Each file in tests/data/bad/ holds one problem; the table below pins the exact message and the
column that points at the offending key, value, list item or node. Tests run from the repository
root so that messages show the paths users type.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from tinsmith.cli import main
from tinsmith.load.graph_file import SUPPORTED_DTYPES

ROOT = Path(__file__).resolve().parents[1]
BAD = "tests/data/bad"


class Bad(NamedTuple):
    file: str  # under tests/data/bad/
    loc: str  # line:col
    error: str
    note: str | None = None


CASES = [
    Bad('attr_choice.yaml', '11:21', "attribute 'transB' of Gemm node 'gemm_y' must be one of 0, 1, not 2"),
    Bad('attr_unhashable_key.yaml', '9:13', 'a mapping key must be a plain value'),
    Bad('attrs_list.yaml', '9:12', "'attrs' must be a mapping, not a list",
        'map attribute names to values, e.g. attrs: {axis: 1}'),
    Bad('axis_out_of_range.yaml', '10:13',
        "Softmax node 'softmax_y': axis 5 is out of range for a tensor of rank 2 (expected -2..1)"),
    Bad('bad_attr_type.yaml', '9:19',
        "attribute 'axis' of Softmax node 'softmax_y' must be an integer, not 'last'"),
    Bad('binary.yaml', '1:8', 'the graph file is not UTF-8 text (byte 0xff)',
        'save the file as UTF-8'),
    Bad('builder_attr.yaml', '11:25',
        "attribute 'activation' of Linear node 'linear_y' must be one of 'none', 'relu', 'gelu', "
        "not 'softmax'"),
    Bad('builder_axis.yaml', '11:19',
        "LayerNormalization node 'layernormalization_y': "
        "axis 2 is out of range for a tensor of rank 2 (expected -2..1)"),
    Bad('builder_inner_dtype.yaml', '10:20',
        "Add node 'linear_y_add': input 1 has element type int64, expected float32",
        "while expanding Linear node 'linear_y' into primitives"),
    Bad('builder_inner_shape.yaml', '8:5',
        "MatMul node 'linear_y_matmul': inner dimensions differ: [2, 3] x [4, 4] (3 != 4)",
        "while expanding Linear node 'linear_y' into primitives"),
    Bad('builder_too_many_outputs.yaml', '10:18', "Linear node 'linear_y' has 1 output, but 2 are named"),
    Bad('constant_bad_value.yaml', '6:14',
        "constant 'c': 'value' must be a number or a (nested, rectangular) list of numbers"),
    Bad('constant_file_and_value.yaml', '6:28', "constant 'w': give either 'file' or 'value', not both"),
    Bad('constant_int_not_integral.yaml', '6:14', "constant 's': an int64 constant must hold whole numbers"),
    Bad('constant_no_source.yaml', '6:3',
        "constant 'w': no data source; give one of 'file', 'value', 'random', 'onnx'",
        'e.g. {file: weights/w.npy}'),
    Bad('constant_unknown_field.yaml', '6:19', "constant 'c': unknown field 'sahpe' for a 'value' constant",
        'allowed fields: dtype, value'),
    Bad('constants_list.yaml', '6:3', "'constants' must be a mapping, not a list",
        'map each constant name to its data, e.g. w: {file: weights/w.npy}'),
    Bad('corrupt_npy.yaml', '6:13', "constant 'w': 'weights/corrupt.npy' is not a NumPy .npy file",
        'write it with numpy.save'),
    Bad('corrupt_npz.yaml', '6:13', "constant 'w': 'weights/corrupt.npz' is not an .npz archive",
        'write it with numpy.savez'),
    Bad('cycle.yaml', '6:5', 'the graph has a cycle: first -> second -> first',
        'a value cannot depend on itself'),
    Bad('declared_output_mismatch.yaml', '5:6',
        "output 'y' is declared float32[3, 2], but the graph computes float32[2, 3]",
        'correct the declared type, or give only the name to use the inferred one'),
    Bad('dtype_mismatch.yaml', '9:17', "Add node 'add_y': input 1 has element type int64, expected float32"),
    Bad('duplicate_key.yaml', '9:5', "duplicate key 'inputs'",
        "'inputs' was first given at line 7"),
    Bad('duplicate_node.yaml', '11:11', "duplicate node name 'act'",
        "'act' already names the node at line 7"),
    Bad('duplicate_value.yaml', '11:15', "duplicate value name 'y'",
        "'y' is already defined at line 8"),
    Bad('empty.yaml', '1:1', 'a graph file must be a YAML mapping, not empty',
        "start with 'graph: NAME'"),
    Bad('empty_output_name.yaml', '8:15', "a name in 'outputs' cannot be empty",
        '"" stands only for an omitted optional input'),
    Bad('graph_name_keyword.yaml', '1:8', "invalid graph name: 'class' is a C or C++ keyword",
        'names become C and C++ identifiers in the generated code'),
    Bad('graph_name_number.yaml', '1:8', 'invalid graph name: a name must be a string, not 5',
        'names become C and C++ identifiers in the generated code'),
    Bad('input_dtype.yaml', '3:14', "unsupported dtype 'string' for input 'x'",
        'supported: ' + ', '.join(SUPPORTED_DTYPES)),
    Bad('input_no_shape.yaml', '3:6', "input 'x' has no 'shape'",
        'add e.g. shape: [1, 16]'),
    Bad('input_type_not_mapping.yaml', '3:6', "the type of input 'x' must be a mapping, not a list",
        'write e.g. {dtype: float32, shape: [1, 16]}'),
    Bad('inputs_not_mapping.yaml', '2:9', "'inputs' must be a mapping, not the number 5",
        'map each input name to its type, e.g. x: {dtype: float32, shape: [1, 16]}'),
    Bad('inputs_number.yaml', '7:13', "'inputs' must be a list of value names, not the number 5",
        'write e.g. inputs: [x]'),
    Bad('matmul_mismatch.yaml', '8:5',
        "MatMul node 'matmul_y': inner dimensions differ: [2, 3] x [4, 5] (3 != 4)"),
    Bad('missing_graph_name.yaml', '1:1', 'the graph has no name',
        "add 'graph: NAME' at the top"),
    Bad('missing_inputs.yaml', '1:1', "the graph declares no 'inputs'",
        'add e.g. inputs: {x: {dtype: float32, shape: [1, 16]}}'),
    Bad('missing_required_attr.yaml', '6:5', "Concat node 'concat_y' needs attribute 'axis'"),
    Bad('missing_weight.yaml', '6:13', "constant 'w': weight file 'weights/missing.npy' does not exist",
        'paths are relative to the graph file'),
    Bad('name_api.yaml', '4:11', "invalid output name: 'ws' is a name the generated API uses itself",
        'names become C and C++ identifiers in the generated code'),
    Bad('name_double_underscore.yaml', '7:11',
        "invalid node name: 'my__relu' contains '__', which C and C++ reserve",
        'names become C and C++ identifiers in the generated code'),
    Bad('name_keyword.yaml', '3:3', "invalid input name: 'int' is a C or C++ keyword",
        'names become C and C++ identifiers in the generated code'),
    Bad('name_not_identifier.yaml', '4:11',
        "invalid output name: '2nd' is not a valid identifier "
        "(use letters, digits and '_', starting with a letter)",
        'names become C and C++ identifiers in the generated code'),
    Bad('no_inputs.yaml', '2:9', 'the graph declares no inputs',
        'add e.g. x: {dtype: float32, shape: [1, 16]}'),
    Bad('node_is_list.yaml', '6:5', 'a node must be a mapping, not a list',
        'write a node as a mapping, e.g. {op: Relu, inputs: [x], outputs: [y]}'),
    Bad('node_missing_op.yaml', '6:5', "the node has no 'op'",
        'add e.g. op: Relu (`python -m tinsmith ops` lists the ops)'),
    Bad('node_missing_outputs.yaml', '6:5', "the Relu node has no 'outputs'",
        'name the values it writes, e.g. outputs: [y]'),
    Bad('node_unknown_key.yaml', '7:5', "unknown key 'input' in a node",
        'allowed keys: op, name, inputs, outputs, attrs'),
    Bad('nodes_mapping.yaml', '5:8', "'nodes' must be a list, not a mapping",
        "write the nodes as a list, each item starting with '- op: ...'"),
    Bad('not_a_mapping.yaml', '1:1', 'a graph file must be a YAML mapping, not a list',
        "start with 'graph: NAME'"),
    Bad('npz_is_npy.yaml', '6:13', "constant 'w': 'weights/really_npy.npz' is not an .npz archive",
        'write it with numpy.savez'),
    Bad('npz_key_missing.yaml', '6:33', "constant 'w': 'weights/w.npz' has no array 'w2'",
        'it holds: b, w'),
    Bad('npz_key_not_string.yaml', '6:33', "constant 'w': 'key' must be the name of an array in the archive"),
    Bad('npz_without_key.yaml', '6:13',
        "constant 'w': 'weights/w.npz' is an .npz archive: say which array with 'key'",
        'add key: NAME'),
    Bad('op_not_string.yaml', '6:9', "'op' must be a string, not a list",
        "write the op's name, e.g. op: Relu"),
    Bad('output_is_input.yaml', '4:11', "graph output 'x' is never produced by any node",
        'to pass it through, add a node {op: Identity, inputs: [x], outputs: [NAME]}'),
    Bad('output_listed_twice.yaml', '4:14', "output 'y' is listed twice"),
    Bad('output_never_produced.yaml', '4:14', "graph output 'z' is never produced by any node",
        "list the value a node writes in its 'outputs'"),
    Bad('outputs_empty.yaml', '4:10', 'the graph declares no outputs',
        'add e.g. outputs: [y]'),
    Bad('perm_not_permutation.yaml', '9:19',
        "Transpose node 'transpose_y': perm [0, 0] is not a permutation of 0..1"),
    Bad('random_bad_distribution.yaml', '6:15', "constant 'w': unknown distribution 'gaussian'",
        'use one of: normal, uniform'),
    Bad('random_no_shape.yaml', '6:3',
        "constant 'w': a random constant needs 'shape', a list of positive integers",
        'e.g. shape: [16, 8]'),
    Bad('required_input_omitted.yaml', '7:17',
        "input 1 of Gemm node 'gemm_y' is required and cannot be omitted"),
    Bad('reshape_bad_target.yaml', '9:17',
        "Reshape node 'reshape_y': cannot reshape [2, 3] (6 elements) to [4, 2] (8 elements)"),
    Bad('reshape_not_constant.yaml', '10:17',
        "input 1 of Reshape node 'reshape_y' must be a constant, known when the graph is built"),
    Bad('self_loop.yaml', '6:5', 'the graph has a cycle: add_y -> add_y',
        'a value cannot depend on itself'),
    Bad('shape_float.yaml', '3:34',
        "dimension 1 of input 'x' must be a positive integer, not the number 1.5",
        'Tinsmith compiles static shapes only'),
    Bad('shape_mismatch.yaml', '8:5', "Add node 'add_y': shapes [2, 3] and [2] cannot be broadcast together"),
    Bad('shape_not_list.yaml', '3:30',
        "the shape of input 'x' must be a list of positive integers, not the number 6",
        'write e.g. shape: [1, 16]'),
    Bad('shape_string.yaml', '3:34', "dimension 1 of input 'x' must be a positive integer, not 'a'",
        'Tinsmith compiles static shapes only'),
    Bad('shape_zero.yaml', '3:34', "dimension 1 of input 'x' must be a positive integer, not the number 0",
        'Tinsmith compiles static shapes only'),
    Bad('tab_indent.yaml', '7:1', "invalid YAML: found character '\\t' that cannot start any token",
        'indent with spaces; YAML does not allow tabs'),
    Bad('too_few_inputs.yaml', '7:13', "Add node 'add_y' takes 2 inputs, got 1"),
    Bad('two_documents.yaml', '9:1',
        'invalid YAML: expected a single document in the stream, but found another document',
        "a graph file holds one YAML document; remove the '---' line"),
    Bad('type_unknown_key.yaml', '3:38', "unknown key 'layout' in the type of input 'x'",
        'allowed keys: dtype, shape, quant'),
    Bad('unknown_attr.yaml', '9:22', "Softmax node 'softmax_y' has no attribute 'axes' (it takes: axis)"),
    Bad('unknown_op.yaml', '6:9', "unknown op 'Relux' in node 'relux_y'",
        "did you mean 'Relu' or 'PRelu' or 'Elu'?"),
    Bad('unknown_op_no_match.yaml', '6:9', "unknown op 'Frobnicate' in node 'frobnicate_y'",
        'run `python -m tinsmith ops` to list the supported ops'),
    Bad('unknown_top_key.yaml', '5:1', "unknown key 'node' in the graph",
        'allowed keys: graph, version, inputs, outputs, states, constants, nodes'),
    Bad('unknown_value.yaml', '7:17', "unknown value 'z' (input of node 'add_y')",
        'inputs must be graph inputs, constants or node outputs'),
    Bad('value_bool.yaml', '6:14',
        "constant 'c': 'value' must be a number or a (nested, rectangular) list of numbers"),
    Bad('version.yaml', '1:10', 'unsupported graph file version 2',
        'this Tinsmith reads version 1'),
    Bad('weight_shape_mismatch.yaml', '6:35',
        "constant 'w': the data has shape [4, 3], but 'shape' says [3, 4]"),
    Bad('weight_unsupported_suffix.yaml', '6:13',
        "constant 'w': cannot load 'weights/w.bin': only .npy and .npz files are supported"),
    Bad('wrong_input_count.yaml', '7:17', "Relu node 'relu_y' takes 1 input, got 2"),
    Bad('wrong_output_count.yaml', '8:18', "Relu node 'relu_y' has 1 output, but 2 are named"),
    Bad('yaml_syntax.yaml', '8:12', "invalid YAML: expected ',' or ']', but got ':'",
        'while parsing a flow sequence started at line 7, column 13'),
]


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def expected_lines(path: str, loc: str, error: str, note: str | None) -> list[str]:
    lines = [f"{path}:{loc}: error: {error}"]
    if note is not None:
        lines.append(f"{path}:{loc}: note: {note}")
    return lines


def show(path: str, capsys) -> list[str]:
    """Run `show` in-process; return its stderr lines after checking status and output."""
    status = main(["show", path])
    out, err = capsys.readouterr()
    assert status == 1
    assert out == ""
    assert "Traceback" not in err
    return err.rstrip("\n").split("\n")


@pytest.mark.parametrize("case", CASES, ids=[c.file for c in CASES])
def test_bad_graph_is_reported_at_its_location(case: Bad, capsys):
    path = f"{BAD}/{case.file}"
    assert show(path, capsys) == expected_lines(path, case.loc, case.error, case.note)


def test_every_bad_file_has_a_row():
    files = sorted(p.name for p in (ROOT / BAD).glob("*.yaml"))
    assert files == sorted(c.file for c in CASES)
    assert len(files) >= 22


@pytest.mark.parametrize("path, error", [
    (f"{BAD}/no_such_graph.yaml", "cannot read graph file: No such file or directory"),
    (f"{BAD}/weights", "cannot read graph file: Is a directory"),
])
def test_unreadable_graph_file(path, error, capsys):
    assert show(path, capsys) == [f"{path}:1:1: error: {error}"]


def _graph_with_constant(tmp_path: Path, constant: str) -> str:
    graph = tmp_path / "g.yaml"
    graph.write_text("graph: g\n"
                     "inputs: {x: {shape: [2, 3]}}\n"
                     "outputs: [y]\n"
                     "constants:\n"
                     f"  w: {constant}\n"
                     "nodes:\n"
                     "  - {op: MatMul, inputs: [x, w], outputs: [y]}\n")
    return os.path.relpath(graph)


def test_truncated_npz(tmp_path, capsys):
    whole = (ROOT / BAD / "weights" / "w.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(whole[:len(whole) // 2])
    path = _graph_with_constant(tmp_path, "{file: cut.npz, key: w}")
    lines = show(path, capsys)
    assert lines[0].startswith(f"{path}:5:13: error: constant 'w': cannot read weight file 'cut.npz': ")
    assert len(lines) == 1


def test_npy_holding_python_objects(tmp_path, capsys):
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    path = _graph_with_constant(tmp_path, "{file: objects.npy}")
    assert show(path, capsys) == [f"{path}:5:13: error: constant 'w': cannot read weight file "
                                  "'objects.npy': it holds Python objects, not numbers"]


def test_weight_file_that_is_a_directory(tmp_path, capsys):
    (tmp_path / "dir.npy").mkdir()
    path = _graph_with_constant(tmp_path, "{file: dir.npy}")
    assert show(path, capsys) == [f"{path}:5:13: error: constant 'w': weight file 'dir.npy' is a directory"]


def test_int64_constant_too_large(tmp_path, capsys):
    path = _graph_with_constant(tmp_path, "{value: [18446744073709551615], dtype: int64}")
    assert show(path, capsys) == [f"{path}:5:14: error: constant 'w': the data holds a number too large "
                                  "for int64"]


def test_deeply_nested_yaml(tmp_path, capsys):
    graph = tmp_path / "deep.yaml"
    graph.write_text("graph: " + "[" * 5000 + "]" * 5000 + "\n")
    path = os.path.relpath(graph)
    assert show(path, capsys) == [f"{path}:1:1: error: invalid YAML: nested too deeply"]


def test_exponent_floats_merge_keys_and_anchors_are_read(tmp_path, capsys):
    """Valid YAML that PyYAML reads differently by default: 1e-5 is a number, `<<` merges."""
    graph = tmp_path / "ok.yaml"
    graph.write_text("graph: ok\n"
                     "inputs: {x: {shape: [2, 4]}}\n"
                     "outputs: [y]\n"
                     "constants:\n"
                     "  scale: {value: [1, 1, 1, 1]}\n"
                     "nodes:\n"
                     "  - &norm {op: LayerNormalization, inputs: [x, scale], outputs: [n],\n"
                     "           attrs: {epsilon: 1e-5, axis: -1}}\n"
                     "  - {<<: *norm, inputs: [n, scale], outputs: [y]}\n")
    assert main(["show", str(graph)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert "y: float32[2, 4]" in out


# --- through the real command line -------------------------------------------------------

def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tinsmith", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("case", [c for c in CASES if c.file in
                                  ("yaml_syntax.yaml", "unknown_op.yaml", "missing_weight.yaml",
                                   "dtype_mismatch.yaml")], ids=lambda c: c.file)
def test_command_line_reports_graph_errors(case: Bad):
    path = f"{BAD}/{case.file}"
    proc = _run("show", path)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert proc.stderr.rstrip("\n").split("\n") == expected_lines(path, case.loc, case.error, case.note)


@pytest.mark.parametrize("args", [(), ("show",), ("frobnicate", "graphs/mlp.yaml"),
                                  ("show", "graphs/mlp.yaml", "--no-such-option")])
def test_command_line_bad_usage_exits_2(args):
    proc = _run(*args)
    assert proc.returncode == 2
    assert "usage:" in proc.stderr
    assert "Traceback" not in proc.stderr
