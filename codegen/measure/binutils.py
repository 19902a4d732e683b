"""What an object file or a linked image holds, as the target's binutils report it: sections,
symbols, and each function's instructions with the calls and jumps that leave it.

Everything is read through the target's own objdump (and c++filt for display names), so the
figures are the toolchain's, not a re-implementation of ELF parsing.
"""
from __future__ import annotations

import os
import re
import subprocess
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from tinsmith.escape import ld_section_name
from tinsmith.errors import TinsmithError
from tinsmith.targets import Target


class MeasureError(TinsmithError):
    """A compiled model that cannot be measured (missing tools or files, unreadable output)."""


def _placed(name: str) -> bool:
    """True for a section name a target's placement may give constants."""
    try:
        ld_section_name(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Section:
    name: str
    size: int
    flags: frozenset[str]  # objdump's: ALLOC, LOAD, READONLY, CODE, DATA, ...

    @property
    def kind(self) -> str | None:
        """Where the section lives on the device: "code", "constants", "data" (flash and
        RAM), "bss" (RAM), "other" (flash: unwind tables, init arrays), or None (not loaded)."""
        if "ALLOC" not in self.flags:
            return None
        if "CODE" in self.flags:
            return "code"
        if "READONLY" in self.flags:
            # a target's placement may name the constants' section (see codegen/escape.py)
            return "constants" if self.name.startswith(".rodata") or _placed(self.name) else "other"
        return "data" if "LOAD" in self.flags else "bss"


@dataclass(frozen=True)
class Symbol:
    name: str
    section: str           # "*UND*" when undefined
    address: int
    size: int
    function: bool         # an ELF FUNC symbol


@dataclass(frozen=True)
class Instruction:
    address: int
    mnemonic: str          # without prefixes (x86 notrack, bnd, ...)
    operands: str
    relocation: str | None  # symbol of the relocation at this instruction, addend stripped
    addend: int = 0         # the relocation's addend, where objdump shows it (RELA)

    def __str__(self) -> str:
        return f"{self.mnemonic} {self.operands}".strip()


@dataclass(frozen=True)
class Function:
    symbol: str
    section: str
    address: int
    size: int
    instructions: tuple[Instruction, ...]


@dataclass(frozen=True)
class Binary:
    """One object file or linked image."""

    path: Path
    arch: str                  # "arm" or "x86-64"
    relocatable: bool          # an object file: addresses are per section
    sections: tuple[Section, ...]
    symbols: tuple[Symbol, ...]
    functions: Mapping[str, Function]

    @cached_property
    def index(self) -> dict[str | None, tuple[list[int], list[Function]]]:
        """Functions sorted by address, per section for an object file (key None for an image)."""
        groups: dict[str | None, list[Function]] = {}
        for f in self.functions.values():
            groups.setdefault(f.section if self.relocatable else None, []).append(f)
        return {key: ([f.address for f in fs], fs) for key, fs in
                ((key, sorted(fs, key=lambda f: (f.address, f.symbol))) for key, fs in groups.items())}


def run_tool(target: Target, tool: str, args: Sequence[str], stdin: str | None = None) -> str:
    """Output of one of the target's binutils (objdump, c++filt, ...), or a MeasureError."""
    env = dict(os.environ)
    if target.toolchain.path is not None:
        env["PATH"] = f"{target.toolchain.path}{os.pathsep}{env.get('PATH', '')}"
    command = [target.toolchain.command(tool), *args]
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, env=env)
    except FileNotFoundError:
        raise MeasureError(None, f"target '{target.name}' needs '{command[0]}' to measure the model, "
                                 f"and it is not on PATH", f"see {target.source}") from None
    if done.returncode != 0:
        raise MeasureError(None, f"'{' '.join(command)}' failed: {done.stderr.strip()}")
    return done.stdout


# --- sections and symbols ----------------------------------------------------------------

_FORMAT = re.compile(r"file format (\S+)")
_FLAGS = re.compile(r"^architecture: .*\n(.*)$", re.M)
_SECTION = re.compile(r"^\s*\d+\s+(\S+)\s+([0-9a-f]+)\s+[0-9a-f]+\s+[0-9a-f]+\s+[0-9a-f]+\s+2\*\*\d+\s*(.*)$")
_SYMBOL = re.compile(r"^([0-9a-f]+) (.{7}) (\S+)\t([0-9a-f]+) (?:\.hidden |\.protected |\.internal )?(.+)$")


def _arch(file_format: str) -> str:
    if "arm" in file_format:
        return "arm"
    if "x86-64" in file_format:
        return "x86-64"
    raise MeasureError(None, f"cannot measure code in file format '{file_format}'",
                       "stack analysis knows Arm (Thumb) and x86-64")


def _sections(text: str) -> tuple[Section, ...]:
    found = []
    for line in text.splitlines():
        if m := _SECTION.match(line):
            flags = frozenset(f.strip() for f in m.group(3).split(",") if f.strip())
            found.append(Section(m.group(1), int(m.group(2), 16), flags))
    return tuple(found)


def _symbols(text: str) -> tuple[Symbol, ...]:
    found = []
    for line in text.splitlines():
        if m := _SYMBOL.match(line):
            flags = m.group(2)
            found.append(Symbol(name=m.group(5), section=m.group(3), address=int(m.group(1), 16),
                                size=int(m.group(4), 16), function=flags[6] == "F"))
    return tuple(found)


# --- disassembly -------------------------------------------------------------------------

_DISASSEMBLY_OF = re.compile(r"^Disassembly of section (\S+):$")
_INSTRUCTION = re.compile(r"^\s*([0-9a-f]+):\t(.*)$")
_RELOCATION = re.compile(r"^\s*([0-9a-f]+): (R_\w+)\s+(\S+)")
_COMMENT = re.compile(r"\s+[@#]\s.*$")  # objdump's "@ 0x40" (Arm) and "# 1234 <x>" (x86)
_ADDEND = re.compile(r"[+-]0x[0-9a-f]+$")
_X86_PREFIXES = {"notrack", "bnd", "lock", "rep", "repz", "repnz", "repe", "repne", "data16", "cs", "ds", "addr32"}


def _split(text: str) -> tuple[str, str]:
    words = text.split(None, 1)
    while len(words) == 2 and words[0] in _X86_PREFIXES:
        words = words[1].split(None, 1)
    if not words:
        return "", ""
    return words[0], (words[1].strip() if len(words) > 1 else "")


def _instructions(text: str) -> dict[str, list[Instruction]]:
    """Instructions per section, each with the relocation (if any) applied inside it."""
    by_section: dict[str, list[Instruction]] = {}
    current: list[Instruction] | None = None
    patchable = False  # the last line listed was an instruction (not data), so a relocation is its
    for line in text.splitlines():
        if m := _DISASSEMBLY_OF.match(line):
            current, patchable = by_section.setdefault(m.group(1), []), False
        elif current is None:
            continue
        elif m := _RELOCATION.match(line):
            if patchable and current[-1].relocation is None:
                last = current[-1]
                addend = _ADDEND.search(m.group(3))
                current[-1] = Instruction(last.address, last.mnemonic, last.operands,
                                          _ADDEND.sub("", m.group(3)), int(addend.group(0), 16) if addend else 0)
        elif m := _INSTRUCTION.match(line):
            mnemonic, operands = _split(_COMMENT.sub("", m.group(2)))
            patchable = bool(mnemonic) and not mnemonic.startswith(".")  # .word, .short: literal pools
            if patchable:
                current.append(Instruction(int(m.group(1), 16), mnemonic, operands.replace("\t", " "), None))
        else:
            patchable = False  # labels, blank lines, "..." (zeros)
    return by_section


def _functions(symbols: Iterable[Symbol], code: Mapping[str, list[Instruction]]) -> dict[str, Function]:
    """Each FUNC symbol with its instructions: those from its address up to its size, or, for
    a symbol without a size (assembly), up to the next function in its section."""
    starts: dict[str, list[Symbol]] = {}
    for s in symbols:
        if s.function and s.section in code:
            starts.setdefault(s.section, []).append(s)
    functions = {}
    for section, syms in starts.items():
        syms.sort(key=lambda s: s.address)
        instructions = sorted(code[section], key=lambda ins: ins.address)
        at = [ins.address for ins in instructions]
        ends = sorted({s.address for s in syms})
        for s in syms:
            if s.size:
                end = s.address + s.size
            else:
                later = ends[bisect_right(ends, s.address):]
                end = later[0] if later else (at[-1] + 1 if at else s.address)
            body = tuple(instructions[bisect_left(at, s.address):bisect_left(at, end)])
            functions[s.name] = Function(s.name, section, s.address, end - s.address, body)
    return functions


def read_binary(target: Target, path: Path) -> Binary:
    """Sections, symbols and functions of an object file or linked image."""
    path = Path(path)
    if not path.is_file():
        raise MeasureError(None, f"'{path}' does not exist")
    headers = run_tool(target, "objdump", ["-f", "-h", "-t", "-w", str(path)])
    file_format, flags = _FORMAT.search(headers), _FLAGS.search(headers)
    if file_format is None or flags is None:
        raise MeasureError(None, f"objdump does not recognise '{path}'")
    arch = _arch(file_format.group(1))
    symbols = _symbols(headers)
    if arch == "arm":  # the Thumb bit is not part of the address
        symbols = tuple(Symbol(s.name, s.section, s.address & ~1 if s.function else s.address, s.size,
                               s.function) for s in symbols)
    disassembly = run_tool(target, "objdump", ["-d", "-r", "--no-show-raw-insn", str(path)])
    relocatable = not {"EXEC_P", "DYNAMIC"} & {f.strip() for f in flags.group(1).split(",")}
    return Binary(path=path, arch=arch, relocatable=relocatable, sections=_sections(headers),
                  symbols=symbols, functions=_functions(symbols, _instructions(disassembly)))


# --- who calls whom ----------------------------------------------------------------------

_ANNOTATED = re.compile(r"(?:^|\s)(?:0x)?([0-9a-f]+) <([^>]+)>\s*$")
_ARM_CONDITIONS = "eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le|al"
_ARM_BRANCH = re.compile(rf"^(bl|blx|b(?:{_ARM_CONDITIONS})?|cbn?z)(?:\.[nw])?$")
_ARM_REGISTER = re.compile(r"r\d+|ip|lr|sl|fp|sb")
_X86_BRANCH = re.compile(r"^(call|jmp|j[a-z]{1,3})q?$")


@dataclass(frozen=True)
class Transfer:
    """Control leaving a function: a call, a tail call, or a computed (indirect) transfer."""

    instruction: Instruction
    target: str | None          # callee symbol, when a relocation or a PLT entry names it
    target_address: int | None  # else the address branched to; neither: an indirect transfer


def transfers(binary: Binary, fn: Function) -> list[Transfer]:
    """Calls and jumps in `fn` whose destination is outside it, or unknown (indirect)."""
    found = []
    for ins in fn.instructions:
        if binary.arch == "arm":
            if not _ARM_BRANCH.match(ins.mnemonic):
                continue
            if _ARM_REGISTER.fullmatch(ins.operands):  # blx rN: a call through a pointer
                found.append(Transfer(ins, None, None))
                continue
        else:
            m = _X86_BRANCH.match(ins.mnemonic)
            if not m:
                continue
            if ins.operands.startswith("*"):
                if m.group(1) == "call":  # through a pointer: could go anywhere
                    found.append(Transfer(ins, None, None))
                continue  # a computed jump: see computed_jumps
        annotated = _ANNOTATED.search(ins.operands)
        address = int(annotated.group(1), 16) if annotated else None
        if ins.relocation is not None:
            found.append(Transfer(ins, ins.relocation, None))
        elif annotated and annotated.group(2).endswith("@plt"):  # a shared library's function
            found.append(Transfer(ins, annotated.group(2)[:-len("@plt")], None))
        elif address is not None and not fn.address <= address < fn.address + max(fn.size, 1):
            found.append(Transfer(ins, None, address))
    return found


def computed_jumps(binary: Binary, fn: Function) -> list[Instruction]:
    """Jumps to a computed address in `fn`: switch tables, as compilers and libgcc emit them
    (Thumb `mov pc, r3` after a table load, x86 `jmp *%rax`). They are taken to stay in
    the function, which holds for compiled code without function pointers; the report lists
    the functions that have them."""
    found = []
    for ins in fn.instructions:
        if binary.arch == "arm":
            if ins.mnemonic == "bx":
                computed = ins.operands != "lr"  # bx lr is the return
            else:
                computed = (ins.mnemonic.split(".")[0] in ("mov", "ldr") and ins.operands.startswith("pc,")
                            and ins.operands != "pc, lr" and "[sp]" not in ins.operands)  # not a pop
        else:
            computed = bool(_X86_BRANCH.match(ins.mnemonic)) and not ins.mnemonic.startswith("call") and \
                ins.operands.startswith("*")
        if computed:
            found.append(ins)
    return found


def function_at(binary: Binary, section: str | None, address: int) -> Function | None:
    """The function containing `address` (in `section`, for an object file)."""
    addresses, functions = binary.index.get(section if binary.relocatable else None, ((), ()))
    index = bisect_right(addresses, address) - 1
    while index >= 0:  # aliases and nested symbols share or precede the address
        f = functions[index]
        if f.address <= address < f.address + max(f.size, 1):
            return f
        index -= 1
    return None


def demangle(target: Target, names: Iterable[str]) -> dict[str, str]:
    """Readable names (C++ demangled) for symbols, by one c++filt run."""
    names = sorted(set(names))
    if not names:
        return {}
    try:
        lines = run_tool(target, "c++filt", [], stdin="\n".join(names) + "\n").splitlines()
    except MeasureError:
        return {n: n for n in names}  # display only: mangled names are still right
    return dict(zip(names, lines)) if len(lines) == len(names) else {n: n for n in names}
