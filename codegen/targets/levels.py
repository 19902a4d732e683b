"""ISA levels of a dispatching target: one library holds the model's kernels generated once per
level (each as the level's own target file generates and compiles them), and the generated code
runs the widest level the CPU has, chosen once at run time (docs/KERNELS.md, section 10).

A target file lists them, narrowest first:

    levels:
      - {name: x86-64, target: host}                       # the first requires nothing: it runs anywhere
      - {name: x86-64-v3, target: host-x86-64-v3, requires: [avx, avx2, fma, bmi, bmi2, f16c, lzcnt, movbe]}
      - {name: x86-64-v4, target: host-x86-64-v4, requires: [avx512f, avx512bw, avx512cd, avx512dq, avx512vl]}

`requires` names `__builtin_cpu_supports` features (GCC and Clang); a level runs when the CPU has
its features and every earlier level's. `target` is a built-in target or a file relative to this
one; its capabilities, CPU flags and compiler make the level's kernels and compile them.
"""
from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tinsmith.targets import Target

_LEVEL_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
_FEATURE = re.compile(r"^[a-z][a-z0-9._-]*$")
# What the generated code reads to pin a level (tests, comparisons): a level's name.
PIN_VARIABLE = "TINSMITH_HOST_LEVEL"


@dataclass(frozen=True)
class Level:
    """One ISA level: its name (what TINSMITH_HOST_LEVEL names), the target that generates and
    compiles its kernels, and the CPU features it needs besides the earlier levels'."""

    name: str
    target: "Target"
    requires: tuple[str, ...] = ()

    @property
    def identifier(self) -> str:
        """The C++ namespace of the level's code and the suffix of its source file."""
        return self.name.replace("-", "_")


def parse_levels(fields, path: Path, owner: str) -> tuple[Level, ...]:
    """The `levels` list of a target file (`fields`: the file's reader, see targets._Fields)."""
    from tinsmith.targets import TARGETS, TargetError, _Fields, load_target
    items = fields.raw("levels")
    where = fields.at("levels")
    if not isinstance(items, list) or not items:
        raise TargetError(where, "'levels' must be a list of {name, target, requires} entries, narrowest first")
    levels = []
    for i, item in enumerate(items):
        entry = _Fields(item, where, f"level {i + 1} of 'levels'")
        name = entry.string("name")
        if not _LEVEL_NAME.match(name) or name in (lv.name for lv in levels):
            raise TargetError(entry.at("name"), f"level name '{name}' must be lower-case letters, digits and "
                                                f"single '-', and differ from the other levels'")
        target_name = entry.string("target")
        target_path = TARGETS.get(target_name) or path.parent / target_name
        target = load_target(target_path if target_path.is_file() else target_name)
        requires = entry.strings("requires") if entry.raw("requires", required=False) is not None else ()
        entry.done()
        bad = [f for f in requires if not _FEATURE.match(f)]
        if bad:
            raise TargetError(entry.at("requires"), f"CPU feature '{bad[0]}' is not a __builtin_cpu_supports name",
                              "e.g. avx2, fma, avx512f")
        if i == 0 and requires:
            raise TargetError(entry.at("requires"), "the first level must require nothing: it is what runs on a "
                                                    "CPU that has none of the others")
        if target.levels or target.baremetal or target.capabilities.backend != "host":
            raise TargetError(entry.at("target"), f"level '{name}' names target '{target.name}', which is not a "
                                                  f"hosted target of the host backend without levels of its own")
        levels.append(Level(name, target, tuple(requires)))
    if len({lv.target.toolchain.command("cxx") for lv in levels}) > 1:
        raise TargetError(where, f"the levels of '{owner}' use different compilers", "one library, one compiler")
    return tuple(levels)


@functools.lru_cache(maxsize=8)
def compiler_targets_x86(cxx: str) -> bool:
    """True when the compiler `cxx` makes x86 code (where __builtin_cpu_supports exists)."""
    try:
        macros = subprocess.run([cxx, "-dM", "-E", "-x", "c++", "/dev/null"], capture_output=True, text=True,
                                check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return False
    return "__x86_64__" in macros or "__i386__" in macros


def build_levels(target: "Target") -> tuple[Level, ...]:
    """The levels a build of `target` holds: all of them where its compiler makes x86 code, else only
    the first (the portable one); none for a target without levels."""
    if not target.levels:
        return ()
    if compiler_targets_x86(target.levels[0].target.toolchain.command("cxx")):
        return target.levels
    return target.levels[:1]


def level_source(graph: str, level: Level, first: bool) -> str:
    """The generated source file that holds `level`'s kernels: the first level's are in GRAPH.cpp
    with the code that chooses, the others in GRAPH_LEVEL.cpp."""
    return f"{graph}.cpp" if first else f"{graph}_{level.identifier}.cpp"


def library_sources(graph: str, target: "Target") -> list[tuple[str, "Target"]]:
    """The generated sources of `graph`'s library with the target that compiles each (its flags):
    GRAPH.cpp by `target`, and a dispatching target's further levels by their own targets."""
    return [(f"{graph}.cpp", target)] + [(level_source(graph, level, False), level.target)
                                         for level in build_levels(target)[1:]]
