"""Stack frames of single functions: the compiler's own figures (GCC's -fstack-usage .su file
and -fcallgraph-info=su .ci file), or, for code the compiler did not describe (libm, libc,
libgcc), a bound read from the disassembly.

A frame here is every byte the function itself moves the stack pointer down by, so that
the stack a call needs is the sum of the frames along its deepest call path. On x86-64
that includes the return address the call pushes, as GCC's .su figures do.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

from tinsmith.measure.binutils import Function, Instruction


@dataclass(frozen=True)
class Frame:
    """A function's own stack use: `bytes`, or None when it is not statically bounded."""

    bytes: int | None
    how: str               # where the figure comes from, for the report
    why_unbounded: str | None = None


# --- the compiler's figures --------------------------------------------------------------

# "mlp.cpp:384:6:void mlp::{anonymous}::run(const float*, float*, unsigned char*)\t32\tstatic"
_SU_LINE = re.compile(r"^(?:[^\t]*?:\d+:\d+:)?(.*)\t(\d+)\t(\S+)\s*$")
# node: { title: "mlp.cpp:_ZN3mlp...Ph" label: "void mlp::...\nmlp.cpp:384:6\n32 bytes (static)" }
_CI_NODE = re.compile(r'^node: \{ title: "(?:[^"]*:)?([^":]+)" label: "[^"]*?\\n(\d+) bytes \(([^)]*)\)"')


def _compiler_frame(size: int, qualifier: str, source: str) -> Frame:
    # GCC's qualifiers: "static" (fixed), "dynamic,bounded" (grows, but by a bounded amount
    # GCC added in), "dynamic" (alloca or a VLA: unbounded).
    if qualifier == "dynamic":
        return Frame(None, source, "its frame grows at run time (alloca or a variable-length array)")
    return Frame(size, source)


def read_callgraph_info(path: Path) -> dict[str, Frame]:
    """Frames by symbol (mangled name) from a GCC -fcallgraph-info=su file."""
    frames = {}
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        if m := _CI_NODE.match(line):
            frames[m.group(1)] = _compiler_frame(int(m.group(2)), m.group(3), f"compiler ({Path(path).name})")
    return frames


def read_stack_usage(path: Path) -> dict[str, Frame]:
    """Frames by GCC's printable function name (not mangled) from a -fstack-usage file; a
    name listed twice (a function and its clones) keeps the larger frame."""
    frames: dict[str, Frame] = {}
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        if m := _SU_LINE.match(line):
            key = qualified_name(m.group(1))
            frame = _compiler_frame(int(m.group(2)), m.group(3), f"compiler ({Path(path).name})")
            old = frames.get(key)
            if old is None or frame.bytes is None or (old.bytes is not None and frame.bytes > old.bytes):
                frames[key] = frame
    return frames


def qualified_name(text: str) -> str:
    """The qualified name, without return type, template arguments, parameters or clone
    suffix, of a GCC printable name (`void a::{anonymous}::f(const float*)`, as .su files
    give it) or of a demangled symbol (`a::(anonymous namespace)::f(float const*) [clone
    .isra.0]`): the key on which the two are matched. Overloads share a key, and then the
    larger frame is used for all of them."""
    text = text.replace("(anonymous namespace)", "{anonymous}")
    text = re.sub(r" \[clone [^\]]*\]", "", text)
    plain, depth = [], 0
    for ch in text:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            if ch == "(":
                break  # the parameter list
            plain.append(ch)
    return "".join(plain).strip().split(" ")[-1]


# --- bounds from the disassembly ---------------------------------------------------------

def _registers(reglist: str) -> list[str]:
    """Registers in an Arm register list "{r4, r5-r7, lr}" or "{d8-d9}"."""
    items = []
    for part in reglist.strip().strip("{}").split(","):
        part = part.strip()
        if m := re.fullmatch(r"([rsd])(\d+)-\1?(\d+)", part):
            items += [f"{m.group(1)}{i}" for i in range(int(m.group(2)), int(m.group(3)) + 1)]
        elif part:
            items.append(part)
    return items


def _immediate(text: str) -> int:
    return int(text, 0)


# Each rule: mnemonic pattern, operand pattern, bytes the stack pointer moves down by (a
# function of the operand match), or None for a move of unknown size. Anything else that
# writes the stack pointer, other than the moves up listed in _ARM_UP / _X86_UP, is unknown.
Rule = tuple[re.Pattern, re.Pattern, Callable[[re.Match], int | None]]

_ARM_DOWN: tuple[Rule, ...] = (
    (re.compile(r"push(\.w)?"), re.compile(r"(\{.*\})"), lambda m: 4 * len(_registers(m.group(1)))),
    (re.compile(r"stm(db|fd)(\.w)?"), re.compile(r"sp!, (\{.*\})"), lambda m: 4 * len(_registers(m.group(1)))),
    (re.compile(r"vpush(\.\d+)?|vstmdb(\.\d+)?"), re.compile(r"(?:sp!, )?(\{.*\})"),
     lambda m: sum(8 if r.startswith("d") else 4 for r in _registers(m.group(1)))),
    (re.compile(r"subw?(\.w)?|subs"), re.compile(r"sp, (?:sp, )?#(\d+|0x[0-9a-f]+)"), lambda m: _immediate(m.group(1))),
    (re.compile(r"addw?(\.w)?|adds"), re.compile(r"sp, (?:sp, )?#-(\d+|0x[0-9a-f]+)"), lambda m: _immediate(m.group(1))),
    (re.compile(r"str[bhd]?(\.w)?"), re.compile(r".*\[sp, #-(\d+|0x[0-9a-f]+)\]!"), lambda m: _immediate(m.group(1))),
    (re.compile(r"subw?(\.w)?|subs"), re.compile(r"sp, (?:sp, )?\w+.*"), lambda m: None),
)
# Moves up, and restores of a value the function saved before (mov sp, r7 undoes the frame
# it set up from sp): none of them can take the stack below what the moves down reached.
_ARM_UP = ((re.compile(r"(pop|vpop|ldm(ia|fd)?|vldmia)(\.w|\.\d+)?"), re.compile(r".*")),
           (re.compile(r"addw?(\.w)?|adds"), re.compile(r"sp, (?:sp, )?#(\d+|0x[0-9a-f]+)")),
           (re.compile(r"movs?"), re.compile(r"sp, (r\d+|fp|ip|sl)")),
           (re.compile(r"(ldr|ldrd)(\.w)?"), re.compile(r".*\[sp\], #\d+")))

_X86_DOWN: tuple[Rule, ...] = (
    (re.compile(r"pushq?"), re.compile(r".*"), lambda m: 8),
    (re.compile(r"subq?"), re.compile(r"\$(0x[0-9a-f]+|\d+),%rsp"), lambda m: _immediate(m.group(1))),
    (re.compile(r"addq?"), re.compile(r"\$-(0x[0-9a-f]+|\d+),%rsp"), lambda m: _immediate(m.group(1))),
    # Alignment to 2**k bytes (and $-2**k) moves down by less than 2**k.
    (re.compile(r"andq?"), re.compile(r"\$(0xf[0-9a-f]*),%rsp"), lambda m: (1 << 64) - int(m.group(1), 16)),
    (re.compile(r"enterq?"), re.compile(r"\$(0x[0-9a-f]+|\d+),.*"), lambda m: _immediate(m.group(1)) + 8),
    (re.compile(r"subq?"), re.compile(r"%\w+,%rsp"), lambda m: None),
)
_X86_UP = ((re.compile(r"(pop|leave)q?"), re.compile(r".*")),
           (re.compile(r"addq?"), re.compile(r"\$(0x[0-9a-f]+|\d+),%rsp")),
           (re.compile(r"(lea|mov)q?"), re.compile(r".*\(?%rbp\)?,%rsp")))


def _writes_sp(arch: str, ins: Instruction) -> bool:
    ops = ins.operands
    if arch == "arm":
        if ins.mnemonic.startswith(("cmp", "cmn", "tst", "teq", "str", "vst")) and "!" not in ops:
            return False
        return (ops.startswith(("sp,", "sp!")) or "[sp, #-" in ops or "[sp], " in ops
                or ins.mnemonic.startswith(("push", "vpush", "pop", "vpop")))
    return ops.endswith("%rsp") or ins.mnemonic.startswith(("push", "pop", "leave", "enter"))


def frame_from_disassembly(arch: str, fn: Function, source: str) -> Frame:
    """A bound on `fn`'s frame: the sum of every move of the stack pointer down in its body.
    Compiled code moves it down once per prologue push or allocation, so the sum bounds the
    deepest point; a move by a register (alloca) or an unrecognised write is unbounded."""
    down_rules, up_rules = (_ARM_DOWN, _ARM_UP) if arch == "arm" else (_X86_DOWN, _X86_UP)
    total = 8 if arch == "x86-64" else 0  # the return address the call pushed
    for ins in fn.instructions:
        if not _writes_sp(arch, ins):
            continue
        for mnemonic, operands, size in down_rules:
            if mnemonic.fullmatch(ins.mnemonic) and (m := operands.fullmatch(ins.operands)):
                moved = size(m)
                if moved is None:
                    return Frame(None, source, f"'{ins}' at 0x{ins.address:x} moves the stack pointer by "
                                               f"a run-time amount")
                total += moved
                break
        else:
            if not any(mnemonic.fullmatch(ins.mnemonic) and operands.fullmatch(ins.operands)
                       for mnemonic, operands in up_rules):
                return Frame(None, source, f"'{ins}' at 0x{ins.address:x} changes the stack pointer in a way "
                                           f"the analysis does not know")
    return Frame(total, source)


def frames_by_symbol(symbols: Iterable[str], demangled: Mapping[str, str],
                     callgraph_info: Mapping[str, Frame] | None,
                     stack_usage: Mapping[str, Frame] | None) -> dict[str, Frame]:
    """The compiler's frame for each symbol that has one: from the .ci file by mangled name,
    else from the .su file by qualified name (clones share their origin's entry)."""
    found = {}
    for symbol in symbols:
        if callgraph_info and symbol in callgraph_info:
            found[symbol] = callgraph_info[symbol]
        elif stack_usage:
            key = qualified_name(demangled.get(symbol, symbol))
            if key in stack_usage:
                found[symbol] = stack_usage[key]
    return found
