"""SCons tool for Tinsmith: graph YAML files become generated C++ sources, a verified header
set, a static library and a host runner.

Only SCons glue lives here; every stage of the compiler runs in `python -m codegen`.

Use it from any project (the repository's own SConstruct finds it through site_scons/):

    env = Environment(tools=["default", "tinsmith"], toolpath=["<tinsmith>/site_scons/site_tools"])
    lib = env.TinsmithModel("kws.yaml")              # [build/host/kws/libkws.a]
    app = env.Clone()
    app.Append(CPPPATH=[lib[0].dir, "$TINSMITH_INCLUDE"])   # kws.hpp / kws.h and tinsmith/buffer.hpp
    app.Program("firmware", ["main.cpp"] + lib)      # or main.c with the C API from kws.h

The library is C++ that needs nothing from the C++ runtime (no exceptions, RTTI or heap), only
the C math library: a C program links it with the C linker plus `LIBS=["m"]` (SCons links a
program whose own sources are C with $CC, not $CXX), a C++ program as it is.

Builders and methods:
  env.TinsmithSources(target, source)   graph.yaml -> NAME.hpp NAME.h NAME.cpp NAME_runner.cpp NAME.json
  env.TinsmithVerify(target, source)    NAME.json -> NAME.verified (libclang checks of the headers)
  env.TinsmithModel(graph[, build_dir]) pseudo-builder: all of the above, returns [libNAME.a]; the
                                        generated headers are in its folder, lib[0].dir
  env.TinsmithRunner(graph[, build_dir]) host runner program for the graph (links the runtime)
  env.TinsmithRuntime()                 the runtime library, libtinsmith.a

Construction variables (defaults in brackets):
  TINSMITH_ROOT          the Tinsmith checkout [the directory above site_scons/]
  TINSMITH_INCLUDE       the runtime headers code that includes NAME.hpp needs
                         [$TINSMITH_ROOT/runtime_cpp/include]
  TINSMITH_PYTHON        Python that runs the generator [the one running SCons]
  TINSMITH_BUILD_DIR     where each graph's outputs go, one folder per graph named after the
                         graph; '#' is the top of the project whose SConstruct runs [#build/host]
  TINSMITH_CXXFLAGS      flags for generated code and the runtime (they replace $CXXFLAGS;
                         $CCFLAGS, e.g. -mcpu=..., still apply)
                         [-std=c++17 -O2 -Wall -Wextra -Werror -fno-exceptions -fno-rtti]
  TINSMITHCOM / TINSMITHCOMSTR               command (and its display) that generates sources
  TINSMITHVERIFYCOM / TINSMITHVERIFYCOMSTR   command (and its display) that verifies headers

A graph file with an error still gets its targets (named after the file when its name cannot
be read), so the error is reported by the generate step as `path:line:col: error: ...` and
fails the build like any other failed command.
"""
from __future__ import annotations

import sys
from pathlib import Path

import SCons.Action
import SCons.Builder
import SCons.Scanner
import SCons.Util

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:  # the generator package, for reading graph names and dependencies
    sys.path.insert(0, str(_ROOT))

from codegen.errors import TinsmithError  # noqa: E402
from codegen.load import graph_dependencies, graph_name  # noqa: E402

GENERATED_SUFFIXES = (".hpp", ".h", ".cpp", "_runner.cpp", ".json")
_RUNTIMES: dict = {}


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
    """Generate, verify and compile one graph; returns the static library node list."""
    folder = _model_dir(env, graph, build_dir)
    name = _name_of(env, graph)
    generated = env.TinsmithSources(folder.File(name + ".hpp"), graph)
    env.Depends(generated, _generator_files())
    verified = env.TinsmithVerify(folder.File(name + ".verified"), folder.File(name + ".json"))
    env.Depends(verified, [folder.File(name + ".hpp"), folder.File(name + ".h")])
    cxx = env.Clone()
    cxx.Replace(CXXFLAGS="$TINSMITH_CXXFLAGS")
    cxx.Prepend(CPPPATH=[folder, "$TINSMITH_INCLUDE"])
    obj = cxx.StaticObject(folder.File(name + env["OBJSUFFIX"]), folder.File(name + ".cpp"))
    env.Depends(obj, verified)  # nothing compiles from headers that failed verification
    return cxx.StaticLibrary(folder.File(_library_file(env, name)), obj)


def _tinsmith_runtime(env, build_dir=None):
    """The runtime library every runner links."""
    out = env.Dir(build_dir or "$TINSMITH_BUILD_DIR").Dir("runtime")
    if out.abspath in _RUNTIMES:  # one runtime per build folder, however many graphs link it
        return _RUNTIMES[out.abspath]
    cxx = env.Clone()
    cxx.Replace(CXXFLAGS="$TINSMITH_CXXFLAGS")
    cxx.Prepend(CPPPATH=["$TINSMITH_INCLUDE"])
    sources = sorted((_ROOT / "runtime_cpp" / "src").glob("*.cpp"))
    objs = [cxx.StaticObject(out.File(src.stem + env["OBJSUFFIX"]), env.File(str(src))) for src in sources]
    _RUNTIMES[out.abspath] = cxx.StaticLibrary(out.File(_library_file(env, "tinsmith")), objs)
    return _RUNTIMES[out.abspath]


def _tinsmith_runner(env, graph, build_dir=None):
    """Host program that runs the compiled graph on raw input files (see NAME_runner.cpp)."""
    folder = _model_dir(env, graph, build_dir)
    name = _name_of(env, graph)
    library = _tinsmith_model(env, graph, build_dir)
    runtime = _tinsmith_runtime(env, build_dir)
    cxx = env.Clone()
    cxx.Replace(CXXFLAGS="$TINSMITH_CXXFLAGS")
    cxx.Prepend(CPPPATH=[folder, "$TINSMITH_INCLUDE"])
    obj = cxx.StaticObject(folder.File(name + "_runner" + env["OBJSUFFIX"]), folder.File(name + "_runner.cpp"))
    env.Depends(obj, folder.File(name + ".verified"))
    return cxx.Program(folder.File(name + "_runner"), obj + library + runtime)


def generate(env):
    """Add Tinsmith's builders, methods and construction variables to `env`."""
    env.SetDefault(
        TINSMITH_ROOT=str(_ROOT),
        TINSMITH_INCLUDE="$TINSMITH_ROOT/runtime_cpp/include",
        TINSMITH_PYTHON=sys.executable,
        TINSMITH_BUILD_DIR="#build/host",
        TINSMITH_CXXFLAGS="-std=c++17 -O2 -Wall -Wextra -Werror -fno-exceptions -fno-rtti",
        TINSMITHCOM="$TINSMITH_PYTHON -m codegen generate $SOURCE -o ${TARGET.dir}",
        TINSMITHCOMSTR="",
        TINSMITHVERIFYCOM="$TINSMITH_PYTHON -m codegen verify $SOURCE --stamp $TARGET",
        TINSMITHVERIFYCOMSTR="",
    )
    env.PrependENVPath("PYTHONPATH", env.subst("$TINSMITH_ROOT"))
    env["BUILDERS"]["TinsmithSources"] = SCons.Builder.Builder(
        action=SCons.Action.Action("$TINSMITHCOM", "$TINSMITHCOMSTR"),
        emitter=_sources_emitter,
        source_scanner=SCons.Scanner.Scanner(function=_scan_graph, skeys=[".yaml", ".yml"]),
        src_suffix=".yaml")
    env["BUILDERS"]["TinsmithVerify"] = SCons.Builder.Builder(
        action=SCons.Action.Action("$TINSMITHVERIFYCOM", "$TINSMITHVERIFYCOMSTR"),
        suffix=".verified", src_suffix=".json")
    env.AddMethod(_tinsmith_model, "TinsmithModel")
    env.AddMethod(_tinsmith_runtime, "TinsmithRuntime")
    env.AddMethod(_tinsmith_runner, "TinsmithRunner")


def exists(env):
    return env.Detect("g++") or env.Detect("c++") or env.Detect("clang++")
