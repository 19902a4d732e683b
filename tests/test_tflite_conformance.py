"""The TFLite single-operator conformance set (conformance/tflite, docs/TFLITE.md) as a regression
suite: the committed models are what make_models.py writes, and a seeded sample of the baseline
(one case per operator and element type, at most SAMPLE) still passes against the TFLite Micro
interpreter: integer outputs equal, float32 within 1e-5 relative. `python -m conformance.tflite.run`
runs every case."""
from __future__ import annotations

import os
import random

import pytest

from conformance.tflite.run import MODELS, _describe, read_baseline, run_cases

pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
SAMPLE = 24


def test_committed_models_are_what_make_models_writes(tmp_path):
    from conformance.tflite.make_models import write_all
    names = write_all(tmp_path)
    assert sorted(p.stem for p in MODELS.glob("*.tflite")) == sorted(names)
    for name in names:
        assert (tmp_path / f"{name}.tflite").read_bytes() == (MODELS / f"{name}.tflite").read_bytes(), name


def test_a_sample_of_the_baseline_still_passes(tmp_path):
    baseline = sorted(read_baseline())
    assert len(baseline) >= 120
    by_kind: dict[tuple[str, str], list[str]] = {}
    for name in baseline:
        by_kind.setdefault(_describe(MODELS / f"{name}.tflite"), []).append(name)
    rng = random.Random(int(os.environ.get("TINSMITH_CONFORMANCE_SEED", "0")))
    sample = sorted(rng.choice(names) for names in by_kind.values())
    sample = sorted(rng.sample(sample, min(SAMPLE, len(sample))))
    results = run_cases(sample, tmp_path, jobs=2, log=lambda _: None)
    failed = [f"{r.name}: {r.status}: {r.reason}" for r in results if r.status != "passed"]
    assert not failed, "\n".join(failed)


M4_CASES = ("transpose_conv_same_stride2_float32", "depthwise_conv_2d_multiplier2_float32",
            "resize_bilinear_half_pixel_float32", "strided_slice_int8", "relu6_int8", "l2_normalization_float32",
            "transpose_conv_same_stride2_int8", "batch_matmul_adj_y_broadcast_int8",
            "resize_bilinear_half_pixel_int8")


@pytest.mark.parametrize("name", M4_CASES)
def test_case_matches_tflite_micro_on_the_cortex_m4(name, tmp_path):
    """A few cases cross-compiled and run on the emulated Cortex-M4, compared as on the host."""
    import numpy as np

    from tinsmith.cli import run_compiled
    from tinsmith.pipeline import lower
    from conformance.tflite.run import ATOL, RTOL, _inputs, _oracle
    path = MODELS / f"{name}.tflite"
    graph = lower(path)
    inputs = _inputs(name)
    got = run_compiled(path, dict(zip(graph.inputs, inputs)), tmp_path, graph, "cortex-m4")
    for value, want in zip(graph.outputs, _oracle(path, inputs)[1]):
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got[value], want, rtol=RTOL, atol=ATOL, err_msg=f"{name} {value}")
        else:
            np.testing.assert_array_equal(got[value], want, err_msg=f"{name} {value}")
