"""The build steps after generation, as functions: verifying a graph's headers and measuring its
report. The command line (`tinsmith verify`, `tinsmith report`) and the SCons tool, which runs
them inside the SCons process (no interpreter to start, nothing to import again per graph), call
the same code, so the files they write are the same bytes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Sequence


def verify_step(plan: Path, include_dirs: Sequence[Path] = (), stamp: Path | None = None) -> None:
    """Check the headers beside `plan` with libclang (tinsmith.verify, raising VerifyError); write
    `stamp` when they pass."""
    from tinsmith.verify import verify_outputs  # (libclang: loaded only where a step verifies)
    verify_outputs(Path(plan), [Path(p) for p in include_dirs])
    if stamp is not None:
        Path(stamp).write_text("verified\n")


def report_step(plan: Path, obj: Path, target: str | Path, output: Path, html: Path | None = None,
                firmware: Path | None = None, ram_budget: int | None = None,
                flash_budget: int | None = None, show: Callable[[dict], None] | None = None) -> dict:
    """Measure the compiled model against its plan for `target` (a built-in target's name or a
    target file), show it (`show`, before budgets are checked, so a model over budget still shows
    its figures), fail (BudgetError) over a budget, write the report `output` and its page `html`;
    returns the report."""
    from tinsmith.escape import json_text
    from tinsmith.measure import check_budgets, measure_model
    from tinsmith.targets import load_target
    report = measure_model(json.loads(Path(plan).read_text(encoding="utf-8")), Path(obj), load_target(target),
                           Path(firmware) if firmware else None)
    if show is not None:
        show(report)
    check_budgets(report, ram_budget, flash_budget)
    Path(output).write_text(json_text(report), encoding="utf-8")
    if html:
        from tinsmith.measure.page import write_page
        write_page(report, Path(html))
    return report
