"""Conformance run: every ONNX backend node test case imported, built, run and compared.

    python -m conformance.run                     # full run; writes docs/CONFORMANCE.md
    python -m conformance.run --update-baseline   # ... and rewrites conformance/passing.txt
    python -m conformance.run -k resize           # only cases whose name contains 'resize'
    python -m conformance.run --sample 2          # two baseline cases per operator (as CI does)

Stages: (1) in this process, each case's model (operands frozen, see cases.py) is written to
BUILD/models/NAME.onnx and run through the compiler for the host target, up to the generated
files; a TinsmithError makes the case `unsupported`. (2) The generated code of many cases is
compiled into one host program per batch, with the host target's flags and -Werror
(batch.py). (3) Each case's runner runs on each data set, several at a time, and its outputs
are compared with the expected ones (execute.py). The build folder is kept, so a second run
recompiles only the batches that changed. Exit status 1 when a case in the baseline no longer
passes.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python conformance/run.py` as well as `python -m conformance.run`
    sys.path.insert(0, str(ROOT))

from conformance.batch import Program, build_batches  # noqa: I001  (after the sys.path line above)
from conformance.cases import Case, Prepared, as_array, load_cases, prepare
from conformance.execute import Signature, run_data_set
from conformance.report import Result, fully_passing_ops, read_baseline, render, result_of, write_baseline

BASELINE = ROOT / "conformance" / "passing.txt"
DOC = ROOT / "docs" / "CONFORMANCE.md"
DEFAULT_BUILD_DIR = Path(tempfile.gettempdir()) / "tinsmith-conformance"
BATCH_SIZE = 24
SAMPLE_SEED_ENV = "TINSMITH_CONFORMANCE_SEED"


@dataclass(frozen=True)
class Run:
    """A finished run: the cases, one result each (same order), and seconds per stage."""

    cases: tuple[Case, ...]
    results: tuple[Result, ...]
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def passing(self) -> set[str]:
        return {r.name for r in self.results if r.status == "passed"}


@dataclass(frozen=True, eq=False)
class _Built:
    """A case that compiled in-process and waits for its build and run."""

    case: Case
    prepared: Prepared
    folder: str
    signature: Signature
    files: dict[str, str]


def _first_line(text: str) -> str:
    return (str(text).strip().splitlines() or [""])[0]


def _constant_inputs() -> dict[str, tuple[int, ...]]:
    import tinsmith.pipeline  # noqa: F401  (registers every primitive)
    from tinsmith.ops.registry import PRIMITIVES
    return {name: p.constant_inputs for name, p in PRIMITIVES.items() if p.constant_inputs}


def _upgraded(model):
    """The model upgraded to the importer's minimum opset (local functions inlined), as the
    importer would upgrade it, but here: the importer does it in a fresh interpreter per model
    (to survive a converter crash), which costs more than compiling a one-node model. A model
    the converter cannot upgrade is written as it is, and the importer says why."""
    import onnx.inliner
    import onnx.version_converter

    from tinsmith.load.onnx_model import MIN_OPSET, _default_opset
    opset = _default_opset(model)
    if not (0 < opset < MIN_OPSET or model.functions):
        return model
    try:
        if model.functions:
            model = onnx.inliner.inline_local_functions(model)
        return onnx.version_converter.convert_version(model, MIN_OPSET) if 0 < opset < MIN_OPSET else model
    except Exception:  # noqa: BLE001  (no adapter for some op)
        return model


def _compile(case: Case, models_dir: Path, constant_inputs) -> _Built | Result:
    """Stage 1 for one case: freeze operands, write the model, compile it in this process."""
    from tinsmith.errors import TinsmithError
    from tinsmith.files import write_if_changed
    from tinsmith.load import graph_name
    from tinsmith.pipeline import compile_graph

    try:
        # upgraded first, so that operands are frozen for the ops the importer will see (an old
        # Upsample's scales are Resize's build-time scales)
        prepared = prepare(dataclasses.replace(case, model=_upgraded(case.model)), constant_inputs)
    except Exception as e:  # noqa: BLE001  (data the harness cannot freeze)
        return result_of(case, "unsupported", f"cannot freeze operands: {type(e).__name__}: {_first_line(e)}")
    path = models_dir / f"{case.name}.onnx"
    write_if_changed(path, prepared.model.SerializeToString())
    frozen = prepared.frozen_inputs
    try:
        with warnings.catch_warnings():  # references overflow on purpose in some cases
            warnings.simplefilter("ignore")
            compiled = compile_graph(path, target="host")
    except TinsmithError as e:
        return result_of(case, "unsupported", _first_line(e.message), frozen)
    except Exception as e:  # noqa: BLE001  (a crash in the compiler is a bug, not a limitation)
        return result_of(case, "failed", f"the compiler crashed: {type(e).__name__}: {_first_line(e)}", frozen)
    graph = compiled.graph
    data = [(inputs, outputs) for inputs, outputs in case.data_sets]
    if any(as_array(inputs[i]) is None for inputs, _ in data for i in prepared.runtime_inputs) or \
            any(as_array(x) is None for _, outputs in data for x in outputs):
        return result_of(case, "unsupported", "the test feeds or expects sequences, optionals or maps", frozen)

    def io(names):
        return tuple((n, graph.types[n].numpy_dtype, tuple(graph.types[n].shape)) for n in names)
    return _Built(case, prepared, graph_name(path), Signature(io(graph.inputs), io(graph.outputs)),
                  compiled.files)


_WORK: dict[str, object] = {}  # what the forked stage-1 workers read: the cases, folders, constant inputs


def _compile_one(index: int) -> _Built | Result:
    """Stage 1 in a worker: the case is sent back without its (large) model."""
    case = _WORK["cases"][index]
    item = _compile(case, _WORK["models_dir"], _WORK["constant_inputs"])
    if isinstance(item, Result):
        return item
    return dataclasses.replace(item, case=None, prepared=dataclasses.replace(item.prepared, model=None))


def _compile_all(cases: Sequence[Case], models_dir: Path, jobs: int) -> list[_Built | Result]:
    """Stage 1 for every case, on `jobs` forked workers (the compiler is single-threaded Python)."""
    import multiprocessing
    _WORK.update(cases=list(cases), models_dir=models_dir, constant_inputs=_constant_inputs())
    try:
        if jobs <= 1 or len(cases) < 8 or "fork" not in multiprocessing.get_all_start_methods():
            items = [_compile_one(i) for i in range(len(cases))]
        else:
            with multiprocessing.get_context("fork").Pool(jobs) as pool:
                items = pool.map(_compile_one, range(len(cases)), chunksize=4)
    finally:
        _WORK.clear()
    return [dataclasses.replace(item, case=case) if isinstance(item, _Built) else item
            for case, item in zip(cases, items)]


def _execute(item: _Built, program: Program, build_dir: Path) -> Result:
    """Stage 3 for one built case: every data set through its runner."""
    folder = build_dir / "cases" / item.folder
    frozen = item.prepared.frozen_inputs
    for k, (inputs, outputs) in enumerate(item.case.data_sets):
        arrays = [as_array(inputs[i]) for i in item.prepared.runtime_inputs]
        expected = [as_array(x) for x in outputs]
        reason = run_data_set(program.command, item.signature, arrays, expected, item.case.rtol, item.case.atol,
                              folder / f"conformance_{k}")
        if reason:
            prefix = f"data set {k}: " if len(item.case.data_sets) > 1 else ""
            return result_of(item.case, "failed", prefix + reason, frozen)
    return result_of(item.case, "passed", "", frozen)


def sample_cases(cases: Sequence[Case], baseline: set[str], per_op: int, seed: int = 0) -> list[Case]:
    """A bounded regression sample: for each operator, `per_op` of its baseline cases chosen by a
    seeded hash of their names (stable for one seed; another seed picks others), in the
    package's order. The full run stays the reference; this keeps every operator exercised."""
    import hashlib

    def rank(case: Case) -> bytes:
        return hashlib.sha256(f"{seed}:{case.name}".encode()).digest()

    by_op: dict[str, list[Case]] = {}
    for case in cases:
        if case.name in baseline:
            by_op.setdefault(case.op, []).append(case)
    chosen = {c.name for group in by_op.values() for c in sorted(group, key=rank)[:per_op]}
    return [c for c in cases if c.name in chosen]


def run_conformance(build_dir: Path = DEFAULT_BUILD_DIR, select: str | None = None, jobs: int | None = None,
                    batch_size: int = BATCH_SIZE, log: Callable[[str], None] = print,
                    sample: int | None = None, seed: int = 0) -> Run:
    """Import, build, run and compare every node test case (or those whose name contains
    `select`; or, with `sample`, that many baseline cases per operator, see sample_cases);
    build_dir keeps the models and builds between runs."""
    jobs = jobs or os.cpu_count() or 1
    build_dir = Path(build_dir).resolve()
    models_dir = build_dir / "models"
    models_dir.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}

    start = time.monotonic()
    cases = load_cases(select)
    if sample is not None:
        cases = sample_cases(cases, read_baseline(BASELINE), sample, seed)
    seconds["collect"] = time.monotonic() - start
    log(f"{len(cases)} cases collected in {seconds['collect']:.0f} s")

    start = time.monotonic()
    outcome: dict[str, Result] = {}
    built: list[_Built] = []
    for case, item in zip(cases, _compile_all(cases, models_dir, jobs)):
        if isinstance(item, Result):
            outcome[case.name] = item
        else:
            built.append(item)
    seconds["compile"] = time.monotonic() - start
    log(f"{len(built)} cases compiled, {len(outcome)} declined, in {seconds['compile']:.0f} s")

    start = time.monotonic()
    programs, failures = build_batches([(b.folder, b.files) for b in built], build_dir, jobs, batch_size, log)
    seconds["build"] = time.monotonic() - start
    log(f"{len(built) - len(failures)} cases built, {len(failures)} failed to build, in {seconds['build']:.0f} s")

    start = time.monotonic()
    runnable = []
    for item in built:
        if item.folder in failures:
            outcome[item.case.name] = result_of(item.case, "failed", failures[item.folder],
                                                item.prepared.frozen_inputs)
        else:
            runnable.append(item)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for item, result in zip(runnable, pool.map(lambda b: _execute(b, programs[b.folder], build_dir), runnable)):
            outcome[item.case.name] = result
    seconds["run"] = time.monotonic() - start
    log(f"{len(runnable)} cases run in {seconds['run']:.0f} s")
    return Run(tuple(cases), tuple(outcome[c.name] for c in cases), seconds)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run, print the tallies, write the doc (full runs) and maybe the baseline."""
    parser = argparse.ArgumentParser(prog="python -m conformance.run", description=__doc__.splitlines()[0])
    parser.add_argument("-k", "--select", help="only cases whose name contains this text (no doc written)")
    parser.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD_DIR,
                        help=f"models and builds, kept between runs [{DEFAULT_BUILD_DIR}]")
    parser.add_argument("-j", "--jobs", type=int, default=None, help="parallel builds and runs [CPU count]")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE, help=f"cases per compiled program [{BATCH_SIZE}]")
    parser.add_argument("--sample", type=int, metavar="N",
                        help="only N baseline cases per operator (no doc written); the seed is "
                             f"${SAMPLE_SEED_ENV} [0]")
    parser.add_argument("--doc", type=Path, default=DOC, help=f"report to write on a full run [{DOC.relative_to(ROOT)}]")
    parser.add_argument("--no-doc", action="store_true", help="do not write the report")
    parser.add_argument("--json", type=Path, help="also write every result to this JSON file")
    parser.add_argument("--update-baseline", action="store_true",
                        help=f"rewrite {BASELINE.relative_to(ROOT)} with the cases that pass (full runs only)")
    args = parser.parse_args(argv)
    import onnx

    start = time.monotonic()
    run = run_conformance(args.build_dir, args.select, args.jobs, args.batch_size,
                          sample=args.sample, seed=int(os.environ.get(SAMPLE_SEED_ENV, "0")))
    elapsed = time.monotonic() - start
    passing = run.passing
    tally = {s: sum(1 for r in run.results if r.status == s) for s in ("passed", "failed", "unsupported")}
    print(f"{len(run.results)} cases: {tally['passed']} passed, {tally['failed']} failed, "
          f"{tally['unsupported']} unsupported; {len(fully_passing_ops(run.cases, passing))} operator types "
          f"pass all their float32 cases; {elapsed:.0f} s")
    baseline = read_baseline(BASELINE)
    selected = {c.name for c in run.cases}
    regressions = sorted((baseline & selected) - passing)
    new = sorted(passing - baseline)
    if new:
        shown = " ".join(new[:30]) + (f" ... ({len(new) - 30} more)" if len(new) > 30 else "")
        print(f"{len(new)} passing cases not in the baseline: {shown}")
    if regressions:
        print(f"{len(regressions)} cases of the baseline no longer pass:")
        for r in run.results:
            if r.name in regressions:
                print(f"  {r.name}: {r.status}: {r.reason}")
    if args.json:
        args.json.write_text(json.dumps([dataclasses.asdict(r) for r in run.results], indent=1) + "\n",
                             encoding="utf-8")
    if args.select is None and args.sample is None:
        if not args.no_doc:
            args.doc.write_text(render(run.cases, run.results, onnx.__version__), encoding="utf-8")
            print(f"wrote {args.doc}")
        if args.update_baseline:
            write_baseline(BASELINE, passing)
            print(f"wrote {BASELINE} ({len(passing)} cases)")
    elif args.update_baseline:
        print("--update-baseline needs a full run (no -k, no --sample)", file=sys.stderr)
        return 2
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
