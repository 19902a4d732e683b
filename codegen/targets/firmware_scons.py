"""SCons side of targets: a cross toolchain configured from a Target, and test firmware for a
generated model (model + firmware main + startup + semihosting, linked for the board).

Import from an SConstruct (the Tinsmith root must be on sys.path):

    from tinsmith.targets.firmware_scons import firmware_program
    elf = firmware_program(env, "cortex-m4", "build/host/mlp", "mlp")

`model_dir` holds NAME.cpp, NAME.h and NAME.plan.json, as the generator writes them; if the
same build generates them (the tinsmith tool's TinsmithSources), SCons orders the steps.
"""
from __future__ import annotations

import os
from pathlib import Path

import SCons.Action
import SCons.Errors

from tinsmith.errors import TinsmithError
from tinsmith.targets import BAREMETAL_DIR, Target, load_target
from tinsmith.targets.firmware import (MAIN_TEMPLATE, RUNTIME_SOURCES, SECTIONS_SCRIPT, firmware_main_file,
                                      memory_script)

_RUNTIME_INCLUDE = BAREMETAL_DIR.parent / "include"
# Settings of the caller's environment that describe its own compiler; a cross build
# starts from none of them.
_COMPILER_VARIABLES = ("CPPPATH", "CPPDEFINES", "CCFLAGS", "CFLAGS", "CXXFLAGS", "ASFLAGS", "LINKFLAGS",
                       "LIBS", "LIBPATH")


def _target(target: Target | str | Path) -> Target:
    try:
        return load_target(target)
    except TinsmithError as e:
        raise SCons.Errors.UserError(str(e)) from None


def configure_toolchain(env, target: Target | str | Path, optimize: str | None = None,
                        extra_ccflags=()):
    """A clone of `env` that compiles, archives and links with the target's toolchain and
    flags (`optimize` replaces the target's default, e.g. "-O2"; `extra_ccflags` are added
    to C and C++ compiles, e.g. ["-Werror"]). `env` itself is left unchanged."""
    target = _target(target)
    tc = target.toolchain
    cross = env.Clone()
    for tool in ("gcc", "g++", "gnulink", "ar", "as"):  # GNU-style command lines whatever env had
        cross.Tool(tool)
    if tc.path is not None:
        cross.PrependENVPath("PATH", str(tc.path))
    for tool in ("cc", "cxx", "ar", "ranlib"):
        if not cross.WhereIs(tc.command(tool)):
            where = f" or in {tc.path}" if tc.path else ""
            raise SCons.Errors.UserError(
                f"{target.source}: error: target '{target.name}' needs '{tc.command(tool)}', which is not on "
                f"the build's PATH{where}")
    cross.Replace(**{name: [] for name in _COMPILER_VARIABLES})
    cpu = list(target.cpu_flags)
    opt = [optimize or target.optimize]
    cross.Replace(
        CC=tc.command("cc"), CXX=tc.command("cxx"), AS=tc.command("as"), LINK=tc.command("cxx"),
        AR=tc.command("ar"), RANLIB=tc.command("ranlib"), NM=tc.command("nm"),
        CCFLAGS=cpu + opt + list(target.ccflags) + list(extra_ccflags),
        CFLAGS=list(target.cflags), CXXFLAGS=list(target.cxxflags),
        ASFLAGS=cpu, LINKFLAGS=cpu + opt + list(target.linkflags),
        TINSMITH_TARGET=target.name)
    cross.SetDefault(TINSMITHFIRMWARECOMSTR="tinsmith firmware $TARGET")
    if target.baremetal:
        cross.Replace(OBJSUFFIX=".o", PROGSUFFIX=".elf", LIBPREFIX="lib", LIBSUFFIX=".a")
        if target.board.placement:
            # Generated code puts constants in the placement's section only where this is
            # defined, so a host build of the same sources is unchanged.
            cross.Append(CPPDEFINES=["TINSMITH_PLACE_SECTIONS"])
    return cross


def _dir(env, folder):
    """A Dir node; strings and paths are relative to the calling SConscript, as in SCons."""
    return env.Dir(str(folder)) if isinstance(folder, (str, os.PathLike)) else env.Dir(folder)


def _write_main(target, source, env):
    firmware_main_file(source[0].abspath, target[0].abspath, env.get("TINSMITH_WORKSPACE_SECTION") or None)


def _write_text(target, source, env):
    Path(target[0].abspath).write_text(source[0].read(), encoding="utf-8")


def firmware_program(env, target: Target | str | Path, model_dir, name: str, build_dir=None,
                     optimize: str | None = None, extra_ccflags=(), model_library=None):
    """The ELF of the test firmware for graph `name` in `model_dir` on a bare-metal target
    (a list with one node). It reads inputs and writes outputs and measurements through
    semihosting; run it with tinsmith.targets.qemu.run_on_emulator. Everything is built in
    `build_dir` [model_dir/firmware/TARGET, plus the `optimize` flag if given]. With
    `model_library` (the model already compiled for the target, as the tinsmith tool builds
    it), the firmware links that library instead of compiling NAME.cpp again."""
    target = _target(target)
    if not target.baremetal:
        raise SCons.Errors.UserError(f"{target.source}: error: target '{target.name}' has no board; "
                                     f"firmware needs a bare-metal target")
    cross = configure_toolchain(env, target, optimize, extra_ccflags)
    model_dir = _dir(env, model_dir)
    out = (_dir(env, build_dir) if build_dir is not None else
           model_dir.Dir("firmware").Dir(target.name + (optimize or "")))
    cross.Replace(CPPPATH=[model_dir, env.Dir(str(BAREMETAL_DIR)), env.Dir(str(_RUNTIME_INCLUDE))])

    main = cross.Command(out.File(f"{name}_firmware.cpp"), model_dir.File(f"{name}.plan.json"),
                         SCons.Action.Action(_write_main, "$TINSMITHFIRMWARECOMSTR",
                                             varlist=["TINSMITH_WORKSPACE_SECTION"]),
                         TINSMITH_WORKSPACE_SECTION=(target.board.placement.workspace.section
                                                     if target.board.placement.workspace else ""))
    cross.Depends(main, [env.File(str(MAIN_TEMPLATE)), env.File(str(Path(__file__).with_name("firmware.py")))])

    if target.board.linker_script is not None:
        script = env.File(str(target.board.linker_script))
    else:
        script = cross.Command(out.File("memory.ld"), cross.Value(memory_script(target)),
                               SCons.Action.Action(_write_text, "$TINSMITHFIRMWARECOMSTR"))[0]

    objects = [cross.Object(out.File(f"{name}_firmware{cross['OBJSUFFIX']}"), main)]
    if model_library is None:
        objects.append(cross.Object(out.File(f"{name}{cross['OBJSUFFIX']}"), model_dir.File(f"{name}.cpp")))
    objects += [cross.Object(out.Dir("baremetal").File(Path(src).stem + cross["OBJSUFFIX"]),
                             env.File(str(BAREMETAL_DIR / src)))
                for src in RUNTIME_SOURCES]
    cross.Append(LINKFLAGS=["-T", script.abspath, f"-L{BAREMETAL_DIR}", "-Wl,-Map=${TARGET.base}.map"])
    elf = cross.Program(out.File(f"{name}{cross['PROGSUFFIX']}"), objects + list(model_library or []))
    cross.Depends(elf, [script, env.File(str(SECTIONS_SCRIPT))])
    cross.Clean(elf, out.File(f"{name}.map"))
    return elf
