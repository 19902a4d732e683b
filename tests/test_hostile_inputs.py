"""Hostile model files: each finding of the fuzz campaign (limits, crashes, hangs, round trips,
a valid model that did not compile) as a regression test.

Messages are checked whole where they are the contract (`path:line:col: error: ...`), and every
command runs as its own process where a crash or a hang is what is being tested."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tinsmith import limits
from tinsmith.cli import main
from tinsmith.errors import GraphError
from tinsmith.load import load_graph_spec
from tinsmith.pipeline import compile_graph
from conftest import ROOT, scons, tinsmith
from fuzz import harness
from fuzz.mutate import bomb_graph

X4 = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
Y4 = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def graph_text(inputs="x: {dtype: float32, shape: [1, 4]}", constants="", nodes="- {op: Relu, inputs: [x], outputs: [y]}",
               name="g") -> str:
    consts = f"constants:\n  {constants}\n" if constants else ""
    return f"graph: {name}\ninputs:\n  {inputs}\noutputs: [y]\n{consts}nodes:\n  {nodes}\n"


def error_lines(tmp_path: Path, *args: str, timeout: float = harness.TIMEOUT) -> list[str]:
    """Run `python -m tinsmith ARGS` in tmp_path; it must fail with status 1 and located messages
    only (the fuzz harness's promises); returns stderr's lines."""
    status, _, err, _ = harness.run_tinsmith(list(args), tmp_path, timeout)
    findings = harness.check_messages(status, err)
    assert not findings, (findings, err)
    assert status == 1, err
    return err.splitlines()


def save_model(path: Path, nodes, inputs=(X4,), outputs=(Y4,), inits=(), opset=18, functions=(),
               extra_opsets=()) -> Path:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets],
                              functions=list(functions))
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


# --- limits ---------------------------------------------------------------------------------
def counting(monkeypatch, owner, name: str) -> list[int]:
    """Count the calls of `owner.name` (the real function still runs); the count is [n]."""
    calls, real = [0], getattr(owner, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)
    monkeypatch.setattr(owner, name, counted)
    return calls


def statements(compiled) -> int:
    """Loop IR statements (loops included) of every kernel of a compiled graph."""
    from tinsmith.generate.loop_ir import walk_stmts
    return sum(1 for k in compiled.model.kernels for _ in walk_stmts(k.kernel.body))


def test_yaml_alias_bomb_is_refused_quickly(tmp_path, monkeypatch):
    """The work is counted, not timed: the loader composes each node of the file once and sizes each
    alias once, never the 10**9 values the aliases stand for."""
    from tinsmith.load import located_yaml
    path = write(tmp_path / "bomb.yaml", bomb_graph(9))  # 10**9 values once expanded
    composed = counting(monkeypatch, located_yaml._Loader, "compose_node")
    sized = counting(monkeypatch, located_yaml, "_expanded_size")
    with pytest.raises(GraphError) as e:
        load_graph_spec(path)
    assert composed[0] < 200 and sized[0] < 400, (composed, sized)
    assert e.value.message == "YAML aliases here expand to more than 100,000 values (limit 'alias_expansion')"
    assert (e.value.loc.line, e.value.loc.col) == (9, 55)  # the alias that goes over
    assert "--limits alias_expansion=N" in e.value.hint


def test_alias_expansion_limit_can_be_lowered_and_small_aliases_stay_allowed(tmp_path):
    path = write(tmp_path / "g.yaml", graph_text(constants="a: {value: &v [1, 2, 3, 4]}\n  b: {value: *v}",
                                                 nodes="- {op: Add, inputs: [x, a], outputs: [y]}"))
    assert [c.name for c in load_graph_spec(path).constants] == ["a", "b"]
    with limits.using(limits.parse("alias_expansion=3")), pytest.raises(GraphError, match="alias_expansion"):
        load_graph_spec(path)


def test_weight_file_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "w.npy")
    write(tmp_path / "g.yaml", graph_text(constants="w: {file: w.npy}", nodes="- {op: Add, inputs: [x, w], outputs: [y]}"))
    assert error_lines(tmp_path, "show", "g.yaml") == [
        "g.yaml:6:13: error: constant 'w': cannot read weight file 'w.npy': it is a FIFO, not a regular file"]


def test_graph_file_that_is_a_fifo_or_a_device_is_refused(tmp_path):
    os.mkfifo(tmp_path / "g.yaml")
    (tmp_path / "z.yaml").symlink_to("/dev/zero")
    assert error_lines(tmp_path, "show", "g.yaml") == [
        "g.yaml:1:1: error: cannot read graph file: it is a FIFO, not a regular file"]
    assert error_lines(tmp_path, "show", "z.yaml") == [
        "z.yaml:1:1: error: cannot read graph file: it is a device, not a regular file"]


def test_huge_random_shape_is_a_located_error(tmp_path):
    write(tmp_path / "g.yaml", graph_text(constants="w: {random: normal, shape: [100000, 100000]}",
                                          nodes="- {op: Add, inputs: [x, w], outputs: [y]}"))
    assert error_lines(tmp_path, "show", "g.yaml") == [
        "g.yaml:6:30: error: constant 'w': the constant has 10,000,000,000 elements, more than the limit of "
        "16,777,216 (limit 'constant_elements')",
        "g.yaml:6:30: note: if the model is trusted and really needs it, raise the limit with "
        "--limits constant_elements=N"]


def test_input_over_int_max_elements_is_a_located_error(tmp_path):
    write(tmp_path / "g.yaml", graph_text(inputs="x: {dtype: float32, shape: [65536, 65536]}"))
    lines = error_lines(tmp_path, "generate", "g.yaml", "-o", "out")
    assert lines[0] == ("g.yaml:3:30: error: input 'x' has 4,294,967,296 elements, more than the limit of "
                        "67,108,864 (limit 'tensor_elements')")
    assert not (tmp_path / "out").exists()


def test_a_computed_value_over_the_limit_is_reported_at_its_node(tmp_path):
    write(tmp_path / "g.yaml", graph_text(constants="r: {value: [70000, 70000], dtype: int64}",
                                          nodes="- {op: Tile, inputs: [x, r], outputs: [y]}"))
    assert error_lines(tmp_path, "show", "g.yaml")[0] == (
        "g.yaml:8:5: error: Tile node 'tile_y': output 0 has 19,600,000,000 elements, more than the limit "
        "of 67,108,864 (limit 'tensor_elements')")


def test_rank_limit(tmp_path):
    write(tmp_path / "g.yaml", graph_text(inputs="x: {dtype: float32, shape: [1, 1, 1, 1, 1, 1, 1, 1, 1]}"))
    assert "has 9 dimensions, more than the limit of 8 (limit 'rank')" in error_lines(tmp_path, "show", "g.yaml")[0]


def test_huge_pads_are_refused_at_the_attribute(tmp_path):
    write(tmp_path / "g.yaml", graph_text(
        inputs="x: {dtype: float32, shape: [1, 1, 8]}", constants="w: {random: normal, shape: [1, 1, 3]}",
        nodes="- {op: Conv, inputs: [x, w], outputs: [y], attrs: {pads: [1000000000, 1]}}"))
    assert error_lines(tmp_path, "show", "g.yaml")[0] == (
        "g.yaml:8:60: error: Conv node 'conv_y': pads entry 1,000,000,000 is over the limit of 4,096 (limit 'pad')")


def test_padded_input_over_the_element_limit_is_refused(tmp_path):
    write(tmp_path / "g.yaml", graph_text(
        inputs="x: {dtype: float32, shape: [1, 64, 512, 512]}", constants="w: {random: normal, shape: [1, 64, 3, 3]}",
        nodes="- {op: Conv, inputs: [x, w], outputs: [y], attrs: {pads: [4000, 4000, 4000, 4000]}}"))
    assert "the padded input has" in error_lines(tmp_path, "show", "g.yaml")[0]


def test_conv_tiling_of_a_long_axis_is_fast(tmp_path, monkeypatch):
    """Tiling used to visit every output position in Python: a long 1-D axis took minutes. Counted:
    the positions the axis planner looks at (its edges, not its 60 M positions) and the statements
    generated."""
    from tinsmith.generate.functors import conv
    path = write(tmp_path / "g.yaml", graph_text(
        inputs="x: {dtype: float32, shape: [1, 1, 60000000]}", constants="w: {random: normal, shape: [1, 1, 3]}",
        nodes="- {op: Conv, inputs: [x, w], outputs: [y], attrs: {pads: [1, 1], strides: [1]}}"))
    visited = counting(monkeypatch, conv, "_taps_inside")
    compiled = compile_graph(path)
    assert compiled.graph.types["y"].shape == (1, 1, 60000000)
    assert 0 < visited[0] <= 20, visited
    assert statements(compiled) <= 100, statements(compiled)  # STMTS


def test_too_many_nodes(tmp_path):
    nodes = "\n  ".join(f"- {{op: Relu, inputs: [{'x' if i == 0 else f'v{i}'}], outputs: [{'y' if i == 9 else f'v{i + 1}'}]}}"
                        for i in range(10))
    path = write(tmp_path / "g.yaml", graph_text(nodes=nodes))
    assert len(compile_graph(path).graph.nodes) >= 1
    with limits.using(limits.parse("graph_nodes=5")), pytest.raises(GraphError) as e:
        load_graph_spec(path)
    assert e.value.message == "the graph has 10 nodes, more than the limit of 5 (limit 'graph_nodes')"


def test_limits_option_raises_a_limit_and_rejects_unknown_names(tmp_path, capsys):
    write(tmp_path / "g.yaml", graph_text(constants="w: {random: normal, shape: [4, 4]}",
                                          nodes="- {op: MatMul, inputs: [x, w], outputs: [y]}"))
    assert main(["show", str(tmp_path / "g.yaml"), "--limits", "constant_elements=10"]) == 1
    assert "limit 'constant_elements'" in capsys.readouterr().err
    assert main(["show", str(tmp_path / "g.yaml"), "--limits", "constant_elements=16,rank=3"]) == 0
    with pytest.raises(SystemExit):
        main(["show", str(tmp_path / "g.yaml"), "--limits", "nodes=3"])
    with pytest.raises(SystemExit):  # kernels index with int: no tensor over 2**26 elements
        main(["show", str(tmp_path / "g.yaml"), "--limits", "tensor_elements=2**31"])


def test_npz_header_declaring_a_huge_array_is_refused_before_reading(tmp_path):
    import io
    import zipfile
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f4", "fortran_order": False, "shape": (2**20, 2**20)})
    with zipfile.ZipFile(tmp_path / "w.npz", "w") as z:
        z.writestr("w.npy", head.getvalue() + b"\0" * 16)
    write(tmp_path / "g.yaml", graph_text(constants="w: {file: w.npz, key: w}",
                                          nodes="- {op: Add, inputs: [x, w], outputs: [y]}"))
    assert error_lines(tmp_path, "show", "g.yaml")[0] == (
        "g.yaml:6:13: error: constant 'w': the array in 'w.npz' under 'w' has 1,099,511,627,776 elements, "
        "more than the limit of 16,777,216 (limit 'constant_elements')")


def test_a_300_character_graph_name_is_a_located_error(tmp_path):
    write(tmp_path / "g.yaml", graph_text(name="g" * 300))
    assert error_lines(tmp_path, "generate", "g.yaml", "-o", "out")[0] == (
        "g.yaml:1:8: error: the graph name has 300 characters, more than 200")


# --- the ONNX importer checks a model before touching it -----------------------------------
def test_split_with_a_string_attribute_does_not_crash_the_version_converter(tmp_path):
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=1)
    node.attribute.append(helper.make_attribute("split", "abc"))
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2]) for n in "ab"]
    save_model(tmp_path / "split.onnx", [node], outputs=outs, opset=11)
    for args in (["import-onnx", "split.onnx", "-o", "out/split.yaml"], ["generate", "split.onnx", "-o", "out"]):
        lines = error_lines(tmp_path, *args)
        assert lines[0] == ("split.onnx: error: a Split node: the model is not valid ONNX (the ONNX checker): "
                            "Mismatched attribute type in ' : split'. Expected: 'INTS', actual: 'STRING'")
    assert not (tmp_path / "out").exists()


def test_recursive_model_local_function(tmp_path):
    f = helper.make_function("local", "F", ["a"], ["b"], [helper.make_node("F", ["a"], ["b"], domain="local")],
                             [helper.make_opsetid("", 18)])
    save_model(tmp_path / "rec.onnx", [helper.make_node("F", ["x"], ["y"], domain="local")], functions=[f],
               extra_opsets=[helper.make_opsetid("local", 1)])
    assert "Model-local functions must not be recursive" in error_lines(tmp_path, "show", "rec.onnx")[0]


@pytest.mark.parametrize("attr", [helper.make_attribute("value_float", [1, 2]), helper.make_attribute("value", "text")])
def test_constant_attribute_of_the_wrong_type(tmp_path, attr):
    c = helper.make_node("Constant", [], ["c"], name="k")
    c.attribute.append(attr)
    save_model(tmp_path / "c.onnx", [c, helper.make_node("Add", ["x", "c"], ["y"])])
    line = error_lines(tmp_path, "import-onnx", "c.onnx", "-o", "out/c.yaml")[0]
    assert line.startswith("c.onnx: error: node 'k' (Constant): the model is not valid ONNX (the ONNX checker): "
                           "Mismatched attribute type")


def test_corrupt_initializer_in_a_model_and_through_the_onnx_loader(tmp_path):
    t = numpy_helper.from_array(np.ones(4, np.float32), "w")
    t.raw_data = b"\0" * 7
    save_model(tmp_path / "m.onnx", [helper.make_node("Add", ["x", "w"], ["y"])], inits=[t])
    assert "raw_data size (7 bytes) is too small" in error_lines(tmp_path, "show", "m.onnx")[0]
    write(tmp_path / "g.yaml", graph_text(constants="w: {onnx: m.onnx, initializer: w}",
                                          nodes="- {op: Add, inputs: [x, w], outputs: [y]}"))
    line = error_lines(tmp_path, "show", "g.yaml")[0]
    assert line.startswith("g.yaml:6:34: error: constant 'w': cannot read the data of initializer 'w'")


def test_names_that_are_not_utf8(tmp_path):
    path = save_model(tmp_path / "u.onnx", [helper.make_node("Relu", ["x"], ["y"], name="QQQQ")])
    path.write_bytes(path.read_bytes().replace(b"QQQQ", b"Q\xff\xfeQ"))
    assert error_lines(tmp_path, "import-onnx", "u.onnx", "-o", "out/u.yaml") == [
        "u.onnx: error: graph.node[0].name is not valid UTF-8 text: b'Q\\xff\\xfeQ'",
        "u.onnx: note: ONNX strings are UTF-8; re-export the model"]
    model = onnx.load_from_string(save_model(tmp_path / "u.onnx", [helper.make_node("Relu", ["x"], ["y"])]).read_bytes())
    model.producer_name = "PPPP"  # any string field, not only names
    path.write_bytes(model.SerializeToString().replace(b"PPPP", b"P\xff\xfeP"))
    assert error_lines(tmp_path, "generate", "u.onnx", "-o", "out")[0] == (
        "u.onnx: error: producer_name is not valid UTF-8 text: b'P\\xff\\xfeP'")


def test_nan_initializer_is_located(tmp_path):
    save_model(tmp_path / "m.onnx", [helper.make_node("Add", ["x", "w"], ["y"])],
               inits=[numpy_helper.from_array(np.array([np.nan, 1, 2, 3], np.float32), "w")])
    assert error_lines(tmp_path, "import-onnx", "m.onnx", "-o", "out/m.yaml") == [
        "m.onnx: error: initializer 'w': constants a graph file cannot hold: 'w' (holds NaN or infinite values)",
        "m.onnx: note: compile the model file directly instead of importing it"]
    assert not (tmp_path / "out").exists()


def test_empty_initializer_is_located(tmp_path):
    x1 = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y0 = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    save_model(tmp_path / "m.onnx", [helper.make_node("Reshape", ["x", "w"], ["y"])], inputs=(x1,), outputs=(y0,),
               inits=[numpy_helper.from_array(np.zeros([0], np.int64), "w")])
    assert error_lines(tmp_path, "import-onnx", "m.onnx", "-o", "out/m.yaml")[0] == (
        "m.onnx: error: initializer 'w': constants a graph file cannot hold: 'w' (empty)")


def test_huge_initializer_dims_are_refused_before_reading(tmp_path):
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**20, 2**20])  # and no data
    save_model(tmp_path / "m.onnx", [helper.make_node("Add", ["x", "w"], ["y"])], inits=[t])
    assert error_lines(tmp_path, "show", "m.onnx")  # the checker or the limit: located, no traceback


# --- round trips: an import that exits 0 wrote a graph file that loads --------------------
def test_model_without_outputs(tmp_path):
    save_model(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"])], outputs=())
    assert error_lines(tmp_path, "import-onnx", "m.onnx", "-o", "out/m.yaml")[0] == (
        "m.onnx: error: graph: the model has no outputs")
    assert not (tmp_path / "out").exists()


def test_output_listed_twice(tmp_path):
    save_model(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"])], outputs=(Y4, Y4))
    assert error_lines(tmp_path, "import-onnx", "m.onnx", "-o", "out/m.yaml")[0] == (
        "m.onnx: error: output 'y': the model lists this output twice")


@pytest.mark.parametrize("batch", ["0", "-1"])
def test_batch_must_be_positive(tmp_path, batch):
    xb = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    save_model(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"])], inputs=(xb,))
    assert error_lines(tmp_path, "import-onnx", "m.onnx", "-o", "out/m.yaml", "--batch", batch) == [
        f"m.onnx: error: the batch size must be a positive integer, not {batch}"]


def test_long_names_either_import_and_load_or_fail_cleanly(tmp_path):
    long = "v" * 1100
    out = helper.make_tensor_value_info(long, TensorProto.FLOAT, [1, 4])
    save_model(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], [long], name="n" * 1100)], outputs=(out,))
    outcome = harness.run_case("long", tmp_path, ["import-onnx", "m.onnx", "-o", "out/m.yaml"])
    assert not outcome.findings, outcome.findings  # exit 0 with a graph file that loads, or a located error


def test_import_removes_what_it_wrote_when_it_does_not_load_again(tmp_path, monkeypatch):
    from tinsmith.load import write_yaml
    save_model(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"])])
    real = write_yaml.graph_yaml

    def broken(*args, **kwargs):  # a writer bug: the text no longer loads
        text, weights = real(*args, **kwargs)
        return text.replace('outputs: ["y"]', 'outputs: ["y", "y"]', 1), weights
    monkeypatch.setattr(write_yaml, "graph_yaml", broken)
    with pytest.raises(Exception) as e:
        write_yaml.import_onnx(tmp_path / "m.onnx", tmp_path / "out" / "m.yaml")
    assert "the imported graph file does not load, so it was removed" in str(e.value)
    assert not (tmp_path / "out" / "m.yaml").exists()


# --- a valid model that did not compile -----------------------------------------------------
def compiled_and_onnxruntime(tmp_path: Path, path: Path, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The model's output as the compiled runner (built by SCons) and ONNX Runtime compute it."""
    import onnxruntime as ort
    want = ort.InferenceSession(path.read_bytes(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    build, name = tmp_path / "build", path.stem
    scons("-Q", f"graphs={path}", f"build_dir={build}", str(build / name / f"{name}_runner"))
    (tmp_path / "in.bin").write_bytes(x.astype("<f4").tobytes())
    subprocess.run([str(build / name / f"{name}_runner"), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                   check=True)
    return np.frombuffer((tmp_path / "out.bin").read_bytes(), "<f4").reshape(want.shape), want


def test_conv_transpose_1d_stride_2_pads_0_2_compiles_and_matches_onnxruntime(tmp_path):
    """Its two phases declared `float acc0` twice in one scope."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((1, 1, 3)).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", strides=[2], pads=[0, 2])
    path = save_model(tmp_path / "ct.onnx", [node], inputs=(helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2]),),
                      outputs=(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 3]),),
                      inits=[numpy_helper.from_array(w, "w")])
    got, want = compiled_and_onnxruntime(tmp_path, path, rng.standard_normal((1, 1, 2)).astype(np.float32))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_max_pool_window_wholly_in_the_padding_matches_onnxruntime(tmp_path):
    """Found by the differential fuzz: ONNX Runtime starts MaxPool from the lowest float32, so a
    window with no tap inside the input gives -3.4028235e38 (Tinsmith gave -inf)."""
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1, 2], dilations=[1, 2], pads=[0, 1, 0, 1],
                            strides=[3, 3])
    path = save_model(tmp_path / "mp.onnx", [node], inputs=(helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 1]),),
                      outputs=(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 1, 1]),))
    got, want = compiled_and_onnxruntime(tmp_path, path, np.array([1.0, 2.0], np.float32).reshape(1, 1, 2, 1))
    assert want.item() == np.finfo(np.float32).min
    np.testing.assert_array_equal(got, want)


# --- check passes on every shipped graph ----------------------------------------------------
@pytest.mark.parametrize("graph", ["ad_autoencoder", "kws_dscnn", "ic_resnet8", "vww_mobilenet"])
def test_check_passes_on_the_shipped_mlperf_graphs(graph, tmp_path):
    # the smallest through the default (three-level) target, the others through the one-level host:
    # the graphs are the question here, not the levels (tests/test_host_levels.py)
    target = [] if graph == "ad_autoencoder" else ["--target", "host"]
    proc = tinsmith("check", str(ROOT / "graphs" / f"{graph}.yaml"), "--build-dir", str(tmp_path), *target)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "of the tolerance (summation length" in proc.stdout


def test_check_help_states_the_tolerance():
    proc = subprocess.run([sys.executable, "-m", "tinsmith", "check", "--help"], cwd=ROOT, capture_output=True,
                          text=True)
    assert "(rtol + n * eps)" in proc.stdout and "summation length" in proc.stdout


def test_average_pool_with_huge_pads_is_fast(tmp_path, monkeypatch):
    """Windows wholly in the padding used to be one loop nest each: 64 M nests for these pads."""
    path = write(tmp_path / "g.yaml", graph_text(
        inputs="x: {dtype: float32, shape: [1, 1, 8, 8]}",
        nodes="- {op: AveragePool, inputs: [x], outputs: [y], attrs: {kernel_shape: [3, 3], "
              "pads: [4000, 4000, 4000, 4000]}}"))
    from tinsmith.generate.functors import conv
    visited = counting(monkeypatch, conv, "_taps_inside")
    compiled = compile_graph(path)
    assert compiled.graph.types["y"].shape == (1, 1, 8006, 8006)
    assert 0 < visited[0] <= 4 * 8006, visited  # each position of each axis once (twice: taps, counted)
    assert statements(compiled) <= 400, statements(compiled)  # 220: a few dozen nests, not one per window


def test_average_pool_needing_too_many_loop_nests_is_refused(tmp_path):
    write(tmp_path / "g.yaml", graph_text(
        inputs="x: {dtype: float32, shape: [1, 1, 2048, 2048]}",
        nodes="- {op: AveragePool, inputs: [x], outputs: [y], attrs: {kernel_shape: [1000, 1000], "
              "pads: [999, 999, 999, 999]}}"))
    assert error_lines(tmp_path, "show", "g.yaml")[0] == (
        "g.yaml:6:72: error: AveragePool node 'averagepool_y': its windows need about 4,008,004 loop nests, "
        "more than the limit of 16,384 (limit 'window_nests')")


def test_a_crash_inside_the_version_converter_is_an_error_not_a_crash(tmp_path, monkeypatch):
    """The converter runs in a child process: even a model the checker passes and the converter
    still crashes on ends in a located error (here the child is made to crash)."""
    from tinsmith.load import onnx_model
    save_model(tmp_path / "old.onnx", [helper.make_node("Relu", ["x"], ["y"])], opset=11)
    monkeypatch.setattr(onnx_model, "_CONVERT", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    with pytest.raises(GraphError) as e:
        onnx_model.read_onnx(tmp_path / "old.onnx")
    # an opset-11 model without local functions: only the version converter ran, and the hint
    # does not blame functions the model does not have
    assert e.value.message == f"ONNX's version converter failed on this model (signal {int(signal.SIGSEGV)})"
    assert e.value.hint == f"export the model at opset {onnx_model.MIN_OPSET} or later"
    assert e.value.loc.path.endswith("old.onnx")


def test_old_models_are_still_upgraded_and_local_functions_inlined(tmp_path):
    from tinsmith.load.onnx_model import read_onnx
    f = helper.make_function("local", "F", ["a"], ["b"], [helper.make_node("Sigmoid", ["a"], ["b"])],
                             [helper.make_opsetid("", 11)])
    save_model(tmp_path / "old.onnx", [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("F", ["r"], ["y"], domain="local")],
               opset=11, functions=[f], extra_opsets=[helper.make_opsetid("local", 1)])
    model = read_onnx(tmp_path / "old.onnx")
    assert (model.upgraded_from, model.opset) == (11, 18)
    assert [n.op for n in model.spec.nodes] == ["Relu", "Sigmoid"]


def test_a_graph_at_the_element_limit_builds_and_its_plan_check_needs_no_memory_per_byte(tmp_path):
    """The plan check used to hold three 8-byte times per workspace byte (and more while comparing):
    a large graph ended in numpy's _ArrayMemoryError. Now its memory grows with the runs of bytes
    whose times it must prove: kernels too long to trace are one run per buffer. Measured here on a
    chain of 2**24-element values (the element limit lowered to that size; the default 2**26 builds
    the same way, in about 3 GB, most of it the values' own arrays before the check), one element more is refused."""
    import tracemalloc
    from tinsmith.planners.check import check_plan
    size = 1 << 24
    chain = "\n  ".join(f"- {{op: Softmax, inputs: [{a}], outputs: [{b}]}}" for a, b in (("x", "a"), ("a", "b"), ("b", "y")))
    path = write(tmp_path / "g.yaml", graph_text(inputs=f"x: {{dtype: float32, shape: [1, {size}]}}", nodes=chain))
    with limits.using(limits.parse(f"tensor_elements={size}")):
        compiled = compile_graph(path)
    workspace = compiled.plan.workspace_bytes
    assert workspace >= 2 * 4 * size  # two values of the chain live in the workspace
    tracemalloc.start()
    try:
        untraced = check_plan(compiled.model)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(untraced) == 3  # each Softmax is too long to trace: assumed to touch its bytes throughout
    assert peak < workspace // 64, (peak, workspace)  # (the byte replay needed over 24 bytes per byte)
    write(tmp_path / "big.yaml", graph_text(inputs=f"x: {{dtype: float32, shape: [1, {size + 1}]}}", nodes=chain))
    with limits.using(limits.parse(f"tensor_elements={size}")), pytest.raises(GraphError, match="tensor_elements"):
        compile_graph(tmp_path / "big.yaml")


# --- TFLite flatbuffers (the input campaign of issue 22) --------------------------------------
def _tflite_error(tmp_path, data: bytes) -> GraphError:
    from tinsmith.pipeline import lower
    path = tmp_path / "m.tflite"
    path.write_bytes(data)
    with pytest.raises(GraphError) as e:
        lower(path)
    assert (e.value.loc.path.endswith("m.tflite"), e.value.loc.line) == (True, 0)  # a binary file: the file alone
    return e.value


def _tanh(**changes) -> bytes:
    from tinsmith.quant.activations import OUTPUT_QUANT
    from tflite_writer import single_operator
    return single_operator(28, "int8", [1, 8], changes.pop("x_quant", (0.05, 3)), OUTPUT_QUANT["tanh"], **changes)


@pytest.mark.parametrize("damage", ["truncated", "root_offset", "vector_length"])
def test_tflite_flatbuffer_that_points_outside_the_file_is_refused(tmp_path, damage):
    """The flatbuffer readers are lazy: an offset or a length pointing outside the file raised
    struct.error, TypeError or ValueError deep inside them, at whatever read came first."""
    import struct
    data = bytearray(_tanh())
    if damage == "truncated":
        data = data[: len(data) * 2 // 3]
    elif damage == "root_offset":
        data[0:4] = struct.pack("<I", 0x7FFFFFF0)
    else:  # every 32-bit word that holds 2 (the model's tensor count) becomes a huge length
        for at in range(0, len(data) - 3, 4):
            if struct.unpack_from("<I", data, at)[0] == 2:
                data[at:at + 4] = struct.pack("<I", 0x10000000)
    e = _tflite_error(tmp_path, bytes(data))
    assert e.message.startswith("not a valid TFLite model")


def test_tflite_operator_refers_to_a_tensor_the_model_lacks(tmp_path):
    e = _tflite_error(tmp_path, _tanh(op_inputs=(5,)))
    assert e.message == "an operator or the graph refers to tensor 5, but the model has 2 tensors"


def test_tflite_operator_without_inputs_is_refused(tmp_path):
    e = _tflite_error(tmp_path, _tanh(op_inputs=()))
    assert e.message == "operator 0 (TANH) has 0 inputs and 1 outputs; it needs at least 1 inputs and one output"


def test_tflite_tensor_with_an_invalid_quantization_is_refused(tmp_path):
    e = _tflite_error(tmp_path, _tanh(x_quant=(-0.5, 0)))
    assert e.message == "operator 0 (TANH): tensor 'x' has an invalid quantization: scales must be positive and finite"


def test_random_constant_with_a_negative_scale_is_refused_at_the_scale(tmp_path):
    """A negative scale of a uniform random constant ended in NumPy's 'high - low < 0' traceback."""
    write(tmp_path / "g.yaml", graph_text(constants="w: {random: uniform, shape: [4], scale: -1.0}",
                                          nodes="- {op: Add, inputs: [x, w], outputs: [y]}"))
    assert error_lines(tmp_path, "show", "g.yaml")[0] == (
        "g.yaml:6:43: error: constant 'w': 'scale' must be a finite number of at least 0, not -1.0")


def test_tflite_quantized_operator_with_a_float_output_is_refused(tmp_path):
    from tflite_writer import single_operator
    e = _tflite_error(tmp_path, single_operator(0, "int8", [1, 8], (0.05, 3), (0.1, 0), op_inputs=(0, 0),
                                                y_dtype="float32"))
    assert e.message == ("operator 0 (ADD): tensor 'y' is float32, but the output of a quantized operator must be "
                         "an integer type (int8)")


def test_tflite_operator_without_its_options_takes_the_defaults(tmp_path):
    """A model may leave an operator's builtin options out (TFLite reads the schema's defaults); the
    importer read an uninitialised table and failed. ADD(x, x) with no AddOptions: no activation,
    bit-exact with the TFLite Micro interpreter."""
    tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    from tinsmith.cli import run_compiled
    from tinsmith.pipeline import lower
    from tflite_writer import single_operator
    model = single_operator(0, "int8", [1, 256], (0.05, 3), (0.1, -2), op_inputs=(0, 0))
    path = tmp_path / "add.tflite"
    path.write_bytes(model)
    graph = lower(path)
    x = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    got = run_compiled(path, {graph.inputs[0]: x}, tmp_path / "build", graph)[graph.outputs[0]]
    interp = tflm.Interpreter.from_bytes(model)
    interp.set_input(x, 0)
    interp.invoke()
    np.testing.assert_array_equal(got, interp.get_output(0))


def test_tflite_tensor_over_the_element_limit_is_refused(tmp_path):
    """A few bytes of shape asked NumPy for an array larger than memory ('array is too big')."""
    from tinsmith.quant.activations import OUTPUT_QUANT
    from tflite_writer import single_operator
    e = _tflite_error(tmp_path, single_operator(28, "int8", [1, 1 << 27], (0.05, 3), OUTPUT_QUANT["tanh"]))
    assert e.message == ("tensor 'x' has 134,217,728 elements, more than the limit of 67,108,864 "
                         "(limit 'tensor_elements')")
    assert "--limits tensor_elements=N" in e.hint
