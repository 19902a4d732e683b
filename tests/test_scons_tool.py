"""The tinsmith SCons tool follows SCons's own conventions, each checked with real `scons`:
`scons -c` removes every file a build made; VariantDir works with duplicate=0 and 1; every
setting that changes the outputs is in the build signature, and two environments never share a
build folder with different settings; the repository's SConstruct documents its settings in
`scons --help` and rejects unknown ones; the summary line shows on CacheDir hits too; the
generator's own files are one node of the dependency tree; declaring a build imports neither
NumPy nor the IR.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import oracle
from conftest import scons
from test_e2e_scons import TINY, commands, make_project

SUMMARY = re.compile(r"^mlp \[host-dispatch\]: RAM [\d.]+ \w?i?B .*\| flash .* MACs$", re.M)  # (the default target)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A snapshot of the project; never built itself."""
    return make_project(tmp_path_factory.mktemp("checkout"))


@pytest.fixture
def project(checkout, tmp_path) -> Path:
    return make_project(tmp_path / "project", checkout)


def tool_project(folder: Path, checkout: Path, sconstruct: str) -> Path:
    """A project of the user's own: mlp.yaml and its weights under src/models, and an SConstruct
    that loads the tool from the snapshot (`TOOL` is the tool's folder)."""
    models = folder / "src" / "models"
    (models / "weights").mkdir(parents=True)
    shutil.copy(checkout / "graphs" / "mlp.yaml", models / "mlp.yaml")
    shutil.copy(checkout / "graphs" / "weights" / "mlp.npz", models / "weights" / "mlp.npz")
    head = (f"TOOL = {str(checkout / 'site_scons' / 'site_tools')!r}\n"
            "env = Environment(tools=['default', 'tinsmith'], toolpath=[TOOL])\n")
    (folder / "SConstruct").write_text(head + sconstruct)
    return folder


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


# --- scons -c -------------------------------------------------------------------------------

@pytest.mark.parametrize("target, graphs", [("host", "graphs/mlp.yaml,graphs/branches.yaml"),
                                            ("cortex-m4", "graphs/mlp.yaml")])
def test_clean_removes_every_file_the_build_made(project, target, graphs):
    settings = [f"target={target}", f"graphs={graphs}"]
    proc = scons("-Q", "-j2", *settings, "run", cwd=project)
    assert re.search(r"^mlp( \[cortex-m4\])?: probs\[1x10\] sum=1", proc.stdout, re.M), proc.stdout
    made = files_under(project / "build")
    # the files that used to stay behind, and those of the programs `run` builds
    for name in ("mlp.su", "mlp.ci", "mlp.verified", "mlp.summary", "mlp.json", "libmlp.a"):
        assert f"{target}/mlp/{name}" in made
    if target == "cortex-m4":
        assert {"cortex-m4/mlp/firmware/mlp.map", "cortex-m4/mlp/firmware/mlp.elf"} <= set(made)
    else:
        assert {"host/mlp/mlp_runner", "host/runtime/libtinsmith.a"} <= set(made)

    scons("-Q", "-c", *settings, cwd=project)
    assert files_under(project / "build") == []
    assert [p.name for p in project.iterdir() if p.name.startswith(".sconsign")] == [".sconsign.dblite"]


# --- VariantDir ------------------------------------------------------------------------------

VARIANT_SCONSTRUCT = """\
env['TINSMITH_TARGET'] = 'host'  # (one level: where the outputs go does not depend on the target)
env['TINSMITH_BUILD_DIR'] = '.'  # beside the SConscript: in the variant dir
VariantDir('out', 'src', duplicate={duplicate})
SConscript('out/SConscript', exports='env')
"""


@pytest.mark.parametrize("duplicate", [0, 1])
def test_variant_dir(checkout, tmp_path, runner_io, duplicate):
    project = tool_project(tmp_path, checkout, VARIANT_SCONSTRUCT.format(duplicate=duplicate))
    (project / "src" / "SConscript").write_text("Import('env')\nenv.TinsmithRunner('models/mlp.yaml')\n")
    scons("-Q", cwd=project)
    runner = project / "out" / "mlp" / "mlp_runner"
    # duplicate=1 copies the graph and the weights it reads into the variant dir, as SCons
    # does for sources and the headers they include; duplicate=0 reads them where they are
    assert (project / "out" / "models" / "weights" / "mlp.npz").is_file() == bool(duplicate)
    x = oracle.seeded_inputs("mlp", seed=5)["x"]
    npz = project / "src" / "models" / "weights" / "mlp.npz"
    (got,) = runner_io(runner, [x], [((1, 10), np.float32)], tmp_path)
    np.testing.assert_allclose(got, oracle.mlp(x, oracle.mlp_weights(npz))["probs"], rtol=1e-5, atol=1e-6)
    assert scons("-q", cwd=project, check=False).returncode == 0

    # editing the weights in the source tree regenerates the graph
    weights = {k: (v * 0.5 - 0.02).astype(np.float32) for k, v in oracle.mlp_weights(npz).items()}
    np.savez(npz, **weights)
    assert scons("-q", cwd=project, check=False).returncode == 1
    assert any("codegen generate " in line for line in commands(scons("-Q", cwd=project)))
    (got,) = runner_io(runner, [x], [((1, 10), np.float32)], tmp_path)
    np.testing.assert_allclose(got, oracle.mlp(x, weights)["probs"], rtol=1e-5, atol=1e-6)
    assert scons("-q", cwd=project, check=False).returncode == 0


# --- verify and report: in the SCons process, or as commands -----------------------------------

STEPS_AS_COMMANDS = """\
env['TINSMITHVERIFYCOM'] = '$TINSMITH_GENERATOR verify $SOURCE --stamp $TARGET'
env['TINSMITHREPORTCOM'] = ('$TINSMITH_GENERATOR report $SOURCES -o $TARGET --html ${TARGETS[1]} '
                            '--target $TINSMITH_TARGET_FILE --quiet')
"""


def test_verify_and_report_in_the_scons_process_write_what_the_commands_write(checkout, tmp_path):
    """By default the verify and report steps are functions run inside SCons (no Python to start
    per graph); as command strings they run `tinsmith verify` and `tinsmith report`. Both builds
    hold the same files, byte for byte, and only the command build runs the commands."""
    built = {}
    for how, extra in (("in-process", ""), ("commands", STEPS_AS_COMMANDS)):
        project = tool_project(tmp_path / how, checkout, extra + "env['TINSMITH_TARGET'] = 'host'\n"
                               "env['TINSMITH_BUILD_DIR'] = '#build'\n"
                               "env.TinsmithModel('src/models/mlp.yaml')\n")
        ran = commands(scons("-Q", cwd=project))
        assert any(" verify " in line and "--stamp" in line for line in ran), ran
        assert any(line.startswith("tinsmith report") for line in ran) == (how == "in-process"), ran
        built[how] = {name: (project / "build" / name).read_bytes() for name in files_under(project / "build")
                      if not name.startswith(".sconsign")}
        assert scons("-q", cwd=project, check=False).returncode == 0  # up to date
    assert built["in-process"].keys() == built["commands"].keys()
    assert {"mlp/mlp.verified", "mlp/mlp.json", "mlp/mlp.html"} <= built["in-process"].keys()
    differ = [name for name in built["in-process"] if built["in-process"][name].replace(b"in-process", b"commands")
              != built["commands"][name]]
    assert not differ, differ


# --- settings: in the build signature, never two settings in one folder ----------------------

SETTINGS_SCONSTRUCT = """\
for name in ('TINSMITH_OPTIMIZE', 'TINSMITH_EXTRA_CCFLAGS', 'TINSMITH_RAM_BUDGET', 'TINSMITH_FLASH_BUDGET'):
    env[name] = ARGUMENTS.get(name, env[name])
env['TINSMITH_CONSTANTS_IN_RAM'] = ARGUMENTS.get('TINSMITH_CONSTANTS_IN_RAM') == '1'
env['TINSMITH_BUILD_DIR'] = '#build'
env.TinsmithModel('src/models/mlp.yaml')
"""


@pytest.mark.parametrize("setting, step", [
    ("TINSMITH_OPTIMIZE=-O1", "g++ -o build/mlp/mlp.o"),
    ("TINSMITH_EXTRA_CCFLAGS=-Werror -DSIGNATURE_TEST", "g++ -o build/mlp/mlp.o"),
    ("TINSMITH_CONSTANTS_IN_RAM=1", "codegen generate"),
    # (the report step runs in the SCons process, shown as the command it stands for)
    ("TINSMITH_RAM_BUDGET=100000", "tinsmith report build/mlp/mlp.plan.json build/mlp/mlp.o -o build/mlp/mlp.json"),
    ("TINSMITH_FLASH_BUDGET=100000", "tinsmith report build/mlp/mlp.plan.json build/mlp/mlp.o -o build/mlp/mlp.json"),
])
def test_each_setting_is_in_the_build_signature(checkout, tmp_path_factory, setting, step):
    project = tmp_path_factory.getbasetemp() / "signature"
    if not project.exists():  # one build, shared by the cases: each only asks what would run
        tool_project(project, checkout, SETTINGS_SCONSTRUCT)
        scons("-Q", cwd=project)
    assert scons("-q", setting, cwd=project, check=False).returncode == 1
    would_run = commands(scons("-Q", "-n", setting, cwd=project))
    assert any(step in line for line in would_run), would_run
    assert scons("-q", cwd=project, check=False).returncode == 0  # the build itself is untouched


TWO_ENVIRONMENTS = """\
other = env.Clone({setting})
env.TinsmithRunner('src/models/mlp.yaml')
other.TinsmithModel('src/models/mlp.yaml')
"""


@pytest.mark.parametrize("setting, name", [
    ("TINSMITH_OPTIMIZE='-O3'", "TINSMITH_OPTIMIZE"),
    ("TINSMITH_EXTRA_CCFLAGS='-Werror -ffast-math'", "TINSMITH_EXTRA_CCFLAGS"),
    ("TINSMITH_CONSTANTS_IN_RAM=True", "TINSMITH_CONSTANTS_IN_RAM"),
    ("TINSMITH_RAM_BUDGET='65536'", "TINSMITH_RAM_BUDGET"),
    ("TINSMITH_TARGET='cortex-m4', TINSMITH_BUILD_DIR='#build/host-dispatch'", "TINSMITH_TARGET"),
])
def test_two_environments_with_different_settings_never_share_a_folder(checkout, tmp_path, setting, name):
    project = tool_project(tmp_path, checkout, TWO_ENVIRONMENTS.format(setting=setting))
    proc = scons("-Q", cwd=project, check=False)
    assert proc.returncode == 2
    assert "build/host-dispatch/mlp: two environments build the model into this folder with different settings" \
        in proc.stderr, proc.stderr
    assert re.search(rf"^  {name}: .* here, .* there$", proc.stderr, re.M), proc.stderr
    assert "SConstruct:5" in proc.stderr and "SConstruct:4" in proc.stderr  # both calls, where they are
    assert "note: give each environment its own folder" in proc.stderr
    assert not (project / "build").exists()


def test_environments_with_equal_settings_share_the_folder(checkout, tmp_path):
    project = tool_project(tmp_path, checkout, TWO_ENVIRONMENTS.format(setting="") +
                           "fast = env.Clone(TINSMITH_OPTIMIZE='-O3', TINSMITH_BUILD_DIR='#build/fast')\n"
                           "fast.TinsmithModel('src/models/mlp.yaml')\n")
    proc = scons("-Q", "-j2", cwd=project)
    assert "warning" not in proc.stderr.lower(), proc.stderr
    assert (project / "build" / "host-dispatch" / "mlp" / "mlp_runner").is_file()
    assert (project / "build" / "fast" / "mlp" / "libmlp.a").is_file()
    # the two environments with equal settings declare the host folder's steps once
    compiles = [line for line in commands(proc) if line.startswith("g++ ") and "/mlp/mlp.o -c " in line]
    assert {line.split(" -o ")[1].split()[0]: "-O3" in line for line in compiles} == {
        "build/host-dispatch/mlp/mlp.o": False, "build/fast/mlp/mlp.o": True}
    assert len(compiles) == 2
    assert len([line for line in commands(proc) if "codegen generate " in line]) == 2


def test_models_with_different_budgets_share_the_runtime(checkout, tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY.format(name="tiny"))
    project = tool_project(tmp_path, checkout,
                           "env['TINSMITH_RAM_BUDGET'] = '1000000'\n"
                           "env.TinsmithRunner('src/models/mlp.yaml')\n"
                           "env.Clone(TINSMITH_RAM_BUDGET='2000000').TinsmithRunner('tiny.yaml')\n")
    proc = scons("-Q", "-j2", cwd=project)
    assert "warning" not in proc.stderr.lower(), proc.stderr
    assert len([line for line in commands(proc) if line.startswith("ar ") and "libtinsmith.a" in line]) == 1
    for name in ("mlp", "tiny"):
        assert (project / "build" / "host-dispatch" / name / f"{name}_runner").is_file()


# --- the repository's SConstruct: Variables and Help -----------------------------------------

def test_help_lists_every_setting(project):
    proc = scons("-Q", "--help", cwd=project)
    for name in ("target", "graphs", "build_dir", "optimize", "ram_budget", "flash_budget",
                 "constants_in_ram", "threads", "verbose"):
        assert re.search(rf"^  {name} +\S", proc.stdout, re.M), f"{name}:\n{proc.stdout}"
    assert "[host-dispatch]" in proc.stdout  # defaults are shown
    assert not (project / "build").exists()


@pytest.mark.parametrize("argument, message, note", [
    ("taget=cortex-m4", "error: unknown setting 'taget' in 'taget=cortex-m4'",
     "note: did you mean 'target'?"),
    ("flash_budgett=100", "error: unknown setting 'flash_budgett' in 'flash_budgett=100'",
     "note: did you mean 'flash_budget'?"),
    ("colour=blue", "error: unknown setting 'colour' in 'colour=blue'", "note: the settings are target, "),
    ("ram_budget=64k", "ram_budget=64k: a budget is a number of bytes", ""),
    ("threads=two", "threads=two: a thread count is a number from 1 to 64", ""),
])
def test_unknown_or_bad_setting_is_rejected(project, argument, message, note):
    proc = scons("-Q", argument, cwd=project, check=False)
    assert proc.returncode == 2
    assert message in proc.stderr and note in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (project / "build").exists()


# --- CacheDir --------------------------------------------------------------------------------

def test_summary_line_prints_on_cache_hits(checkout, tmp_path):
    project = tool_project(tmp_path, checkout, "CacheDir('cache')\nenv.TinsmithRunner('src/models/mlp.yaml')\n")
    first = scons("-Q", cwd=project)
    assert len(SUMMARY.findall(first.stdout)) == 1, first.stdout
    scons("-Q", "-c", cwd=project)
    assert files_under(project / "build") == []

    second = scons("-Q", cwd=project)
    assert "Retrieved `build/host-dispatch/mlp/mlp.json' from cache" in second.stdout
    assert "Retrieved `build/host-dispatch/mlp/libmlp.a' from cache" in second.stdout
    assert not any("codegen " in line or "g++" in line for line in commands(second)), second.stdout
    assert SUMMARY.findall(second.stdout) == SUMMARY.findall(first.stdout)

    third = scons("-Q", cwd=project)  # up to date: nothing runs, nothing is printed
    assert commands(third) == []
    assert scons("-q", cwd=project, check=False).returncode == 0


# --- the generator in the dependency tree ----------------------------------------------------

def test_generator_files_are_one_node_of_the_tree(project):
    settings = ["target=host", "graphs=graphs/mlp.yaml,graphs/branches.yaml"]  # (host: one target file)
    scons("-Q", "-j2", *settings, cwd=project)
    tree = scons("-Q", "--tree=prune", *settings, cwd=project).stdout
    generator_files = [p for p in (project / "codegen").rglob("*") if p.suffix in (".py", ".j2")]
    assert len(generator_files) > 50
    shown = [line for line in tree.splitlines() if re.search(r"codegen/\S+\.(py|j2)$", line)]
    assert shown == [], "\n".join(shown[:10])
    values = set(re.findall(r"tinsmith generator [0-9a-f]{16}", tree))
    assert len(values) == 1, values
    assert len(tree.splitlines()) < 300

    # editing any of the generator's files regenerates every graph, re-verifies and re-measures
    template = next((project / "codegen").rglob("*.j2"))
    template.write_text(template.read_text() + "{# a comment that changes nothing generated #}\n")
    would_run = commands(scons("-Q", "-n", *settings, cwd=project))
    for name in ("mlp", "branches"):
        assert f"tinsmith generate graphs/{name}.yaml" in would_run
        assert f"tinsmith verify build/host/{name}/{name}.plan.json" in would_run


# --- what loading the tool costs ------------------------------------------------------------

# Modules that declaring a build (loading the tool, naming each graph's outputs, finding the
# weight files it reads) has no use for: SCons starts for every build, most with nothing to do.
HEAVY_MODULES = ("numpy", "ml_dtypes", "jinja2", "clang", "onnx", "tinsmith.ir")


@pytest.mark.parametrize("target, method", [("host", "TinsmithRunner"), ("cortex-m4", "TinsmithFirmware")])
def test_declaring_a_build_imports_neither_numpy_nor_the_ir(checkout, tmp_path, target, method):
    project = tool_project(tmp_path, checkout, (
        "import atexit, sys\n"
        f"env['TINSMITH_TARGET'] = {target!r}\n"
        f"env.{method}('src/models/mlp.yaml')\n"
        f"atexit.register(lambda: print('heavy:', [m for m in {HEAVY_MODULES!r} if m in sys.modules]))\n"))
    # -n: the SConstruct is read and the graph scanned for its weight files, but no step runs
    proc = scons("-Q", "-n", cwd=project)
    assert any(" generate src/models/mlp.yaml " in line for line in commands(proc)), proc.stdout  # declared
    assert re.search(r"^heavy: \[\]$", proc.stdout, re.M), proc.stdout


def test_building_a_model_runs_its_checks_in_scons_without_numpy(checkout, tmp_path):
    """The header check (libclang) and the report run inside the SCons process: they read the
    generated files and the object, never the graph, so they need neither NumPy nor the IR."""
    project = tool_project(tmp_path, checkout, (
        "import atexit, sys\n"
        "env['TINSMITH_TARGET'] = 'host'\n"
        "env.TinsmithModel('src/models/mlp.yaml')\n"
        "atexit.register(lambda: print('heavy:', [m for m in ('numpy', 'ml_dtypes', 'tinsmith.ir.graph', 'onnx')"
        " if m in sys.modules]))\n"))
    proc = scons("-Q", cwd=project)
    assert any("tinsmith verify " in line for line in commands(proc)), proc.stdout  # the checks ran here
    assert re.search(r"^heavy: \[\]$", proc.stdout, re.M), proc.stdout
