"""Builds made once per test session and shared by every test (and every xdist worker) that
needs them: each graph in graphs/ built for a target by the repository's own SConstruct.

A build lives in a folder named after its key under the session's shared temporary folder (the
parent of the workers' own folders when xdist runs the suite). The first test to ask builds it
while holding a file lock; the others wait on the lock and reuse the folder. Users only read a
shared build: inputs and outputs of runs go to their own tmp_path.
"""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
GRAPHS = sorted((ROOT / "graphs").glob("*.yaml"))
_DONE = ".complete"


def shared_root(basetemp: Path) -> Path:
    """The folder every worker of this session sees: the workers' basetemp parent under
    xdist, the session's basetemp otherwise (whose parent other sessions share)."""
    return basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp


@contextmanager
def _locked(path: Path):
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def shared_build(basetemp: Path, key: str, build: Callable[[Path], None]) -> Path:
    """The folder `build(folder)` filled, made once per session for `key` by whichever test
    (of whichever worker) asked first. A failed build is not recorded: the next asker retries
    it and fails with its own message."""
    root = shared_root(basetemp) / "shared-builds"
    root.mkdir(parents=True, exist_ok=True)
    folder = root / key
    with _locked(root / f"{key}.lock"):
        if not (folder / _DONE).exists():
            folder.mkdir(exist_ok=True)
            build(folder)
            (folder / _DONE).write_text("")
    return folder


def _scons(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", "-C", str(ROOT), *args],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"scons {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"


def every_graph(basetemp: Path, target: str) -> Path:
    """Every graph in graphs/ built for `target` by the repository's SConstruct (one SCons run),
    once per session: FOLDER/NAME/ holds NAME.json and the other outputs, and the host runner
    NAME_runner, or for a bare-metal target the test firmware firmware/NAME.elf."""
    def build(folder: Path) -> None:
        if target.startswith("host"):  # a host build's default targets include the runners
            _scons(f"target={target}", f"build_dir={folder}")
        else:
            elfs = [str(folder / g.stem / "firmware" / f"{g.stem}.elf") for g in GRAPHS]
            _scons(f"target={target}", f"build_dir={folder}", *elfs)
    return shared_build(basetemp, f"graphs-{target}", build)


def these_graphs(basetemp: Path, key: str, target: str, paths: list[Path]) -> Path:
    """The graph (or model) files `paths` built for `target` by one SCons run of the repository's
    SConstruct (its -j2 and one start of SCons for all of them), once per session for `key`:
    FOLDER/NAME/ as every_graph lays it out, NAME being each graph's name."""
    from tinsmith.load import graph_name

    def build(folder: Path) -> None:
        graphs = f"graphs={','.join(str(p) for p in paths)}"
        if target.startswith("host"):
            _scons(f"target={target}", graphs, f"build_dir={folder}")
        else:
            elfs = [str(folder / graph_name(p) / "firmware" / f"{graph_name(p)}.elf") for p in paths]
            _scons(f"target={target}", graphs, f"build_dir={folder}", *elfs)
    return shared_build(basetemp, key, build)


def run_built(folder: Path, target: str, graph, inputs: dict) -> dict:
    """The outputs of `graph` (lowered) on `inputs` (name -> array) from a build above: its host
    runner, or its firmware on the target's emulator, fed and read as `tinsmith run` does."""
    import tempfile
    from tinsmith.cli import _input_bytes, _output_arrays
    from tinsmith.targets import load_target
    from tinsmith.targets.qemu import run_on_emulator
    data = _input_bytes(graph, inputs)
    if load_target(target).baremetal:
        return _output_arrays(graph, run_on_emulator(target, folder / graph.name / "firmware" / f"{graph.name}.elf",
                                                     data).output)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "in.bin").write_bytes(data)
        subprocess.run([str(folder / graph.name / f"{graph.name}_runner"), str(Path(tmp) / "in.bin"),
                        str(Path(tmp) / "out.bin")], check=True)
        return _output_arrays(graph, (Path(tmp) / "out.bin").read_bytes())


def every_plan(basetemp: Path) -> Path:
    """Every graph in graphs/ compiled in-process for the portable backend (compile_graph with
    no target), once per session: FOLDER/NAME.plan.json, the plan the report pages draw."""
    def build(folder: Path) -> None:
        from tinsmith.pipeline import compile_graph
        for graph in GRAPHS:
            name = f"{graph.stem}.plan.json"
            (folder / name).write_text(compile_graph(graph).files[name], encoding="utf-8")
    return shared_build(basetemp, "plans-portable", build)
