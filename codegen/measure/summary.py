"""One line a build prints per model: what it needs in RAM and flash, and its MACs."""
from __future__ import annotations

from typing import Mapping


def size(n: int | None) -> str:
    """Bytes for people: 96 B, 1.2 KiB, 3.5 MiB; "unbounded" for None."""
    if n is None:
        return "unbounded"
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


def summary(report: Mapping) -> str:
    """`mlp [cortex-m4]: RAM 224 B (workspace 176 B, lower bound 176 B, stack 48 B) | flash
    9.7 KiB (code 312 B, constants 9.4 KiB; calls 748 B of library code) | 2,730 MACs`, and
    `| N instructions (measured on the emulator)` once `build --instructions` measured them."""
    ram, flash = report["ram"], report["flash"]
    ram_parts = [f"workspace {size(ram['workspace_bytes'])}"]
    if "workspace_lower_bound_bytes" in ram:
        ram_parts.append(f"lower bound {size(ram['workspace_lower_bound_bytes'])}")
    hosted = ram.get("stack_detail", {}).get("hosted", False)
    ram_parts.append(f"stack {size(ram['stack_bytes'])}" + (", informative on the host" if hosted else ""))
    if ram.get("static_bytes"):
        ram_parts.append(f"static {size(ram['static_bytes'])}")
    flash_parts = [f"code {size(flash['code_bytes'])}", f"constants {size(flash['constant_bytes'])}"]
    for key, label in (("data_init_bytes", "data"), ("other_bytes", "other")):
        if flash.get(key):
            flash_parts.append(f"{label} {size(flash[key])}")
    library = f"; calls {size(flash['library_code_bytes'])} of library code" if flash.get("library_code_bytes") else ""
    return (f"{report['graph']} [{report.get('target', '?')}]: RAM {size(ram.get('total_bytes'))} "
            f"({', '.join(ram_parts)}) | flash {size(flash['total_bytes'])} ({', '.join(flash_parts)}{library}) | "
            f"{report.get('macs', 0):,} MACs" + _instructions(report))


def _instructions(report: Mapping) -> str:
    """` | 5,031,200 instructions (measured on QEMU)` when the report has them."""
    total = (report.get("instructions") or {}).get("total")
    return f" | {total:,} instructions (measured on the emulator)" if total is not None else ""
