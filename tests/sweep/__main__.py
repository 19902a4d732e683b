"""python -m tests.sweep: every primitive x every element-type combination its definition accepts x
every shipped target; prints the findings table and writes the findings file (docs/KERNELS.md).

  python -m tests.sweep [--targets host,cortex-m4] [--ops Add,QConv2D] [--jobs 2] [--no-run]
                        [--sample N] [--work DIR] [--findings FILE]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from tests.sweep.report import summarize, write_findings
from tests.sweep.sweep import DEFAULT_FINDINGS, sweep
from tests.sweep.run import SWEPT_TARGETS


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default=",".join(SWEPT_TARGETS),
                    help="comma-separated targets (default: all shipped but host-dispatch, whose levels are)")
    ap.add_argument("--ops", default="", help="comma-separated primitives (default: all)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-run", action="store_true", help="compile only, also on the host")
    ap.add_argument("--sample", type=int, default=0, help="every Nth accepted combination only")
    ap.add_argument("--work", default="/tmp/tinsmith-sweep", help="scratch folder (emptied first)")
    ap.add_argument("--findings", default=str(DEFAULT_FINDINGS), help="where to write the findings")
    a = ap.parse_args(argv)
    targets = [t for t in a.targets.split(",") if t]
    unknown = [t for t in targets if t not in SWEPT_TARGETS]
    if unknown:
        ap.error(f"unknown target(s) {', '.join(unknown)}; swept: {', '.join(SWEPT_TARGETS)}")
    start = time.monotonic()
    outcome = sweep(targets, [o for o in a.ops.split(",") if o], jobs=a.jobs, run_host=not a.no_run,
                    sample=a.sample, work=Path(a.work), progress=lambda m: print(m, file=sys.stderr, flush=True))
    print(summarize(outcome, time.monotonic() - start))
    write_findings(outcome, Path(a.findings))
    print(f"findings written to {a.findings}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
