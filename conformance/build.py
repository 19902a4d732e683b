"""Building many models per SCons run: conformance/SConstruct (the Tinsmith SCons tool, as a
project uses it) builds every listed model's host runner; `-k` keeps a batch going past a model
whose build fails, and each failure is traced back to its model through the paths in SCons's
output. The tool's `python -m codegen` commands go to a warm interpreter (warm.py) when one
is given."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
SCONSTRUCT = Path(__file__).resolve().parent / "SConstruct"
_FAILED_TARGET = re.compile(r"^scons: \*\*\* \[(?P<target>[^\]]+)\] (?P<what>.*)$")


def _folder_of(target: str, build_dir: Path) -> str | None:
    """The model folder (directly under build_dir) a failed target lies in."""
    path = Path(target)
    path = path if path.is_absolute() else ROOT / path
    try:
        parts = path.resolve().relative_to(build_dir.resolve()).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 else None


def _tidy(line: str, build_dir: Path, models_dir: Path) -> str:
    """An error line without the temporary folders' paths, so reports do not change run to run."""
    for folder in (build_dir.resolve(), models_dir.resolve(), build_dir, models_dir, ROOT):
        line = line.replace(f"{folder}/", "")
    return line.strip()


_STAGES = ((".hpp", "generate"), (".verified", "verify"), (".json", "report"), ("_runner.o", "compile runner"),
           (".o", "compile"), (".a", "archive"), ("_runner", "link runner"))


def _stage(target: str) -> str:
    """The build step that makes `target` (NAME.hpp is made by generate, NAME.verified by verify, ...)."""
    return next((stage for suffix, stage in _STAGES if target.endswith(suffix)), "build")


def failure_reasons(output: str, folders: Sequence[str], build_dir: Path, models_dir: Path) -> dict[str, str]:
    """{folder: 'step: first error line'} for the models whose targets SCons reports as failed.

    The error line is the first `error:` line that names the model's folder or file, else the
    last one before SCons reports the failure that names no other model of the batch (verify
    and compiler errors in shared headers name the header, not the model)."""
    lines = output.splitlines()
    marks = {f: (f"/{f}/", f"/{f}.onnx") for f in folders}

    def names(line: str, folder: str) -> bool:
        return any(mark in line for mark in marks[folder])

    def is_error(line: str) -> bool:
        return "error:" in line and not line.startswith("scons: ")

    failed: dict[str, str] = {}
    for at, line in enumerate(lines):
        m = _FAILED_TARGET.match(line)
        folder = _folder_of(m["target"], build_dir) if m else None
        if folder is None or folder in failed or folder not in marks:
            continue
        own = next((x for x in lines if is_error(x) and names(x, folder)), None)
        if own is None:
            own = next((x for x in reversed(lines[:at])
                        if is_error(x) and not any(names(x, other) for other in marks if other != folder)), None)
        text = own if own is not None else f"{m['what']} ({Path(m['target']).name})"
        failed[folder] = f"{_stage(m['target'])}: {_tidy(text, build_dir, models_dir)}"
    return failed


def build_models(models: Sequence[Path], build_dir: Path, jobs: int, batch_size: int,
                 log: Callable[[str], None] = print, python: str | None = None,
                 env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Build the host runner of every model into build_dir/NAME/, batch_size models per SCons
    run; return {NAME: reason} for the models whose build failed. NAME is the model's stem (the
    graph name of the case names used here). `python` is the command that runs `-m codegen`, `env` variables for SCons's environment."""
    failures: dict[str, str] = {}
    build_dir.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(models), batch_size):
        batch = list(models[start:start + batch_size])
        log(f"  building {start + 1}-{start + len(batch)} of {len(models)}")
        cmd = [sys.executable, "-m", "SCons", "-Q", "-k", f"-j{jobs}", "-C", str(ROOT), "-f", str(SCONSTRUCT),
               "graphs=" + ",".join(str(p.resolve()) for p in batch), f"build_dir={build_dir.resolve()}"]
        if python:
            cmd.append(f"python={python}")
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env={**os.environ, **(env or {})})
        folders = [p.stem for p in batch]
        reasons = failure_reasons(proc.stdout + "\n" + proc.stderr, folders, build_dir, batch[0].parent)
        if proc.returncode != 0 and not reasons:  # SCons itself failed: blame the whole batch
            last = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
            reasons = {f: f"scons exited {proc.returncode}: {last}" for f in folders}
        failures.update({f: r for f, r in reasons.items() if f in folders})
    return failures
