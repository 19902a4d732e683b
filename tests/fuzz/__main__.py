"""`python -m tests.fuzz [--inputs N | --minutes M] [--seed S] [--keep DIR]`: a fuzz campaign over
graph files, ONNX and TFLite models (hostile and random valid ones, the valid ones also compared
with ONNX Runtime and the TFLite Micro interpreter). Reproducers of every finding are kept in DIR
(findings/FORMAT-INDEX/ and finding_*). `--slow` runs the older campaign, every case through the
command line. Exit status 1 when anything was found."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from .campaign import run_campaign, run_inputs


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--inputs", type=int, help="how many inputs to run (or --minutes)")
    parser.add_argument("--minutes", type=float, help="how long to run [10 unless --inputs]")
    parser.add_argument("--seed", type=int, default=0, help="campaign seed [0]")
    parser.add_argument("--keep", help="folder for the cases that find something [a temporary folder]")
    parser.add_argument("--compiled-every", type=int, default=200,
                        help="one case in this many goes through tinsmith generate, g++ and libclang [200]")
    parser.add_argument("--differential-every", type=int, default=5000,
                        help="random models compared with ONNX Runtime and TFLite Micro once per this many "
                             "inputs [5000]")
    parser.add_argument("--slow", action="store_true", help="every case through the command line (timed)")
    args = parser.parse_args()
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="tinsmith-fuzz-"))
    workdir.mkdir(parents=True, exist_ok=True)
    seconds = args.minutes * 60 if args.minutes is not None else (None if args.inputs else 600.0)

    def log(message: str) -> None:
        print(message, flush=True)
    if args.slow:
        report = run_campaign(args.seed, workdir, seconds=seconds or 600.0, log=log)
    else:
        report = run_inputs(args.seed, workdir, inputs=args.inputs, seconds=seconds,
                            compiled_every=args.compiled_every, differential_every=args.differential_every, log=log)
    print(report.summary())
    print(f"cases with findings are in {workdir}")
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
