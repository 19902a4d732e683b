"""Targets as data: one YAML file per target names its toolchain, flags, board and emulator.

Built-in targets live next to this file (`TARGETS`); a user adds one by passing the path of
their own file to `load_target`, with no code change. The format, version 1:

    target: cortex-m4                 # identifier; names build folders
    based_on: cortex-m4               # optional: another target (a built-in name, or a file
                                      # relative to this one) whose sections this file keeps
                                      # where it does not write its own; `capabilities` is
                                      # merged key by key, any other section replaced whole
    description: one line
    toolchain:                        # commands are prefix + name, looked up on PATH
      prefix: arm-none-eabi-          # (after `path`, if given)
      cc: gcc
      cxx: g++
      ar: ar
      ranlib: ranlib
      nm: nm
      link: gcc                       # optional: the driver that links (default: cxx; gcc where
                                      # the toolchain has no C++ library for g++ to add)
      path: /opt/arm/bin              # optional
      system_includes: [cxx]          # optional: folders searched for C++'s system headers,
                                      # relative to this file (a toolchain that ships none)
    cpu_flags: [-mcpu=cortex-m4, ...] # compile, assemble and link
    optimize: -Os                     # default optimization flag; callers may override
    ccflags: [...]                    # C and C++
    cflags: [...]                     # C only
    cxxflags: [...]                   # C++ only
    linkflags: [...]
    board:                            # null for a hosted target
      name: mps2-an386
      memory:                         # sizes: integers, or strings like 16K, 4M, 0x4000
        flash: {origin: 0x0, length: 4M}
        ram: {origin: 0x20000000, length: 4M}
        ext_flash: {origin: 0x60000000, length: 16M}   # optional: more regions, any name in
                                      # lower case; none may overlap another
      placement:                      # optional: what goes in a region other than flash/RAM
        constants: {region: ext_flash, section: .ext_weights}  # section optional (default
        workspace: {region: dtcm, section: .dtcm_bss}          # .tinsmith_constants and
        stack: {region: dtcm}         # .tinsmith_workspace); the stack takes a region only
      stack_bytes: 16K
      core_clock_hz: 25000000         # the tick counter's clock, for converting ticks
      runtime: [startup.c, semihost.c, measure.c]  # optional: the test firmware's start-up,
                                      # semihosting and counter sources in runtime_cpp/baremetal/
                                      # (default: the Cortex-M ones, as here)
      linker_script: my.ld            # optional, relative to the YAML file; replaces the
                                      # script written from `memory` (see sections.ld)
    capabilities:                     # optional: what kernels may use (default: portable C++)
      backend: cortex-m               # kernel backend: cpp, host or cortex-m
      fpu: fpv4-sp                    # none, or the FPU's name
      simd_bits: 0                    # float vector width kernels may use (0: none; native: the build machine's)
      dsp: true                       # Armv7E-M DSP extension (SMLAD, ...)
      float_registers: 16             # float registers a blocked inner loop may fill (or native)
      vector_registers: 8             # optional: vector registers, where they are fewer than the
                                      # float ones (Helium: 8 Q registers over 32 S registers)
      channels_last: false            # convolution chains computed NHWC inside (codegen/layout.py)
    levels:                           # optional, hosted x86-64: the kernels generated once per
      - {name: x86-64, target: host}  # listed target, narrowest first, in one library that runs
      - {name: x86-64-v4, target: host-x86-64-v4, requires: [avx512f, ...]}  # the widest the CPU
                                      # has (tinsmith.targets.levels; host-dispatch.yaml)
    emulator:                         # null when nothing emulates the core
      command: [qemu-system-arm, ...] # everything but -icount and -kernel
      icount_shift: 6                 # optional: one instruction = 2**shift ns
      timeout_seconds: 60             # optional

Nothing here needs SCons; `tinsmith.targets.firmware_scons` is the SCons side.
"""
from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from tinsmith.errors import SourceLoc, TinsmithError
from tinsmith.escape import one_line
from tinsmith.load.located_yaml import LocatedDict, LocatedList, parse_yaml
from tinsmith.paths import BAREMETAL_DIR

__all__ = ["TARGETS", "BAREMETAL_DIR", "Board", "Capabilities", "Emulator", "MemoryRegion", "Place", "Placement",
           "Target", "TargetError", "Toolchain", "load_target", "parse_placement", "with_placement", "with_threads"]

_HERE = Path(__file__).resolve().parent
TARGETS: Mapping[str, Path] = {p.stem: p for p in sorted(_HERE.glob("*.yaml"))}


class TargetError(TinsmithError):
    """A problem in a target file, or a target that cannot do what was asked."""


@dataclass(frozen=True)
class Toolchain:
    prefix: str
    cc: str
    cxx: str
    ar: str
    ranlib: str
    nm: str
    path: Path | None = None
    link: str | None = None  # the driver that links, when not cxx
    system_includes: tuple[Path, ...] = ()  # C++ system headers the toolchain lacks (searched with -isystem)

    def command(self, tool: str) -> str:
        """The command that runs `tool` ("cc", "cxx", "link", ..., or any other binutils name)."""
        if tool == "link":
            return self.prefix + (self.link or self.cxx)
        return self.prefix + getattr(self, tool, tool)


@dataclass(frozen=True)
class MemoryRegion:
    origin: int
    length: int


@dataclass(frozen=True)
class Place:
    """Where one kind of memory goes: a region of the board's memory map, through a named
    linker section (none for the stack, which the memory script makes itself)."""

    region: str
    section: str | None = None


@dataclass(frozen=True)
class Placement:
    """Constants, workspace and stack placed outside the default flash and RAM; None keeps the
    default (constants in flash, or RAM with constants-in-RAM; workspace and stack in RAM)."""

    constants: Place | None = None
    workspace: Place | None = None
    stack: Place | None = None

    def __bool__(self) -> bool:
        return any((self.constants, self.workspace, self.stack))


PLACEABLE = ("constants", "workspace", "stack")
# The test firmware's start-up code, semihosting and tick counter (runtime_cpp/baremetal/) of a
# board whose target file names none: the Cortex-M ones.
DEFAULT_RUNTIME = ("startup.c", "semihost.c", "measure.c")
DEFAULT_SECTIONS = {"constants": ".tinsmith_constants", "workspace": ".tinsmith_workspace"}


@dataclass(frozen=True)
class Board:
    name: str
    flash: MemoryRegion
    ram: MemoryRegion
    stack_bytes: int
    core_clock_hz: int | None = None
    linker_script: Path | None = None
    regions: tuple[tuple[str, MemoryRegion], ...] = ()  # more named regions, beyond flash and ram
    placement: Placement = Placement()
    runtime: tuple[str, ...] = DEFAULT_RUNTIME  # test firmware's sources in runtime_cpp/baremetal/

    def region(self, name: str) -> MemoryRegion | None:
        """The region called `name` ("flash", "ram" or one of `regions`)."""
        return {"flash": self.flash, "ram": self.ram, **dict(self.regions)}.get(name)


@dataclass(frozen=True)
class Emulator:
    command: tuple[str, ...]
    icount_shift: int | None = None
    timeout_seconds: float = 60.0


KERNEL_BACKENDS = ("cpp", "host", "cortex-m")


@dataclass(frozen=True)
class Capabilities:
    """What generated kernels may use on this target (the `capabilities` section)."""

    backend: str = "cpp"
    fpu: str = "none"
    simd_bits: int = 0
    dsp: bool = False
    float_registers: int = 8
    channels_last: bool = False  # convolution chains run NHWC inside (codegen/layout.py)
    # The kernel sets the backend draws on, in lookup order (codegen/generate/kernel_sets.py);
    # empty: the backend's own list. Where the list was written, for errors about a name in it.
    kernels: tuple[str, ...] = ()
    kernels_at: Any = field(default=None, compare=False)
    # vector registers a blocked vector loop may fill; 0: as many as float_registers (the host's
    # vector units, whose float registers are the vector registers)
    vector_registers: int = 0

    @property
    def vector_register_count(self) -> int:
        return self.vector_registers or self.float_registers
    # Threads call() may run on (a hosted target's worker pool, runtime_cpp/include/tinsmith/thread_pool.hpp):
    # 1 is the linear executor, with no threads code at all.
    threads: int = 1

    def lanes(self, dtype_bytes: int = 4) -> int:
        """Vector width for elements of `dtype_bytes` (1: scalar code)."""
        return max(1, self.simd_bits // (8 * dtype_bytes))


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    source: Path
    toolchain: Toolchain
    cpu_flags: tuple[str, ...]
    optimize: str
    ccflags: tuple[str, ...]
    cflags: tuple[str, ...]
    cxxflags: tuple[str, ...]
    linkflags: tuple[str, ...]
    board: Board | None
    emulator: Emulator | None
    capabilities: Capabilities = None  # type: ignore[assignment]
    # the target files this one was read from: its own, then those it is based on (what a
    # build depends on)
    files: tuple[Path, ...] = ()
    # ISA levels whose kernels one library holds, the widest the CPU has chosen at run time
    # (tinsmith.targets.levels); empty: one set of kernels, this target's
    levels: tuple = ()

    def __post_init__(self):
        if self.capabilities is None:
            object.__setattr__(self, "capabilities", Capabilities())

    @property
    def baremetal(self) -> bool:
        """True when firmware for this target brings its own startup code and memory map."""
        return self.board is not None


def load_target(name_or_path: str | Path) -> Target:
    """A built-in target by name, or the target described by a YAML file."""
    if isinstance(name_or_path, Target):
        return name_or_path
    text = str(name_or_path)
    if text in TARGETS:
        return _parse(TARGETS[text])
    path = Path(text)
    if path.suffix in (".yaml", ".yml") or path.exists() or "/" in text:
        if not path.is_file():
            raise TargetError(None, f"target file '{text}' does not exist")
        return _parse(path)
    import difflib
    close = difflib.get_close_matches(text.lower(), list(TARGETS), n=1, cutoff=0.6)
    raise TargetError(None, f"unknown target '{text}'" + (f"; did you mean '{close[0]}'?" if close else ""),
                      f"built-in targets are {', '.join(TARGETS)}; or give the path of a target YAML file")


# --- parsing ---------------------------------------------------------------------------

_SIZE = re.compile(r"^\s*(0x[0-9a-fA-F]+|\d+)\s*([KMG]?)i?B?\s*$")
_SCALE = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.+-]*$")


class _Fields:
    """Reads one mapping, remembering which keys were used so unknown ones are errors."""

    def __init__(self, data: Any, loc: SourceLoc, what: str):
        if not isinstance(data, dict):
            raise TargetError(loc, f"{what} must be a mapping")
        self.data, self.what = data, what
        self.loc = getattr(data, "loc", loc)
        self.used: set[str] = set()

    def at(self, key: str) -> SourceLoc:
        return self.data.at(key) if isinstance(self.data, LocatedDict) else self.loc

    def raw(self, key: str, required: bool = True, default: Any = None) -> Any:
        self.used.add(key)
        if key not in self.data:
            if required:
                raise TargetError(self.loc, f"{self.what} needs '{key}'")
            return default
        return self.data[key]

    def string(self, key: str, required: bool = True, default: str | None = None,
               empty: bool = False) -> str | None:
        value = self.raw(key, required)
        if value is None and not required:
            return default
        if not isinstance(value, str) or (not empty and not value):
            raise TargetError(self.at(key), f"'{key}' must be a{'' if empty else ' non-empty'} string")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.raw(key)
        if not isinstance(value, list):
            raise TargetError(self.at(key), f"'{key}' must be a list of strings")
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item:
                loc = value.at(i) if isinstance(value, LocatedList) else self.at(key)
                raise TargetError(loc, f"'{key}' must be a list of strings; item {i + 1} is {item!r}",
                                  "quote a flag that YAML would read as something else")
            if item in ("-Wl", "-Wa", "-Wp", "-Xlinker"):
                loc = value.at(i) if isinstance(value, LocatedList) else self.at(key)
                raise TargetError(loc, f"'{key}' has a bare '{item}'",
                                  f"a comma ends an item in [a, b] lists: write \"{item},...\" in quotes")
        return tuple(value)

    def size(self, key: str, required: bool = True) -> int | None:
        value = self.raw(key, required)
        if value is None and not required:
            return None
        if isinstance(value, bool):
            number = None
        elif isinstance(value, int):
            number = value
        elif isinstance(value, str) and (m := _SIZE.match(value)):
            number = int(m.group(1), 0) * _SCALE[m.group(2)]
        else:
            number = None
        if number is None or number < 0:
            raise TargetError(self.at(key), f"'{key}' must be a non-negative integer or a size like 16K or 4M; "
                                            f"got {value!r}")
        return number

    def nested(self, key: str, required: bool = True) -> "_Fields | None":
        value = self.raw(key, required)
        if value is None and not required:
            return None
        return _Fields(value, self.at(key), f"'{key}'")

    def done(self) -> None:
        for key in self.data:
            if key not in self.used:
                loc = self.data.key_locs.get(key, self.loc) if isinstance(self.data, LocatedDict) else self.loc
                raise TargetError(loc, f"unknown key '{key}' in {self.what}",
                                  f"known keys: {', '.join(sorted(self.used))}")


MAX_BASES = 8  # a chain of based_on files longer than this is a mistake (or a cycle)


def _read_target_file(path: Path) -> LocatedDict:
    try:
        text = path.read_text(encoding="utf-8")
        data = parse_yaml(text, str(path))
    except OSError as e:
        raise TargetError(None, f"cannot read target file '{path}': {e.strerror}") from None
    except TinsmithError as e:  # YAML syntax, reported where it is
        raise TargetError(e.loc, e.message, e.hint) from None
    _Fields(data, SourceLoc(str(path), 1, 1), "a target file")  # a mapping, or the error says so
    return data


def _with_bases(path: Path) -> tuple[LocatedDict, dict[str, Path], tuple[Path, ...]]:
    """The target file's sections over those of the targets it is based on: (sections, the file
    each section came from, every file read). Relative paths in a section resolve against the
    file that wrote it."""
    data = _read_target_file(path)
    data_loc = data.loc
    sections, origin, files = dict(data), {key: path for key in data}, [path.resolve()]
    locs, key_locs = dict(data.value_locs), dict(data.key_locs)
    while "based_on" in data:
        where, name = data.at("based_on"), data["based_on"]
        if not isinstance(name, str) or not name:
            raise TargetError(where, "'based_on' must name a built-in target or a target file")
        base = TARGETS.get(name) or (path.parent / name)
        if not base.is_file():
            raise TargetError(where, f"'based_on' names '{name}', which is neither a built-in target nor a file",
                              f"built-in targets are {', '.join(TARGETS)}; a file path is relative to {path.parent}")
        if base.resolve() in files or len(files) > MAX_BASES:
            raise TargetError(where, f"'based_on: {name}' makes a cycle of target files "
                                     f"({' -> '.join([f.name for f in files] + [base.name])})")
        path, data = base, _read_target_file(base)
        files.append(base.resolve())
        for key, value in data.items():
            if key == "capabilities" and isinstance(sections.get(key), dict) and isinstance(value, dict):
                merged = LocatedDict({**value, **sections[key]})
                merged.loc, merged.key_locs = sections[key].loc, {**value.key_locs, **sections[key].key_locs}
                merged.value_locs = {**value.value_locs, **sections[key].value_locs}
                sections[key] = merged
            elif key not in sections:
                sections[key], origin[key], locs[key] = value, path, data.at(key)
                key_locs[key] = data.key_locs.get(key, data.loc)
    sections.pop("based_on", None)
    located = LocatedDict(sections)
    located.loc, located.key_locs, located.value_locs = data_loc, key_locs, locs
    return located, origin, tuple(files)


def _parse(path: Path) -> Target:
    data, origin, files = _with_bases(path)
    top = _Fields(data, SourceLoc(str(path), 1, 1), "a target file")
    name = top.string("target")
    if not _NAME.match(name):
        raise TargetError(top.at("target"), f"target name '{name}' must be letters, digits, '_', '-', '.' or '+'")
    toolchain = _toolchain(top.nested("toolchain"), origin.get("toolchain", path))
    target = Target(
        name=name,
        description=top.string("description", required=False, default=""),
        source=path.resolve(),
        toolchain=toolchain,
        cpu_flags=top.strings("cpu_flags"),
        optimize=top.string("optimize", required=False, default="-Os"),
        ccflags=top.strings("ccflags"),
        cflags=top.strings("cflags"),
        cxxflags=top.strings("cxxflags"),
        linkflags=top.strings("linkflags"),
        board=_board(top.nested("board"), origin["board"]) if top.raw("board") is not None else None,
        emulator=_emulator(top.nested("emulator")) if top.raw("emulator") is not None else None,
        capabilities=_capabilities(top.nested("capabilities")) if top.raw("capabilities", required=False)
        is not None else Capabilities(),
        files=files,
    )
    if top.raw("levels", required=False) is not None:
        from tinsmith.targets.levels import parse_levels
        levels = parse_levels(top, origin.get("levels", path), name)
        target = replace(target, levels=levels,
                         files=tuple(dict.fromkeys(files + tuple(f for lv in levels for f in lv.target.files))))
    top.done()
    if target.emulator is not None and target.board is None:
        raise TargetError(top.at("emulator"), "an emulator needs a board to run firmware on",
                          "set 'emulator: null', or describe the board")
    return target


def _toolchain(fields: _Fields, path: Path) -> Toolchain:
    tools = {key: fields.string(key) for key in ("cc", "cxx", "ar", "ranlib", "nm")}
    prefix = fields.string("prefix", required=False, default="", empty=True)
    folder = fields.string("path", required=False)
    link = fields.string("link", required=False)
    includes = fields.strings("system_includes") if fields.raw("system_includes", required=False) is not None else ()
    fields.done()
    resolved = tuple((path.parent / item).resolve() for item in includes)
    for item, where in zip(includes, resolved):
        if not where.is_dir():
            raise TargetError(fields.at("system_includes"), f"system include folder '{item}' does not exist",
                              f"paths are relative to {path.parent}")
    return Toolchain(prefix=prefix, path=(path.parent / folder).resolve() if folder else None,
                     link=link, system_includes=resolved, **tools)


def _region(fields: _Fields) -> MemoryRegion:
    region = MemoryRegion(origin=fields.size("origin"), length=fields.size("length"))
    fields.done()
    if region.length == 0:
        raise TargetError(fields.at("length"), f"{fields.what} has length 0")
    return region


def _board(fields: _Fields, path: Path) -> Board:
    name = fields.string("name")
    memory = fields.nested("memory")
    flash, ram = _region(memory.nested("flash")), _region(memory.nested("ram"))
    regions = []
    for key in memory.data:
        if key in ("flash", "ram"):
            continue
        loc = memory.data.key_locs.get(key, memory.loc) if isinstance(memory.data, LocatedDict) else memory.loc
        if not isinstance(key, str) or not _REGION.match(key):
            raise TargetError(loc, f"memory region name {key!r} must be lower-case letters, digits and '_', "
                                   f"starting with a letter")
        regions.append((key, _region(memory.nested(key))))
    memory.done()
    _check_overlaps([("flash", flash), ("ram", ram), *regions], memory)
    stack = fields.size("stack_bytes")
    if stack == 0 or stack % 8:
        raise TargetError(fields.at("stack_bytes"), "'stack_bytes' must be a positive multiple of 8 "
                                                    "(the AAPCS stack alignment)")
    if stack >= ram.length:
        raise TargetError(fields.at("stack_bytes"), f"the stack ({stack} bytes) does not fit in RAM "
                                                    f"({ram.length} bytes)")
    clock = fields.size("core_clock_hz", required=False)
    script = fields.string("linker_script", required=False)
    placement_fields = fields.nested("placement", required=False)
    runtime = fields.strings("runtime") if fields.raw("runtime", required=False) is not None else DEFAULT_RUNTIME
    fields.done()
    missing = [name for name in runtime if Path(name).name != name or not (BAREMETAL_DIR / name).is_file()]
    if missing:
        raise TargetError(fields.at("runtime"), f"'runtime' names '{missing[0]}', which is not in {BAREMETAL_DIR}",
                          f"its sources are {', '.join(sorted(p.name for p in BAREMETAL_DIR.glob('*.c')))}")
    if clock == 0:
        raise TargetError(fields.at("core_clock_hz"), "'core_clock_hz' must be positive")
    script_path = (path.parent / script).resolve() if script else None
    if script_path is not None and not script_path.is_file():
        raise TargetError(fields.at("linker_script"), f"linker script '{script}' does not exist",
                          f"paths are relative to {path.parent}")
    board = Board(name=name, flash=flash, ram=ram, stack_bytes=stack, core_clock_hz=clock,
                  linker_script=script_path, regions=tuple(regions), runtime=tuple(runtime))
    if placement_fields is not None:
        board = replace(board, placement=_placement(placement_fields, board))
    return board


_REGION = re.compile(r"^[a-z][a-z0-9_]{0,30}$")


def _check_overlaps(regions, memory: _Fields) -> None:
    """Regions of one memory map must not overlap: the linker would put two things in one place."""
    for i, (a, ra) in enumerate(regions):
        for b, rb in regions[i + 1:]:
            if ra.origin < rb.origin + rb.length and rb.origin < ra.origin + ra.length:
                raise TargetError(memory.at(b), f"memory region '{b}' overlaps '{a}'",
                                  "shrink one of them: each byte belongs to one region")


def _check_place(kind: str, place: Place, board: Board, loc: SourceLoc | None,
                 section_loc: SourceLoc | None = None) -> Place:
    from tinsmith.escape import ld_section_name
    if board.region(place.region) is None:
        known = ", ".join(["flash", "ram", *(n for n, _ in board.regions)])
        raise TargetError(loc, f"{kind} are placed in region '{place.region}', which the board's memory does "
                               f"not have", f"regions: {known}")
    if kind == "constants" and place.region == "ram":
        raise TargetError(loc, "constants cannot be placed in 'ram': nothing loads them there at reset",
                          "to copy constants to RAM at startup use constants-in-RAM (--constants-in-ram, "
                          "TINSMITH_CONSTANTS_IN_RAM) instead")
    if kind == "stack":
        if board.stack_bytes >= board.region(place.region).length:
            raise TargetError(loc, f"the stack ({board.stack_bytes} bytes) does not fit in region '{place.region}'")
        if place.section is not None:
            raise TargetError(section_loc or loc, "the stack takes a region only; the memory script makes its section")
        return place
    section = place.section or DEFAULT_SECTIONS[kind]
    try:
        ld_section_name(section)
    except ValueError:
        raise TargetError(section_loc or loc, f"'{one_line(section)}' cannot name the {kind}' linker section",
                          "a section name is a '.' and then letters, digits and '_' (no further '.'), "
                          "e.g. .ext_weights, and not one the toolchain uses (.text, .rodata, .data, .bss ...)") \
            from None
    return Place(place.region, section)


def _placement(fields: _Fields, board: Board) -> Placement:
    places = {}
    for kind in PLACEABLE:
        entry = fields.nested(kind, required=False)
        if entry is None:
            continue
        region = entry.string("region")
        section = entry.string("section", required=False)
        entry.done()
        places[kind] = _check_place(kind, Place(region, section), board, entry.at("region"), entry.at("section"))
    fields.done()
    placement = Placement(**places)
    _check_sections_differ(placement, fields.loc)
    return placement


def _check_sections_differ(placement: Placement, loc: SourceLoc | None) -> None:
    c, w = placement.constants, placement.workspace
    if c and w and c.section == w.section:
        raise TargetError(loc, f"constants and workspace are both placed in section '{c.section}'",
                          "give each its own section: one is loaded with the image, the other is not")


def parse_placement(text: str) -> dict[str, Place]:
    """A placement given per build: `KIND=REGION[:SECTION],...`, e.g.
    `constants=ext_flash:.ext_weights,stack=dtcm` (KIND: constants, workspace, stack)."""
    places = {}
    for item in filter(None, (part.strip() for part in str(text).split(","))):
        kind, eq, where = item.partition("=")
        kind = kind.strip()
        if not eq or kind not in PLACEABLE:
            raise TargetError(None, f"placement '{one_line(item)}' must be KIND=REGION[:SECTION] with KIND one of "
                                    f"{', '.join(PLACEABLE)}", "e.g. constants=ext_flash:.ext_weights,stack=dtcm")
        if kind in places:
            raise TargetError(None, f"placement names '{kind}' twice")
        region, _, section = where.partition(":")
        places[kind] = Place(region.strip(), section.strip() or None)
    return places


def with_placement(target: Target, text: str) -> Target:
    """`target` with the per-build placement `text` (see parse_placement) over its own, kind by kind."""
    places = parse_placement(text)
    if not places:
        return target
    if target.board is None:
        raise TargetError(None, f"target '{target.name}' has no board, so nothing to place memory in",
                          "placement needs a bare-metal target")
    checked = {kind: _check_place(kind, place, target.board, None) for kind, place in places.items()}
    placement = replace(target.board.placement, **checked)
    _check_sections_differ(placement, None)
    return replace(target, board=replace(target.board, placement=placement))


def _emulator(fields: _Fields) -> Emulator:
    command = fields.strings("command")
    if not command:
        raise TargetError(fields.at("command"), "'command' must name the emulator program")
    shift = fields.raw("icount_shift", required=False)
    if shift is not None and (isinstance(shift, bool) or not isinstance(shift, int) or not 0 <= shift <= 10):
        raise TargetError(fields.at("icount_shift"), f"'icount_shift' must be an integer from 0 to 10; got {shift!r}")
    timeout = fields.raw("timeout_seconds", required=False, default=60.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise TargetError(fields.at("timeout_seconds"), f"'timeout_seconds' must be a positive number; got {timeout!r}")
    fields.done()
    listed = fields.data["command"]
    for i, item in enumerate(command):
        if item in ("-icount", "-kernel"):
            raise TargetError(listed.at(i) if isinstance(listed, LocatedList) else fields.at("command"),
                              f"'command' must not contain {item}",
                              "the runner adds -kernel ELF, and -icount from 'icount_shift'")
    return Emulator(command=command, icount_shift=shift, timeout_seconds=float(timeout))


@functools.lru_cache(maxsize=1)
def native_vector_unit() -> dict[str, int]:
    """simd_bits and float_registers of the build machine's x86-64 vector unit, as GCC with
    -march=native sees it: AVX-512 is 512 bits and 32 registers, AVX2 256 and 16, else SSE2's
    128 and 16."""
    try:
        macros = subprocess.run(["gcc", "-march=native", "-dM", "-E", "-x", "c", os.devnull],
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        macros = ""
    if "__AVX512F__" in macros:
        return {"simd_bits": 512, "float_registers": 32}
    if "__AVX2__" in macros:
        return {"simd_bits": 256, "float_registers": 16}
    return {"simd_bits": 128, "float_registers": 16}


def _capabilities(fields: _Fields) -> Capabilities:
    backend = fields.string("backend", required=False, default="cpp")
    if backend not in KERNEL_BACKENDS:
        raise TargetError(fields.at("backend"), f"'backend' must be one of {', '.join(KERNEL_BACKENDS)}; "
                                                f"got {backend!r}")
    fpu = fields.string("fpu", required=False, default="none")
    numbers = {}
    for key, default, allowed in (("simd_bits", 0, (0, 64, 128, 256, 512)), ("float_registers", 8, None),
                                  ("vector_registers", 0, None)):
        value = fields.raw(key, required=False, default=default)
        if value == "native":  # what `-march=native` gives on the build machine
            value = native_vector_unit().get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or (allowed and value not in allowed) \
                or value < 0:
            raise TargetError(fields.at(key), f"'{key}' must be "
                              f"{'one of ' + ', '.join(map(str, allowed)) if allowed else 'a non-negative integer'}"
                              f"; got {value!r}")
        numbers[key] = value
    flags = {}
    for key in ("dsp", "channels_last"):
        flags[key] = fields.raw(key, required=False, default=False)
        if not isinstance(flags[key], bool):
            raise TargetError(fields.at(key), f"'{key}' must be true or false; got {flags[key]!r}")
    kernels = fields.strings("kernels") if "kernels" in fields.data else ()
    kernels_at = fields.at("kernels")
    threads = fields.raw("threads", required=False, default=1)
    threads_problem = thread_count_problem(threads)
    if threads_problem:
        raise TargetError(fields.at("threads"), f"'threads' {threads_problem}")
    if threads > 1 and backend != "host":
        raise TargetError(fields.at("threads"), "'threads' above 1 needs the host backend (a hosted target with "
                                                "POSIX threads)")
    fields.done()
    return Capabilities(backend, fpu, numbers["simd_bits"], flags["dsp"], numbers["float_registers"],
                        flags["channels_last"], kernels, kernels_at,
                        vector_registers=numbers["vector_registers"], threads=threads)


MAX_THREADS = 64  # runtime_cpp/include/tinsmith/thread_pool.hpp: kMaxWorkers + 1


def thread_count_problem(value) -> str | None:
    """What is wrong with `value` as a thread count (None: nothing)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_THREADS:
        return f"must be an integer from 1 to {MAX_THREADS}; got {value!r}"
    return None


def with_threads(target: Target, threads: int) -> Target:
    """`target` running call() on `threads` threads (a build's setting over the target file's)."""
    problem = thread_count_problem(threads)
    if problem:
        raise TargetError(None, f"the thread count {problem}")
    if threads > 1 and (target.baremetal or target.capabilities.backend != "host"):
        raise TargetError(None, f"target '{target.name}' runs one thread: only hosted targets with the host "
                                f"backend run call() on several threads", "build with threads=1")
    return replace(target, capabilities=replace(target.capabilities, threads=threads))
