"""SCons tool for Tinsmith: graph files become generated C++ sources, verified headers, a static
library for the chosen target, a JSON report of RAM, flash and stack, and a program that
runs the model (a host runner, or test firmware for a bare-metal target).

Only SCons glue lives here; every stage of the compiler runs in `python -m codegen`.

Use it from any project (the repository's own SConstruct finds it through site_scons/):

    env = Environment(tools=["default", "tinsmith"], toolpath=["<tinsmith>/site_scons/site_tools"])
    env["TINSMITH_TARGET"] = "cortex-m4"              # or "host" (default), or your-board.yaml
    lib = env.TinsmithModel("kws.yaml")              # [build/cortex-m4/kws/libkws.a]
    app = env.Clone()
    app.Append(CPPPATH=[lib[0].dir, "$TINSMITH_INCLUDE"])   # kws.hpp / kws.h and tinsmith/buffer.hpp
    app.Program("firmware", ["main.cpp"] + lib)      # or main.c with the C API from kws.h

The library is C++ that needs nothing from the C++ runtime (no exceptions, RTTI or heap), only
the C math library: a C program links it with the C linker plus `LIBS=["m"]` (SCons links a
program whose own sources are C with $CC, not $CXX), a C++ program as it is.

Builders and methods:
  env.TinsmithSources(target, source)   graph -> NAME.hpp NAME.h NAME.cpp NAME_runner.cpp NAME.plan.json
  env.TinsmithVerify(target, source)    NAME.plan.json -> NAME.verified (libclang checks of the headers)
  env.TinsmithReport(target, sources)   NAME.plan.json + the target's object -> NAME.json
  env.TinsmithModel(graph[, build_dir]) pseudo-builder: all of the above for $TINSMITH_TARGET;
                                        returns [libNAME.a]; headers and report are in lib[0].dir
  env.TinsmithRunner(graph[, build_dir]) host runner program for the graph (links the runtime)
  env.TinsmithFirmware(graph[, build_dir]) test firmware (ELF) for a bare-metal target
  env.TinsmithRuntime()                 the host runtime library, libtinsmith.a
  env.TinsmithToolchain()               a clone of env set up for $TINSMITH_TARGET's compilers and flags
  env.TinsmithMemoryScript(path)        linker script with the target board's memory map
  env.TinsmithTargetInfo()              the Target (codegen/targets) that $TINSMITH_TARGET names

Construction variables (defaults in brackets):
  TINSMITH_TARGET        a built-in target (host, cortex-m4, cortex-m7, cortex-m0plus) or the
                         path of a target YAML file (see codegen/targets/) [host]
  TINSMITH_ROOT          the Tinsmith checkout [the directory above site_scons/]
  TINSMITH_INCLUDE       the runtime headers code that includes NAME.hpp needs
                         [$TINSMITH_ROOT/runtime_cpp/include]
  TINSMITH_PYTHON        Python that runs the generator [the one running SCons]
  TINSMITH_BUILD_DIR     where each graph's outputs go, one folder per graph named after the
                         graph; '#' is the top of the project whose SConstruct runs
                         [#build/$TINSMITH_TARGET]
  TINSMITH_OPTIMIZE      optimisation flag replacing the target's default (e.g. -O2) [target's]
  TINSMITH_EXTRA_CCFLAGS flags added to the target's for generated code [-Werror]
  TINSMITH_CONSTANTS_IN_RAM  true: constants are copied to RAM at startup instead of read
                         from flash (faster where flash has wait states; costs RAM) [False]
  TINSMITH_LIMITS        NAME=N,... : limits on what a model file may ask for (tensor sizes,
                         windows, nodes, YAML aliases; see docs/SECURITY.md) [defaults]
  TINSMITH_RAM_BUDGET, TINSMITH_FLASH_BUDGET
                         bytes; a model that needs more fails the build, naming the largest
                         consumers [none]
  TINSMITHCOM / TINSMITHCOMSTR               command (and its display) that generates sources
  TINSMITHVERIFYCOM / TINSMITHVERIFYCOMSTR   command (and its display) that verifies headers
  TINSMITHREPORTCOM / TINSMITHREPORTCOMSTR   command (and its display) that measures the report

A graph file with an error still gets its targets (named after the file when its name cannot
be read), so the error is reported by the generate step as `path:line:col: error: ...` and
fails the build like any other failed command.
"""
from __future__ import annotations

import sys
from pathlib import Path

import SCons.Action
import SCons.Builder
import SCons.Errors
import SCons.Scanner
import SCons.Util

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:  # the generator package, for reading graph names and dependencies
    sys.path.insert(0, str(_ROOT))

from codegen.errors import TinsmithError  # noqa: E402
from codegen.load import graph_dependencies, graph_name  # noqa: E402
from codegen.targets import load_target  # noqa: E402
from codegen.targets.firmware import memory_script  # noqa: E402
from codegen.targets.firmware_scons import configure_toolchain, firmware_program  # noqa: E402

GENERATED_SUFFIXES = (".hpp", ".h", ".cpp", "_runner.cpp", ".plan.json")
GRAPH_SUFFIXES = (".yaml", ".yml", ".onnx")
_RUNTIMES: dict = {}
_MODELS: dict = {}


def _target(env):
    """The Target that $TINSMITH_TARGET names."""
    try:
        return load_target(env.subst("$TINSMITH_TARGET"))
    except TinsmithError as e:
        raise SCons.Errors.UserError(str(e)) from None


def _compiler(env, folder):
    """An environment that compiles generated code for the target, with the model's headers."""
    cross = configure_toolchain(env, _target(env), env.subst("$TINSMITH_OPTIMIZE") or None,
                                env.Split(env.subst("$TINSMITH_EXTRA_CCFLAGS")))
    cross.Prepend(CPPPATH=[folder, "$TINSMITH_INCLUDE"])
    return cross


def _name_of(env, source) -> str:
    """The graph's name; for a file whose name cannot be read, its stem, so that the generate
    step runs and reports the error at its line (and other graphs still build with -k)."""
    path = env.File(source).srcnode().abspath
    try:
        return graph_name(path)
    except TinsmithError:
        return Path(path).stem


def _sources_emitter(target, source, env):
    """Declare every file the generator writes, named after the graph, in the target's folder."""
    name = _name_of(env, source[0])
    folder = target[0].dir
    return [folder.File(name + suffix) for suffix in GENERATED_SUFFIXES], source


def _scan_graph(node, env, path):
    """Weight files a graph reads are dependencies: editing one regenerates the graph."""
    return [env.File(str(p)) for p in graph_dependencies(node.srcnode().abspath)]


def _generator_files() -> list[str]:
    """The generator's own code and templates: changing them regenerates every graph."""
    code = _ROOT / "codegen"
    return sorted(str(p) for p in code.rglob("*") if p.suffix in (".py", ".j2") and p.is_file())


def _library_file(env, name: str) -> str:
    return env.subst("$LIBPREFIX") + name + env.subst("$LIBSUFFIX")


def _model_dir(env, graph, build_dir):
    return env.Dir(build_dir or "$TINSMITH_BUILD_DIR").Dir(_name_of(env, graph))


def _tinsmith_model(env, graph, build_dir=None):
    """Generate, verify, compile and measure one graph for $TINSMITH_TARGET; returns
    [libNAME.a]. NAME.json, the report, is built beside it."""
    folder = _model_dir(env, graph, build_dir)
    if folder.abspath in _MODELS:  # TinsmithRunner and TinsmithFirmware ask for the model too
        return _MODELS[folder.abspath]
    name = _name_of(env, graph)
    generated = env.TinsmithSources(folder.File(name + ".hpp"), graph)
    env.Depends(generated, _generator_files())
    plan = folder.File(name + ".plan.json")
    verified = env.TinsmithVerify(folder.File(name + ".verified"), plan)
    env.Depends(verified, [folder.File(name + ".hpp"), folder.File(name + ".h")])
    cross = _compiler(env, folder)
    # NAME.su (frame sizes) and NAME.ci (call graph) beside the object: the report's stack
    # figure comes from them.
    obj = cross.StaticObject(folder.File(name + cross["OBJSUFFIX"]), folder.File(name + ".cpp"),
                             CCFLAGS=cross["CCFLAGS"] + ["-fstack-usage", "-fcallgraph-info=su"])
    env.SideEffect([folder.File(name + ".su"), folder.File(name + ".ci")], obj)
    env.Depends(obj, verified)  # nothing compiles from headers that failed verification
    library = cross.StaticLibrary(folder.File(_library_file(cross, name)), obj)
    report = env.TinsmithReport(folder.File(name + ".json"), [plan, obj[0]])
    env.Depends(report, env.File(str(_target(env).source)))
    env.Depends(library, report)  # a model over budget fails the build
    _MODELS[folder.abspath] = library
    return library


def _firmware(env, graph, build_dir, library):
    folder = _model_dir(env, graph, build_dir)
    return firmware_program(env, _target(env), folder, _name_of(env, graph), build_dir=folder.Dir("firmware"),
                            optimize=env.subst("$TINSMITH_OPTIMIZE") or None,
                            extra_ccflags=env.Split(env.subst("$TINSMITH_EXTRA_CCFLAGS")),
                            model_library=library)


def _tinsmith_firmware(env, graph, build_dir=None):
    """Test firmware (ELF) running the graph on $TINSMITH_TARGET's board: it reads inputs and
    writes outputs through semihosting (see codegen/targets/qemu.py)."""
    if not _target(env).baremetal:
        raise SCons.Errors.UserError(f"TinsmithFirmware needs a bare-metal target, not "
                                     f"'{env.subst('$TINSMITH_TARGET')}'")
    library = _tinsmith_model(env, graph, build_dir)
    return _firmware(env, graph, build_dir, library)


def _tinsmith_toolchain(env):
    """A clone of `env` that compiles and links with $TINSMITH_TARGET's toolchain and flags, for
    the firmware that links the model."""
    return configure_toolchain(env, _target(env), env.subst("$TINSMITH_OPTIMIZE") or None)


def _write_memory_script(target, source, env):
    Path(target[0].abspath).write_text(source[0].get_contents().decode(), encoding="utf-8")


def _tinsmith_memory_script(env, path):
    """Linker script with $TINSMITH_TARGET's board memory map (it INCLUDEs sections.ld from
    runtime_cpp/baremetal, so link with -L there)."""
    script = env.Value(memory_script(_target(env)))
    return env.Command(path, script, SCons.Action.Action(_write_memory_script, "tinsmith memory map $TARGET"))


def _tinsmith_runtime(env, build_dir=None):
    """The host runtime library every runner links."""
    out = env.Dir(build_dir or "$TINSMITH_BUILD_DIR").Dir("runtime")
    if out.abspath in _RUNTIMES:  # one runtime per build folder, however many graphs link it
        return _RUNTIMES[out.abspath]
    cxx = _compiler(env, out)
    sources = sorted((_ROOT / "runtime_cpp" / "src").glob("*.cpp"))
    objs = [cxx.StaticObject(out.File(src.stem + cxx["OBJSUFFIX"]), env.File(str(src))) for src in sources]
    _RUNTIMES[out.abspath] = cxx.StaticLibrary(out.File(_library_file(cxx, "tinsmith")), objs)
    return _RUNTIMES[out.abspath]


def _tinsmith_runner(env, graph, build_dir=None):
    """Host program that runs the compiled graph on raw input files (see NAME_runner.cpp)."""
    if _target(env).baremetal:
        raise SCons.Errors.UserError(f"TinsmithRunner builds host programs; for "
                                     f"'{env.subst('$TINSMITH_TARGET')}' use TinsmithFirmware")
    folder = _model_dir(env, graph, build_dir)
    name = _name_of(env, graph)
    library = _tinsmith_model(env, graph, build_dir)
    runtime = _tinsmith_runtime(env, build_dir)
    cxx = _compiler(env, folder)
    obj = cxx.StaticObject(folder.File(name + "_runner" + cxx["OBJSUFFIX"]), folder.File(name + "_runner.cpp"))
    env.Depends(obj, folder.File(name + ".verified"))
    return cxx.Program(folder.File(name + "_runner"), obj + library + runtime)


def generate(env):
    """Add Tinsmith's builders, methods and construction variables to `env`."""
    env.SetDefault(
        TINSMITH_TARGET="host",
        TINSMITH_ROOT=str(_ROOT),
        TINSMITH_INCLUDE="$TINSMITH_ROOT/runtime_cpp/include",
        TINSMITH_PYTHON=sys.executable,
        TINSMITH_BUILD_DIR="#build/$TINSMITH_TARGET",
        TINSMITH_OPTIMIZE="",
        TINSMITH_EXTRA_CCFLAGS="-Werror",
        TINSMITH_RAM_BUDGET="",
        TINSMITH_FLASH_BUDGET="",
        TINSMITH_CONSTANTS_IN_RAM=False,
        TINSMITH_LIMITS="",
        TINSMITHCOM=("$TINSMITH_PYTHON -m codegen generate $SOURCE -o ${TARGET.dir}"
                     "${TINSMITH_CONSTANTS_IN_RAM and ' --constants-in-ram' or ''}"
                     "${TINSMITH_LIMITS and ' --limits ' + TINSMITH_LIMITS or ''}"),
        TINSMITHCOMSTR="",
        TINSMITHVERIFYCOM="$TINSMITH_PYTHON -m codegen verify $SOURCE --stamp $TARGET",
        TINSMITHVERIFYCOMSTR="",
        TINSMITHREPORTCOM=("$TINSMITH_PYTHON -m codegen report $SOURCES -o $TARGET --target $TINSMITH_TARGET"
                           "${TINSMITH_RAM_BUDGET and ' --ram-budget ' + TINSMITH_RAM_BUDGET}"
                           "${TINSMITH_FLASH_BUDGET and ' --flash-budget ' + TINSMITH_FLASH_BUDGET}"),
        TINSMITHREPORTCOMSTR="",
    )
    env.PrependENVPath("PYTHONPATH", env.subst("$TINSMITH_ROOT"))
    env["BUILDERS"]["TinsmithSources"] = SCons.Builder.Builder(
        action=SCons.Action.Action("$TINSMITHCOM", "$TINSMITHCOMSTR"),
        emitter=_sources_emitter,
        source_scanner=SCons.Scanner.Scanner(function=_scan_graph, skeys=list(GRAPH_SUFFIXES)))
    env["BUILDERS"]["TinsmithVerify"] = SCons.Builder.Builder(
        action=SCons.Action.Action("$TINSMITHVERIFYCOM", "$TINSMITHVERIFYCOMSTR"),
        suffix=".verified", src_suffix=".plan.json")
    env["BUILDERS"]["TinsmithReport"] = SCons.Builder.Builder(
        action=SCons.Action.Action("$TINSMITHREPORTCOM", "$TINSMITHREPORTCOMSTR"))
    env.AddMethod(_tinsmith_model, "TinsmithModel")
    env.AddMethod(_tinsmith_runtime, "TinsmithRuntime")
    env.AddMethod(_tinsmith_runner, "TinsmithRunner")
    env.AddMethod(_tinsmith_firmware, "TinsmithFirmware")
    env.AddMethod(_target, "TinsmithTargetInfo")
    env.AddMethod(_tinsmith_toolchain, "TinsmithToolchain")
    env.AddMethod(_tinsmith_memory_script, "TinsmithMemoryScript")


def exists(env):
    return env.Detect("g++") or env.Detect("c++") or env.Detect("clang++")
