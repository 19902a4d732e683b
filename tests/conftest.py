"""Shared fixtures: SCons and CLI invocations, and one build of the example graphs per session.

Every build goes to a temporary folder (with its own SCons database, see SConstruct), so the
tests neither depend on nor touch the developer's build/.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
GRAPHS = ROOT / "graphs"
EXAMPLES = ("mlp", "encoder", "branches")


def _run(cmd: Sequence[str], cwd: Path, env: dict | None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(list(cmd), cwd=cwd, env=full_env, capture_output=True, text=True)


def scons(*args: str, cwd: Path = ROOT, env: dict | None = None, check: bool = True):
    """Run `python -m SCons ARGS` in cwd; with check, fail the test with SCons's output."""
    proc = _run([sys.executable, "-m", "SCons", *args], cwd, env)
    if check and proc.returncode != 0:
        pytest.fail(f"scons {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def tinsmith(*args: str, cwd: Path = ROOT, env: dict | None = None):
    """Run `python -m tinsmith ARGS` in cwd."""
    return _run([sys.executable, "-m", "tinsmith", *args], cwd, env or {})


def run_runner(runner: Path, inputs: Sequence[np.ndarray],
               outputs: Sequence[tuple[tuple[int, ...], np.dtype]], tmp: Path) -> list[np.ndarray]:
    """Run a host runner (NAME_runner IN.bin OUT.bin): inputs and outputs are raw little-endian
    data concatenated in declaration order."""
    in_file, out_file = tmp / f"{runner.name}.in", tmp / f"{runner.name}.out"
    in_file.write_bytes(b"".join(np.ascontiguousarray(a, dtype=np.dtype(a.dtype).newbyteorder("<")).tobytes()
                                 for a in inputs))
    proc = subprocess.run([str(runner), str(in_file), str(out_file)], capture_output=True, text=True)
    assert proc.returncode == 0, f"{runner} failed: {proc.stderr}"
    data, offset, result = out_file.read_bytes(), 0, []
    for shape, dtype in outputs:
        dtype = np.dtype(dtype).newbyteorder("<")
        count = int(np.prod(shape, dtype=np.int64))
        result.append(np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape))
        offset += count * dtype.itemsize
    assert offset == len(data), f"{runner} wrote {len(data)} bytes, expected {offset}"
    return result


@pytest.fixture(scope="session")
def scons_cmd():
    return scons


@pytest.fixture(scope="session")
def tinsmith_cmd():
    return tinsmith


@pytest.fixture(scope="session")
def runner_io():
    return run_runner


@pytest.fixture(scope="session")
def example_build(tmp_path_factory) -> Path:
    """The example graphs built once, by one SCons run, into a session folder; returns it.
    Holds build_dir/NAME/{NAME.hpp,.h,.cpp,.json,_runner.cpp,lib NAME.a,NAME_runner}."""
    build_dir = tmp_path_factory.mktemp("examples_build")
    graphs = ",".join(str(GRAPHS / f"{name}.yaml") for name in EXAMPLES)
    scons("-Q", "-j2", "target=host", f"graphs={graphs}", f"build_dir={build_dir}")  # (the single-level layout)
    return build_dir


@pytest.fixture(scope="session")
def graph_builds(tmp_path_factory):
    """`graph_builds(target)`: the folder holding every graph in graphs/ built for the target by
    the repository's SConstruct (tests/shared_builds.py), made once per session for all workers.
    Read it only: write a run's inputs and outputs to your own tmp_path."""
    from shared_builds import every_graph
    return lambda target: every_graph(tmp_path_factory.getbasetemp(), target)


@pytest.fixture(scope="session")
def built_workspace(tmp_path_factory, graph_builds):
    """`built_workspace(graph, target)`: the workspace bytes in the report `tinsmith build GRAPH
    --target TARGET` writes (built once per graph and target in a session): the figure every
    recipe generating for that target must reproduce. A graph of graphs/ is read from the
    session's shared build of every graph for the target (the same SCons tool writes the report)."""
    import json
    folder, seen = tmp_path_factory.mktemp("built"), {}

    def workspace(graph: Path, target: str) -> int:
        key = (str(graph), target)
        if key not in seen and Path(graph).resolve().parent == GRAPHS:
            report = graph_builds(target) / Path(graph).stem / f"{Path(graph).stem}.json"
            seen[key] = json.loads(report.read_text())["ram"]["workspace_bytes"]
        if key not in seen:
            build_dir = folder / f"{Path(graph).stem}-{target}"
            proc = tinsmith("build", str(graph), "--target", target, "--build-dir", str(build_dir))
            assert proc.returncode == 0, proc.stdout + proc.stderr
            report = build_dir / Path(graph).stem / f"{Path(graph).stem}.json"
            seen[key] = json.loads(report.read_text())["ram"]["workspace_bytes"]
        return seen[key]
    return workspace


# --- longest files first ---------------------------------------------------------------------
# xdist (--dist loadfile --no-loadscope-reorder, pytest.ini) hands out test files in collection
# order, each to the first free worker. Starting with the costliest files and ending with the
# many cheap ones lets both workers finish together (longest-processing-time-first). The CPU
# seconds per file are measured data: `python -m tests.cpu_report DIR --write-costs` rewrites
# FILE_COSTS from a run with TINSMITH_CPU_LOG=DIR. A file not listed yet (a new one) is estimated
# at the listed files' mean CPU seconds per test times its own count of tests, so that a costly
# new file does not start last, when the other worker has nothing left to run; stale figures
# cost balance, never a test.
FILE_COSTS = Path(__file__).with_name("data") / "file_cpu_seconds.json"


def file_costs(items) -> dict[str, float]:
    """CPU seconds per test file of `items`: measured (FILE_COSTS) or estimated from its count."""
    import collections
    import json
    measured = json.loads(FILE_COSTS.read_text()) if FILE_COSTS.is_file() else {}
    counts = collections.Counter(item.nodeid.split("::", 1)[0] for item in items)
    known = [name for name in counts if name in measured]
    per_test = sum(measured[n] for n in known) / max(sum(counts[n] for n in known), 1)
    return {name: measured.get(name, per_test * count) for name, count in counts.items()}


# --- bytecode, compiled once ----------------------------------------------------------------
# The suite starts Python hundreds of times (`python -m tinsmith`, each graph's generate step, SCons
# loading the tool). An environment with PYTHONDONTWRITEBYTECODE set (as CI and shared machines
# often have) makes every one of them compile the generator's ~200 modules from source again,
# which costs more than half of a small graph's generate step. Python still reads bytecode that
# exists, so the session writes it once, before the workers start (__pycache__ is ignored by git,
# by the generator's digest and by every copy of the checkout the tests make).
def pytest_sessionstart(session):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import compileall
    root = Path(__file__).resolve().parents[1]
    for folder in ("codegen", "site_scons", "tests"):
        compileall.compile_dir(root / folder, quiet=2, workers=1)
    from tinsmith.compile_templates import compile_all
    compile_all()  # the Jinja2 templates' compiled code likewise (codegen/template_cache.py)


def pytest_collection_modifyitems(session, config, items):
    costs = file_costs(items)
    items.sort(key=lambda item: -costs[item.nodeid.split("::", 1)[0]])  # stable within a file


# --- CPU time per test and per fixture -------------------------------------------------------
# With TINSMITH_CPU_LOG=DIR, every worker appends one JSON line per test phase and per fixture
# set-up to DIR/cpu-WORKER.jsonl: CPU seconds of the pytest process plus those of the processes
# it waited for (scons, g++, QEMU). CPU time, not wall time, because the figure should not
# depend on what else the machine is running; `python -m tests.cpu_report DIR` sums it up.
# Set-ups of session-scoped fixtures are not logged apart (the hook sees only those of the
# tests' folder); their cost is in the first test that needs them, like every fixture's.
_CPU_LOG = os.environ.get("TINSMITH_CPU_LOG")


def _cpu_seconds() -> tuple[float, float]:
    import resource
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def _log_cpu(record: dict) -> None:
    import json
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(Path(_CPU_LOG) / f"cpu-{worker}.jsonl", "a") as log:
        log.write(json.dumps(record) + "\n")


if _CPU_LOG:
    Path(_CPU_LOG).mkdir(parents=True, exist_ok=True)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(fixturedef, request):
        own, children = _cpu_seconds()
        yield
        own_after, children_after = _cpu_seconds()
        _log_cpu({"fixture": fixturedef.argname, "scope": fixturedef.scope,
                  "node": request.node.nodeid, "own": own_after - own,
                  "children": children_after - children})

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        import time
        own, children = _cpu_seconds()
        start = time.monotonic()
        yield
        own_after, children_after = _cpu_seconds()
        _log_cpu({"test": item.nodeid, "own": own_after - own, "children": children_after - children,
                  "wall": time.monotonic() - start})


def emulated_core(name: str):
    """The target `name` as a test parameter, skipped where its compiler or emulator is not
    installed."""
    from tinsmith.targets import load_target
    target = load_target(name)
    missing = [tool for tool in (target.toolchain.command("cxx"), target.emulator.command[0]) if not shutil.which(tool)]
    return pytest.param(name, marks=pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} "
                                                                              "(sh setup.sh installs it)"))
