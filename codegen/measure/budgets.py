"""RAM and flash budgets: a model that needs more fails the build, and the message names the
values, constants and functions that take the most, so the user knows what to shrink."""
from __future__ import annotations

from typing import Mapping

from tinsmith.errors import TinsmithError
from tinsmith.measure.summary import size

LARGEST = 3  # consumers named per category


class BudgetError(TinsmithError):
    """A model that needs more RAM or flash than its budget allows."""


def _largest_values(report: Mapping) -> str:
    values = sorted(report.get("plan", []), key=lambda v: (-v["bytes"], v["offset"], v["value"]))[:LARGEST]
    return ", ".join(f"{v['value']} {v['bytes']} bytes at offset {v['offset']}" for v in values)


def _short(name: str) -> str:
    """`m::(anonymous namespace)::kernels::fc1(float const*)` -> `kernels::fc1`."""
    depth, cut = 0, len(name)
    for i, ch in enumerate(name.replace("(anonymous namespace)", "{anonymous}")):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0:
            cut = i
            break
    plain = name.replace("(anonymous namespace)", "{anonymous}")[:cut]
    return plain.split("{anonymous}::")[-1]


def _ram_problem(report: Mapping, budget: int) -> str | None:
    ram = report["ram"]
    if ram.get("stack_bytes") is None:
        return (f"RAM budget {budget} bytes cannot be checked: the stack is unbounded "
                f"({ram.get('stack_unbounded_because', 'unknown reason')})")
    total = ram["total_bytes"]
    if total <= budget:
        return None
    detail = ram.get("stack_detail", {})
    parts = [f"workspace {ram['workspace_bytes']}" + (f": largest values {_largest_values(report)}"
                                                    if report.get("plan") else "")]
    path = " -> ".join(_short(n) for n in detail.get("path", []))
    parts.append(f"stack {ram['stack_bytes']}" + (f": deepest path {path}" if path else ""))
    if ram.get("static_bytes"):
        parts.append(f"static {ram['static_bytes']}")
    return f"RAM budget {budget} bytes exceeded by {total - budget}: needs {total} ({'; '.join(parts)})"


def _flash_problem(report: Mapping, budget: int) -> str | None:
    flash = report["flash"]
    total = flash["total_bytes"]
    if total <= budget:
        return None
    constants = sorted(report.get("constants", []), key=lambda c: (-c["bytes"], c["name"]))[:LARGEST]
    functions = flash.get("functions", [])[:LARGEST]
    largest_constants = ", ".join(f"{c['name']} {c['bytes']} bytes" for c in constants)
    largest_functions = ", ".join(f"{_short(f['name'])} {f['bytes']} bytes" for f in functions)
    parts = [f"constants {flash['constant_bytes']}" + (f": largest {largest_constants}" if constants else ""),
             f"code {flash['code_bytes']}" + (f": largest functions {largest_functions}" if functions else "")]
    for key, label in (("data_init_bytes", "initialised data"), ("other_bytes", "other")):
        if flash.get(key):
            parts.append(f"{label} {flash[key]}")
    text = f"flash budget {budget} bytes exceeded by {total - budget}: needs {total} ({'; '.join(parts)})"
    if flash.get("library_code_bytes"):
        text += f"; besides, {flash['library_code_bytes']} bytes of library code it calls"
    return text


def check_budgets(report: Mapping, ram_budget: int | None, flash_budget: int | None) -> None:
    """Raise BudgetError when the model needs more RAM (workspace + stack + static data) or
    flash (code + constants + initialised data) than a budget given in bytes allows."""
    problems = [p for p in (_ram_problem(report, ram_budget) if ram_budget is not None else None,
                            _flash_problem(report, flash_budget) if flash_budget is not None else None) if p]
    if problems:
        where = f"{report['graph']} [{report.get('target', '?')}]: "
        raise BudgetError(None, where + problems[0], more=tuple(where + p for p in problems[1:]),
                          hint="shrink the largest consumers, or raise the budget" +
                          (f" (needs {size(report['ram'].get('total_bytes'))} RAM, "
                           f"{size(report['flash']['total_bytes'])} flash)"))
