"""Tinsmith as an installed package: `pip install` of a copy of the checkout into a new
virtual environment, then the `tinsmith` command and the SCons tool from folders that know
nothing of the checkout.

The new environment sees the test run's packages through a .pth file (so the test installs
only Tinsmith itself, with --no-deps, and needs the package index only for the build backend);
what the package must carry (the generator, its templates and targets, the SCons tool, the
C++ runtime) comes from the installed files alone: the copy is deleted before anything runs.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from test_e2e_scons import TINY, _tiny_expected, write_external_project

PACKAGED = ("pyproject.toml", "README.md", "codegen", "site_scons", "runtime_cpp", "docs")


def _run(cmd, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict]:
    """A virtual environment with Tinsmith pip-installed (not editable); returns its bin folder
    and an environment for subprocesses that puts it first on PATH."""
    work = tmp_path_factory.mktemp("install")
    source = work / "source"
    source.mkdir()
    for name in PACKAGED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, source / name)
    env_dir = work / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    site = Path(subprocess.run([bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "test_run_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", PIP_DISABLE_PIP_VERSION_CHECK="1")
    _run([bin_dir / "python", "-m", "pip", "install", "--quiet", "--no-deps", source], work, env)
    shutil.rmtree(source)  # from here on, only what was installed exists
    return bin_dir, env


def test_installed_command_builds_and_checks_a_graph_from_another_folder(installed, tmp_path):
    bin_dir, env = installed
    graph = tmp_path / "models" / "tiny.yaml"
    graph.parent.mkdir()
    graph.write_text(TINY.format(name="tiny"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    built = _run([bin_dir / "tinsmith", "build", graph], elsewhere, env)
    runner = elsewhere / "build" / "host-dispatch" / "tiny" / "tiny_runner"  # (the default target)
    assert f"built {runner}" in built.stdout
    assert (runner.parent / "tiny.json").is_file() and (runner.parent / "libtiny.a").is_file()
    assert (runner.parent / "tiny.html").is_file()  # the page template is packaged
    # the runtime headers the library was compiled against are the installed ones
    assert "site-packages/tinsmith/runtime_cpp/include" in built.stdout
    checked = _run([bin_dir / "tinsmith", "check", graph], elsewhere, env)
    assert checked.stdout.startswith("y: max abs diff")
    # `python -m tinsmith` is the same program
    assert _run([bin_dir / "python", "-m", "tinsmith", "ops"], elsewhere, env).stdout == \
        _run([bin_dir / "tinsmith", "ops"], elsewhere, env).stdout


def test_the_package_installs_under_its_own_name_only(installed, tmp_path):
    """One top-level module, `tinsmith` (generator, SCons tool, runtime and documents inside it):
    nothing named after the checkout's folders, such as `codegen`, lands in site-packages."""
    bin_dir, env = installed
    listing = ("import importlib.metadata as m; "
               "print(sorted({f.parts[0] for f in m.files('tinsmith') if f.parts[0] != '..' "
               "and not f.parts[0].endswith('.dist-info')}))")
    assert _run([bin_dir / "python", "-c", listing], tmp_path, env).stdout.strip() == "['tinsmith']"
    toolpath = _run([bin_dir / "python", "-c", "import tinsmith; print(tinsmith.toolpath())"], tmp_path, env)
    assert Path(toolpath.stdout.strip(), "tinsmith", "__init__.py").is_file()
    assert toolpath.stdout.strip().endswith("site-packages/tinsmith/site_tools")


def test_project_outside_the_checkout_uses_the_installed_scons_tool(installed, tmp_path):
    bin_dir, env = installed
    project = write_external_project(tmp_path / "firmware", "tinsmith.toolpath()", preamble="import tinsmith\n")
    _run([bin_dir / "python", "-m", "SCons", "-Q", "-j2"], project, env)
    want = _tiny_expected().ravel()
    for program in ("app_cpp", "app_c"):
        out = _run([project / program], project, env).stdout
        np.testing.assert_allclose(np.array([float(v) for v in out.split()]), want, rtol=1e-5, atol=1e-6,
                                   err_msg=program)
    # a second build has nothing to do
    assert subprocess.run([bin_dir / "python", "-m", "SCons", "-q"], cwd=project, env=env).returncode == 0


def test_version_and_the_documents_help_cites_are_installed(installed, tmp_path):
    bin_dir, env = installed
    version = _run([bin_dir / "tinsmith", "--version"], tmp_path, env).stdout.strip()
    assert version == "tinsmith 0.1.0"
    wide = {**env, "COLUMNS": "10000"}  # argparse wraps at hyphens otherwise
    help_text = _run([bin_dir / "tinsmith", "build", "--help"], tmp_path, wide).stdout
    cited = next(w for w in help_text.split() if w.endswith("SECURITY.md"))
    assert Path(cited).is_file() and "site-packages/tinsmith/docs" in cited, cited


@pytest.mark.skipif(not shutil.which("cmake"), reason="needs cmake")
def test_cmake_finds_the_installed_package_through_the_active_environment(installed, tmp_path):
    """find_package(Tinsmith) with nothing but the environment's bin folder on PATH (as an active
    venv has it): the example project configures, builds and runs."""
    bin_dir, env = installed
    project = tmp_path / "cmake"
    shutil.copytree(ROOT / "examples" / "cmake", project)
    _run(["cmake", "-S", ".", "-B", "build"], project, env)
    _run(["cmake", "--build", "build", "-j", "2"], project, env)
    out = _run([project / "build" / "vibration_demo"], project, env).stdout
    assert out.startswith("vibration: ")
    cache = (project / "build" / "CMakeCache.txt").read_text()
    assert f"Tinsmith_DIR:PATH={bin_dir.parent / 'share' / 'cmake' / 'Tinsmith'}" in cache


def test_installed_validate_and_arena_work_from_another_folder(installed, tmp_path):
    """The documented validate and arena commands, from a folder that knows nothing of the
    checkout (the models are copied there)."""
    bin_dir, env = installed
    model = tmp_path / "kws_dscnn_int8.tflite"
    shutil.copy(ROOT / "models" / model.name, model)
    out = _run([bin_dir / "tinsmith", "validate", model.name, "--samples", "1"], tmp_path, env).stdout
    assert "against the TFLite Micro interpreter on 1 seeded random input" in out
    assert "agrees with the TFLite Micro interpreter within the tolerance" in out
    for name in ("kws_dscnn.yaml", "kws_dscnn.npz", "ad_autoencoder.yaml", "ad_autoencoder.npz"):
        shutil.copy(ROOT / "graphs" / name, tmp_path / name)
    (tmp_path / "pair.yaml").write_text("arena: pair\ngraphs: [kws_dscnn.yaml, ad_autoencoder.yaml]\n")
    line = _run([bin_dir / "tinsmith", "arena", "pair.yaml", "-o", "out", "--target", "cortex-m4"], tmp_path,
                env).stdout
    assert line.startswith("pair [cortex-m4]: arena 33,120 B shared by kws_dscnn 33,120 B")
