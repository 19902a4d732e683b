"""Run test firmware (see firmware_scons.firmware_program) on the target's emulator.

The firmware talks to the host through semihosting files in the emulator's working
directory: it reads the inputs, writes the outputs and a few measurements, and exits with
a status. With `icount_shift` set, QEMU advances the core clock by 2**shift ns per
executed instruction, so the SysTick ticks the firmware counts convert to instructions.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Mapping, NamedTuple

from tinsmith.targets import Target, TargetError, load_target
from tinsmith.targets.firmware import INPUT_FILE, OUTPUT_FILE, STATS_FILE


class EmulatorError(TargetError):
    """The emulator is missing, timed out, or the firmware failed."""


class EmulatorRun(NamedTuple):
    output: bytes          # the outputs, concatenated in declaration order
    stack_bytes: int       # stack NAME_call used, from the caller's stack pointer down
    instructions: int | None  # instructions NAME_call executed (None without icount)
    stats: Mapping[str, int]  # everything the firmware measured (see firmware_main.cpp.j2)


# Exit statuses of the firmware (firmware_main.cpp.j2, startup.c).
_STATUS = {1: "could not read its inputs", 2: "could not write its outputs",
           3: "took an unexpected exception (a fault)"}


def emulator_command(target: Target | str, elf: str | Path) -> list[str]:
    """The command line that runs `elf` on the target's emulator."""
    target = load_target(target)
    if target.emulator is None:
        raise EmulatorError(None, f"target '{target.name}' has no emulator", f"see {target.source}")
    command = list(target.emulator.command)
    if target.emulator.icount_shift is not None:
        command += ["-icount", f"shift={target.emulator.icount_shift},align=off,sleep=off"]
    return command + ["-kernel", str(Path(elf).resolve())]


def ticks_to_instructions(target: Target, ticks: int) -> int | None:
    """Instructions executed in `ticks` SysTick ticks under icount, or None if unknown."""
    emulator, board = target.emulator, target.board
    if emulator is None or emulator.icount_shift is None or board is None or not board.core_clock_hz:
        return None
    # ticks / clock = seconds of emulated time; each instruction is 2**shift ns of it.
    return round(ticks * 1_000_000_000 / (board.core_clock_hz * (1 << emulator.icount_shift)))


def _parse_stats(text: str) -> dict[str, int]:
    stats = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key and value.isdigit():
            stats[key] = int(value)
    return stats


def run_on_emulator(target: Target | str, elf: str | Path, input_bytes: bytes,
                    timeout: float | None = None) -> EmulatorRun:
    """Run the firmware on `input_bytes` (raw inputs in declaration order); returns its
    outputs, the stack its model call used, and the instructions that call executed."""
    target = load_target(target)
    elf = Path(elf)
    if not elf.is_file():
        raise EmulatorError(None, f"firmware '{elf}' does not exist")
    command = emulator_command(target, elf)
    if shutil.which(command[0]) is None:
        raise EmulatorError(None, f"emulator '{command[0]}' for target '{target.name}' is not on PATH",
                            "on Debian or Ubuntu: apt-get install qemu-system-arm")
    limit = timeout if timeout is not None else target.emulator.timeout_seconds
    with tempfile.TemporaryDirectory(prefix="tinsmith-qemu-") as folder:
        work = Path(folder)
        (work / INPUT_FILE).write_bytes(input_bytes)
        try:
            done = subprocess.run(command, cwd=work, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=limit)
        except subprocess.TimeoutExpired as e:
            said = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
            raise EmulatorError(None, f"{elf.name} on {target.name} did not finish within {limit:g} s",
                                f"emulator said: {said.strip()}" if said.strip() else
                                "does the image start? check the board's memory map") from None
        said = (done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")).strip()
        if done.returncode != 0:
            why = _STATUS.get(done.returncode, f"exited with status {done.returncode}")
            raise EmulatorError(None, f"{elf.name} on {target.name} {why}",
                                f"emulator said: {said}" if said else f"command: {' '.join(command)}")
        try:
            output = (work / OUTPUT_FILE).read_bytes()
            stats = _parse_stats((work / STATS_FILE).read_text(encoding="ascii", errors="replace"))
        except OSError as e:
            raise EmulatorError(None, f"{elf.name} on {target.name} exited without writing {Path(e.filename).name}",
                                f"emulator said: {said}" if said else None) from None
    if "call_stack_bytes" not in stats:
        raise EmulatorError(None, f"{elf.name} on {target.name} wrote no stack measurement")
    ticks = stats.get("call_ticks", 0) - stats.get("tick_overhead", 0)
    instructions = ticks_to_instructions(target, max(ticks, 0)) if "call_ticks" in stats else None
    return EmulatorRun(output, stats["call_stack_bytes"], instructions, stats)


def kernel_instructions(target: Target | str, run: EmulatorRun) -> list[int] | None:
    """Instructions of each kernel in the timed call (the report's nodes, in order), from firmware
    built with TINSMITH_KERNEL_HOOK defined for the model and its main; None without it."""
    target = load_target(target)
    count = sum(1 for key in run.stats if key.startswith("kernel_ticks_"))
    if not count:
        return None
    overhead = run.stats.get("tick_overhead", 0)  # each kernel's count includes one read of the counter
    return [ticks_to_instructions(target, max(run.stats[f"kernel_ticks_{i}"] - overhead, 0)) for i in range(count)]

