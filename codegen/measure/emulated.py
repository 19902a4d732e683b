"""Instructions measured on the emulated core: the whole call and each kernel.

The test firmware the SCons tool links for a bare-metal target times one `call()` with the
core's SysTick; QEMU runs with -icount, so ticks convert exactly to executed instructions
(codegen/targets/qemu.py). For each kernel the firmware is built once more with
TINSMITH_KERNEL_HOOK defined, which reads the counter around every kernel (that build is
slower by the hook's reads, so the total comes from the ordinary firmware). Both counts are
measured, never estimated; they go into the report (NAME.json) and its page (NAME.html).
"""
from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Mapping

from tinsmith.errors import TinsmithError
from tinsmith.measure.report import with_kernel_instructions

HOOK_FOLDER = "firmware-hook"


def build_kernel_hook_firmware(model_dir: Path, graph_name: str, target: str) -> Path:
    """Build (with SCons, incrementally) the test firmware with the kernel hook from the model's
    generated sources in `model_dir` (build_dir/NAME); returns its ELF."""
    model_dir = model_dir.resolve()
    script = model_dir / HOOK_FOLDER / "SConstruct"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f"""\
# Written by Tinsmith: the test firmware of {graph_name} with a counter read around every kernel.
import os, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from tinsmith.targets.firmware_scons import firmware_program
env = Environment(ENV=os.environ.copy())
firmware_program(env, {target!r}, {str(model_dir)!r}, {graph_name!r}, build_dir={str(script.parent)!r},
                 extra_ccflags=["-DTINSMITH_KERNEL_HOOK"])
""", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-f", str(script)], cwd=script.parent,
                          capture_output=True, text=True)
    elf = script.parent / f"{graph_name}.elf"
    if proc.returncode != 0 or not elf.is_file():
        raise TinsmithError(None, f"building the per-kernel firmware of {graph_name} for {target} failed:",
                            detail=(proc.stdout + proc.stderr).strip() or None)
    return elf


def with_instructions(report: Mapping, total: int | None, per_kernel: list[int] | None, emulator: str,
                      inputs: str) -> dict:
    """The report with the instructions one call executed on the emulated core (`total`) and, if
    given, each kernel's; `emulator` and `inputs` say how they were measured."""
    result = with_kernel_instructions(report, per_kernel) if per_kernel is not None else copy.deepcopy(dict(report))
    result["instructions"] = {"total": total, "per_kernel": per_kernel is not None, "emulator": emulator,
                              "inputs": inputs}
    return result
