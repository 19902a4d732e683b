"""The element-type x target sweep (issue 18): every primitive x every element-type combination its
definition accepts x every shipped target compiles warning-free (-Wall -Wextra -Werror) and matches
the NumPy reference on the host, or is refused by Tinsmith with a message naming the op and the types.

The full sweep (`python -m tests.sweep`, ~4 minutes on 2 free cores) writes tests/sweep/findings.txt, the
checked-in table of everything that is not plain success. Here a deterministic sample of it runs
(every SAMPLE-th combination, all targets) and must reproduce exactly the baseline's lines for the
sampled combinations: a new finding fails, and so does a fixed one until the baseline is regenerated.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from tinsmith.ops import PRIMITIVES
from tests.sweep import run
from tests.sweep.combos import all_combos, assignments
from tests.sweep.probes import PROBES
from tests.sweep.report import HEADER, finding_lines
from tests.sweep.sweep import DEFAULT_FINDINGS, select, sweep

SAMPLE = 23  # every 23rd combination: a spread over ops, slots and types in about a minute

needs_toolchains = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("arm-none-eabi-g++") is None,
                                      reason="needs g++ and arm-none-eabi-g++")


def baseline() -> list[str]:
    return [l for l in DEFAULT_FINDINGS.read_text().splitlines() if l and not l.startswith("#")]


# Primitives that take one fixed element type per operand and build-time tables only the TFLite
# importer makes (the signal library's, TFLite's int16 activation, softmax and GELU tables): the sweep
# has no type to vary; tests/test_tflite_signal.py, test_tflite_recurrent.py, test_tflite_16x8.py and
# test_tflite_integer_forms.py check each against TFLite Micro (or LiteRT), and test_fuzz.py feeds
# the importer hostile operands of every type for them.
FIXED_TYPES = {"Int16Activation", "Int16Softmax", "Int16Lookup"} | {op for op in PRIMITIVES if op.startswith("Signal")}


def test_every_primitive_has_a_probe():
    assert {p.op for p in PROBES} == set(PRIMITIVES) - FIXED_TYPES
    assert len({p.key for p in PROBES}) == len(PROBES), "two probes of one op need different tags"


def test_assignments_are_uniform_then_the_product_of_the_slots():
    cast = next(p for p in PROBES if p.op == "Cast")
    got = assignments(cast)
    n = len(PROBES[0].candidates("T"))
    assert len(got) == n * n  # every (from, to) pair once; the uniform ones lead
    assert got[0] == (("T", "float32"), ("U", "float32"))
    conv = next(p for p in PROBES if p.key == "QConv2D")
    assert (("X", "int16"), ("W", "int8"), ("Z", "int32")) in assignments(conv)


def test_the_baseline_names_only_combinations_that_exist():
    known = {(c.probe.key, c.label) for c in all_combos(PROBES)}
    lines = baseline()
    assert DEFAULT_FINDINGS.read_text().startswith(HEADER)
    for line in lines:
        probe, types, target, outcome, _ = line.split(" | ", 4)
        assert (probe, types) in known, line
        assert target in (*run.SWEPT_TARGETS, run.ANY_TARGET), line
        assert outcome in (*run.FINDINGS, "refused-unclear", run.NOT_ACCEPTED_UNCLEAR), line
    assert lines == sorted(set(lines))


def test_float_tolerance_scales_with_the_type_and_the_reduction():
    want = np.array([1.0, 2.0, np.nan, np.inf], np.float32)
    assert run.compare(want.copy(), want, "float32", 1) == ""
    near = want + np.float32(2 ** -20)
    assert run.compare(near, want, "float32", 1) == ""
    assert "differ" in run.compare(want + np.float32(1e-3), want, "float32", 1)
    assert run.compare(want + np.float32(1e-3), want, "float16", 1) == ""
    assert "differ" in run.compare(np.array([3], np.int8), np.array([4], np.int8), "int8", 1)


@needs_toolchains
def test_sampled_sweep_reproduces_the_baseline(tmp_path):
    combos = select(sample=SAMPLE)
    outcome = sweep(list(run.SWEPT_TARGETS), combos=combos, jobs=2, work=tmp_path)
    assert outcome.accepted > 100
    sampled = {(c.probe.key, c.label) for c in combos}
    want = [l for l in baseline() if tuple(l.split(" | ", 2)[:2]) in sampled]
    got = finding_lines(outcome.results)
    assert got == want, "the sweep's findings changed: run `python -m tests.sweep` and review tests/sweep/findings.txt"
    assert not [l for l in got if "refused-unclear" in l or run.NOT_ACCEPTED_UNCLEAR in l]


def test_no_accepted_graph_fails_in_the_cxx_compiler():
    """Issue 18's done-when: the last full sweep found no C++ compiler error or warning."""
    bad = [l for l in baseline() if f" | {run.CXX_ERROR} | " in l or f" | {run.WARNING} | " in l]
    assert not bad, f"{len(bad)} C++ compiler failures, e.g. {bad[0]}"


@pytest.mark.skipif(shutil.which("riscv64-unknown-elf-g++") is None, reason="needs riscv64-unknown-elf-g++")
def test_math_calls_pick_one_overload_on_every_target(tmp_path):
    """pow of integers and fmax/fmin of a double and a float: glibc's C++ library promotes
    them, the RISC-V toolchains' <cmath> found them ambiguous (the full sweep found 16 errors and 2 warnings
    there); the generated call says which overload it means, and the host still matches NumPy."""
    combos = [c for c in select(ops=("Pow", "Clip"))
              if c.probe.op == "Clip" and "float64" in c.label or c.probe.op == "Pow" and "float" not in c.label]
    outcome = sweep(["host", "rv32imac", "cortex-m4"], combos=combos, jobs=2, work=tmp_path)
    assert outcome.accepted >= 10
    assert finding_lines(outcome.results) == []
