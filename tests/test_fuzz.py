"""A seeded, bounded fuzz campaign in the suite (12 hostile cases, 4 random models): hostile graph files, weight files
and ONNX models must each end in exit status 0 or 1 with located one-line messages, no traceback,
no hang, nothing written outside the build folder, and generated code that compiles and verifies;
random valid models must match ONNX Runtime. See tests/fuzz/.

The campaign is counted, not timed, so a loaded machine runs the same cases, only slower.
`python -m tests.fuzz --minutes 10` runs a longer, timed campaign; TINSMITH_FUZZ_CASES runs more
cases here and TINSMITH_FUZZ_SEED chooses another seed."""
from __future__ import annotations

import os

from fuzz.campaign import run_campaign

CASES = int(os.environ.get("TINSMITH_FUZZ_CASES", "12"))
SEED = int(os.environ.get("TINSMITH_FUZZ_SEED", "20261123"))


def test_fuzz_campaign_finds_nothing(tmp_path):
    report = run_campaign(SEED, tmp_path, cases=CASES, differential=4)
    print(report.summary())
    assert report.cases == CASES and report.differential >= 4, report.summary()
    assert not report.findings, report.summary()
