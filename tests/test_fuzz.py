"""Seeded, bounded fuzz campaigns in the suite, and the campaign's findings pinned as tests.

`test_fuzz_campaign_finds_nothing`: 12 hostile cases through the command line and 4 random models
against ONNX Runtime (tests/fuzz/campaign.py, `run_campaign`). Hostile graph files, weight files
and ONNX models must each end in exit status 0 or 1 with located one-line messages, no traceback,
no hang, nothing written outside the build folder, and generated code that compiles and verifies.

`test_input_campaign_finds_nothing`: the short form of `python -m tests.fuzz --inputs N`
(`run_inputs`): graph files, ONNX and TFLite models, hostile and valid, loaded in bulk; one case
through the command line, g++ and libclang; a random int8 TFLite model against the TFLite Micro
interpreter (the long campaign also compares random ONNX models with ONNX Runtime).

Campaigns are counted, not timed, so a loaded machine runs the same cases, only slower.
TINSMITH_FUZZ_CASES runs more cases here and TINSMITH_FUZZ_SEED chooses another seed; the long
campaign and its results are in docs/SECURITY.md."""
from __future__ import annotations

import math
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fuzz.campaign import run_campaign, run_inputs

CASES = int(os.environ.get("TINSMITH_FUZZ_CASES", "12"))
SEED = int(os.environ.get("TINSMITH_FUZZ_SEED", "20261123"))


def test_fuzz_campaign_finds_nothing(tmp_path):
    report = run_campaign(SEED, tmp_path, cases=CASES, differential=4)
    print(report.summary())
    assert report.cases == CASES and report.differential >= 4, report.summary()
    assert not report.findings, report.summary()


def test_input_campaign_finds_nothing(tmp_path):
    inputs = 10 * CASES + 1  # (121: 119 in bulk, one compiled, then the differential models)
    # (no ONNX models compared here: the campaign above compares four, with one SCons build)
    report = run_inputs(SEED, tmp_path, inputs=inputs, compiled_every=60, differential_every=110, onnx_models=0)
    print(report.summary())
    assert report.cases >= inputs, report.summary()
    formats = {key.split()[0] for key in report.kinds}
    assert formats == {"yaml", "onnx", "tflite"}, report.summary()
    assert report.kinds.get("tflite differential") == 1 and report.differential == 1, report.summary()
    assert not report.findings, report.summary()


def test_a_case_that_finds_something_is_kept_as_a_reproducer(tmp_path):
    """The worker keeps a finding's file and says how to run it again. The finding here: a graph
    judged as a valid model (a refusal is then a finding) whose output is never computed."""
    from fuzz.quick import judge, keep_finding
    case = tmp_path / "case"
    case.mkdir()
    (case / "model.yaml").write_text("graph: g\ninputs: {x: {dtype: float32, shape: [1, 4]}}\noutputs: [y]\n"
                                     "nodes:\n  - {op: Relu, inputs: [x], outputs: [q]}\n")
    accepted, findings = judge(case / "model.yaml", False, refuse_is_finding=True)
    assert not accepted and findings and findings[0].startswith("refused: ") and "model.yaml:" in findings[0]
    kept = keep_finding(tmp_path, "yaml", 7, case, case / "model.yaml", findings)
    assert kept == tmp_path / "findings" / "yaml-0000007"
    assert (kept / "model.yaml").read_text() == (case / "model.yaml").read_text()
    assert "python -m tinsmith generate model.yaml" in (kept / "finding.txt").read_text()


# Findings of the long campaign, each made again from its seed and index (tests/fuzz/quick.py makes
# every case from them): (seed, index, what the located error now says). Each was a traceback.
CAMPAIGN_FINDINGS = [
    (2, 180, "'scale' must be a finite number of at least 0, not -1.0"),  # NumPy: high - low < 0
    # (3-1096: float32 operators import now, and reading on, the importer meets the damage; 7-8269, a
    # float32 RELU, imports and is no longer a finding)
    (3, 1096, "not a valid TFLite model: the flatbuffer holds an offset"),  # KeyError
    (4, 611, "is float32, but the output of a quantized operator must be an integer type"),
    (8, 62, "is not quantized"),  # convolution weights without quantization: AttributeError
    (3, 3041, "is not quantized"),
    (2, 3032, "dimensions cannot be negative"),  # NumPy: negative dimensions are not allowed
    (5, 2134, "dimensions cannot be negative"),
    (3, 12892, "is float32, but the output of a quantized operator must be an integer type"),  # RELU
    (4, 3270, "dimensions cannot be negative"),  # NumPy: array is too big (14 dimensions, some negative)
    (3002, 16594, "'scale' must be at most 3.402823e+38"),  # NumPy's uniform: high - low range exceeds bounds
    (3601, 18310, "input 1 is empty (''), but the operator needs a value there"),  # Concat of [x, '']: AttributeError
    (3201, 37853, "must be a number within float32's range"),  # epsilon 1e308: NumPy's overflow warning
]

# Findings of the same campaigns in models that load: each now builds quietly or is refused with a
# located message when generated. A Conv folded at build time over an input with no elements
# (IndexError), a RESIZE_BILINEAR of an empty axis (ZeroDivisionError; now refused: nothing to
# sample), a BatchNormalization with a negative variance (NumPy's warning while folding it into its
# convolution), a zero-element tensor whose other dimensions multiply past what NumPy indexes
# (ValueError).
CAMPAIGN_ACCEPTED = [(3101, 39716), (3101, 20674), (3101, 26811), (3102, 30882)]


@pytest.mark.parametrize("seed,index,message", CAMPAIGN_FINDINGS, ids=[f"{s}-{i}" for s, i, _ in CAMPAIGN_FINDINGS])
def test_campaign_findings_are_located_errors(seed, index, message, tmp_path):
    from tinsmith.errors import GraphError
    from tinsmith.pipeline import lower
    from fuzz.quick import case_rng, format_of, judge, make_case
    rng = case_rng(seed, index)
    rng.random()  # (the draw that chose the format, as the worker does)
    path, _ = make_case(format_of(seed, index), rng, tmp_path)
    assert judge(path, False) == (False, [])  # refused, with located one-line messages only
    with pytest.raises(GraphError) as e:
        lower(path)
    assert message in e.value.message


@pytest.mark.parametrize("seed,index", CAMPAIGN_ACCEPTED, ids=[f"{s}-{i}" for s, i in CAMPAIGN_ACCEPTED])
def test_campaign_findings_in_models_that_load_generate_or_are_refused_cleanly(seed, index, tmp_path):
    from fuzz.quick import case_rng, format_of, judge, make_case
    rng = case_rng(seed, index)
    rng.random()  # (the draw that chose the format, as the worker does)
    path, _ = make_case(format_of(seed, index), rng, tmp_path)
    assert judge(path, True)[1] == []  # generated, or refused with a located one-line message


# --- the finding of the issue-22 campaign: a near-zero ReduceLogSum ---------------------------
def _log_sum_model(channels: int, length: int) -> onnx.ModelProto:
    """MatMul, Clip, Sigmoid, Sub, Erf, ReduceLogSum (over channels), LpPool: the ops of the model
    that differed from ONNX Runtime by 0.0097."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Clip", ["m", "lo", "hi"], ["c"]),
             helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Sub", ["s", "half"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("ReduceLogSum", ["e", "axes"], ["r"], keepdims=1),
             helper.make_node("LpPool", ["r"], ["y"], kernel_shape=[2], p=2)]
    inits = [numpy_helper.from_array(np.eye(length, dtype=np.float32), "w"),
             numpy_helper.from_array(np.array(-3, np.float32), "lo"), numpy_helper.from_array(np.array(3, np.float32), "hi"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"), numpy_helper.from_array(np.array([1], np.int64), "axes")]
    graph = helper.make_graph(nodes, "log_sum", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, length])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, length - 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def test_a_log_sum_near_zero_is_within_float32_error_on_both_sides(tmp_path):
    """Which side was right when a random model (MatMul, Clip, Sub, Erf, Sigmoid, ReduceLogSum,
    LpPool) differed from ONNX Runtime by 0.0097? Both: its ReduceLogSum summed terms of both signs
    to nearly zero. Sigmoid's result near 0.5 carries an absolute rounding error up to 2**-25,
    which Sub (exact there) and Erf (slope below 1.13) pass on to each term; log(s) then has the
    absolute error (sum of the terms' errors) / s, which for s ~ 1e-5 is ~1e-2 whatever the order
    of the sum. Here both Tinsmith and ONNX Runtime are checked against float64 arithmetic on the
    same float32 input, each within that bound, and the bound is what the two may differ by."""
    pytest.importorskip("onnxruntime")
    import onnxruntime as ort
    from tinsmith.cli import run_compiled
    from tinsmith.pipeline import lower
    channels, length = 4, 6
    model = _log_sum_model(channels, length)
    path = tmp_path / "log_sum.onnx"
    path.write_bytes(model.SerializeToString())
    rng = np.random.default_rng(3)
    a, b = rng.uniform(0.3, 2.0, length), rng.uniform(0.3, 2.0, length)
    delta = 10.0 ** rng.uniform(-5, -3, length)  # odd functions of a, -a, b, -(b - delta): sums ~ delta / 10
    x = np.stack([a, -a, b, -(b - delta)]).astype(np.float32)[None]

    # float64 reference on the same float32 input (NumPy and math.erf, not Tinsmith's reference)
    v = np.clip(x.astype(np.float64)[0], -3, 3)
    terms = np.vectorize(math.erf)(1 / (1 + np.exp(-v)) - 0.5)
    sums = terms.sum(axis=0)
    assert np.all(sums > 0) and np.all(sums < 1e-3)  # the ill-conditioned case
    logs = np.log(sums)
    want = np.sqrt(logs[:-1] ** 2 + logs[1:] ** 2)
    # error bound: per term 3 ulps of 0.5 (Sigmoid's rounding and approximation, then Erf's slope and
    # rounding), the float32 sum of `channels` terms, relative to the sum; LpPool adds a few ulps
    eps = 2.0 ** -23
    term_error = 3 * 2.0 ** -24 * 1.13 + eps * np.abs(terms)
    log_error = (term_error.sum(axis=0) + channels * eps * np.abs(terms).sum(axis=0)) / sums
    bound = np.maximum(log_error[:-1], log_error[1:]) + 4 * eps * want

    graph = lower(path)
    got = run_compiled(path, {graph.inputs[0]: x}, tmp_path / "build", graph)[graph.outputs[0]].ravel()
    runtime = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0].ravel()
    assert np.all(np.abs(got - want) <= bound), (got, want, bound)
    assert np.all(np.abs(runtime - want) <= bound), (runtime, want, bound)
    assert bound.max() > 0.0097  # a difference of the finding's size is within float32's reach here


# --- hostile TFLite operators (tests/fuzz/tflite_operators.py) ------------------------------------
def test_hostile_tflite_operators_are_imported_or_refused_with_located_errors(tmp_path):
    """Well-formed flatbuffers whose operator codes, options and operands lie (unknown and custom
    codes, another operator's options, hostile option values, custom options bytes) reach the
    converters that damaged bytes rarely do: each is imported or refused with a located error."""
    import random
    import warnings

    from tinsmith.errors import TinsmithError
    from tinsmith.pipeline import lower
    from fuzz.quick import judge
    from fuzz.tflite_operators import hostile_operator_model
    accepted, refusals = 0, set()
    for i in range(120):
        path = tmp_path / f"m{i}.tflite"
        path.write_bytes(hostile_operator_model(random.Random(f"{SEED}:{i}")))
        ok, findings = judge(path, False)
        assert not findings, (i, findings)
        accepted += ok
        if not ok:
            with warnings.catch_warnings(), pytest.raises(TinsmithError) as e:
                warnings.simplefilter("ignore")
                lower(path)
            refusals.add(e.value.message.split(" ")[0:3][-1])
    assert accepted >= 5 and len(refusals) >= 5, (accepted, refusals)


def test_an_int8_elu_table_saturates_for_a_tiny_output_scale():
    """Campaign finding (a hostile-operator case): an int8 ELU whose output scale is 1e-30 scales
    positive inputs past int64's range; the table cast them to int64 first (NumPy's 'invalid value
    encountered in cast' on stderr, and -128 where 127 is right). Clipped before the cast, every
    positive input saturates at 127 and every negative one at -128."""
    import warnings

    from tinsmith.load import tflite_tables
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = tflite_tables.elu(0.05, 0, 1e-30, 0)
    inputs = np.arange(-128, 128)
    assert np.all(table[inputs > 0] == 127) and np.all(table[inputs < 0] == -128) and table[inputs == 0] == 0
    # an ordinary scale: 0.05 * x on the output's scale 0.1, ELU below zero, rounded half away from
    # zero; within one step of float64 arithmetic (the table computes in float32, as TFLite Micro does)
    ordinary = tflite_tables.elu(0.05, 0, 0.1, 0).astype(np.int64)
    real = 0.05 * inputs
    scaled = np.where(real < 0, np.expm1(real), real) / 0.1
    want = np.clip(np.sign(scaled) * np.floor(np.abs(scaled) + 0.5), -128, 127)
    assert np.max(np.abs(ordinary - want)) <= 1 and np.mean(ordinary == want) > 0.9


def test_a_mean_over_an_empty_axis_is_nan_without_a_warning(tmp_path):
    """Campaign finding (seed 2611, ONNX case 13536): ReduceMean over an axis of size 0, folded when
    the graph is built, printed NumPy's 'Mean of empty slice' RuntimeWarning on the build's stderr.
    The value stays what it was, 0 / 0 = NaN (ONNX leaves a reduction over an empty set undefined
    for ReduceMean; ONNX Runtime happens to give 0), and no warning is printed."""
    from tinsmith.pipeline import compile_graph
    from tinsmith.reference import evaluate
    from fuzz.quick import judge
    nodes = [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("ReduceMean", ["a", "axes"], ["y"], keepdims=1)]
    graph = helper.make_graph(nodes, "empty_mean", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 0, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 2])],
                              [numpy_helper.from_array(np.array([1], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    path = tmp_path / "empty_mean.onnx"
    path.write_bytes(model.SerializeToString())
    assert judge(path, True) == (True, [])  # generated, and no warning
    compiled = compile_graph(path)
    out = evaluate(compiled.graph, {compiled.graph.inputs[0]: np.zeros((1, 0, 2), np.float32)})[compiled.graph.outputs[0]]
    assert out.shape == (1, 1, 2) and np.all(np.isnan(out))


def test_a_uniform_constant_with_scale_minus_zero_is_all_zeros(tmp_path):
    """Campaign finding (seed 2613, graph case 6150): `scale: -0.0` passed the check "at least 0" and
    NumPy's uniform(-scale, scale) then refused low 0.0 above high -0.0 (a traceback). -0.0 is a
    scale of zero: every element is 0."""
    from tinsmith.pipeline import lower
    from tinsmith.reference import evaluate
    from fuzz.quick import judge
    path = tmp_path / "g.yaml"
    path.write_text("graph: g\ninputs: {x: {dtype: float32, shape: [1, 4]}}\noutputs: [y]\n"
                    "constants:\n  w: {random: uniform, shape: [1, 4], seed: 7, scale: -0.0}\n"
                    "nodes:\n  - {op: Add, inputs: [x, w], outputs: [y]}\n")
    assert judge(path, False) == (True, [])
    graph = lower(path)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    assert np.array_equal(evaluate(graph, {"x": x})["y"], x)  # x + 0


def test_a_non_finite_attribute_reaches_the_report_as_a_json_string():
    """A campaign finding (seed 2702, case 21693, kept as tests/data/fuzz/): a LEAKY_RELU whose
    alpha is -inf imports, and its plan report held a float JSON has no spelling for, a traceback
    from the JSON writer. Non-finite floats are the strings JSON readers know ("-Infinity")."""
    import json
    from tinsmith.pipeline import compile_graph
    from fuzz.quick import judge
    from pathlib import Path
    path = Path(__file__).parent / "data" / "fuzz" / "leaky_relu_alpha_minus_inf.tflite"
    assert judge(path, True) == (True, [])
    report = json.loads(next(v for k, v in compile_graph(path).files.items() if k.endswith(".plan.json")))
    assert any(n["attrs"].get("alpha") == "-Infinity" for n in report["nodes"])


def test_an_output_over_its_input_is_planned_on_the_kernels_typed_stores(tmp_path):
    """Campaign finding (seed 3802, compiled batch 10500, rand1.onnx): a grouped convolution of
    stride 2 (host vector kernel: three vector stores per group, then the group's last column read
    and stored one by one) over a ConvTranspose output did not build for host, host-dispatch or the
    portable target: the plan check found the output written over an input element still to be
    read. The overlap planner traced the kernel before its locals were typed, so a store of a
    vector local counted one element, not four, and the shift it allowed was 32 bytes too small.
    The kernels are typed when built; the model builds and computes what ONNX Runtime does."""
    ort = pytest.importorskip("onnxruntime")
    from tinsmith.cli import run_compiled
    from tinsmith.pipeline import compile_graph
    rng = np.random.default_rng(3802)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name) for name, shape in
               (("w1", (4, 3, 1, 3)), ("w3", (9, 1, 2, 1)), ("w4", (9,)))]
    nodes = [helper.make_node("ConvTranspose", ["x", "w1"], ["t"], kernel_shape=[1, 3], pads=[0, 1, 0, 0],
                              strides=[1, 2]),
             helper.make_node("Conv", ["t", "w3", "w4"], ["c"], group=3, kernel_shape=[2, 1], pads=[1, 0, 0, 0],
                              strides=[1, 2]),
             helper.make_node("Softmax", ["c"], ["y"])]  # (c stays in the workspace)
    graph = helper.make_graph(nodes, "grouped_over_input", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                          [1, 4, 1, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 9, 1, 5])], weights)
    path = tmp_path / "grouped.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    compiled = compile_graph(path, target="host")  # (the plan check refused it before)
    assert ("c", "t") in {(o, i) for o, i, _ in compiled.plan.overlaps}  # the output still goes over its input
    x = rng.standard_normal((1, 4, 1, 5)).astype(np.float32)
    got = run_compiled(path, {"x": x}, tmp_path / "build", compiled.graph, "host")["y"]
    want = ort.InferenceSession(path.read_bytes(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
