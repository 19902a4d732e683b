"""`python -m tests.fuzz [--minutes M] [--seed S] [--keep DIR]`: a longer fuzz campaign."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from .campaign import run_campaign


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to run [10]")
    parser.add_argument("--seed", type=int, default=0, help="campaign seed [0]")
    parser.add_argument("--keep", help="folder for the cases that find something [a temporary folder]")
    args = parser.parse_args()
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="tinsmith-fuzz-"))
    workdir.mkdir(parents=True, exist_ok=True)
    report = run_campaign(args.seed, workdir, seconds=args.minutes * 60, log=lambda m: print(m, flush=True))
    print(report.summary())
    print(f"cases with findings are in {workdir}")
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
