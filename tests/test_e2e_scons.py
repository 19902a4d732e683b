"""The real SCons build, end to end, in copies of the project under tmp_path.

A project copy holds a snapshot of this checkout (SConstruct, site_scons/, codegen/,
runtime_cpp/, and of graphs/ the small example graphs, EXAMPLES, with their weights), so `scons`
there behaves as it does here, the repository stays untouched, and edits made to the checkout
while the tests run do not leak into them. (Every graph of graphs/ is built by the same
SConstruct in tests/test_targets.py and tests/test_new_cores.py.)
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import oracle
from conftest import EXAMPLES, ROOT, scons

GENERATED = (".hpp", ".h", ".cpp", "_runner.cpp", ".plan.json", ".json")


def _other_graphs(folder: str, names: list[str]) -> list[str]:
    """What a copy leaves out: in graphs/, the graphs (and their weights) not in EXAMPLES. The
    bytecode in __pycache__ stays (the generator's digest leaves it out; Python and Jinja2 check it
    against the sources, so an edited copy compiles again): without it, every Python process a
    copy's build starts compiles the generator from source (PYTHONDONTWRITEBYTECODE, see
    conftest.py), which more than doubles the start-up of its generate step."""
    skip = set()
    if Path(folder).name == "graphs":
        skip |= {n for n in names if n.endswith((".yaml", ".npz")) and n.rsplit(".", 1)[0] not in EXAMPLES}
    return sorted(skip)


def make_project(dest: Path, source: Path = ROOT) -> Path:
    """Copy the project's sources (from the checkout, or from another copy) to dest."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(source / "SConstruct", dest / "SConstruct")
    for folder in ("site_scons", "codegen", "runtime_cpp", "graphs"):
        shutil.copytree(source / folder, dest / folder, ignore=_other_graphs)
    return dest


def mtimes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in sorted(folder.rglob("*")) if p.is_file()}


def commands(proc) -> list[str]:
    """The commands a `scons -Q` run executed (what it printed, minus up-to-date notes)."""
    return [line for line in proc.stdout.splitlines() if line and not line.startswith("scons: ")]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """The snapshot every test of this module builds from (never built itself)."""
    return make_project(tmp_path_factory.mktemp("checkout"))


@pytest.fixture(scope="module")
def built_project(checkout, tmp_path_factory) -> Path:
    project = make_project(tmp_path_factory.mktemp("project"), checkout)
    scons("-Q", "-j2", cwd=project)
    return project


@pytest.fixture
def fresh_project(checkout, tmp_path) -> Path:
    """An unbuilt copy of the same sources as built_project."""
    return make_project(tmp_path / "project", checkout)


def test_build_creates_every_output(built_project):
    for name in EXAMPLES:
        folder = built_project / "build" / "host-dispatch" / name
        for suffix in (*GENERATED, ".verified", ".o", "_runner"):
            assert (folder / f"{name}{suffix}").is_file(), f"{name}{suffix}"
        assert (folder / f"lib{name}.a").is_file()
    leftovers = [p for p in (built_project / "build").rglob(".*")]  # the generator's temp files
    assert leftovers == []


def test_nothing_changed_means_nothing_rebuilt(built_project):
    before = mtimes(built_project / "build")
    assert scons("-q", cwd=built_project, check=False).returncode == 0
    proc = scons("-Q", cwd=built_project)
    assert commands(proc) == []
    assert mtimes(built_project / "build") == before


def test_scons_run_runs_every_runner(built_project):
    proc = scons("-Q", "run", cwd=built_project)
    for name in EXAMPLES:
        assert re.search(rf"^{name}: \w+\[[\dx]+\] sum=\S+ first=\S+$", proc.stdout, re.M), proc.stdout


def test_weight_change_rebuilds_only_that_graph(fresh_project, runner_io, tmp_path):
    scons("-Q", "-j2", cwd=fresh_project)
    build = fresh_project / "build" / "host-dispatch"
    others = {name: mtimes(build / name) for name in ("encoder", "branches", "runtime")}
    old_cpp = (build / "mlp" / "mlp.cpp").read_bytes()

    npz = fresh_project / "graphs" / "weights" / "mlp.npz"
    weights = {k: (v * 1.5 + 0.01).astype(np.float32) for k, v in oracle.mlp_weights(npz).items()}
    np.savez(npz, **weights)

    assert scons("-q", cwd=fresh_project, check=False).returncode == 1
    done = commands(scons("-Q", cwd=fresh_project))
    assert "tinsmith generate graphs/mlp.yaml" in done
    for line in done:
        assert "mlp" in line and not re.search(r"encoder|branches|host_io", line), line
    assert {name: mtimes(build / name) for name in others} == others
    assert (build / "mlp" / "mlp.cpp").read_bytes() != old_cpp
    assert scons("-q", cwd=fresh_project, check=False).returncode == 0

    x = oracle.seeded_inputs("mlp", seed=3)["x"]
    (got,) = runner_io(build / "mlp" / "mlp_runner", [x], [((1, 10), np.float32)], tmp_path)
    np.testing.assert_allclose(got, oracle.mlp(x, weights)["probs"], rtol=1e-5, atol=1e-6)


def test_clean_builds_are_byte_identical(built_project, fresh_project):
    # a different hash seed shakes out any dependence on set or dict order of str keys
    scons("-Q", "-j2", cwd=fresh_project, env={"PYTHONHASHSEED": "12345"})
    compared = 0
    for name in EXAMPLES:
        for suffix in GENERATED:
            first = built_project / "build" / "host-dispatch" / name / f"{name}{suffix}"
            second = fresh_project / "build" / "host-dispatch" / name / f"{name}{suffix}"
            assert first.read_bytes() == second.read_bytes(), f"{name}{suffix} differs"
            compared += 1
    assert compared == len(EXAMPLES) * len(GENERATED)


@pytest.mark.parametrize("text, where, message", [
    ("graph: broken\ninputs:\n  x: {dtype: float32, shape: [2, 3]}\noutputs: [y]\nnodes:\n"
     "  - {op: Relu, inputs: [x], outputs: [h]}\n  - {op: Frobnicate, inputs: [h], outputs: [y]}\n",
     "graphs/broken.yaml:7:10", "unknown op 'Frobnicate'"),
    # a file whose graph name cannot even be read is reported the same way
    ("graph: broken\ninputs:\n  x: {dtype: float32, shape: [2, 3]\noutputs: [y]\n",
     "graphs/broken.yaml:4:1", "invalid YAML"),
], ids=["unknown-op", "yaml-syntax"])
def test_graph_error_fails_the_build_at_its_line(fresh_project, text, where, message):
    (fresh_project / "graphs" / "broken.yaml").write_text(text)
    # (the host's one level: the error is the generate step's, which every target runs alike)
    proc = scons("-Q", "-k", "-j2", "target=host", cwd=fresh_project, check=False)
    assert proc.returncode == 2
    assert re.search(rf"^{re.escape(where)}: error: {re.escape(message)}", proc.stderr, re.M), proc.stderr
    assert "Traceback" not in proc.stderr and 'File "' not in proc.stderr
    folder = fresh_project / "build" / "host" / "broken"
    assert not folder.exists() or list(folder.iterdir()) == [], "half-written outputs left behind"
    for name in EXAMPLES:  # -k: the other graphs still build
        assert (fresh_project / "build" / "host" / name / f"{name}_runner").is_file()


TINY = """\
graph: {name}
inputs:
  x: {{dtype: float32, shape: [2, 3]}}
outputs: [y]
constants:
  w: {{random: normal, shape: [3, 4], seed: 11, scale: 0.5}}
  b: {{value: [0.1, -0.2, 0.3, -0.4]}}
nodes:
  - {{op: MatMul, name: project, inputs: [x, w], outputs: [h]}}
  - {{op: Add, name: shift, inputs: [h, b], outputs: [hb]}}
  - {{op: Tanh, name: squash, inputs: [hb], outputs: [y]}}
"""


def _tiny_expected() -> np.ndarray:
    x = np.array([(i - 2.5) / 4 for i in range(6)], np.float32).reshape(2, 3).astype(np.float64)
    w = oracle.random_constant("normal", [3, 4], 11, 0.5).astype(np.float64)
    b = np.array([0.1, -0.2, 0.3, -0.4], np.float32).astype(np.float64)
    return np.tanh(x @ w + b)


def test_verify_failure_stops_the_build_before_compiling(checkout, tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY.format(name="tiny"))
    # the generate step is followed by a "bug" that declares the input as double
    (tmp_path / "tamper.py").write_text(
        "import sys, pathlib\n"
        "p = pathlib.Path(sys.argv[1])\n"
        "p.write_text(p.read_text().replace('Input_x = tinsmith::Buffer<float', "
        "'Input_x = tinsmith::Buffer<double'))\n")
    (tmp_path / "SConstruct").write_text(
        f"env = Environment(tools=['default', 'tinsmith'], toolpath=[{str(checkout / 'site_scons' / 'site_tools')!r}])\n"
        "env['TINSMITHCOM'] = env['TINSMITHCOM'] + ' && $TINSMITH_PYTHON tamper.py ${TARGET.dir}/tiny.hpp'\n"
        "env.TinsmithModel('tiny.yaml')\n")
    proc = scons("-Q", cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert "error: 'x' has element type 'double', the report says float32" in proc.stderr, proc.stderr
    folder = tmp_path / "build" / "host-dispatch" / "tiny"
    assert not (folder / "tiny.verified").exists()
    assert not (folder / "tiny.o").exists() and not (folder / "libtiny.a").exists()
    assert not any(" -c " in line for line in commands(proc)), proc.stdout


EXTERNAL_SCONSTRUCT = """\
{preamble}env = Environment(tools=['default', 'tinsmith'], toolpath=[{toolpath}])
lib = env.TinsmithModel('my.yaml')
app = env.Clone()
app.Append(CPPPATH=[lib[0].dir, '$TINSMITH_INCLUDE'],
           CXXFLAGS=['-std=c++17', '-Wall', '-Wextra', '-Werror'],
           CFLAGS=['-std=c11', '-Wall', '-Wextra', '-Werror', '-pedantic'])
app.Program('app_cpp', ['main.cpp'] + lib)
# C has no linker of its own for C++ objects; the library needs only the math library
app.Program('app_c', ['main_c.c'] + lib, LIBS=['m'])
"""

MAIN_CPP = """\
#include <cstdio>

#include "mymodel.hpp"

int main() {
  static mymodel::Input_x x;
  static mymodel::Output_y y;
  static mymodel::Workspace ws;
  for (int i = 0; i < 6; ++i) x.data[i] = static_cast<float>(i - 2.5) / 4;
  mymodel::init_ws(ws);
  mymodel::call(x, y, ws);
  for (float v : y.data) std::printf("%.9g\\n", static_cast<double>(v));
  return 0;
}
"""

MAIN_C = """\
#include <stdio.h>

#include "mymodel.h"

static float x[MYMODEL_SIZE_x];
static float y[MYMODEL_SIZE_y];
static _Alignas(16) unsigned char ws[MYMODEL_WORKSPACE_BYTES > 0 ? MYMODEL_WORKSPACE_BYTES : 1];

int main(void) {
  for (int i = 0; i < 6; ++i) x[i] = (float)(i - 2.5) / 4;
  mymodel_init_ws(ws);
  mymodel_call(x, y, ws);
  for (unsigned i = 0; i < MYMODEL_SIZE_y; ++i) printf("%.9g\\n", (double)y[i]);
  return 0;
}
"""


def write_external_project(project: Path, toolpath: str, preamble: str = "") -> Path:
    """A user's project outside Tinsmith: the tiny model, a C++ and a C program using it, and an
    SConstruct loading the tool from `toolpath` (a Python expression, after `preamble`)."""
    project.mkdir()
    (project / "my.yaml").write_text(TINY.format(name="mymodel"))
    (project / "main.cpp").write_text(MAIN_CPP)
    (project / "main_c.c").write_text(MAIN_C)
    (project / "SConstruct").write_text(EXTERNAL_SCONSTRUCT.format(preamble=preamble, toolpath=toolpath))
    return project


def test_external_project_uses_the_tool(checkout, tmp_path):
    project = write_external_project(tmp_path / "firmware", repr(str(checkout / "site_scons" / "site_tools")))
    scons("-Q", "-j2", cwd=project)
    # outputs go to the user's project, not to the Tinsmith checkout
    assert (project / "build" / "host-dispatch" / "mymodel" / "libmymodel.a").is_file()
    assert (project / "build" / "host-dispatch" / "mymodel" / "mymodel.hpp").read_text().startswith(
        "// Generated by Tinsmith from my.yaml.")
    want = _tiny_expected().ravel()
    for program in ("app_cpp", "app_c"):
        out = subprocess.run([str(project / program)], capture_output=True, text=True, check=True).stdout
        got = np.array([float(v) for v in out.split()])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=program)
    assert scons("-q", cwd=project, check=False).returncode == 0
