"""TFLite conformance run: every single-operator model of conformance/tflite/models (written by
make_models.py) imported, compiled for the host, run on its seeded inputs and compared with the
TFLite Micro interpreter (the `tflite-micro` package of the test extra) on the same inputs.

    python -m conformance.tflite.run                     # full run; writes docs/TFLITE.md's table
    python -m conformance.tflite.run --update-baseline   # ... and rewrites conformance/tflite/passing.txt
    python -m conformance.tflite.run -k conv             # only cases whose name contains 'conv'

Integer and boolean outputs must be equal; float32 ones within 1e-5 relative (numpy.isclose with
rtol 1e-5, atol 1e-6 for elements near zero). A case is `unsupported` when Tinsmith refuses it at
import (the message says why), `no oracle` when the interpreter cannot run it (TFLite Micro does
not register every builtin), `failed` otherwise. The generated code of many cases is compiled into
one host program with -Werror (conformance/batch.py), as the ONNX conformance run does. Exit
status 1 when a case in the baseline no longer passes.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `python conformance/tflite/run.py` as well as `python -m ...`
    sys.path.insert(0, str(ROOT))

from conformance.batch import build_batches  # noqa: E402,I001
from conformance.execute import Signature, run_data_set  # noqa: E402

MODELS = Path(__file__).resolve().parent / "models"
BASELINE = Path(__file__).resolve().parent / "passing.txt"
DOC = ROOT / "docs" / "TFLITE.md"
TABLE_BEGIN, TABLE_END = "<!-- conformance table: begin -->", "<!-- conformance table: end -->"
RTOL, ATOL = 1e-5, 1e-6
ARENA_BYTES = 1 << 20  # the interpreter's arena: room for the largest case (a 512-point FFT's state)
BATCH_SIZE = 24
# Operators whose TFLite Micro results are not defined in some cases, checked against LiteRT instead
LITERT_FIRST = {"SPACE_TO_BATCH_ND": "TFLite Micro's kernel pads with a value it never sets (the arena's bytes)"}


@dataclass(frozen=True)
class Result:
    name: str
    operator: str  # the builtin name of the case's first operator
    dtype: str  # the element type of its first input
    status: str  # passed, failed, unsupported, no oracle
    reason: str = ""
    oracle: str = "TFLite Micro"  # the interpreter whose outputs are expected


def case_names(select: str | None = None) -> list[str]:
    return sorted(p.stem for p in MODELS.glob("*.tflite") if not select or select in p.stem)


def _describe(path: Path) -> tuple[str, str]:
    """(operator, element type) of a case: its main operator's builtin name (the last one, after a
    QUANTIZE or SHAPE that feeds it) and the element type that picks its converter."""
    import tflite
    from tflite.utils import opcode2name

    from tinsmith.load.tflite_operators import CUSTOM_OPERATORS, OPERATORS
    from tinsmith.load.tflite_reader import TENSOR_TYPES
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    graph = model.Subgraphs(0)
    codes = [model.OperatorCodes(graph.Operators(k).OpcodeIndex()) for k in range(graph.OperatorsLength())]
    # a custom operator by its custom code (SignalWindow, ...)
    names = [c.CustomCode().decode() if c.CustomCode() else opcode2name(max(c.BuiltinCode(), c.DeprecatedBuiltinCode()))
             for c in codes]
    k = max((i for i, n in enumerate(names) if n not in ("SHAPE", "QUANTIZE")), default=0)
    rule = OPERATORS.get(names[k]) or CUSTOM_OPERATORS.get(f"CUSTOM:{names[k]}")
    # (an operator no element type decides, ASSIGN_VARIABLE: its last input, the value it moves)
    typed_by = (rule.typed_by if rule.typed_by is not None else -1) if rule else 0
    tensor = graph.Tensors(int(graph.Operators(k).InputsAsNumpy()[typed_by]))
    return names[k], TENSOR_TYPES.get(tensor.Type(), str(tensor.Type()))


def _inputs(name: str) -> list[np.ndarray]:
    with np.load(MODELS / f"{name}.npz") as archive:
        return [archive[k] for k in archive.files]  # (written in the model's input order)


def _oracle(path: Path, inputs: Sequence[np.ndarray], micro: bool = True) -> tuple[str, list[np.ndarray] | str]:
    """(interpreter, its outputs), or (interpreter, why it cannot run the model): TFLite Micro (unless
    not `micro`), or where it does not register the operator, TFLite's own runtime (LiteRT, also in
    the test extra)."""
    from tflite_micro.python.tflite_micro.runtime import Interpreter
    try:
        if not micro:
            raise RuntimeError("its results are not defined for this operator")
        interp = Interpreter.from_bytes(path.read_bytes(), arena_size=ARENA_BYTES)
        for i, x in enumerate(inputs):
            interp.set_input(x, i)
        interp.invoke()
        return "TFLite Micro", [np.asarray(interp.get_output(i)) for i in range(_output_count(path))]
    except Exception as e:  # noqa: BLE001  (an op TFLite Micro does not register, and friends)
        micro = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    try:
        from ai_edge_litert.interpreter import Interpreter as LiteRT
        interp = LiteRT(model_content=path.read_bytes())
        interp.allocate_tensors()
        for detail, x in zip(interp.get_input_details(), inputs):
            interp.set_tensor(detail["index"], x)
        interp.invoke()
        return "LiteRT", [np.asarray(interp.get_tensor(d["index"])) for d in interp.get_output_details()]
    except Exception as e:  # noqa: BLE001
        return "none", (f"neither interpreter runs it (TFLite Micro: {micro}; LiteRT: {type(e).__name__}: "
                        f"{str(e).strip().splitlines()[0] if str(e).strip() else ''})")


def _output_count(path: Path) -> int:
    import tflite
    return tflite.Model.GetRootAsModel(path.read_bytes(), 0).Subgraphs(0).OutputsLength()


def run_cases(names: Sequence[str], build_dir: Path, jobs: int = 2,
              log: Callable[[str], None] = print) -> list[Result]:
    """Import, compile, run and compare each named case; one Result each, in order."""
    from tinsmith.errors import TinsmithError
    from tinsmith.pipeline import compile_graph
    results: dict[str, Result] = {}
    built, expected = [], {}
    for name in names:
        path = MODELS / f"{name}.tflite"
        operator, dtype = _describe(path)

        oracle, want = _oracle(path, _inputs(name), micro=operator not in LITERT_FIRST)

        def result(status: str, reason: str = "", name=name, operator=operator, dtype=dtype, oracle=oracle) -> Result:
            return Result(name, operator, dtype, status, reason, oracle)
        if isinstance(want, str):
            results[name] = result("no oracle", want)
            continue
        try:
            compiled = compile_graph(path, target="host")
        except TinsmithError as e:
            results[name] = result("unsupported", e.message)
            continue
        except Exception as e:  # noqa: BLE001  (a crash in the compiler is a bug, not a limitation)
            results[name] = result("failed", f"the compiler crashed: {type(e).__name__}: {e}")
            continue
        graph = compiled.graph

        def io(values):
            return tuple((n, graph.types[n].numpy_dtype, tuple(graph.types[n].shape)) for n in values)
        expected[name] = (result, Signature(io(graph.api_inputs), io(graph.api_outputs)), want)
        built.append((name, compiled.files))
    log(f"{len(names)} cases: {len(built)} compiled, {len(names) - len(built)} refused or without an oracle")
    programs, failures = build_batches(built, build_dir, jobs, BATCH_SIZE, log)
    (build_dir / "scratch").mkdir(parents=True, exist_ok=True)
    for name, _ in built:
        result, signature, want = expected[name]
        if name in failures:
            results[name] = result("failed", failures[name])
            continue
        reason = run_data_set(programs[name].command, signature, _inputs(name), want, RTOL, ATOL,
                              build_dir / "scratch" / name)
        results[name] = result("failed", reason) if reason else result("passed")
    return [results[n] for n in names]


def read_baseline(path: Path = BASELINE) -> set[str]:
    if not path.exists():
        return set()
    return {line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")}


def write_baseline(results: Sequence[Result], path: Path = BASELINE) -> None:
    lines = ["# TFLite conformance cases that pass (one a line, sorted); a case here that stops passing",
             "# fails tests/test_tflite_conformance.py. Rewrite: python -m conformance.tflite.run --update-baseline",
             *sorted(r.name for r in results if r.status == "passed")]
    path.write_text("\n".join(lines) + "\n")


def table(results: Sequence[Result]) -> str:
    """The per-operator table of docs/TFLITE.md: cases per operator and element type, and why not."""
    rows: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        rows.setdefault((r.operator, r.dtype), []).append(r)
    lines = ["| operator | element type | cases | passed | oracle | not passing |", "|---|---|---:|---:|---|---|"]
    for (op, dtype), rs in sorted(rows.items()):
        passed = sum(r.status == "passed" for r in rs)
        notes = "; ".join(f"{r.name}: {r.status}" + (f" ({r.reason[:160]})" if r.reason else "")
                          for r in rs if r.status != "passed")
        oracles = ", ".join(sorted({r.oracle for r in rs}))
        lines.append(f"| {op} | {dtype} | {len(rs)} | {passed} | {oracles} | {notes.replace('|', '/')} |")
    total = sum(r.status == "passed" for r in results)
    lite = sum(r.oracle == "LiteRT" for r in results)
    lines.append("")
    lines.append(f"{total} of {len(results)} cases pass; {lite} are checked against LiteRT, TFLite's own runtime, "
                 f"because TFLite Micro does not register their operator or refuses their form.")
    return "\n".join(lines)


def write_doc(results: Sequence[Result], doc: Path = DOC) -> None:
    text = doc.read_text(encoding="utf-8")
    head, _, rest = text.partition(TABLE_BEGIN)
    _, _, tail = rest.partition(TABLE_END)
    doc.write_text(f"{head}{TABLE_BEGIN}\n{table(results)}\n{TABLE_END}{tail}", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.tflite.run", description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="select", help="only cases whose name contains this")
    parser.add_argument("--update-baseline", action="store_true", help="rewrite conformance/tflite/passing.txt")
    parser.add_argument("--build-dir", default=str(Path(tempfile.gettempdir()) / "tinsmith-tflite-conformance"))
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    results = run_cases(case_names(args.select), Path(args.build_dir), args.jobs)
    for r in results:
        if r.status != "passed":
            print(f"{r.name}: {r.status}: {r.reason}")
    print(f"{sum(r.status == 'passed' for r in results)} of {len(results)} cases pass")
    if not args.select:
        write_doc(results)
        if args.update_baseline:
            write_baseline(results)
    lost = sorted(read_baseline() - {r.name for r in results if r.status == "passed"} &
                  {r.name for r in results})
    if lost:
        print(f"no longer passing: {', '.join(lost)}", file=sys.stderr)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
