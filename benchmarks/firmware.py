"""Measure every graph in graphs/ on every firmware target and write docs/BENCHMARKS.md.

    python benchmarks/firmware.py            # builds build/<target>/..., runs QEMU, rewrites the doc

Per graph and target: workspace (and its lower bound), worst-case stack of call() as the
report states it and as stack painting measured it on the emulated core, code and constant
bytes measured from the target's object file, and the instructions one inference executes
on the emulated Cortex-M4 (QEMU with -icount: the same count on every run).

    python benchmarks/firmware.py --per-kernel   # also: each kernel's instructions on the M4

    python benchmarks/firmware.py --targets cortex-m55,rv32imac   # these targets' rows only

With --targets the other targets' rows are kept as the table holds them. With --per-kernel the Cortex-M4 firmware is built once more with the kernel hook
(TINSMITH_KERNEL_HOOK), and each kernel's instructions go into build/cortex-m4/NAME/NAME.json
and the per-layer table of NAME.html.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tinsmith.measure.page import write_page  # noqa: E402
from tinsmith.measure.report import with_kernel_instructions  # noqa: E402
from tinsmith.pipeline import lower  # noqa: E402
from tinsmith.targets import load_target  # noqa: E402
from tinsmith.targets.qemu import kernel_instructions, run_on_emulator  # noqa: E402

TARGETS = ("host", "cortex-m4", "cortex-m7", "cortex-m33", "cortex-m55", "cortex-m55-speed", "cortex-m0plus",
           "rv32imafc", "rv32imac")
OUT = ROOT / "docs" / "BENCHMARKS.md"


def build(target: str, graphs: list[Path]) -> None:
    """Build every graph for `target` (libraries and reports, and test firmware where the target
    has a board) with the repo's SConstruct. -k: a model too big for a board's memory fails to
    link its firmware; the table says so, and the other graphs still build."""
    subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", "-C", str(ROOT), f"target={target}"],
                   check=True, stdout=subprocess.DEVNULL)
    if load_target(target).baremetal:
        elfs = [f"build/{target}/{g.stem}/firmware/{g.stem}.elf" for g in graphs]
        subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", "-k", "-C", str(ROOT), f"target={target}", *elfs],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def seeded_input(graph) -> bytes:
    rng = np.random.default_rng(0)
    return b"".join(rng.standard_normal(graph.types[n].shape).astype("<f4").tobytes() for n in graph.inputs)


def measure(target_name: str, graph_path: Path) -> dict:
    graph = lower(graph_path)
    folder = ROOT / "build" / target_name / graph.name
    report = json.loads((folder / f"{graph.name}.json").read_text())
    row = {"graph": graph.name, "target": target_name,
           "workspace": report["ram"]["workspace_bytes"],
           "lower_bound": report["ram"]["workspace_lower_bound_bytes"],
           "stack": report["ram"].get("stack_bytes"),
           "code": report["flash"].get("code_bytes"),
           "constants": report["flash"]["constant_bytes"],
           "macs": report["macs"]}
    target = load_target(target_name)
    elf = folder / "firmware" / f"{graph.name}.elf"
    if target.emulator is not None:
        if elf.is_file():
            run = run_on_emulator(target, elf, seeded_input(graph), timeout=600)
            row["stack_measured"] = run.stack_bytes
            row["instructions"] = run.instructions
        else:
            row["note"] = f"does not fit {target.board.name}"
    return row


def per_kernel(target_name: str, graphs: list[Path]) -> None:
    """Each kernel's instructions on the emulated core, into the graph's JSON report and page: the
    firmware built again, with the kernel hook, into build/T/NAME/firmware-hook."""
    work = ROOT / "build" / target_name
    names = [lower(g).name for g in graphs]
    script = work / "SConstruct.kernel-hook"
    script.write_text(f"""\
import os, sys
sys.path.insert(0, {str(ROOT)!r})
from tinsmith.targets.firmware_scons import firmware_program
env = Environment(ENV=os.environ.copy())
for name in {names!r}:
    firmware_program(env, {target_name!r}, name, name, build_dir=f"{{name}}/firmware-hook",
                     extra_ccflags=["-DTINSMITH_KERNEL_HOOK"])
""")
    subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", "-k", "-f", script.name], cwd=work,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = load_target(target_name)
    for graph_path, name in zip(graphs, names):
        elf = work / name / "firmware-hook" / f"{name}.elf"
        if not elf.is_file():  # does not fit the board
            continue
        counts = kernel_instructions(target, run_on_emulator(target, elf, seeded_input(lower(graph_path)), timeout=600))
        path = work / name / f"{name}.json"
        report = with_kernel_instructions(json.loads(path.read_text()), counts)
        path.write_text(json.dumps(report, indent=2) + "\n")
        write_page(report, path.with_suffix(".html"))


def _fmt(v) -> str:
    return "—" if v is None else f"{v:,}" if isinstance(v, int) else str(v)


def _chosen_targets(argv: list[str]) -> tuple[str, ...]:
    if "--targets" not in argv:
        return TARGETS
    chosen = tuple(argv[argv.index("--targets") + 1].split(","))
    unknown = [t for t in chosen if t not in TARGETS]
    if unknown:
        sys.exit(f"error: unknown target {unknown[0]!r}; the benchmark's targets are {', '.join(TARGETS)}")
    return chosen


def _row(r: dict) -> str:
    per_mac = f"{r['instructions'] / r['macs']:.2f}" if r.get("instructions") and r["macs"] else None
    return (f"| {r['graph']} | {r['target']} | {_fmt(r['workspace'])} | {_fmt(r['lower_bound'])} | "
            f"{_fmt(r['stack'])} | {_fmt(r.get('stack_measured'))} | {_fmt(r['code'])} | "
            f"{_fmt(r['constants'])} | {_fmt(r['macs'])} | {_fmt(r.get('instructions', r.get('note')))} "
            f"| {_fmt(per_mac)} |")


def main() -> int:
    graphs = sorted((ROOT / "graphs").glob("*.yaml"))
    targets = _chosen_targets(sys.argv[1:])
    old = OUT.read_text().splitlines() if OUT.is_file() else []
    first_row = next((i for i, line in enumerate(old) if line.startswith("|")), len(old))
    end = next((i for i in range(first_row, len(old)) if not old[i].startswith("|")), len(old))
    # (graph, target) -> its line: the rows of targets not measured now stay as they were
    table = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in old[first_row + 2:end]}
    for target in targets:
        build(target, graphs)
        table.update({(r["graph"], target): _row(r) for r in (measure(target, g) for g in graphs)})
    lines = [
        "# Benchmarks",
        "",
        "Written by `python benchmarks/firmware.py` (builds every graph for every target with",
        "`scons target=T`, reads `build/T/NAME/NAME.json`, runs the test firmware on QEMU).",
        "Bytes unless stated. *Stack* is the report's worst case for `call()` (from `-fstack-usage`",
        "and the call graph); *measured* is the high-water mark stack painting saw on the emulated",
        "core. *Instructions* are executed by one inference on QEMU with `-icount` (deterministic;",
        "instructions, not cycles). Default optimisation: `-Os` for Cortex-M and RISC-V, `-O2` for the host.",
        "",
        "*Instr./MAC* is instructions over MACs (Conv, Gemm and MatMul multiply-accumulates).",
        "",
        "`cortex-m55-speed` is the Cortex-M55 with float32 on Helium vectors, channels-last",
        "(docs/KERNELS.md, \"adding a core\"): about half of `cortex-m55`'s instructions on the CNNs, for up",
        "to twice its workspace (ic). `python benchmarks/firmware.py --targets T,...` remeasures some",
        "targets and keeps the other rows.",
        "",
        "| graph | target | workspace | lower bound | stack | measured | code | constants | MACs | instructions "
        "| instr./MAC |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    order = {t: i for i, t in enumerate(TARGETS)}
    lines += [table[k] for k in sorted(table, key=lambda k: (k[0], order.get(k[1], len(order))))]
    # what follows this table (notes, the host comparison of benchmarks/host.py) is kept
    OUT.write_text("\n".join(lines + old[end:]) + "\n")
    print(OUT.read_text())
    if "--per-kernel" in sys.argv[1:]:
        per_kernel("cortex-m4", graphs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
