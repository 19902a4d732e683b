"""The findings table: counts per class and target, and one line per finding, in a stable order."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.sweep import run

HEADER = "# probe | element types | target | outcome | first line\n"


def finding_lines(results) -> list[str]:
    """One line per result that is not plain success, sorted: the checked-in baseline's format."""
    lines = []
    for r in results:
        if r.outcome == run.OK:
            continue
        outcome = r.outcome if r.outcome != run.REFUSED or r.clear else "refused-unclear"
        lines.append(" | ".join((r.probe, r.types, r.target, outcome, r.message)))
    return sorted(set(lines))


def write_findings(outcome, path: Path) -> None:
    """Write the run's findings; lines of an earlier file for (combination, target) pairs this run did
    not sweep (other targets, other ops, combinations a sample skipped) are kept as they were."""
    kept = []
    if path.exists():
        for line in path.read_text().splitlines():
            if line and not line.startswith("#"):
                probe, types, target, _ = line.split(" | ", 3)
                if (probe, types) not in outcome.swept or target not in (*outcome.targets, run.ANY_TARGET):
                    kept.append(line)
    lines = sorted(set(kept + finding_lines(outcome.results)))
    path.write_text(HEADER + "".join(line + "\n" for line in lines))


def summarize(outcome, seconds: float) -> str:
    counts = Counter((r.outcome, r.target) for r in outcome.results)
    classes = [run.OK, *run.FINDINGS]
    width = max(len(t) for t in outcome.targets) + 2
    rows = [f"{outcome.combos} combinations, {outcome.accepted} accepted, {outcome.not_accepted} not accepted "
            f"(skipped); {len(outcome.targets)} targets; {seconds:.0f} s",
            f"{'outcome':<18}" + "".join(f"{t:>{width}}" for t in outcome.targets)]
    for c in classes:
        rows.append(f"{c:<18}" + "".join(f"{counts[(c, t)]:>{width}}" for t in outcome.targets))
    unclear = sum(1 for r in outcome.results if r.outcome == run.REFUSED and not r.clear)
    rows.append(f"refusals whose message names no op/node or no element type: {unclear}")
    vague = sum(1 for r in outcome.results if r.outcome == run.NOT_ACCEPTED_UNCLEAR)
    rows.append(f"combinations not accepted with a message that names none of their element types: {vague}")
    by_op = Counter((r.probe, r.outcome) for r in outcome.results if r.outcome in (run.CXX_ERROR, run.WARNING,
                                                                                  run.EXCEPTION, run.MISMATCH,
                                                                                  run.RUN_FAILED, run.REF_FAILED))
    if by_op:
        rows.append("findings by probe:")
        rows += [f"  {p:<28} {o:<18} {n}" for (p, o), n in sorted(by_op.items())]
    return "\n".join(rows)
