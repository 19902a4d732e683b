"""SCons tool for Tinsmith: graph files become generated C++ sources, verified headers, a static
library for the chosen target, a JSON report of RAM, flash and stack, and a program that
runs the model (a host runner, or test firmware for a bare-metal target).

Only SCons glue lives here; every stage of the compiler runs in `python -m tinsmith`.

Use it from any project after installing Tinsmith (docs/INTEGRATION.md, "Installing"; the repository's own SConstruct finds it
through site_scons/; a checkout also works as `toolpath=["<tinsmith>/site_scons/site_tools"]`):

    import tinsmith
    env = Environment(tools=["default", "tinsmith"], toolpath=[tinsmith.toolpath()])
    env["TINSMITH_TARGET"] = "cortex-m4"              # or "host-dispatch" (default), or your-board.yaml
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
  env.TinsmithReport(target, sources)   NAME.plan.json + the target's object -> NAME.json and
                                        NAME.html (the same report as a page to look at)
  env.TinsmithModel(graph[, build_dir]) pseudo-builder: all of the above for $TINSMITH_TARGET,
                                        and NAME.summary, the summary line; returns [libNAME.a];
                                        headers and report are in lib[0].dir
  env.TinsmithArena(name, graphs[, build_dir])  models that never run at the same time share
                                        one workspace: ARENA.h (C and C++: the buffer, and
                                        how to pass it to each model's call) and
                                        ARENA.arena.json (the saving); returns [ARENA.h].
                                        `graphs` may hold arena files; with one arena file
                                        alone, env.TinsmithArena("arena.yaml") takes its name
  env.TinsmithRunner(graph[, build_dir]) host runner program for the graph (links the runtime)
  env.TinsmithFirmware(graph[, build_dir]) test firmware (ELF) for a bare-metal target
  env.TinsmithRuntime()                 the host runtime library, libtinsmith.a
  env.TinsmithToolchain()               a clone of env set up for $TINSMITH_TARGET's compilers and flags
  env.TinsmithMemoryScript(path)        linker script with the target board's memory map
  env.TinsmithTargetInfo()              the Target (codegen/targets) that $TINSMITH_TARGET names

Construction variables (defaults in brackets):
  TINSMITH_TARGET        a built-in target (host-dispatch, host, cortex-m4, cortex-m7, ...) or the
                         path of a target YAML file (see codegen/targets/) [host-dispatch]
  TINSMITH_INCLUDE       the runtime headers code that includes NAME.hpp needs
                         [runtime_cpp/include of the checkout, or of the installed package]
  TINSMITH_PYTHON        Python that runs the generator [the one running SCons]
  TINSMITH_GENERATOR     the command that runs the generator [$TINSMITH_PYTHON -m tinsmith]
  TINSMITH_BUILD_DIR     where each graph's outputs go, one folder per graph named after the
                         graph; '#' is the top of the project whose SConstruct runs
                         [#build/$TINSMITH_TARGET]
  TINSMITH_OPTIMIZE      optimisation flag replacing the target's default (e.g. -O2) [target's]
  TINSMITH_EXTRA_CCFLAGS flags added to the target's for generated code [-Werror]
  TINSMITH_CONSTANTS_IN_RAM  true: constants are copied to RAM at startup instead of read
                         from flash (faster where flash has wait states; costs RAM) [False]
  TINSMITH_THREADS       threads call() may run on, a host target's worker pool: the model gets
                         set_threads() and NAME_set_threads(), and uses this many until told
                         fewer [the target's `threads`: 1, the linear executor]
  TINSMITH_LIMITS        NAME=N,... : limits on what a model file may ask for (tensor sizes,
                         windows, nodes, YAML aliases; see docs/SECURITY.md) [defaults]
  TINSMITH_PLACEMENT     where constants, workspace and stack go on a bare-metal target, over
                         the target YAML's `placement`: KIND=REGION[:SECTION],... with KIND
                         constants, workspace or stack and REGION one of the board's memory
                         regions, e.g. "constants=ext_flash:.ext_weights,stack=dtcm". Constants
                         are declared in SECTION in NAME.cpp (where TINSMITH_PLACE_SECTIONS is
                         defined, as the target's compile does), the test firmware's workspace
                         too, and its memory script puts each section in its region [none]
  TINSMITH_RAM_BUDGET, TINSMITH_FLASH_BUDGET
                         bytes; a model that needs more fails the build, naming the largest
                         consumers [none]
  TINSMITHCOM / TINSMITHCOMSTR               command (and its display) that generates sources
  TINSMITHVERIFYCOM / TINSMITHVERIFYCOMSTR   step (and its display) that verifies headers [a
                         function run in the SCons process; a command string, e.g.
                         "$TINSMITH_GENERATOR verify $SOURCE --stamp $TARGET", runs it as a command]
  TINSMITHREPORTCOM / TINSMITHREPORTCOMSTR   step (and its display) that measures the report [a
                         function run in the SCons process; as a command:
                         "$TINSMITH_GENERATOR report $SOURCES -o $TARGET --html ${TARGETS[1]}
                         --target $TINSMITH_TARGET_FILE --quiet" and the budgets' options]
  TINSMITHARENACOM / TINSMITHARENACOMSTR     command (and its display) that writes an arena

How it behaves, as SCons's own builders do:
- Outputs go where TINSMITH_BUILD_DIR (or build_dir=) says, one folder per graph. Every setting
  that changes them reaches the command line of the steps it affects, so it is part of their
  build signature: changing TINSMITH_OPTIMIZE recompiles, TINSMITH_CONSTANTS_IN_RAM
  regenerates, a budget re-measures. Two environments whose settings differ (any variable
  above but TINSMITH_BUILD_DIR and the displays) never share a folder: asking for one graph's
  outputs in the same folder from both stops
  the build with an error that names the settings and both calls, as SCons stops for two
  environments with different actions for one target; give each its own TINSMITH_BUILD_DIR
  (the default, #build/$TINSMITH_TARGET, already separates targets). Environments with equal
  settings share the folder's outputs (TinsmithRunner after TinsmithModel, say).
- `scons -c` removes every file the build made: the compile's NAME.su and NAME.ci are targets
  of the compile like NAME.o, so they are also kept in, and retrieved from, a CacheDir.
- A graph in a VariantDir works with duplicate=1 (SCons copies the graph and the weight files
  it reads into the variant dir, as it does a source and its headers) and duplicate=0 (both
  are read from the source tree).
- The summary line (`mlp [host]: RAM ... | flash ... | N MACs`) is the display of a step of its
  own that reads NAME.json and writes NAME.summary; it is never cached, so the line shows
  whenever the report is new, measured or retrieved from a CacheDir, and `scons -s` hides it.
- The generator's own files (its code, templates, target files and the C++ runtime) are one
  Value node, `tinsmith generator DIGEST`, in the dependency tree: editing any of them
  regenerates, re-verifies and re-measures every graph.

A graph file with an error still gets its targets (named after the file when its name cannot
be read), so the error is reported by the generate step as `path:line:col: error: ...` and
fails the build like any other failed command.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path

import SCons.Action
import SCons.Builder
import SCons.Errors
import SCons.Scanner
import SCons.Subst
import SCons.Util

_TOOL_DIR = Path(__file__).resolve().parent
_CHECKOUT_GENERATOR = _TOOL_DIR.parents[2] / "codegen"


def _import_generator() -> bool:
    """Import the generator as the `tinsmith` package; True when it is a checkout's codegen/ folder
    that Python would not find by itself.

    SCons registers a tool loaded from a toolpath in sys.modules under its bare name, `tinsmith`,
    which is also the generator package's name: the tool gives the name back before importing
    the generator. The tool in a Tinsmith checkout drives that checkout's generator, installed
    or not (a copy of a checkout with an edited generator builds with its own edits)."""
    if sys.modules.get("tinsmith") is sys.modules.get(__name__):
        del sys.modules["tinsmith"]
    # SCons puts the toolpath first on sys.path while it loads a tool (and restores it after),
    # where `tinsmith` is this tool's folder.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _TOOL_DIR.parent]
    own = _CHECKOUT_GENERATOR
    found = importlib.util.find_spec("tinsmith")
    from_folder = (own / "__init__.py").is_file() and (
        found is None or Path(found.origin).resolve().parent != own.resolve())
    if from_folder:
        spec = importlib.util.spec_from_file_location("tinsmith", own / "__init__.py",
                                                      submodule_search_locations=[str(own)])
        package = sys.modules["tinsmith"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(package)
    import tinsmith
    for name, module in list(sys.modules.items()):  # submodules a displaced copy of the package had loaded
        parent, _, child = name.rpartition(".")
        if parent == "tinsmith" and not hasattr(tinsmith, child):
            setattr(tinsmith, child, module)
    return from_folder


_RUN_FROM_FOLDER = _import_generator()

from tinsmith.arena import arena_summary, is_arena_file, load_arena_file  # noqa: E402
from tinsmith.errors import TinsmithError  # noqa: E402
from tinsmith.paths import PACKAGE_DIR, RUNTIME_DIR, RUNTIME_INCLUDE  # noqa: E402
from tinsmith.load import graph_dependencies, graph_name  # noqa: E402
from tinsmith.targets import load_target, with_placement  # noqa: E402
from tinsmith.targets.firmware import memory_script  # noqa: E402
from tinsmith.targets.firmware_scons import configure_toolchain, firmware_program  # noqa: E402


GENERATED_SUFFIXES = (".hpp", ".h", ".cpp", "_runner.cpp", ".plan.json")
GRAPH_SUFFIXES = (".yaml", ".yml", ".onnx")
# Construction variables that change what a build folder holds. Each reaches the command
# line of the steps it affects (so it is part of their build signature); these are compared
# when a second environment asks for outputs in a folder another one already declared.
SETTINGS = ("TINSMITH_TARGET", "TINSMITH_PLACEMENT", "TINSMITH_OPTIMIZE", "TINSMITH_EXTRA_CCFLAGS",
            "TINSMITH_CONSTANTS_IN_RAM", "TINSMITH_LIMITS", "TINSMITH_THREADS",
            "TINSMITH_RAM_BUDGET", "TINSMITH_FLASH_BUDGET", "TINSMITH_INCLUDE", "TINSMITH_PYTHON",
            "TINSMITH_GENERATOR",
            "TINSMITHCOM", "TINSMITHVERIFYCOM", "TINSMITHREPORTCOM", "TINSMITHARENACOM")
# The settings the host runtime library depends on (runners of models with, say, different
# budgets share one runtime).
RUNTIME_SETTINGS = ("TINSMITH_TARGET", "TINSMITH_PLACEMENT", "TINSMITH_OPTIMIZE", "TINSMITH_EXTRA_CCFLAGS", "TINSMITH_INCLUDE")
# What the pseudo-builders declared, by (kind, folder): (settings, where declared, nodes).
_DECLARED: dict = {}
_GENERATOR_DIGEST: list = []


# Files read while the SConscripts declare the build, by what decides their meaning: each
# pseudo-builder, emitter and command asks for the target (and the graph's name) again, and
# parsing a YAML file with locations costs more than the rest of declaring a graph. An entry
# holds the (mtime, size) of the files it was read from, so an edited file is read again.
_READ: dict = {}


def _stamp(paths) -> tuple:
    stamps = []
    for path in paths:
        try:
            status = os.stat(path)
            stamps.append((str(path), status.st_mtime_ns, status.st_size))
        except OSError:
            stamps.append((str(path), None, None))
    return tuple(stamps)


def _read_once(key, read, files_of):
    """`read()`, or what it returned for `key` before while the files it read are unchanged."""
    if key in _READ:
        stamp, value = _READ[key]
        if _stamp(path for path, _, _ in stamp) == stamp:
            return value
    value = read()
    _READ[key] = (_stamp(files_of(value)), value)
    return value


def _target(env):
    """The Target that $TINSMITH_TARGET names, with $TINSMITH_PLACEMENT over its own placement."""
    name, placement = env.subst("$TINSMITH_TARGET"), env.subst("$TINSMITH_PLACEMENT")
    try:
        return _read_once(("target", name, placement, os.getcwd()),
                          lambda: with_placement(load_target(name), placement), lambda target: target.files)
    except TinsmithError as e:
        raise SCons.Errors.UserError(str(e)) from None


def _constants_section_flag(env) -> str:
    """The generator's option for the target's constants placement (in TINSMITHCOM)."""
    placement = _target(env).board.placement if _target(env).baremetal else None
    if placement is None or placement.constants is None:
        return ""
    return f" --constants-section {placement.constants.section}"  # a checked name: nothing to quote


def _compiler(env, folder):
    """An environment that compiles generated code for the target, with the model's headers."""
    cross = configure_toolchain(env, _target(env), env.subst("$TINSMITH_OPTIMIZE") or None,
                                env.Split(env.subst("$TINSMITH_EXTRA_CCFLAGS")))
    cross.Prepend(CPPPATH=[folder, "$TINSMITH_INCLUDE"])
    return cross


def _graph_path(node) -> str:
    """The file behind a graph node. A graph in a variant dir is read where its contents are:
    in the source tree (which SCons duplicates into the variant dir with duplicate=1, and reads
    in place with duplicate=0), or the variant dir itself when the build makes the graph."""
    return node.abspath if node.is_derived() else node.srcnode().rfile().abspath


def _name_of(env, source) -> str:
    """The graph's name; for a file whose name cannot be read, its stem, so that the generate
    step runs and reports the error at its line (and other graphs still build with -k)."""
    path = _graph_path(env.File(source))

    def read():
        try:
            return graph_name(path)
        except TinsmithError:
            return Path(path).stem
    return _read_once(("graph name", path), read, lambda _: [path])


def _sources_emitter(target, source, env):
    """Declare every file the generator writes, named after the graph, in the target's folder."""
    name = _name_of(env, source[0])
    folder = target[0].dir
    return [folder.File(name + suffix) for suffix in GENERATED_SUFFIXES], source


def _report_emitter(target, source, env):
    """The report's page, NAME.html, is built beside NAME.json unless the caller names it (the
    code that draws it is part of the generator node the model's steps depend on)."""
    if len(target) == 1:
        target.append(target[0].dir.File(Path(target[0].name).stem + ".html"))
    return target, source


def _scan_graph(node, env, path):
    """Weight files a graph reads are dependencies: editing one regenerates the graph.

    A weight file beside the graph (or below, or anywhere the variant dir mirrors) is named
    relative to the graph node, as SCons's C scanner names headers: in a variant dir SCons then
    duplicates it beside the duplicated graph (duplicate=1), or reads it from the source tree
    (duplicate=0), exactly as it does the graph. Other files are named where they are."""
    graph = _graph_path(node)
    found = []
    for dep in graph_dependencies(graph):
        beside = node.dir.File(os.path.relpath(dep, os.path.dirname(graph)))
        found.append(beside if beside.srcnode().abspath == os.path.abspath(dep) else env.File(str(dep)))
    return found


def _generator_files() -> dict[str, Path]:
    """The generator's own files (code, templates, target descriptions) and the C++ runtime,
    by their names inside the package or the runtime folder."""
    files = {}
    for label, folder in (("codegen", PACKAGE_DIR), ("runtime_cpp", RUNTIME_DIR)):
        for path in folder.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files.setdefault(path.resolve(), f"{label}/{path.relative_to(folder).as_posix()}")
    return {name: path for path, name in sorted(files.items(), key=lambda item: item[1])}


def _generator(env):
    """One Value node standing for the generator's own files: its content is a digest of all
    of them, so editing any regenerates, re-verifies and re-measures every graph, while the
    dependency tree shows one node (`tinsmith generator DIGEST`) instead of each file under
    every output."""
    if not _GENERATOR_DIGEST:
        digest = hashlib.sha256()
        for name, path in _generator_files().items():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
        _GENERATOR_DIGEST.append(digest.hexdigest()[:16])
    return env.Value(f"tinsmith generator {_GENERATOR_DIGEST[0]}")


def _library_file(env, name: str) -> str:
    return env.subst("$LIBPREFIX") + name + env.subst("$LIBSUFFIX")


def _model_dir(env, graph, build_dir):
    return env.Dir(build_dir or "$TINSMITH_BUILD_DIR").Dir(_name_of(env, graph))


def _settings(env, graph=None, names=SETTINGS) -> dict[str, str]:
    """What decides the contents of a build folder: the graph and the settings `names`."""
    values = {"graph": _graph_path(env.File(graph))} if graph is not None else {}
    for name in names:
        if name == "TINSMITH_TARGET":
            target = _target(env)
            values[name] = f"{target.name} ({target.source})"
        else:  # commands as written: what they expand to is in the other settings
            values[name] = str(env.get(name, "")) if name.endswith("COM") else env.subst(f"${name}")
    return values


def _caller() -> str:
    """Where in the user's SConscripts the current pseudo-builder call is, as `file:line`."""
    for frame in reversed(traceback.extract_stack()):
        if Path(frame.filename).resolve().parent != _TOOL_DIR and "SCons" not in Path(frame.filename).parts:
            return f"{frame.filename}:{frame.lineno}"
    return "an SConscript"


def _declared(env, kind: str, folder, graph, declare, names=SETTINGS, extra=None):
    """The nodes `declare()` makes for `kind` in `folder`, declared once per folder.

    A second call for the same folder returns the first call's nodes when its environment has
    the same settings (TinsmithRunner and TinsmithFirmware ask for the model, several runners
    for the runtime); with any setting different, the two environments would build different
    files under the same names, so the build stops here with an error, as SCons stops for two
    environments with different actions for one target."""
    settings = {**_settings(env, graph, names), **(extra or {})}
    key = (kind, folder.abspath)
    if key not in _DECLARED:
        _DECLARED[key] = (settings, _caller(), declare())
        return _DECLARED[key][2]
    first, where, nodes = _DECLARED[key]
    differ = [name for name in settings if settings[name] != first.get(name)]
    if differ:
        lines = [f"  {name}: {settings[name]!r} here, {first.get(name)!r} there" for name in differ]
        raise SCons.Errors.UserError(
            f"{folder.path}: two environments build {kind} into this folder with different settings, "
            f"here ({_caller()}) and there ({where}):\n" + "\n".join(lines) +
            "\nnote: give each environment its own folder: set TINSMITH_BUILD_DIR (or pass build_dir=), "
            "e.g. env['TINSMITH_BUILD_DIR'] = '#build/$TINSMITH_TARGET-fast'")
    return nodes


def _print_summary(target, source, env):
    """Keep the summary line in NAME.summary; the line itself is this step's display."""
    Path(target[0].abspath).write_text(_summary_line(target, source, env) + "\n", encoding="utf-8")


def _summary_line(target, source, env):
    from tinsmith.measure.summary import summary  # (the measure package is for steps that run)
    try:
        return summary(json.loads(Path(source[0].abspath).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError):  # e.g. `scons -n` before the report exists
        return f"tinsmith summary {target[0]}"


_SUMMARY = SCons.Action.Action(_print_summary, strfunction=_summary_line)


# The verify and report steps run inside the SCons process by default (TINSMITHVERIFYCOM and
# TINSMITHREPORTCOM hold these functions): both are short next to starting Python and importing
# NumPy, libclang and the generator again for every graph, and they write the same bytes as
# `tinsmith verify` and `tinsmith report` (tinsmith.build_steps). A command string in either
# variable runs the step as a command instead. Generation stays a command of its own: a hostile
# model must not be able to take the SCons process down, and `-j` runs graphs' generators at once.
def _print_error(error) -> None:
    from tinsmith.load.onnx_model import located
    print(located(error) if isinstance(error, TinsmithError) else error, file=sys.stderr)


def _verify_in_process(target, source, env):
    from tinsmith.build_steps import verify_step
    from tinsmith.verify import VerifyError
    try:
        verify_step(Path(source[0].abspath), stamp=Path(target[0].abspath))
    except (VerifyError, TinsmithError) as e:
        _print_error(e)
        return 1
    return 0


def _budget(env, name: str) -> int | None:
    value = env.subst(f"${name}").strip()
    if value and not value.isdigit():
        raise SCons.Errors.UserError(f"{name}={value!r}: a budget is a number of bytes, e.g. 65536")
    return int(value) if value else None


def _target_file(env) -> str:
    """$TINSMITH_TARGET_FILE: the target file node TinsmithModel passes, or a target's name or path."""
    value = env.get("TINSMITH_TARGET_FILE")
    return value.abspath if hasattr(value, "abspath") else env.subst("$TINSMITH_TARGET_FILE")


def _report_in_process(target, source, env):
    from tinsmith.build_steps import report_step
    try:
        report_step(Path(source[0].abspath), Path(source[1].abspath), _target_file(env), Path(target[0].abspath),
                    Path(target[1].abspath) if len(target) > 1 else None,
                    Path(source[2].abspath) if len(source) > 2 else None,
                    _budget(env, "TINSMITH_RAM_BUDGET"), _budget(env, "TINSMITH_FLASH_BUDGET"))
    except TinsmithError as e:
        _print_error(e)
        return 1
    return 0


# what the steps show when their *COMSTR is empty, as the commands they stand for would
_verify_in_process.strfunction = lambda target, source, env: f"tinsmith verify {source[0]} --stamp {target[0]}"
_report_in_process.strfunction = lambda target, source, env: (
    f"tinsmith report {' '.join(str(s) for s in source)} -o {target[0]}")


def _tinsmith_model(env, graph, build_dir=None):
    """Generate, verify, compile and measure one graph for $TINSMITH_TARGET; returns
    [libNAME.a]. NAME.json, the report, is built beside it."""
    folder = _model_dir(env, graph, build_dir)
    return _declared(env, "the model", folder, graph, lambda: _declare_model(env, graph, folder))


def _declare_model(env, graph, folder):
    name = _name_of(env, graph)
    generator = _generator(env)
    target_file = env.File(str(_target(env).source))  # a node, so its path is quoted in commands
    target_files = [env.File(str(f)) for f in _target(env).files]  # and the files it is based on
    generated = env.TinsmithSources(folder.File(name + ".hpp"), graph, TINSMITH_TARGET_FILE=target_file)
    env.Depends(generated, [generator, *target_files])  # kernels follow the target's capabilities
    plan = folder.File(name + ".plan.json")
    verified = env.TinsmithVerify(folder.File(name + ".verified"), plan)
    env.Depends(verified, [folder.File(name + ".hpp"), folder.File(name + ".h"), generator])
    cross = _compiler(env, folder)
    # NAME.su (frame sizes) and NAME.ci (call graph) are written beside the object and are
    # targets of the compile like it: cleaned with it, kept in a CacheDir with it, and there
    # for the report's stack figure even when the object comes from the cache.
    obj, stack_usage, call_graph = cross.StaticObject(
        [folder.File(name + cross["OBJSUFFIX"]), folder.File(name + ".su"), folder.File(name + ".ci")],
        folder.File(name + ".cpp"), CCFLAGS=cross["CCFLAGS"] + ["-fstack-usage", "-fcallgraph-info=su"])
    env.Depends(obj, verified)  # nothing compiles from headers that failed verification
    library = cross.StaticLibrary(folder.File(_library_file(cross, name)), [obj])
    # The target as a file node: SCons quotes a node's path in a command line, so a folder
    # name holding a space or a newline stays one argument instead of starting a command.
    report = env.TinsmithReport(folder.File(name + ".json"), [plan, obj], TINSMITH_TARGET_FILE=target_file)
    env.Depends(report, [stack_usage, call_graph, *target_files, generator])
    # The summary line is printed by a step of its own that reads the report, so it shows
    # whenever the report is new, whether measured or retrieved from a CacheDir.
    line = env.Command(folder.File(name + ".summary"), report, _SUMMARY)
    env.NoCache(line)
    env.Depends(library, line)  # a model over budget fails the build
    return library


def _arena_graphs(env, sources):
    """Graph files from `sources`: graph files as they are, arena files by the graphs they list."""
    graphs = []
    for source in SCons.Util.flatten([sources]):
        node = env.File(source)
        path = _graph_path(node)
        if is_arena_file(path):
            try:
                graphs += [env.File(str(g)) for g in load_arena_file(path).graphs]
            except TinsmithError as e:
                raise SCons.Errors.UserError(str(e)) from None
        else:
            graphs.append(node)
    return graphs


def _tinsmith_arena(env, name, graphs=None, build_dir=None):
    """One shared workspace for models that never run at the same time; returns [ARENA.h].

    `env.TinsmithArena("kws_and_ad", [graph, ...])`, or `env.TinsmithArena("arena.yaml")` with
    an arena file that names the arena and lists its graphs (an arena file may also stand in
    the list). Each graph is built as by TinsmithModel (link its library, lib[0].dir is also
    where ARENA.h finds NAME.h); ARENA.arena.json, the report of the saving, is beside ARENA.h
    and its summary line shows when the arena is made."""
    if graphs is None:
        path = _graph_path(env.File(name))
        if not is_arena_file(path):
            raise SCons.Errors.UserError(f"TinsmithArena({name!r}) without graphs needs an arena file "
                                         f"(arena: NAME, graphs: [FILE, ...])")
        try:
            name = load_arena_file(path).name
        except TinsmithError as e:
            raise SCons.Errors.UserError(str(e)) from None
        graphs = [path]
    sources = _arena_graphs(env, graphs)
    folder = env.Dir(build_dir or "$TINSMITH_BUILD_DIR").Dir(name)
    listed = {"graphs": ", ".join(_graph_path(g) for g in sources)}
    return _declared(env, "the arena", folder, None, lambda: _declare_arena(env, name, sources, folder, build_dir),
                     extra=listed)


def _declare_arena(env, name, graphs, folder, build_dir):
    plans = []
    for graph in graphs:
        _tinsmith_model(env, graph, build_dir)
        model = _model_dir(env, graph, build_dir)
        plans.append(model.File(_name_of(env, graph) + ".plan.json"))
        if model.abspath == folder.abspath:
            raise SCons.Errors.UserError(f"{folder.path}: arena '{name}' and its model would share this folder; "
                                         "give the arena a name that no graph of it has")
    header, report = env.Command([folder.File(name + ".h"), folder.File(name + ".arena.json")], plans,
                                 SCons.Action.Action("$TINSMITHARENACOM", "$TINSMITHARENACOMSTR"),
                                 TINSMITH_ARENA_NAME=name)
    env.Depends([header, report], _generator(env))
    # The summary line is the display of an action run after the arena step (whose outputs
    # are small and cheap to remake, so it is never taken from a CacheDir, where it would not show).
    env.AddPostAction(header, SCons.Action.Action(lambda target, source, env: None,
                                                 strfunction=_arena_summary_line))
    env.NoCache([header, report])
    return [header]


def _arena_summary_line(target, source, env):
    try:
        report = json.loads(Path(target[1].abspath).read_text(encoding="utf-8"))
        return arena_summary(report, _target(env).name)
    except (OSError, ValueError, KeyError, IndexError):  # e.g. `scons -n`
        return f"tinsmith arena {target[0]}"


def _tinsmith_firmware(env, graph, build_dir=None):
    """Test firmware (ELF) running the graph on $TINSMITH_TARGET's board: it reads inputs and
    writes outputs through semihosting (see codegen/targets/qemu.py)."""
    if not _target(env).baremetal:
        raise SCons.Errors.UserError(f"TinsmithFirmware needs a bare-metal target, not "
                                     f"'{env.subst('$TINSMITH_TARGET')}'")
    library = _tinsmith_model(env, graph, build_dir)
    folder = _model_dir(env, graph, build_dir)
    return _declared(env, "the firmware", folder, graph, lambda: firmware_program(
        env, _target(env), folder, _name_of(env, graph), build_dir=folder.Dir("firmware"),
        optimize=env.subst("$TINSMITH_OPTIMIZE") or None,
        extra_ccflags=env.Split(env.subst("$TINSMITH_EXTRA_CCFLAGS")), model_library=library))


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
    return _declared(env, "the runtime", out, None, lambda: _declare_runtime(env, out), RUNTIME_SETTINGS)


def _declare_runtime(env, out):
    cxx = _compiler(env, out)
    sources = sorted((RUNTIME_DIR / "src").glob("*.cpp"))
    objs = [cxx.StaticObject(out.File(src.stem + cxx["OBJSUFFIX"]), env.File(str(src))) for src in sources]
    return cxx.StaticLibrary(out.File(_library_file(cxx, "tinsmith")), objs)


def _tinsmith_runner(env, graph, build_dir=None):
    """Host program that runs the compiled graph on raw input files (see NAME_runner.cpp)."""
    if _target(env).baremetal:
        raise SCons.Errors.UserError(f"TinsmithRunner builds host programs; for "
                                     f"'{env.subst('$TINSMITH_TARGET')}' use TinsmithFirmware")
    library = _tinsmith_model(env, graph, build_dir)
    runtime = _tinsmith_runtime(env, build_dir)
    folder = _model_dir(env, graph, build_dir)
    return _declared(env, "the runner", folder, graph, lambda: _declare_runner(env, graph, folder, library, runtime))


def _declare_runner(env, graph, folder, library, runtime):
    name = _name_of(env, graph)
    cxx = _compiler(env, folder)
    obj = cxx.StaticObject(folder.File(name + "_runner" + cxx["OBJSUFFIX"]), folder.File(name + "_runner.cpp"))
    env.Depends(obj, folder.File(name + ".verified"))
    return cxx.Program(folder.File(name + "_runner"), obj + library + runtime)


def generate(env):
    """Add Tinsmith's builders, methods and construction variables to `env`."""
    env.SetDefault(
        TINSMITH_TARGET="host-dispatch",
        TINSMITH_TARGET_FILE="$TINSMITH_TARGET",
        TINSMITH_INCLUDE=str(RUNTIME_INCLUDE),
        TINSMITH_PYTHON=sys.executable,
        # The command that runs the generator this tool imported: the installed package, or a
        # checkout's codegen/ folder run as a program when that checkout is not the installed one.
        TINSMITH_GENERATOR=(f"$TINSMITH_PYTHON {SCons.Subst.quote_spaces(str(PACKAGE_DIR))}" if _RUN_FROM_FOLDER
                            else "$TINSMITH_PYTHON -m tinsmith"),
        TINSMITH_BUILD_DIR="#build/$TINSMITH_TARGET",
        TINSMITH_OPTIMIZE="",
        TINSMITH_EXTRA_CCFLAGS="-Werror",
        TINSMITH_RAM_BUDGET="",
        TINSMITH_FLASH_BUDGET="",
        TINSMITH_CONSTANTS_IN_RAM=False,
        TINSMITH_LIMITS="",
        TINSMITH_THREADS="",
        TINSMITH_PLACEMENT="",
        TINSMITH_CONSTANTS_SECTION_FLAG=_constants_section_flag,
        TINSMITHCOM=("$TINSMITH_GENERATOR generate $SOURCE -o ${TARGET.dir} --target $TINSMITH_TARGET_FILE"
                     "${TINSMITH_CONSTANTS_IN_RAM and ' --constants-in-ram' or ''}"
                     "${TINSMITH_CONSTANTS_SECTION_FLAG(__env__)}"
                     "${TINSMITH_LIMITS and ' --limits ' + TINSMITH_LIMITS or ''}"
                     "${TINSMITH_THREADS and ' --threads ' + str(TINSMITH_THREADS) or ''}"),
        TINSMITHCOMSTR="",
        # steps run in the SCons process (see _verify_in_process); the docstring gives them as commands
        TINSMITHVERIFYCOM=_verify_in_process,
        TINSMITHVERIFYCOMSTR="",
        TINSMITHREPORTCOM=_report_in_process,
        TINSMITHREPORTCOMSTR="",
        TINSMITHARENACOM=("$TINSMITH_GENERATOR arena $SOURCES -o ${TARGET.dir} --name $TINSMITH_ARENA_NAME "
                          "--target $TINSMITH_TARGET_FILE --quiet"),
        TINSMITHARENACOMSTR="",
    )
    env["BUILDERS"]["TinsmithSources"] = SCons.Builder.Builder(
        action=SCons.Action.Action("$TINSMITHCOM", "$TINSMITHCOMSTR"),
        emitter=_sources_emitter,
        source_scanner=SCons.Scanner.Scanner(function=_scan_graph, skeys=list(GRAPH_SUFFIXES)))
    env["BUILDERS"]["TinsmithVerify"] = SCons.Builder.Builder(
        action=SCons.Action.Action("$TINSMITHVERIFYCOM", "$TINSMITHVERIFYCOMSTR"),
        suffix=".verified", src_suffix=".plan.json")
    # (the budgets and the target are part of the step's signature as a function too: changing one re-measures)
    env["BUILDERS"]["TinsmithReport"] = SCons.Builder.Builder(
        action=SCons.Action.Action("$TINSMITHREPORTCOM", "$TINSMITHREPORTCOMSTR",
                                   varlist=["TINSMITH_RAM_BUDGET", "TINSMITH_FLASH_BUDGET", "TINSMITH_TARGET_FILE"]),
        emitter=_report_emitter)
    env.AddMethod(_tinsmith_model, "TinsmithModel")
    env.AddMethod(_tinsmith_arena, "TinsmithArena")
    env.AddMethod(_tinsmith_runtime, "TinsmithRuntime")
    env.AddMethod(_tinsmith_runner, "TinsmithRunner")
    env.AddMethod(_tinsmith_firmware, "TinsmithFirmware")
    env.AddMethod(_target, "TinsmithTargetInfo")
    env.AddMethod(_tinsmith_toolchain, "TinsmithToolchain")
    env.AddMethod(_tinsmith_memory_script, "TinsmithMemoryScript")


def exists(env):
    return env.Detect("g++") or env.Detect("c++") or env.Detect("clang++")
