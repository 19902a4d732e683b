"""Generated models as Cortex-M firmware: targets load from YAML, every example graph
cross-compiles through SCons (warning-free at -Os and -O2), links without heap, exceptions
or RTTI, and gives the NumPy reference's numbers when QEMU runs it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tinsmith.pipeline import compile_graph, lower, write_files
from tinsmith.reference import evaluate
from tinsmith.targets import TARGETS, TargetError, load_target
from tinsmith.targets.firmware import memory_script, render_firmware_main
from tinsmith.targets.qemu import EmulatorError, run_on_emulator

ROOT = Path(__file__).resolve().parents[1]
# The hand-written examples: small enough for every target, optimisation level and board.
# tests/test_targets.py covers every graph in graphs/ on the Cortex-M4.
GRAPHS = [ROOT / "graphs" / f"{name}.yaml" for name in ("branches", "encoder", "mlp")]
FIRMWARE_TARGETS = ("cortex-m4", "cortex-m7", "cortex-m0plus")
OPTIMIZE = ("-Os", "-O2")
SEED = 20240611

needs_cross = pytest.mark.skipif(shutil.which("arm-none-eabi-g++") is None,
                                 reason="needs arm-none-eabi-g++ (Debian: gcc-arm-none-eabi, libnewlib-arm-none-eabi)")
needs_qemu = pytest.mark.skipif(shutil.which("qemu-system-arm") is None,
                                reason="needs qemu-system-arm (Debian: qemu-system-arm)")

# Symbols that mean the heap, exceptions or RTTI reached the image.
FORBIDDEN_NAMES = {"malloc", "free", "calloc", "realloc", "_malloc_r", "_free_r", "_calloc_r", "_realloc_r",
                   "_sbrk", "_sbrk_r", "__cxa_throw", "__cxa_allocate_exception", "__cxa_begin_catch",
                   "__cxa_end_catch", "__gxx_personality_v0", "_Unwind_Resume", "__cxa_pure_virtual"}
FORBIDDEN_PREFIXES = ("_Znw", "_Zna", "_ZdlPv", "_ZdaPv", "_ZTI", "_ZTS", "_ZTV")


def _graph_id(path: Path) -> str:
    return path.stem


# --- targets as data -------------------------------------------------------------------

def test_builtin_targets_load():
    assert set(TARGETS) >= {"host", "cortex-m4", "cortex-m7", "cortex-m0plus"}
    m4 = load_target("cortex-m4")
    assert m4.toolchain.command("cxx") == "arm-none-eabi-g++"
    assert m4.cpu_flags == ("-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16")
    assert "-Wl,--gc-sections" in m4.linkflags
    assert (m4.board.flash.origin, m4.board.ram.origin, m4.board.ram.length) == (0, 0x20000000, 4 << 20)
    assert m4.emulator.command[:5] == ("qemu-system-arm", "-machine", "mps2-an386", "-cpu", "cortex-m4")
    m0 = load_target("cortex-m0plus")
    assert "-mfloat-abi=soft" in m0.cpu_flags and m0.board.name == "microbit"
    host = load_target("host")
    assert not host.baremetal and host.emulator is None and host.toolchain.command("cc") == "gcc"


def test_user_target_file_needs_no_code(tmp_path):
    text = (ROOT / "codegen" / "targets" / "cortex-m4.yaml").read_text()
    path = tmp_path / "my-board.yaml"
    path.write_text(text.replace("target: cortex-m4", "target: my-board").replace("stack_bytes: 16K",
                                                                                 "stack_bytes: 0x2000"))
    target = load_target(path)
    assert (target.name, target.board.stack_bytes, target.source) == ("my-board", 0x2000, path.resolve())
    assert "__stack_size = 0x2000;" in memory_script(target)
    assert "RAM (rwx) : ORIGIN = 0x20000000, LENGTH = 0x400000" in memory_script(target)


MINIMAL_TARGET = """\
target: tiny
toolchain: {prefix: arm-none-eabi-, cc: gcc, cxx: g++, ar: ar, ranlib: ranlib, nm: nm}
cpu_flags: [-mcpu=cortex-m4, -mthumb]
ccflags: []
cflags: []
cxxflags: []
linkflags: [--specs=nano.specs, "-Wl,--gc-sections"]
board:
  name: mps2-an386
  memory:
    flash: {origin: 0x0, length: 4M}
    ram: {origin: 0x20000000, length: 64K}
  stack_bytes: 8K
emulator:
  command: [qemu-system-arm, -machine, mps2-an386]
  icount_shift: 6
"""


def _bad_target(tmp_path, old: str, new: str) -> str:
    assert old in MINIMAL_TARGET
    path = tmp_path / "bad.yaml"
    path.write_text(MINIMAL_TARGET.replace(old, new, 1))
    with pytest.raises(TargetError) as info:
        load_target(path)
    return str(info.value).replace(str(path), "bad.yaml")


def test_minimal_target_defaults(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(MINIMAL_TARGET)
    tiny = load_target(path)
    assert (tiny.optimize, tiny.description, tiny.board.core_clock_hz, tiny.emulator.timeout_seconds) == \
        ("-Os", "", None, 60.0)
    assert tiny.board.stack_bytes == 8192 and tiny.board.ram.length == 65536


def test_target_errors_say_where(tmp_path):
    assert _bad_target(tmp_path, "nm: nm}", "nm: nm, strip: strip}").splitlines()[0] == \
        "bad.yaml:2:88: error: unknown key 'strip' in 'toolchain'"
    assert _bad_target(tmp_path, " cxx: g++,", "").splitlines()[0] == \
        "bad.yaml:2:12: error: 'toolchain' needs 'cxx'"
    assert _bad_target(tmp_path, "stack_bytes: 8K", "stack_bytes: lots") == \
        "bad.yaml:13:16: error: 'stack_bytes' must be a non-negative integer or a size like 16K or 4M; got 'lots'"
    assert _bad_target(tmp_path, "stack_bytes: 8K", "stack_bytes: 64K") == \
        "bad.yaml:13:16: error: the stack (65536 bytes) does not fit in RAM (65536 bytes)"
    assert _bad_target(tmp_path, '"-Wl,--gc-sections"', "-Wl,--gc-sections").splitlines() == [
        "bad.yaml:7:33: error: 'linkflags' has a bare '-Wl'",
        "bad.yaml:7:33: note: a comma ends an item in [a, b] lists: write \"-Wl,...\" in quotes"]
    assert _bad_target(tmp_path, "icount_shift: 6", "icount_shift: yes") == \
        "bad.yaml:16:17: error: 'icount_shift' must be an integer from 0 to 10; got True"
    assert _bad_target(tmp_path, "mps2-an386]", "mps2-an386, -kernel, x.elf]").splitlines()[0] == \
        "bad.yaml:15:52: error: 'command' must not contain -kernel"
    assert _bad_target(tmp_path, "board:\n", "board: null\nunused:\n").splitlines()[0] == \
        "bad.yaml:9:1: error: unknown key 'unused' in a target file"


def test_unknown_target_lists_builtins():
    with pytest.raises(TargetError) as info:
        load_target("cortex-m99")
    assert str(info.value).splitlines() == [
        "error: unknown target 'cortex-m99'; did you mean 'cortex-m7'?",
        f"note: built-in targets are {', '.join(TARGETS)}; or give the path of a target YAML file"]


def test_missing_emulator_is_a_clear_error(tmp_path):
    text = (ROOT / "codegen" / "targets" / "cortex-m4.yaml").read_text()
    path = tmp_path / "nowhere.yaml"
    path.write_text(text.replace("[qemu-system-arm,", "[qemu-system-nowhere,"))
    elf = tmp_path / "fw.elf"
    elf.write_bytes(b"\x7fELF")
    with pytest.raises(EmulatorError) as info:
        run_on_emulator(load_target(path), elf, b"")
    assert str(info.value).splitlines() == [
        "error: emulator 'qemu-system-nowhere' for target 'cortex-m4' is not on PATH",
        "note: on Debian or Ubuntu: apt-get install qemu-system-arm"]


def test_firmware_main_passes_every_input_and_output_in_order():
    report = {"graph": "two", "inputs": [{"name": "a", "dtype": "float32", "bytes": 8},
                                         {"name": "b", "dtype": "int64", "bytes": 16}],
              "outputs": [{"name": "c", "dtype": "float32", "bytes": 4}]}
    text = render_firmware_main(report)
    assert "two_call(in_a, in_b, out_c, workspace);" in text
    assert "alignas(16) int64_t in_b[TWO_SIZE_b];" in text
    assert "static_assert(kInputBytes == 24u" in text


# --- cross-compiled and emulated ---------------------------------------------------------

@pytest.fixture(scope="module")
def firmware(tmp_path_factory):
    """Every example graph generated, then built for every firmware target at -Os and -O2
    (with -Werror) by one SCons run; maps (graph, target, opt) to the ELF."""
    if shutil.which("arm-none-eabi-g++") is None:
        pytest.skip("needs arm-none-eabi-g++")
    work = tmp_path_factory.mktemp("firmware")
    names = []
    for graph in GRAPHS:
        compiled = compile_graph(graph)
        write_files(compiled.files, work / compiled.graph.name)
        names.append(compiled.graph.name)
    (work / "SConstruct").write_text(f"""\
import os, sys
sys.path.insert(0, {str(ROOT)!r})
from tinsmith.targets.firmware_scons import firmware_program

env = Environment(ENV=os.environ.copy())
for name in {names!r}:
    for target in {list(FIRMWARE_TARGETS)!r}:
        for opt in {list(OPTIMIZE)!r}:
            firmware_program(env, target, name, name, build_dir=f"build/{{name}}/{{target}}{{opt}}",
                             optimize=opt, extra_ccflags=["-Werror"])
""")
    done = subprocess.run([sys.executable, "-m", "SCons", "-Q", f"-j{max(2, os.cpu_count() or 1)}"], cwd=work,
                          capture_output=True, text=True, timeout=300)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    elves = {(graph.stem, name, target, opt): work / "build" / name / f"{target}{opt}" / f"{name}.elf"
             for graph, name in zip(GRAPHS, names) for target in FIRMWARE_TARGETS for opt in OPTIMIZE}
    return {"work": work, "log": log, "elves": elves}


def _elf(firmware, graph: Path, target: str, opt: str) -> Path:
    return next(elf for (stem, _, t, o), elf in firmware["elves"].items() if (stem, t, o) == (graph.stem, target, opt))


def _inputs(graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    arrays = {}
    for name in graph.inputs:
        t = graph.types[name]
        if t.dtype.startswith("float"):
            arrays[name] = rng.standard_normal(t.shape).astype(t.numpy_dtype)
        else:
            arrays[name] = rng.integers(-8, 8, size=t.shape).astype(t.numpy_dtype)
    return arrays


@needs_cross
def test_builds_warning_free(firmware):
    assert "warning" not in firmware["log"].lower(), firmware["log"]
    assert all(elf.is_file() for elf in firmware["elves"].values())


@needs_cross
@pytest.mark.parametrize("target", FIRMWARE_TARGETS)
@pytest.mark.parametrize("graph", GRAPHS, ids=_graph_id)
def test_no_heap_exceptions_or_rtti(firmware, graph, target):
    elf = _elf(firmware, graph, target, "-Os")
    name = elf.stem
    for image in (elf, elf.with_suffix(".o")):  # the whole image (startup included), and the model alone
        listing = subprocess.run(["arm-none-eabi-nm", str(image)], capture_output=True, text=True, check=True).stdout
        symbols = {line.split()[-1] for line in listing.splitlines() if line.strip()}
        bad = sorted(s for s in symbols if s in FORBIDDEN_NAMES or s.startswith(FORBIDDEN_PREFIXES))
        assert not bad, f"{image.name}: {bad}"
    assert f"{name}_call" in listing


@needs_cross
@needs_qemu
@pytest.mark.parametrize("opt", OPTIMIZE)
@pytest.mark.parametrize("target", FIRMWARE_TARGETS)
@pytest.mark.parametrize("graph", GRAPHS, ids=_graph_id)
def test_emulated_matches_reference(firmware, graph, target, opt):
    lowered = lower(graph)
    inputs = _inputs(lowered)
    expected = evaluate(lowered, inputs)
    run = run_on_emulator(target, _elf(firmware, graph, target, opt),
                          b"".join(inputs[n].tobytes() for n in lowered.inputs))
    assert len(run.output) == sum(expected[n].nbytes for n in lowered.outputs)
    offset = 0
    for name in lowered.outputs:
        want = expected[name]
        got = np.frombuffer(run.output, dtype=want.dtype, count=want.size, offset=offset).reshape(want.shape)
        offset += want.nbytes
        # atol only matters next to zero, where float32 rounding of a sum's terms is
        # larger than rtol times the (cancelled) result.
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{graph.stem}.{name} on {target}{opt}")
    region = run.stats["stack_region_bytes"]
    assert 0 < run.stack_bytes <= run.stats["peak_stack_bytes"] < region
    report = json.loads((_elf(firmware, graph, target, opt).parents[3] / lowered.name / f"{lowered.name}.plan.json")
                        .read_text())
    assert run.instructions is not None and run.instructions >= report["macs"]


@needs_cross
@needs_qemu
def test_emulated_runs_are_deterministic(firmware):
    graph = GRAPHS[0]
    lowered = lower(graph)
    data = b"".join(a.tobytes() for a in _inputs(lowered).values())
    first, second = (run_on_emulator("cortex-m4", _elf(firmware, graph, "cortex-m4", "-Os"), data) for _ in range(2))
    assert first == second


@needs_cross
@needs_qemu
def test_wrong_input_size_is_reported(firmware):
    graph = GRAPHS[0]
    lowered = lower(graph)
    need = sum(lowered.types[n].nbytes for n in lowered.inputs)
    with pytest.raises(EmulatorError) as info:
        run_on_emulator("cortex-m4", _elf(firmware, graph, "cortex-m4", "-Os"), bytes(need - 4))
    assert str(info.value).splitlines() == [
        f"error: {lowered.name}.elf on cortex-m4 could not read its inputs",
        f"note: emulator said: {lowered.name} firmware: tinsmith_in.bin must hold exactly {need} bytes"]


def test_a_target_based_on_another_keeps_what_it_does_not_write(tmp_path):
    path = tmp_path / "my-m55.yaml"
    path.write_text("target: my-m55\nbased_on: cortex-m55\ncapabilities: {channels_last: true}\n"
                    "board:\n  name: mps3-an547\n  memory:\n    flash: {origin: 0x0, length: 512K}\n"
                    "    ram: {origin: 0x31000000, length: 64K}\n  stack_bytes: 4K\n")
    mine, base = load_target(path), load_target("cortex-m55")
    # capabilities merge key by key; a section written (board) replaces the base's whole
    assert mine.capabilities.channels_last and mine.capabilities.kernels == base.capabilities.kernels
    assert (mine.board.ram.length, mine.board.placement.constants) == (65536, None)
    assert (mine.toolchain, mine.cpu_flags, mine.emulator) == (base.toolchain, base.cpu_flags, base.emulator)
    # a build depends on every file the target was read from
    assert mine.files == (path.resolve(), base.source)


@pytest.mark.parametrize("based_on, message", [
    ("cortex-m99", "error: 'based_on' names 'cortex-m99', which is neither a built-in target nor a file"),
    ("me.yaml", "error: 'based_on: me.yaml' makes a cycle of target files (me.yaml -> me.yaml)"),
    ("[1]", "error: 'based_on' must name a built-in target or a target file"),
])
def test_based_on_errors_say_where(tmp_path, based_on, message):
    path = tmp_path / "me.yaml"
    path.write_text(f"target: me\nbased_on: {based_on}\n")
    with pytest.raises(TargetError) as info:
        load_target(path)
    assert str(info.value).splitlines()[0] == f"{path}:2:11: {message}"
