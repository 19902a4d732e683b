"""A seeded, bounded fuzz campaign in the suite (about a minute): hostile graph files, weight files
and ONNX models must each end in exit status 0 or 1 with located one-line messages, no traceback,
no hang, nothing written outside the build folder, and generated code that compiles and verifies;
random valid models must match ONNX Runtime. See tests/fuzz/.

TINSMITH_FUZZ_SECONDS=600 runs longer (or `python -m tests.fuzz --minutes 10`);
TINSMITH_FUZZ_SEED chooses another seed."""
from __future__ import annotations

import os

from fuzz.campaign import run_campaign

SECONDS = float(os.environ.get("TINSMITH_FUZZ_SECONDS", "60"))
SEED = int(os.environ.get("TINSMITH_FUZZ_SEED", "20261123"))


def test_fuzz_campaign_finds_nothing(tmp_path):
    report = run_campaign(SEED, SECONDS, tmp_path)
    print(report.summary())
    assert report.cases >= 10 and report.differential >= 4, report.summary()
    assert not report.findings, report.summary()
