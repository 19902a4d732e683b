"""A probe image: the model object alone, linked the way the target links firmware, so the
library code its calls reach (libm, libc, libgcc) can be read without the firmware.

The firmware cannot be the source when the report is built before it (the library depends
on the report, the firmware on the library); and a table of library frames would describe
one newlib build. The probe links the very archives the target's flags select, keeps only
what the entry points reach (--gc-sections), and costs one link.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Sequence

from tinsmith.targets import Target


def link_probe(target: Target, model_object: Path, entries: Sequence[str], out: Path) -> tuple[Path | None, str]:
    """Link `model_object` into `out` with the target's compiler driver and flags, keeping
    what `entries` reach; returns (the image or None, the command line, with file names
    only so reports stay the same from build to build, or the error)."""
    # No startup files: the entry points are the roots, and --gc-sections drops the rest.
    extra = [f for f in ("-nostartfiles", "-Wl,--gc-sections") if f not in target.linkflags]
    flags = ([*target.cpu_flags, target.optimize, *target.linkflags, *extra, f"-Wl,--entry={entries[0]}"]
             + [f"-Wl,--undefined={e}" for e in entries[1:]])
    command = [target.toolchain.command("cxx"), *flags, "-o", str(out), str(model_object)]
    shown = " ".join([target.toolchain.command("cxx"), *flags, "-o", out.name, Path(model_object).name])
    env = dict(os.environ)
    if target.toolchain.path is not None:
        env["PATH"] = f"{target.toolchain.path}{os.pathsep}{env.get('PATH', '')}"
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env)
    except FileNotFoundError:
        return None, f"'{command[0]}' is not on PATH"
    if done.returncode != 0:
        return None, f"'{shown}' failed: {done.stderr.strip()}"
    return out, shown
