"""The ONNX backend node tests as a regression suite (conformance/run.py, docs/CONFORMANCE.md).

By default a bounded sample: two cases per operator from conformance/passing.txt (seeded by
$TINSMITH_CONFORMANCE_SEED, 0 unless set), imported, compiled for the host many cases per
program (conformance/batch.py), run and compared with ONNX's expected outputs at ONNX's
tolerances, into a temporary folder; every sampled case must still pass (about a minute on
two cores). With TINSMITH_CONFORMANCE=full, every node test case of the installed onnx
package runs (as `python -m conformance.run` does, about 3 minutes on two cores): then every
case of the baseline must pass, cases that pass and are not listed are reported as a warning
(add them with `python -m conformance.run --update-baseline`), and the goals for operator types
passing all of their float32 cases and for passing cases are asserted once the baseline
reaches them, the baseline's counts before.
"""
from __future__ import annotations

import os
import warnings

import pytest

from conformance.report import GOAL_CASES, GOAL_OPS, fully_passing_ops, read_baseline
from conformance.run import BASELINE, SAMPLE_SEED_ENV, run_conformance

FULL = os.environ.get("TINSMITH_CONFORMANCE") == "full"
SAMPLE_PER_OP = 2
needs_full_run = pytest.mark.skipif(not FULL, reason="counts every case: needs the full run "
                                    "(TINSMITH_CONFORMANCE=full, or python -m conformance.run)")


@pytest.fixture(scope="module")
def conformance(tmp_path_factory):
    return run_conformance(tmp_path_factory.mktemp("conformance"), log=lambda _: None,
                           sample=None if FULL else SAMPLE_PER_OP, seed=int(os.environ.get(SAMPLE_SEED_ENV, "0")))


@pytest.fixture(scope="module")
def baseline():
    names = read_baseline(BASELINE)
    assert names, f"{BASELINE} is missing or empty"
    return names


def test_cases_in_the_baseline_still_pass(conformance, baseline):
    results = {r.name: r for r in conformance.results}
    new = sorted(conformance.passing - baseline)
    if new and FULL:
        warnings.warn(f"{len(new)} cases pass that {BASELINE.name} does not list (python -m conformance.run "
                      f"--update-baseline adds them): {', '.join(new)}", stacklevel=1)
    regressions = sorted((baseline if FULL else {c.name for c in conformance.cases}) - conformance.passing)
    lines = [f"{n}: {results[n].status}: {results[n].reason}" if n in results
             else f"{n}: no longer among the onnx package's node tests" for n in regressions]
    assert not regressions, f"{len(regressions)} cases of {BASELINE.name} no longer pass:\n" + "\n".join(lines)


@needs_full_run
def test_operator_and_case_counts(conformance, baseline):
    base_ops = fully_passing_ops(conformance.cases, baseline)
    now_ops = fully_passing_ops(conformance.cases, conformance.passing)
    if len(baseline) >= GOAL_CASES and len(base_ops) >= GOAL_OPS:
        want_cases, want_ops = GOAL_CASES, GOAL_OPS
    else:  # not there yet: hold on to the progress the baseline records
        want_cases, want_ops = len(baseline), len(base_ops)
    assert len(conformance.passing) >= want_cases
    lost = sorted(set(base_ops) - set(now_ops))
    assert len(now_ops) >= want_ops, (f"{len(now_ops)} operator types pass all of their float32 cases, "
                                      f"fewer than {want_ops}; no longer: {', '.join(lost)}")


def test_every_case_has_an_outcome_and_every_miss_a_reason(conformance):
    assert len(conformance.results) == len(conformance.cases) > (1000 if FULL else 100)
    assert {r.status for r in conformance.results} <= {"passed", "failed", "unsupported"}
    assert [r.name for r in conformance.results if r.status != "passed" and not r.reason] == []


# --- the harness's own rules, without building anything ----------------------------------------
@pytest.fixture(scope="module")
def cases():
    from conformance.cases import load_cases
    return {c.name: c for c in load_cases()}


def test_cases_are_counted_under_the_operator_they_test(cases):
    assert cases["test_softmax_axis_0"].op == "Softmax"
    expanded = cases["test_softmax_axis_0_expanded_ver18"]
    assert expanded.op == "Softmax" and expanded.expanded  # not ReduceMax, Exp, ... of its body
    assert cases["test_ai_onnx_ml_binarizer"].op == "ai.onnx.ml.Binarizer"
    assert cases["test_gather_0"].float32  # float32 data, int64 indices
    assert cases["test_argmax_default_axis_example"].float32  # int64 result
    assert not cases["test_add_uint8"].float32
    assert not cases["test_cast_FLOAT_to_FLOAT16"].float32


def test_build_time_and_integer_operands_are_frozen(cases):
    from conformance.cases import prepare
    from conformance.run import _constant_inputs
    constant = _constant_inputs()
    reshape = prepare(cases["test_reshape_negative_dim"], constant)  # data, shape
    assert reshape.frozen_inputs == ("shape",) and reshape.runtime_inputs == (0,)
    assert [t.name for t in reshape.model.graph.initializer] == ["shape"]
    assert [v.name for v in reshape.model.graph.input] == ["data"]
    gather = prepare(cases["test_gather_0"], constant)  # float32 data, int64 indices
    assert gather.frozen_inputs == ("indices",)
    assert prepare(cases["test_add"], constant).frozen_inputs == ()
    # freezing both uint8 inputs would leave nothing to compute at run time: kept as written
    assert prepare(cases["test_add_uint8"], constant).frozen_inputs == ()
    # Range needs all three operands at build time, whatever their type
    assert set(prepare(cases["test_range_float_type_positive_delta"], constant).frozen_inputs) == {
        "start", "limit", "delta"}


def test_outputs_compare_as_onnx_compares_them():
    import numpy as np

    from conformance.execute import mismatch
    want = np.array([1.0, np.nan, np.inf, 1000.0], np.float32)
    assert mismatch(0, "y", want.copy(), want, 1e-3, 1e-7) is None  # NaN matches NaN
    near = want.copy()
    near[3] = 1000.9  # within rtol * 1000
    assert mismatch(0, "y", near, want, 1e-3, 1e-7) is None
    near[3] = 1001.5
    assert mismatch(0, "y", near, want, 1e-3, 1e-7).startswith("output 0 (y): 1 of 4 elements differ, first at [3]")
    assert mismatch(0, "y", want.astype(np.float64), want, 1e-3, 1e-7) == "output 0 (y) is float64, expected float32"
    assert mismatch(1, "z", want[:2], want, 1e-3, 1e-7) == "output 1 (z) has shape [2], expected [4]"
    ints = np.array([1000, 2000], np.int64)
    assert mismatch(0, "i", ints + 1, ints, 1e-3, 1e-7) is not None  # integers: exactly


def _relu_model(path, name):
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], name, [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path / f"{name}.onnx"))
    return path / f"{name}.onnx"


def test_a_batch_runs_each_case_and_a_broken_case_fails_alone(tmp_path):
    import numpy as np

    from tinsmith.pipeline import compile_graph
    from conformance.batch import build_batches
    from conformance.execute import Signature, run_data_set
    cases = []
    for name in ("first", "broken", "last"):
        files = dict(compile_graph(_relu_model(tmp_path, name), target="host").files)
        if name == "broken":  # as a kernel the host compiler rejects would
            files["broken.cpp"] += "\nstatic_assert(false, \"broken on purpose\");\n"
        cases.append((name, files))
    programs, failures = build_batches(cases, tmp_path / "build", jobs=2, batch_size=3, log=lambda _: None)
    assert set(programs) == {"first", "last"} and set(failures) == {"broken"}
    assert failures["broken"].startswith("compile: broken/broken.cpp:") and "broken on purpose" in failures["broken"]
    assert programs["first"].path == programs["last"].path  # the others still share one program
    x = np.linspace(-2, 2, 15, dtype=np.float32).reshape(3, 5)
    signature = Signature((("x", np.dtype(np.float32), (3, 5)),), (("y", np.dtype(np.float32), (3, 5)),))
    for name in ("first", "last"):
        assert run_data_set(programs[name].command, signature, [x], [np.maximum(x, 0)], 0, 0,
                            tmp_path / name) is None
    assert run_data_set(programs["last"].command, signature, [x], [x], 0, 0, tmp_path / "w").startswith(
        "output 0 (y): 7 of 15 elements differ")  # the negative ones
