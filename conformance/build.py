"""Building many models per SCons run: the repository's SConstruct builds every listed model's
host runner; `-k` keeps a batch going past a model whose build fails, and each failure is
traced back to its model through the paths in SCons's output."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
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
    for folder in (build_dir.resolve(), models_dir.resolve(), build_dir, models_dir):
        line = line.replace(f"{folder}/", "")
    return line.strip()


def failure_reasons(output: str, folders: Sequence[str], build_dir: Path, models_dir: Path) -> dict[str, str]:
    """{folder: first error line} for the models whose targets SCons reports as failed."""
    lines = output.splitlines()
    failed: dict[str, str] = {}
    for line in lines:
        m = _FAILED_TARGET.match(line)
        if m:
            folder = _folder_of(m["target"], build_dir)
            if folder is not None and folder not in failed:
                failed[folder] = _tidy(line, build_dir, models_dir)
    wanted = set(folders)
    for folder in list(failed):
        if folder not in wanted:
            continue
        marks = (f"/{folder}/", f"/{folder}.onnx")
        for line in lines:
            if (not line.startswith("scons: ") and "error" in line.lower()
                    and any(mark in line for mark in marks)):
                failed[folder] = _tidy(line, build_dir, models_dir)
                break
    return failed


def build_models(models: Sequence[Path], build_dir: Path, jobs: int, batch_size: int,
                 log: Callable[[str], None] = print) -> dict[str, str]:
    """Build the host runner of every model into build_dir/NAME/, batch_size models per SCons
    run; return {NAME: reason} for the models whose build failed. NAME is the model's stem (the
    graph name of the case names used here)."""
    failures: dict[str, str] = {}
    build_dir.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(models), batch_size):
        batch = list(models[start:start + batch_size])
        log(f"  building {start + 1}-{start + len(batch)} of {len(models)}")
        cmd = [sys.executable, "-m", "SCons", "-Q", "-k", f"-j{jobs}", "-C", str(ROOT),
               "graphs=" + ",".join(str(p.resolve()) for p in batch), f"build_dir={build_dir.resolve()}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        folders = [p.stem for p in batch]
        reasons = failure_reasons(proc.stdout + "\n" + proc.stderr, folders, build_dir, batch[0].parent)
        if proc.returncode != 0 and not reasons:  # SCons itself failed: blame the whole batch
            last = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
            reasons = {f: f"scons exited {proc.returncode}: {last}" for f in folders}
        failures.update({f: r for f, r in reasons.items() if f in folders})
    return failures
