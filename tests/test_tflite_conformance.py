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
