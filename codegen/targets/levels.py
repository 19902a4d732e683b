"""ISA levels of a dispatching target: one library holds the model's kernels generated once per
level (each as the level's own target file generates them), and the generated code runs the widest
level the CPU has, chosen once at run time (docs/KERNELS.md, section 10).

A target file lists them, narrowest first:

    levels:
      - {name: x86-64, target: host}                       # the first requires nothing: it runs anywhere
      - {name: x86-64-v3, target: host-x86-64-v3, requires: [avx, avx2, fma, bmi, bmi2, f16c, lzcnt, movbe]}
      - {name: x86-64-v4, target: host-x86-64-v4, requires: [avx512f, avx512bw, avx512cd, avx512dq, avx512vl]}

`requires` names `__builtin_cpu_supports` features (GCC and Clang); a level runs when the CPU has
its features and every earlier level's. `target` is a built-in target or a file relative to this
one; its capabilities make the level's kernels. Every level is in the one GRAPH.cpp, compiled with
the first level's flags: a further level's CPU flags become the target pragma around its code
(`-march=x86-64-v3` -> `#pragma GCC target("arch=x86-64-v3")`), so the flags a level may have are
those GCC's and Clang's target pragmas take, and its other flags must be the first level's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tinsmith.targets import Target

_LEVEL_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
_FEATURE = re.compile(r"^[a-z][a-z0-9._-]*$")
# The CPU flags a further level may have: those that GCC's `#pragma GCC target` and Clang's target
# attribute take without the `-m` (an ISA extension, or arch=, tune=, prefer-vector-width=).
_PRAGMA_FLAG = re.compile(r"^-m((arch|tune|prefer-vector-width)=[a-z0-9._-]+|(no-)?[a-z][a-z0-9.]*(-[a-z0-9.]+)*)$")
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
        """The C++ namespace of the level's code."""
        return self.name.replace("-", "_")

    @property
    def pragma_target(self) -> str:
        """What the target pragma around the level's code says: its target's CPU flags without `-m`."""
        return ",".join(flag[2:] for flag in self.target.cpu_flags)


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
        if i > 0:
            _check_compiled_as_first(entry, name, target, levels[0].target)
        levels.append(Level(name, target, tuple(requires)))
    if len({lv.target.toolchain.command("cxx") for lv in levels}) > 1:
        raise TargetError(where, f"the levels of '{owner}' use different compilers", "one library, one compiler")
    return tuple(levels)


def _check_compiled_as_first(entry, name: str, target: "Target", first: "Target") -> None:
    """A further level is compiled in the first level's translation unit, with its flags and a
    target pragma made of its own CPU flags: those must be pragma options, the rest the first's."""
    from tinsmith.targets import TargetError
    bad = [f for f in target.cpu_flags if not _PRAGMA_FLAG.match(f)]
    if bad:
        raise TargetError(entry.at("target"), f"level '{name}': CPU flag '{bad[0]}' of target '{target.name}' has no "
                                              f"target pragma to compile the level with",
                          "a level's CPU flags are -march=, -mtune=, -mprefer-vector-width= or ISA extensions "
                          "such as -mavx2")
    for field in ("optimize", "ccflags", "cxxflags"):
        if getattr(target, field) != getattr(first, field):
            raise TargetError(entry.at("target"), f"level '{name}': target '{target.name}' has other {field} than "
                                                  f"the first level's '{first.name}'",
                              "every level is compiled in one GRAPH.cpp with the first level's flags; a level's "
                              "own are its CPU flags")

