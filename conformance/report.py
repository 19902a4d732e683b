"""Results of a conformance run: tallies per operator, the baseline of passing cases, and
docs/CONFORMANCE.md."""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from conformance.cases import Case

STATUSES = ("passed", "failed", "unsupported")
GOAL_OPS, GOAL_CASES = 150, 1450  # the coverage goal: operator types passing all their float32 cases, cases


@dataclass(frozen=True)
class Result:
    """What happened to one case: passed, failed (built or ran wrong) or unsupported (Tinsmith
    declined it with an error), with the reason's first line and the inputs frozen for it."""

    name: str
    op: str
    status: str
    reason: str = ""
    frozen: tuple[str, ...] = ()
    float32: bool = False
    expanded: bool = False


def result_of(case: Case, status: str, reason: str = "", frozen: Sequence[str] = ()) -> Result:
    return Result(case.name, case.op, status, reason, tuple(frozen), case.float32, case.expanded)


# --- operators ---------------------------------------------------------------------------------
def float32_cases_by_op(cases: Iterable[Case], expanded: bool = True) -> dict[str, list[str]]:
    """{op: names of its float32 cases}, for the operators that have any."""
    by_op: dict[str, list[str]] = defaultdict(list)
    for c in cases:
        if c.float32 and (expanded or not c.expanded):
            by_op[c.op].append(c.name)
    return dict(by_op)


def fully_passing_ops(cases: Iterable[Case], passing: set[str], expanded: bool = True) -> list[str]:
    """Operators with float32 cases that all pass (`expanded`: their _expanded cases count too)."""
    return sorted(op for op, names in float32_cases_by_op(cases, expanded).items()
                  if all(n in passing for n in names))


# --- baseline ----------------------------------------------------------------------------------
BASELINE_HEADER = ("# ONNX node test cases that pass (one name a line, sorted); a case here that stops\n"
                   "# passing fails tests/test_conformance.py. Rewrite: python -m conformance.run --update-baseline\n")


def read_baseline(path: Path) -> set[str]:
    """Case names in a baseline file (comments and blank lines skipped); empty if it is missing."""
    if not path.exists():
        return set()
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return {line for line in lines if line and not line.startswith("#")}


def write_baseline(path: Path, passing: Iterable[str]) -> None:
    path.write_text(BASELINE_HEADER + "".join(f"{n}\n" for n in sorted(passing)), encoding="utf-8")


# --- causes ------------------------------------------------------------------------------------
def cause(reason: str) -> str:
    """A reason with its particulars (names, numbers, shapes) blanked, to count alike failures."""
    if "elements differ" in reason:
        return "output values differ from the expected ones"
    text = re.sub(r"'[^']*'", "'…'", reason)
    text = re.sub(r"\[[^\]]*\]", "[…]", text)
    text = re.sub(r"\b\d+(\.\d+)?(e[-+]?\d+)?\b", "N", text)
    return text


def top_causes(results: Iterable[Result], status: str | None = None) -> list[tuple[str, list[str]]]:
    """(cause, case names) for failed/unsupported results, most frequent first."""
    groups: dict[str, list[str]] = defaultdict(list)
    for r in results:
        if r.status != "passed" and (status is None or r.status == status):
            groups[cause(r.reason.replace(r.name, "NAME"))].append(r.name)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


# --- the document ------------------------------------------------------------------------------
def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _counts(results: Iterable[Result]) -> Counter:
    return Counter(r.status for r in results)


def render(cases: Sequence[Case], results: Sequence[Result], onnx_version: str) -> str:
    """docs/CONFORMANCE.md for a full run."""
    passing = {r.name for r in results if r.status == "passed"}
    by_op: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_op[r.op].append(r)
    f32_by_op = float32_cases_by_op(cases)
    full = fully_passing_ops(cases, passing)
    full_plain = fully_passing_ops(cases, passing, expanded=False)
    total, f32 = _counts(results), _counts(r for r in results if r.float32)
    frozen_passes = sum(1 for r in results if r.status == "passed" and r.frozen)
    tolerances = sorted({(c.rtol, c.atol) for c in cases})
    tol_text = ", ".join(f"rtol={rt:g}, atol={at:g}" for rt, at in tolerances)
    out = [
        "# ONNX conformance",
        "",
        f"The node test cases shipped with onnx {onnx_version} ({len(cases)} cases, made in-process by",
        "`onnx.backend.test.case.node.collect_testcases`), each imported and compiled for the host",
        "target, built with many other cases into one host program (conformance/batch.py), run on",
        "its data sets and compared with the expected outputs using",
        f"ONNX's own tolerances ({tol_text}; integer and boolean outputs exactly).",
        "Generated by `python -m conformance.run` (see conformance/run.py); do not edit by hand.",
        "Rerun it with `python -m conformance.run --update-baseline`, which also rewrites",
        "conformance/passing.txt, the cases that must keep passing;",
        "`python -m conformance.run -k NAME` runs the cases whose name contains NAME.",
        "The test suite (tests/test_conformance.py) runs a seeded sample of two baseline cases per",
        "operator (`python -m conformance.run --sample 2`; `TINSMITH_CONFORMANCE_SEED` picks another),",
        "and every case with `TINSMITH_CONFORMANCE=full`.",
        "",
        "## Summary",
        "",
        "| cases | total | passed | failed | unsupported |",
        "|---|---:|---:|---:|---:|",
        f"| all | {len(results)} | {total['passed']} | {total['failed']} | {total['unsupported']} |",
        f"| float32 | {sum(f32.values())} | {f32['passed']} | {f32['failed']} | {f32['unsupported']} |",
        "",
        (f"- **{len(full)}** operator types pass all of their float32 cases, of {len(f32_by_op)} that have "
         f"float32 cases (goal: {GOAL_OPS}); counting only cases that are not `_expanded`, {len(full_plain)}."),
        (f"- **{total['passed']}** cases pass (goal: {GOAL_CASES}); {frozen_passes} of them with operands "
         "frozen as initializers (see below)."),
        "",
        "Operators passing all of their float32 cases: " + ", ".join(f"`{op}`" for op in full) + ".",
        "",
        "## How cases are counted",
        "",
        "- **Operator of a case**: the op type of its single node (with the domain when it is not the",
        "  default one). An `_expanded` case (`test_X_expanded`, `test_X_expanded_verN`) holds the",
        "  function body of the operator `test_X` tests and is counted under that operator.",
        "- **float32 case**: its inputs and expected outputs hold float32 data, and besides float32 only",
        "  integer or boolean operands (indices, shapes, axes, conditions, integer results). An operator",
        "  *passes all of its float32 cases* when it has some and every one of them passes,",
        "  `_expanded` ones included.",
        "- **Frozen operands**: the node tests feed every operand as a graph input; Tinsmith compiles",
        "  static graphs with float32 inputs, as real models that hold shapes, axes and indices as",
        "  initializers. So a graph input becomes an initializer with the data set's value when a",
        "  primitive needs it at build time (`constant_inputs` in codegen/ops: Reshape's shape, Slice's",
        "  starts, Resize's scales, ...), or when it is an integer or boolean operand and a float32",
        "  input is left to compute with (a case whose inputs would all be frozen stays as written).",
        "- **unsupported**: Tinsmith declined the model with an error (operator, element type, dynamic",
        "  shape, attribute value, no functor); the reason is that error's message.",
        "  **failed**: the generator crashed, the build failed (the host compiler), the runner",
        "  failed, or an output differs from the expected one.",
        "",
        "## Most frequent causes",
        "",
        "Of the cases that fail, and of the float32 cases that are unsupported (the other unsupported",
        "cases hold element types Tinsmith does not compute with: float16, float64, int8, strings, ...).",
        "",
        "| cases | status | cause | examples |",
        "|---:|---|---|---|",
    ]
    misses = [("failed", [r for r in results if r.status == "failed"]),
              ("unsupported", [r for r in results if r.status == "unsupported" and r.float32])]
    for status, chosen in misses:
        for text, names in top_causes(chosen)[:30]:
            examples = ", ".join(f"`{n}`" for n in names[:3])
            out.append(f"| {len(names)} | {status} | {_md(text)} | {examples} |")
    out += [
        "",
        "## Operators that do not pass all of their float32 cases",
        "",
        "| operator | float32 passed | most frequent reason |",
        "|---|---:|---|",
    ]
    by_name = {r.name: r for r in results}
    for op in sorted(set(f32_by_op) - set(full), key=str.lower):
        names = f32_by_op[op]
        misses_of_op = [by_name[n] for n in names if n not in passing and n in by_name]
        reason = top_causes(misses_of_op)[0][0] if misses_of_op else ""
        out.append(f"| {_md(op)} | {len(names) - len(misses_of_op)}/{len(names)} | {_md(reason)} |")
    out += [
        "",
        "## Per operator",
        "",
        "| operator | cases | passed | failed | unsupported | float32 passed | all float32 pass |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for op in sorted(by_op, key=str.lower):
        rs = by_op[op]
        n = _counts(rs)
        f32_names = f32_by_op.get(op, [])
        f32_pass = sum(1 for name in f32_names if name in passing)
        mark = "yes" if op in full else ("no" if f32_names else "—")
        f32_text = f"{f32_pass}/{len(f32_names)}" if f32_names else "—"
        out.append(f"| {_md(op)} | {len(rs)} | {n['passed']} | {n['failed']} | {n['unsupported']} | "
                   f"{f32_text} | {mark} |")
    out += ["", "## Cases that fail or are unsupported", "",
            "Every case that does not pass, per operator, with the first line of the reason.", ""]
    for op in sorted(by_op, key=str.lower):
        bad = [r for r in by_op[op] if r.status != "passed"]
        if not bad:
            continue
        out += [f"### {_md(op)}", ""]
        for r in sorted(bad, key=lambda r: r.name):
            frozen = f" (frozen: {', '.join(r.frozen)})" if r.frozen else ""
            out.append(f"- `{r.name}` — {r.status}: {_md(r.reason)}{frozen}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"
