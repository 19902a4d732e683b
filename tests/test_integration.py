"""The integration examples in examples/ (Make, CMake, PlatformIO, SCons firmware), built as
their users build them: with the installed `tinsmith` command, under -j2, twice.

Each build's program runs (on the host, or on QEMU for Cortex-M) and its output is compared
with a NumPy model of the example graph written here. A second build must do nothing: no
command runs and no file in the build folder changes, also after a comment-only edit of the
graph (the generator may run then, but nothing is recompiled). docs/INTEGRATION.md quotes the
example files verbatim; a test checks that it still does.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
DOCS = ROOT / "docs" / "INTEGRATION.md"

HAVE_ARM = bool(shutil.which("arm-none-eabi-g++") and shutil.which("qemu-system-arm"))
needs_arm = pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-g++ and qemu-system-arm "
                                                    "(sh setup.sh installs them)")
QEMU = ["qemu-system-arm", "-machine", "mps2-an386", "-cpu", "cortex-m4", "-nographic", "-monitor", "none",
        "-serial", "none", "-semihosting-config", "enable=on,target=native", "-kernel"]
STATES = ("normal", "imbalance", "loose mount")
# The programs print probabilities rounded to 1e-6; float32 arithmetic adds a little more.
ATOL = 2e-6


def tool_env() -> dict[str, str]:
    """The environment of a user who activated the virtual environment Tinsmith is installed in:
    `tinsmith` and `python` on PATH, VIRTUAL_ENV set (CMake's FindPython3 looks there first).
    Without an installed `tinsmith` command, the projects' documented override runs
    `python -m tinsmith` from this checkout instead."""
    bindir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env["PATH"] = os.pathsep.join([str(bindir), env.get("PATH", "")])
    if sys.prefix != sys.base_prefix:
        env["VIRTUAL_ENV"] = sys.prefix
    if not (bindir / "tinsmith").is_file():
        env["TINSMITH"] = f"{sys.executable} -m tinsmith"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def run(cmd, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=tool_env(), capture_output=True, text=True,
                          timeout=300)
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def copy_example(name: str, tmp_path: Path) -> Path:
    project = tmp_path / name
    shutil.copytree(EXAMPLES / name, project, ignore=shutil.ignore_patterns("build", "lib", ".sconsign*"))
    return project


def snapshot(folder: Path) -> dict[str, int]:
    """Every file under `folder` with its modification time."""
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in sorted(folder.rglob("*")) if p.is_file()}


def expected_probabilities(weights: Path) -> np.ndarray:
    """The example graph (examples/make/vibration.yaml) in NumPy, on the window main.cpp builds."""
    with np.load(weights) as w:
        w1, b1, w2, b2 = (w[k].astype(np.float64) for k in ("w1", "b1", "w2", "b2"))
    samples = ((np.arange(32) * 7 % 11) - 5).astype(np.float32) / np.float32(5)
    hidden = np.maximum(samples.astype(np.float64) @ w1 + b1, 0.0)
    logits = hidden @ w2 + b2
    p = np.exp(logits - logits.max())
    return p / p.sum()


def check_output(text: str, weights: Path) -> None:
    """`text` is what the demo printed: 'vibration: P0 P1 P2 -> STATE'."""
    m = re.fullmatch(r"vibration: (\S+) (\S+) (\S+) -> (.+)", text.strip())
    assert m, f"unexpected output: {text!r}"
    got = np.array([float(g) for g in m.groups()[:3]])
    want = expected_probabilities(weights)
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
    assert m.group(4) == STATES[int(want.argmax())]


def retrain(weights: Path) -> None:
    """New weights for the classifier layer, as a retrained model would bring."""
    with np.load(weights) as w:
        arrays = {k: w[k] for k in w.files}
    arrays["w2"] = (arrays["w2"] * np.float32(-1.5)).astype(np.float32)
    np.savez(weights, **arrays)


def add_comment(graph: Path) -> None:
    graph.write_text(graph.read_text() + "# Weights retrained on the March data set.\n")


def header_workspace(header: Path) -> int:
    """NAME_WORKSPACE_BYTES as a generated C header defines it."""
    m = re.search(r"#define \w+_WORKSPACE_BYTES (\d+)u", header.read_text())
    assert m, header
    return int(m.group(1))


# --- Make ------------------------------------------------------------------------------

def make(project: Path, *args: str) -> subprocess.CompletedProcess:
    return run(["make", "-j2", *args], project)


def generator_runs(output: str) -> int:
    return len(re.findall(r" generate vibration\.yaml ", output))


def assert_make_does_nothing(project: Path, *args: str) -> None:
    """`make -q` says all is up to date, and `make` runs no command and changes no file."""
    assert run(["make", "-q", *args], project, check=False).returncode == 0
    before = snapshot(project / "build")
    again = make(project, *args)
    assert again.stdout.strip() == "make: Nothing to be done for 'all'.", again.stdout
    assert snapshot(project / "build") == before


def assert_holds_every_x86_level(compiled: Path) -> None:
    """The default host build compiled from the one vibration.cpp holds each x86-64 level's kernels
    (docs/KERNELS.md, section 10), where the compiler makes x86 code."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return
    symbols = run(["nm", "-C", compiled], compiled.parent).stdout
    for level in ("x86_64", "x86_64_v3", "x86_64_v4"):
        assert f"vibration::tinsmith_{level}::call(" in symbols, level


def test_make_host_program_builds_once_and_runs(tmp_path, built_workspace):
    project = copy_example("make", tmp_path)
    first = make(project)
    assert generator_runs(first.stdout) == 1, first.stdout
    assert "--target host-dispatch" in first.stdout  # the default: the portable multi-level library
    assert header_workspace(project / "build" / "host-dispatch" / "model" / "vibration.h") == \
        built_workspace(project / "vibration.yaml", "host-dispatch")
    assert_holds_every_x86_level(project / "build" / "host-dispatch" / "vibration.o")
    program = project / "build" / "host-dispatch" / "vibration_demo"
    check_output(run([program], project).stdout, project / "vibration.npz")

    before = snapshot(project / "build")
    assert_make_does_nothing(project)

    # A comment in the graph: the generator runs once, nothing is recompiled, and the build
    # after that does nothing at all.
    add_comment(project / "vibration.yaml")
    edited = make(project)
    assert generator_runs(edited.stdout) == 1 and "g++" not in edited.stdout, edited.stdout
    after = snapshot(project / "build")
    del after["host-dispatch/model/vibration.d"], before["host-dispatch/model/vibration.d"]  # the record that it ran
    assert after == before
    assert_make_does_nothing(project)

    # New weights (the depfile names them): regenerated, the model recompiled, main.cpp not
    # (vibration.hpp does not depend on weight values).
    retrain(project / "vibration.npz")
    rebuilt = make(project)
    assert generator_runs(rebuilt.stdout) == 1, rebuilt.stdout
    assert "vibration.cpp -o build/host-dispatch/vibration.o" in rebuilt.stdout and "main.cpp" not in rebuilt.stdout
    check_output(run([program], project).stdout, project / "vibration.npz")
    assert_make_does_nothing(project)


@needs_arm
def test_make_cortex_m4_firmware_boots_on_qemu(tmp_path, built_workspace):
    project = copy_example("make", tmp_path)
    first = make(project, "TARGET=cortex-m4")
    assert generator_runs(first.stdout) == 1, first.stdout
    # generated for the core it is compiled for (64 B of workspace; 80 B for the host)
    assert header_workspace(project / "build" / "cortex-m4" / "model" / "vibration.h") == \
        built_workspace(project / "vibration.yaml", "cortex-m4") != built_workspace(project / "vibration.yaml", "host")
    assert "-T build/cortex-m4/memory.ld" in first.stdout  # linked with the board's memory map
    elf = project / "build" / "cortex-m4" / "vibration_demo.elf"
    boot = run([*QEMU, elf], project)
    check_output(boot.stderr, project / "vibration.npz")  # QEMU prints semihosting on stderr

    assert_make_does_nothing(project, "TARGET=cortex-m4")


# --- CMake -----------------------------------------------------------------------------

GENERATORS = [pytest.param("Ninja", marks=pytest.mark.skipif(not shutil.which("ninja"), reason="needs ninja")),
              "Unix Makefiles"]


def cmake_dir() -> str:
    """-DTinsmith_DIR for this checkout: an editable install puts no TinsmithConfig.cmake in the
    environment's share/cmake (tests/test_install.py checks that a real install finds it alone)."""
    return "-DTinsmith_DIR=" + run([sys.executable, "-m", "tinsmith", "include-dir", "--cmake"], ROOT).stdout.strip()


@pytest.mark.skipif(not shutil.which("cmake"), reason="needs cmake")
@pytest.mark.parametrize("generator", GENERATORS)
def test_cmake_program_builds_once_and_runs(tmp_path, generator, built_workspace):
    project = copy_example("cmake", tmp_path)
    build = project / "build"
    run(["cmake", "-S", ".", "-B", "build", "-G", generator, cmake_dir()], project)

    def cmake_build() -> str:
        return run(["cmake", "--build", "build", "-j", "2"], project).stdout

    first = cmake_build()
    assert first.count("Generating the vibration model") == 1, first
    assert header_workspace(build / "tinsmith" / "vibration" / "vibration.h") == \
        built_workspace(project / "vibration.yaml", "host-dispatch")
    assert_holds_every_x86_level(build / "libvibration.a")
    check_output(run([build / "vibration_demo"], project).stdout, project / "vibration.npz")

    def products() -> dict[str, int]:  # not CMake's own bookkeeping, which it rewrites at will
        return {k: v for k, v in snapshot(build).items()
                if k.endswith((".o", ".a")) or k.startswith("tinsmith/") or k == "vibration_demo"}

    def does_nothing() -> None:
        before = products()
        output = cmake_build()
        assert not re.search(r"Generating|Building|Linking", output), output
        if generator == "Ninja":
            assert "no work to do" in output
            assert "no work to do" in run(["ninja", "-C", "build", "-n"], project).stdout
        assert products() == before

    does_nothing()
    add_comment(project / "vibration.yaml")
    edited = cmake_build()
    assert "Generating the vibration model" in edited and "Building" not in edited, edited
    does_nothing()

    retrain(project / "vibration.npz")
    rebuilt = cmake_build()
    assert "Generating the vibration model" in rebuilt and "vibration.cpp.o" in rebuilt, rebuilt
    assert "main.cpp.o" not in rebuilt
    check_output(run([build / "vibration_demo"], project).stdout, project / "vibration.npz")
    does_nothing()


@pytest.mark.skipif(not shutil.which("cmake") or not shutil.which("ninja"), reason="needs cmake and ninja")
def test_cmake_generates_for_tinsmith_target(tmp_path, built_workspace):
    """-DTINSMITH_TARGET=cortex-m4: the model generated for the Cortex-M4 (only the generation
    step is built here: the host compiler cannot build the Cortex-M4 kernels)."""
    project = copy_example("cmake", tmp_path)
    run(["cmake", "-S", ".", "-B", "build", "-G", "Ninja", "-DTINSMITH_TARGET=cortex-m4", cmake_dir()], project)
    out = run(["ninja", "-C", "build", "-v", "tinsmith/vibration/vibration.stamp"], project).stdout
    assert "--target cortex-m4" in out, out
    assert header_workspace(project / "build" / "tinsmith" / "vibration" / "vibration.h") == \
        built_workspace(project / "vibration.yaml", "cortex-m4")


@pytest.mark.skipif(not shutil.which("cmake"), reason="needs cmake")
def test_cmake_without_tinsmith_says_to_activate_the_environment(tmp_path):
    """A Python that lacks Tinsmith (the venv not active): a hint, not only Python's error."""
    project = copy_example("cmake", tmp_path)
    bare = shutil.which("python3", path="/usr/bin:/bin")
    if bare is None or subprocess.run([bare, "-c", "import tinsmith"], cwd=tmp_path, capture_output=True,
                                      env={"PATH": "/usr/bin:/bin"}).returncode == 0:
        pytest.skip("needs a python3 outside the environment without Tinsmith")
    env = {k: v for k, v in tool_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(["cmake", "-S", ".", "-B", "build", f"-DTINSMITH_PYTHON={bare}", cmake_dir()],
                          cwd=project, env=env, capture_output=True, text=True)
    message = " ".join(proc.stderr.split())  # CMake wraps the message
    assert proc.returncode != 0
    assert "No module named tinsmith" in message and "Activate the virtual environment" in message, message


# --- PlatformIO ------------------------------------------------------------------------

LIBRARY_FILES = {"vibration.cpp", "vibration.hpp", "vibration.h", "tinsmith/buffer.hpp", "tinsmith/math.hpp"}


def test_platformio_library_holds_only_library_sources_and_compiles(tmp_path, built_workspace):
    project = copy_example("platformio", tmp_path)
    library = project / "lib" / "vibration" / "src"
    run(["sh", "generate-model.sh"], project)
    # generated for the board's Cortex-M4
    assert header_workspace(library / "vibration.h") == built_workspace(project / "vibration.yaml", "cortex-m4")
    assert {str(p.relative_to(library)) for p in library.rglob("*") if p.is_file()} == LIBRARY_FILES
    before = snapshot(library)
    run(["sh", "generate-model.sh"], project)
    assert snapshot(library) == before  # unchanged files keep their timestamps

    # As PlatformIO builds it: every source of the library folder, with that folder on the
    # include path, and the flags of platformio.ini. Linked with src/main.cpp, run on the host.
    flags = ["-std=gnu++17", "-fno-exceptions", "-fno-rtti", "-Wall", "-Wextra", "-Werror", f"-I{library}"]
    out = tmp_path / "objects"
    out.mkdir()
    objects = []
    for source in sorted(library.rglob("*.cpp")):
        objects.append(out / (source.stem + ".o"))
        run(["g++", *flags, "-c", source, "-o", objects[-1]], project)
    run(["ar", "rcs", out / "libvibration.a", *objects], project)
    assert " main" not in run(["nm", out / "libvibration.a"], project).stdout  # no runner in the library
    run(["g++", *flags, "src/main.cpp", out / "libvibration.a", "-lm", "-o", out / "demo"], project)
    run([out / "demo"], project)
    if HAVE_ARM:  # and for the board's core
        cpu = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-Os"]
        for source in [*sorted(library.rglob("*.cpp")), project / "src" / "main.cpp"]:
            run(["arm-none-eabi-g++", *cpu, *flags, "-c", source, "-o", out / (source.stem + ".arm.o")], project)


# PlatformIO runs extra scripts as SCons SConscripts with its `env` exported; this SConstruct
# stands in for PlatformIO: a real SCons environment with the one method the script calls,
# answering from platformio.ini.
PIO_STANDIN = """\
import configparser
ini = configparser.ConfigParser()
ini.read("platformio.ini")
section = ini[ini.sections()[0]]
env = Environment(PROJECT_DIR=Dir("#").abspath)
env.AddMethod(lambda env, name, default=None: section.get(name, default), "GetProjectOption")
Export("env")
SConscript(section["extra_scripts"].split(":", 1)[1])
"""


def test_platformio_extra_script_regenerates_on_change(tmp_path, built_workspace):
    project = copy_example("platformio", tmp_path)
    assert (project / "tinsmith_model.py").read_text() == \
        (Path(run([sys.executable, "-m", "tinsmith", "include-dir", "--platformio"], ROOT).stdout.strip())
         / "tinsmith_model.py").read_text()  # the example's copy is the shipped script
    (project / "SConstruct").write_text(PIO_STANDIN)
    library = project / "lib" / "vibration" / "src"

    def build() -> None:
        run([sys.executable, "-m", "SCons", "-Q", "."], project)

    build()
    assert {str(p.relative_to(library)) for p in library.rglob("*") if p.is_file()} == LIBRARY_FILES
    assert header_workspace(library / "vibration.h") == built_workspace(project / "vibration.yaml", "cortex-m4")
    before = snapshot(library)
    build()
    assert snapshot(library) == before  # nothing changed: no file rewritten, nothing to recompile
    retrain(project / "vibration.npz")
    build()
    after = snapshot(library)
    assert after["vibration.cpp"] != before["vibration.cpp"]  # new weights: the model is regenerated
    assert after["vibration.hpp"] == before["vibration.hpp"]  # its interface is not


# --- SCons -----------------------------------------------------------------------------

@needs_arm
def test_scons_firmware_example_second_build_does_nothing(tmp_path, built_workspace):
    project = copy_example("firmware", tmp_path)
    run([sys.executable, "-m", "SCons", "-Q", "-j2"], project)
    assert "tinsmith.paths" not in (project / "SConstruct").read_text()  # only the tool's public functions
    assert header_workspace(project / "build" / "model" / "gesture" / "gesture.h") == \
        built_workspace(project / "gesture.yaml", "cortex-m4")
    boot = run([*QEMU, project / "build" / "firmware.elf"], project)
    assert boot.stderr.startswith("gesture: class ")  # tests/test_examples.py checks the values
    before = snapshot(project / "build")
    assert run([sys.executable, "-m", "SCons", "-q"], project, check=False).returncode == 0
    second = run([sys.executable, "-m", "SCons", "-Q", "-j2"], project)
    assert "is up to date" in second.stdout and "arm-none-eabi" not in second.stdout
    assert snapshot(project / "build") == before

    # After a comment in the graph the generator runs; its output is the same, so nothing
    # is compiled, and the build after that does nothing.
    add_comment(project / "gesture.yaml")
    edited = run([sys.executable, "-m", "SCons", "-Q", "-j2"], project)
    assert "tinsmith generate gesture.yaml" in edited.stdout and "arm-none-eabi" not in edited.stdout
    assert run([sys.executable, "-m", "SCons", "-q"], project, check=False).returncode == 0


# --- the command-line options the recipes use ----------------------------------------------

def tinsmith(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "tinsmith", *args], cwd, check=False)


def test_generate_depfile_names_the_weight_files_and_records_every_run(tmp_path):
    folder = tmp_path / "my models"  # a space, which the depfile escapes
    folder.mkdir()
    for name in ("vibration.yaml", "vibration.npz"):
        shutil.copy(EXAMPLES / "make" / name, folder / name)
    args = ("generate", "my models/vibration.yaml", "-o", "out", "--stamp", "out/vibration.stamp",
            "--depfile", "out/vibration.d")
    assert tinsmith(*args, cwd=tmp_path).returncode == 0
    depfile = (tmp_path / "out" / "vibration.d").read_text()
    assert depfile.startswith("out/vibration.stamp: \\\n  my\\ models/vibration.yaml \\\n"
                              "  my\\ models/vibration.npz\n")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "vibration.cpp", "vibration.d", "vibration.h", "vibration.hpp", "vibration.plan.json",
        "vibration.stamp", "vibration_runner.cpp"]

    before = snapshot(tmp_path / "out")
    os.utime(tmp_path / "out" / "vibration.stamp", ns=(1, 1))
    os.utime(tmp_path / "out" / "vibration.d", ns=(1, 1))
    assert tinsmith(*args, cwd=tmp_path).returncode == 0
    after = snapshot(tmp_path / "out")
    assert after["vibration.stamp"] > 1 and after["vibration.d"] > 1  # the run is recorded
    assert {k: after[k] for k in before if k.startswith("vibration.") and k not in
            ("vibration.stamp", "vibration.d")} == \
           {k: before[k] for k in before if k.startswith("vibration.") and k not in
            ("vibration.stamp", "vibration.d")}  # outputs with unchanged bytes are untouched


def test_generate_failure_writes_no_depfile_or_stamp(tmp_path):
    (tmp_path / "bad.yaml").write_text("graph: bad\ninputs:\n  x: {dtype: float32, shape: [1, 4]}\n"
                                       "outputs: [y]\nnodes:\n  - {op: Nope, inputs: [x], outputs: [y]}\n")
    proc = tinsmith("generate", "bad.yaml", "-o", "out", "--stamp", "out/s", "--depfile", "out/d",
                    cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.startswith("bad.yaml:6:"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_include_dir_and_memory_script(tmp_path):
    include = Path(tinsmith("include-dir", cwd=tmp_path).stdout.strip())
    assert (include / "tinsmith" / "buffer.hpp").is_file()
    baremetal = Path(tinsmith("include-dir", "--baremetal", cwd=tmp_path).stdout.strip())
    assert (baremetal / "sections.ld").is_file() and (baremetal / "startup.c").is_file()
    assert tinsmith("memory-script", "--target", "cortex-m4", "-o", "memory.ld", cwd=tmp_path).returncode == 0
    script = (tmp_path / "memory.ld").read_text()
    assert "RAM (rwx) : ORIGIN = 0x20000000, LENGTH = 0x400000" in script and "INCLUDE sections.ld" in script
    host = tinsmith("memory-script", "--target", "host", "-o", "host.ld", cwd=tmp_path)
    assert host.returncode == 1 and "error: target 'host' has no board" in host.stderr
    assert not (tmp_path / "host.ld").exists()


# --- the documentation -------------------------------------------------------------------

QUOTED = {"make/Makefile": "make", "make/main.cpp": "cpp", "cmake/CMakeLists.txt": "cmake",
          "platformio/generate-model.sh": "sh", "platformio/platformio.ini": "ini",
          "platformio/tinsmith_model.py": "python",
          "platformio/src/main.cpp": "cpp", "firmware/SConstruct": "python"}


@pytest.mark.parametrize("name", sorted(QUOTED))
def test_integration_docs_quote_the_tested_files_verbatim(name):
    text = (EXAMPLES / name).read_text()
    assert f"```{QUOTED[name]}\n{text}```\n" in DOCS.read_text(), \
        f"docs/INTEGRATION.md must quote examples/{name} exactly as it is"


def test_example_copies_are_the_same():
    """The Make, CMake and PlatformIO examples share one model and one demo program."""
    for name in ("vibration.yaml", "vibration.npz"):
        data = (EXAMPLES / "make" / name).read_bytes()
        assert (EXAMPLES / "cmake" / name).read_bytes() == data
        assert (EXAMPLES / "platformio" / name).read_bytes() == data
    assert (EXAMPLES / "cmake" / "main.cpp").read_text() == (EXAMPLES / "make" / "main.cpp").read_text()
