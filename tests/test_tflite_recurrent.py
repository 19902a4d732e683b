"""TFLite's recurrent operators (UNIDIRECTIONAL_SEQUENCE_LSTM, SVDF) compiled for the host and run
several invocations in a row, so that the state they keep between calls (TFLite's variable tensors,
the generated code's static state storage) carries over, against the TensorFlow Lite Micro
interpreter invoked as many times on the same inputs: float32 within 1e-5 relative, integers equal.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import emulated_core
from tflite_recurrent_models import (accumulator, branch, counted_loop, lstm_16x8, lstm_float, lstm_int8, svdf_float,
                                     svdf_int8)

ROOT = Path(__file__).resolve().parents[1]
tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
CALLS = 4  # invocations in a row: the state of each is the last one's
RTOL, ATOL = 1e-5, 1e-6


def oracle(model: bytes, feeds: list[np.ndarray]) -> list[np.ndarray]:
    interp = tflm.Interpreter.from_bytes(model)
    outputs = []
    for x in feeds:
        interp.set_input(x, 0)
        interp.invoke()
        outputs.append(np.array(interp.get_output(0)))
    return outputs


def compiled(model: bytes | Path, feeds: list[np.ndarray], tmp_path: Path) -> list[np.ndarray]:
    """The model (a .tflite's bytes, or a graph file) compiled for the host (with -Wall -Wextra
    -Werror) and called once per feed, in a row, by its host runner (one input set per call)."""
    from tinsmith.paths import RUNTIME_DIR, RUNTIME_INCLUDE
    from tinsmith.pipeline import compile_graph
    path = model if isinstance(model, Path) else tmp_path / "model.tflite"
    if not isinstance(model, Path):
        path.write_bytes(model)
    c = compile_graph(path, target="host")
    for name, text in c.files.items():
        (tmp_path / name).write_text(text)
    report = json.loads(c.files[f"{c.graph.name}.plan.json"])
    (y,) = report["outputs"]
    assert report["states"], "the model keeps no state"
    exe = tmp_path / "runner"
    subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{RUNTIME_INCLUDE}", f"-I{tmp_path}",
                    str(tmp_path / f"{c.graph.name}.cpp"), str(tmp_path / f"{c.graph.name}_runner.cpp"),
                    str(RUNTIME_DIR / "src" / "host_io.cpp"), "-o", str(exe)], check=True, capture_output=True)
    (tmp_path / "in.bin").write_bytes(b"".join(np.ascontiguousarray(f).tobytes() for f in feeds))
    subprocess.run([str(exe), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")], check=True)
    raw = np.fromfile(tmp_path / "out.bin", dtype=np.dtype(y["dtype"]))
    return list(raw.reshape(len(feeds), *y["shape"]))


def feeds(shape, seed: int, dtype: str = "float32") -> list[np.ndarray]:
    """CALLS seeded inputs: float32 in [-2, 2), int8 and int16 over their whole range."""
    rng = np.random.default_rng(1000 + seed)
    if dtype in ("int8", "int16"):
        info = np.iinfo(dtype)
        return [rng.integers(info.min, info.max + 1, shape).astype(dtype) for _ in range(CALLS)]
    return [rng.uniform(-2.0, 2.0, shape).astype(np.float32) for _ in range(CALLS)]


def assert_calls_match(got, want):
    """float32 within 1e-5 relative; integers bit-exact."""
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"call {k + 1} of {len(want)}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"call {k + 1} of {len(want)}")


# operator -> (model maker, element type, seeds, forms: name -> the maker's arguments)
FORMS = {
    "lstm_float32": (lstm_float, "float32", (0, 1), {
        "batch_major": {}, "time_major": {"time_major": True}, "cell_clip": {"cell_clip": 0.4},
        "no_activation": {"activation": 0}, "one_step": {"steps": 1, "batch": 1}}),
    # (no form without a bias: TFLite Micro's float SVDF kernel crashes on one)
    "svdf_float32": (svdf_float, "float32", (0, 1), {
        "rank_2_relu": {}, "rank_1_no_activation": {"rank": 1, "activation": 0}, "memory_1": {"memory": 1},
        "relu6": {"activation": 3, "batch": 1}}),
    "svdf_int8": (svdf_int8, "int8", (0, 1, 2), {
        "rank_2": {}, "rank_1": {"rank": 1, "activation": 0}, "memory_1": {"memory": 1},
        "wide": {"batch": 1, "n_input": 24, "filters": 16, "memory": 8, "rank": 4}}),
    "lstm_int8": (lstm_int8, "int8", (0, 1, 2), {
        "batch_major": {}, "time_major": {"time_major": True}, "cell_clip": {"cell_clip": 0.5},
        "cell_scale_2^-15": {"cell_scale_power": -15}, "cell_scale_2^-8": {"cell_scale_power": -8},
        "one_step": {"steps": 1, "batch": 1}}),
    "lstm_16x8": (lstm_16x8, "int16", (0, 1, 2), {
        "batch_major": {}, "time_major": {"time_major": True}, "cell_clip": {"cell_clip": 0.5},
        "cell_scale_2^-15": {"cell_scale_power": -15}, "cell_scale_2^-8": {"cell_scale_power": -8},
        "one_step": {"steps": 1, "batch": 1}, "wide": {"n_input": 24, "n_cell": 16}}),
}
CASES = [pytest.param(op, form, seed, id=f"{op}-{form}-{seed}")
         for op, (_, _, seeds, forms) in FORMS.items() for form in forms for seed in seeds]


@pytest.fixture(scope="module")
def case_programs(tmp_path_factory):
    """Every case of CASES compiled for the host and built with its host runner into batch
    programs (conformance/batch.py: many cases per compiler run, each with the host target's
    flags and -Werror), once for the module: case id -> (Program, output value of the report)."""
    from conformance.batch import build_batches
    from tinsmith.pipeline import compile_graph
    folder = tmp_path_factory.mktemp("recurrent-cases")
    cases, outputs = [], {}
    for param in CASES:
        operator, form, seed = param.values
        make, _, _, forms = FORMS[operator]
        path = folder / f"case{len(cases)}.tflite"
        path.write_bytes(make(seed, **forms[form])[0])
        c = compile_graph(path, target="host")
        report = json.loads(c.files[f"{c.graph.name}.plan.json"])
        assert report["states"], f"{param.id}: the model keeps no state"
        cases.append((c.graph.name, c.files))
        (outputs[param.id],) = report["outputs"]
    programs, failures = build_batches(cases, folder / "build", jobs=2, batch_size=20, log=lambda _: None)
    by_id = {param.id: name for param, (name, _) in zip(CASES, cases)}
    return {i: (programs.get(name), outputs[i], failures.get(name)) for i, name in by_id.items()}


@pytest.mark.parametrize("operator, form, seed", CASES)
def test_operator_matches_tflite_micro_over_calls(operator, form, seed, case_programs, tmp_path, request):
    """float32 within 1e-5 relative, int8 and int16 bit-exact, on every one of CALLS calls in a row."""
    make, dtype, _, forms = FORMS[operator]
    model, shape = make(seed, **forms[form])
    xs = feeds(shape, seed, dtype)
    program, y, failure = case_programs[request.node.callspec.id]
    assert failure is None, failure
    (tmp_path / "in.bin").write_bytes(b"".join(np.ascontiguousarray(x).tobytes() for x in xs))
    subprocess.run(program.command(str(tmp_path / "in.bin"), str(tmp_path / "out.bin")), check=True)
    got = list(np.fromfile(tmp_path / "out.bin", dtype=np.dtype(y["dtype"])).reshape(len(xs), *y["shape"]))
    assert_calls_match(got, oracle(model, xs))


EMULATED = {"svdf": (lambda: svdf_int8(5, batch=1, n_input=24, filters=16, memory=8, rank=4), "int8"),
            "lstm": (lambda: lstm_int8(5, batch=1, steps=4, n_input=6, n_cell=8), "int8"),
            "lstm_16x8": (lambda: lstm_16x8(5, batch=1, steps=4, n_input=6, n_cell=8), "int16"),
            "lstm_float32": (lambda: lstm_float(5, batch=1, steps=4, n_input=6, n_cell=8), "float32"),
            "svdf_float32": (lambda: svdf_float(5, batch=1, n_input=24, filters=16, memory=8, rank=4), "float32")}


@pytest.fixture(scope="module")
def emulated_builds(tmp_path_factory):
    """The EMULATED models' firmware for the Cortex-M4, built by one SCons run of the repository's
    SConstruct (the tool `tinsmith run` builds with), once per session: (folder, model paths)."""
    from shared_builds import these_graphs
    folder = tmp_path_factory.mktemp("recurrent-models")
    paths = {}
    for operator, (make, _) in EMULATED.items():
        paths[operator] = folder / f"{operator}.tflite"
        paths[operator].write_bytes(make()[0])
    return these_graphs(tmp_path_factory.getbasetemp(), "recurrent-cortex-m4", "cortex-m4", list(paths.values())), paths


@pytest.mark.parametrize("core", [emulated_core("cortex-m4")])
@pytest.mark.parametrize("operator", sorted(EMULATED))
def test_recurrent_operator_matches_tflite_micro_on_the_emulated_cortex_m4(operator, core, emulated_builds):
    """One call from the starting state, on the emulator as `tinsmith run` runs it (the firmware
    times a second call from the same state): integers bit-exact, float32 within 1e-5 relative
    (the core's single-precision FPU and picolibc's expf against the interpreter on the host)."""
    from shared_builds import run_built
    from tinsmith.pipeline import lower
    make, dtype = EMULATED[operator]
    model, shape = make()
    built, paths = emulated_builds
    graph = lower(paths[operator])
    (x,) = feeds(shape, 5, dtype)[:1]
    got = run_built(built, core, graph, {graph.api_inputs[0]: x})[graph.api_outputs[0]]
    assert_calls_match([got], oracle(model, [x]))


def test_sigmoid_table_is_the_one_tflite_micro_interpolates():
    """Each entry read again from TFLite Micro's int16 TANH at an input that lands on it exactly
    (|scaled input| = 128 * 2i at scale 2 / 12288: no interpolation, output entry - 32768)."""
    from tflite_writer import Op, Tensor, model
    from tinsmith.ops.quantized_recurrent import SIGMOID_TABLE
    xs = (128 * np.arange(255)).astype(np.int16)
    data = model([Tensor("x", "int16", [255], quant=(2 / 12288, 0)), Tensor("y", "int16", [255], quant=(1 / 32768, 0))],
                 [Op("TANH", [0], [1])], [0], [1])
    interp = tflm.Interpreter.from_bytes(data)
    interp.set_input(xs, 0)
    interp.invoke()
    np.testing.assert_array_equal(interp.get_output(0).astype(np.int64) + 32768, SIGMOID_TABLE[:255])


@pytest.mark.parametrize("function", ["sigmoid", "tanh"])
def test_int16_activation_reference_matches_tflite_micro_on_every_input(function):
    """Int16Activation's NumPy reference (which the kernel follows step by step) for all 65536
    inputs against TFLite Micro's int16 LOGISTIC and TANH at input scale 2^-12 (multiplier 3)."""
    from tflite_writer import Op, Tensor, model
    from tinsmith.ops.quantized_recurrent import SIGMOID_TABLE, reference
    chunk = 512  # (what the interpreter's arena holds), 128 invocations
    code = "LOGISTIC" if function == "sigmoid" else "TANH"
    data = model([Tensor("x", "int16", [chunk], quant=(2.0 ** -12, 0)),
                  Tensor("y", "int16", [chunk], quant=(1 / 32768, 0))], [Op(code, [0], [1])], [0], [1])
    interp = tflm.Interpreter.from_bytes(data)
    attrs = {"function": function, "input_multiplier": 0, "input_left_shift": 0}
    for start in range(-32768, 32768, chunk):
        xs = np.arange(start, start + chunk).astype(np.int16)
        interp.set_input(xs, 0)
        interp.invoke()
        (got,) = reference([xs, np.asarray(SIGMOID_TABLE, np.int32)], attrs)
        np.testing.assert_array_equal(got, interp.get_output(0), err_msg=f"inputs from {start}")


@pytest.mark.parametrize("initial, decay", [(0.0, 0.5), (1.5, -0.25)])
@pytest.mark.parametrize("seed", [0, 1])
def test_resource_variables_keep_their_value_between_calls(initial, decay, seed, tmp_path):
    """CALL_ONCE's init subgraph (run at build time) sets the variable's start; READ_VARIABLE and
    ASSIGN_VARIABLE carry it from call to call as the interpreter does."""
    model = accumulator(initial, (2, 3), decay)
    xs = feeds((2, 3), seed)
    assert_calls_match(compiled(model, xs, tmp_path), oracle(model, xs))


def _import_error(model: bytes, tmp_path: Path) -> str:
    from tinsmith.errors import GraphError
    from tinsmith.load.tflite_model import read_tflite
    path = tmp_path / "model.tflite"
    path.write_bytes(model)
    with pytest.raises(GraphError) as caught:
        read_tflite(path)
    return caught.value.message


def test_a_variable_starting_from_different_values_is_refused_by_name(tmp_path):
    from tflite_writer import Op, Tensor, model
    init = ([Tensor("h", "resource", []), Tensor("start", "float32", [2], np.float32([0, 1]))],
            [Op("VAR_HANDLE", [], [0], ("VarHandleOptions", {"SharedName": "v"})), Op("ASSIGN_VARIABLE", [0, 1], [])],
            [], [])
    tensors = [Tensor("x", "float32", [2]), Tensor("h", "resource", []), Tensor("v", "float32", [2]),
               Tensor("y", "float32", [2])]
    ops = [Op("CALL_ONCE", [], [], ("CallOnceOptions", {"InitSubgraphIndex": 1})),
           Op("VAR_HANDLE", [], [1], ("VarHandleOptions", {"SharedName": "v"})), Op("READ_VARIABLE", [1], [2]),
           Op("ADD", [0, 2], [3]), Op("ASSIGN_VARIABLE", [1, 3], [])]
    message = _import_error(model(tensors, ops, [0], [3], subgraphs=[init]), tmp_path)
    assert message == ("unsupported TFLite operator: operator 2 (READ_VARIABLE): variable 'v' starts with different "
                       "values in different elements (Tinsmith starts a kept value from one value)")


def test_an_init_subgraph_that_computes_is_refused_by_name(tmp_path):
    from tflite_writer import Op, Tensor, model
    init = ([Tensor("a", "float32", [2], np.float32([0, 1])), Tensor("b", "float32", [2])],
            [Op("RELU", [0], [1])], [], [])
    ops = [Op("CALL_ONCE", [], [], ("CallOnceOptions", {"InitSubgraphIndex": 1})), Op("RELU", [0], [1])]
    message = _import_error(model([Tensor("x", "float32", [2]), Tensor("y", "float32", [2])], ops, [0], [1],
                                  subgraphs=[init]), tmp_path)
    assert message == ("unsupported TFLite operator: operator 0 (CALL_ONCE): an init subgraph that computes "
                       "(RELU, operator 0 of subgraph 1); Tinsmith runs one that assigns constants to variables")


def _run_once(model: bytes, feeds: dict[str, np.ndarray], tmp_path: Path) -> np.ndarray:
    """The model compiled for the host and run once through `tinsmith`'s runner."""
    from tinsmith.cli import run_compiled
    from tinsmith.pipeline import lower
    path = tmp_path / "model.tflite"
    path.write_bytes(model)
    graph = lower(path)
    return run_compiled(path, feeds, tmp_path / "build", graph)[graph.api_outputs[0]]


def _interpret(model: bytes, feeds: list[np.ndarray]) -> np.ndarray:
    interp = tflm.Interpreter.from_bytes(model)
    for k, x in enumerate(feeds):
        interp.set_input(x, k)
    interp.invoke()
    return np.array(interp.get_output(0))


@pytest.mark.parametrize("take", [True, False])
def test_if_on_a_run_time_condition_matches_tflite_micro(take, tmp_path):
    """Both branches computed, the condition selects (the branches have no other effects)."""
    x = np.random.default_rng(3).uniform(-2, 2, (2, 3)).astype(np.float32)
    got = _run_once(branch(), {"take": np.array(take), "x": x}, tmp_path)
    np.testing.assert_allclose(got, _interpret(branch(), [np.array(take), x]), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("trips", [0, 1, 4])
def test_while_with_a_counted_condition_is_unrolled_and_matches_tflite_micro(trips, tmp_path):
    x = np.random.default_rng(trips).uniform(-2, 2, (2, 3)).astype(np.float32)
    got = _run_once(counted_loop(trips), {"x": x}, tmp_path)
    np.testing.assert_allclose(got, _interpret(counted_loop(trips), [x]), rtol=RTOL, atol=ATOL)


KEPT_SUM = """graph: running_sum
inputs:
  x: {dtype: float32, shape: [3]}
  total: {dtype: float32, shape: [3]}
outputs: [y, total_next]
states:
  total: {next: total_next, fill: 1.5}
nodes:
  - {op: Add, inputs: [x, total], outputs: [y]}
  - {op: Identity, inputs: [y], outputs: [total_next]}
"""


def test_a_graph_file_declares_kept_values_under_states(tmp_path):
    """`states:` in a graph file (what `import` writes for a stateful .tflite): the running sum of
    the calls' inputs, from 1.5, against NumPy."""
    path = tmp_path / "running_sum.yaml"
    path.write_text(KEPT_SUM)
    xs = feeds((3,), 4)
    np.testing.assert_allclose(np.stack(compiled(path, xs, tmp_path)), 1.5 + np.cumsum(xs, axis=0), rtol=RTOL)


KEPT_MAX = """graph: running_max
inputs:
  x: {{dtype: {dtype}, shape: [3]}}
  top: {{dtype: {dtype}, shape: [3]}}
outputs: [y, top_next]
states:
  top: {{next: top_next, fill: {fill}}}
nodes:
  - {{op: Max, inputs: [x, top], outputs: [y]}}
  - {{op: Identity, inputs: [y], outputs: [top_next]}}
"""


@pytest.mark.parametrize("dtype, fill, start", [("float32", "-.inf", -np.inf), ("float16", "-1.5", -1.5),
                                                ("int8", "-100", -100)])
def test_a_state_starts_from_its_value_in_its_own_type(dtype, fill, start, tmp_path):
    """The running maximum from `fill`: an infinity (C++ has no literal for it), a float16 (whose
    storage holds its bits) and an integer, against NumPy."""
    path = tmp_path / "running_max.yaml"
    path.write_text(KEPT_MAX.format(dtype=dtype, fill=fill))
    xs = [x.astype(dtype) for x in feeds((3,), 5, "int8" if dtype == "int8" else "float32")]
    want = np.maximum.accumulate(np.stack([np.full(3, start, dtype), *xs]), axis=0)[1:]
    np.testing.assert_array_equal(np.stack(compiled(path, xs, tmp_path)), want)


@pytest.mark.parametrize("dtype, fill, said", [("int8", "300", "300"), ("int16", "0.5", "0.5"), ("uint8", "-1", "-1"),
                                               ("int32", ".inf", "inf"), ("int64", "9" * 30, "9" * 30),
                                               ("float32", "9" * 400, "9" * 400)])  # YAML's unbounded integers
def test_a_state_whose_type_cannot_hold_its_start_is_a_located_error(dtype, fill, said, tmp_path):
    from tinsmith.errors import GraphError
    from tinsmith.load.graph_file import load_graph_spec
    path = tmp_path / "bad.yaml"
    path.write_text(KEPT_MAX.format(dtype=dtype, fill=fill))
    with pytest.raises(GraphError) as caught:
        load_graph_spec(path)
    assert str(caught.value.loc).endswith("bad.yaml:7:31")  # the value
    assert caught.value.message.startswith(f"state 'top' starts from {said}, which {dtype} cannot hold")


def test_a_state_that_is_no_input_is_a_located_error(tmp_path):
    from tinsmith.errors import GraphError
    from tinsmith.load.graph_file import load_graph_spec
    path = tmp_path / "bad.yaml"
    path.write_text(KEPT_SUM.replace("  total: {next", "  totl: {next"))
    with pytest.raises(GraphError) as caught:
        load_graph_spec(path)
    assert str(caught.value.loc).endswith("bad.yaml:7:3")
    assert caught.value.message == "state 'totl' is not a graph input"


def test_validate_starts_every_sample_from_the_starting_state(tmp_path, tinsmith_cmd):
    """The variable starts at 1.0 for each seeded sample in the interpreter and in the compiled model."""
    (tmp_path / "acc.tflite").write_bytes(accumulator(1.0, (2, 3), 0.5))
    proc = tinsmith_cmd("validate", "acc.tflite", "--per-layer", "--target", "host", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "acc [host] agrees with the TFLite Micro interpreter within the tolerance" in proc.stdout


def test_an_int16_svdf_is_refused_with_the_reason(tmp_path):
    """TFLite Micro's SVDF takes float32 or int8 input (and so does TFLite's): no reference to match."""
    from tinsmith.errors import GraphError
    from tinsmith.pipeline import lower
    model, shape = svdf_int8(0, data="int16")
    path = tmp_path / "svdf16.tflite"
    path.write_bytes(model)
    with pytest.raises(GraphError, match=r"operator 0 \(SVDF\): int16 input: TFLite Micro's SVDF \(and TFLite's\) "
                                         r"takes float32 or int8 input"):
        lower(path)
    with pytest.raises(RuntimeError):  # (the claim, checked)
        oracle(model, feeds(shape, 0, "int16")[:1])


def test_a_16x8_lstm_with_a_zero_point_is_refused(tmp_path):
    from tinsmith.errors import GraphError
    from tinsmith.pipeline import lower
    model, _ = lstm_16x8(0, int16_zero_point=4)
    path = tmp_path / "lstm16.tflite"
    path.write_bytes(model)
    with pytest.raises(GraphError, match=r"16x8 data with zero points 4 \(input\) and 0 \(output state\)"):
        lower(path)
