"""Placement: constants, workspace and stack in named linker sections and board regions, set in
the target YAML or per build. Target files are user input: bad regions and section names are
located errors. On the emulated Cortex-M7 the placed symbols sit in their regions (nm) and the
firmware gives the same outputs as without placement."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import oracle
from tinsmith.errors import TinsmithError
from tinsmith.pipeline import compile_graph
from tinsmith.targets import TargetError, load_target, with_placement
from tinsmith.targets.firmware import memory_script
from tinsmith.targets.qemu import run_on_emulator
from conftest import GRAPHS, ROOT, scons, tinsmith

M7 = (ROOT / "codegen" / "targets" / "cortex-m7.yaml").read_text()
# mps2-an500's SSRAM1 and SSRAM2/3 (QEMU's `info mtree`), each split in two regions.
REGIONS = ("    flash: {origin: 0x00000000, length: 2M}\n"
           "    weights: {origin: 0x00200000, length: 2M}\n"
           "    ram: {origin: 0x20000000, length: 2M}\n"
           "    fast_ram: {origin: 0x20200000, length: 2M}\n")
PLACEMENT = ("  placement:\n"
             "    constants: {region: weights, section: .ext_weights}\n"
             "    workspace: {region: fast_ram, section: .fast_bss}\n"
             "    stack: {region: fast_ram}\n")
WEIGHTS, FAST_RAM = range(0x00200000, 0x00400000), range(0x20200000, 0x20400000)

needs_arm = pytest.mark.skipif(shutil.which("arm-none-eabi-g++") is None or shutil.which("qemu-system-arm") is None,
                               reason="needs arm-none-eabi-g++ and qemu-system-arm")


def target_file(folder: Path, placement: str = PLACEMENT, regions: str = REGIONS) -> Path:
    lines = M7.splitlines(keepends=True)
    start = next(i for i, l in enumerate(lines) if l.lstrip().startswith("flash:"))
    text = "".join(lines[:start]) + regions + placement + "".join(lines[start + 2:])
    path = folder / "m7-placed.yaml"
    path.write_text(text)
    return path


# --- target files --------------------------------------------------------------------------

def test_placement_is_read_from_the_target_file(tmp_path):
    board = load_target(target_file(tmp_path)).board
    assert dict(board.regions)["weights"].origin == 0x200000
    p = board.placement
    assert (p.constants.region, p.constants.section) == ("weights", ".ext_weights")
    assert (p.workspace.region, p.workspace.section) == ("fast_ram", ".fast_bss")
    assert (p.stack.region, p.stack.section) == ("fast_ram", None)


def test_per_build_placement_overrides_kind_by_kind(tmp_path):
    target = with_placement(load_target(target_file(tmp_path)), "constants=flash:.my_weights, stack=ram")
    p = target.board.placement
    assert (p.constants.region, p.constants.section) == ("flash", ".my_weights")
    assert p.workspace.section == ".fast_bss" and p.stack.region == "ram"
    assert with_placement(target, "workspace=fast_ram").board.placement.workspace.section == ".tinsmith_workspace"
    with pytest.raises(TargetError, match="has no board"):
        with_placement(load_target("host"), "constants=flash")
    with pytest.raises(TargetError, match="region 'dtcm', which the board's memory does not have"):
        with_placement(load_target("cortex-m7"), "workspace=dtcm")
    with pytest.raises(TargetError, match="KIND=REGION"):
        with_placement(load_target("cortex-m7"), "weights=flash")


@pytest.mark.parametrize("placement, regions, where, message", [
    ("  placement:\n    constants: {region: dtcm}\n", REGIONS, ("dtcm", 25),
     "constants are placed in region 'dtcm', which the board's memory does not have"),
    ("  placement:\n    constants: {region: weights, section: .rodata}\n", REGIONS, (".rodata", 43),
     "'.rodata' cannot name the constants' linker section"),
    ('  placement:\n    constants: {region: weights, section: ".x\\")));asm(\\"nop"}\n', REGIONS, ("asm", 43),
     "cannot name the constants' linker section"),
    ("  placement:\n    constants: {region: weights, section: .a.b}\n", REGIONS, (".a.b", 43),
     "'.a.b' cannot name"),
    ("  placement:\n    constants: {region: ram}\n", REGIONS, ("region: ram", 25), "constants cannot be placed in 'ram'"),
    ("  placement:\n    stack: {region: fast_ram, section: .s}\n", REGIONS, ("stack: {", 40), "the stack takes a region only"),
    ("  placement:\n    constants: {region: weights, section: .s}\n    workspace: {region: fast_ram, section: .s}\n",
     REGIONS, ("constants: {region: weights, section: .s}", 5), "constants and workspace are both placed in section '.s'"),
    ("", REGIONS.replace("0x00200000", "0x00100000"), ("weights:", 14), "memory region 'weights' overlaps 'flash'"),
    ("", REGIONS.replace("weights:", "Weights:"), ("Weights:", 5), "memory region name 'Weights' must be lower-case"),
])
def test_bad_placement_is_a_located_error(tmp_path, placement, regions, where, message):
    path = target_file(tmp_path, placement, regions)
    with pytest.raises(TargetError) as e:
        load_target(path)
    assert message in e.value.message
    needle, col = where
    line = next(i for i, l in enumerate(path.read_text().splitlines(), 1) if needle in l)
    assert (e.value.loc.line, e.value.loc.col) == (line, col), str(e.value)
    assert len(str(e.value).splitlines()) == 1 + bool(e.value.hint)  # one line, however hostile the name


def test_memory_script_places_each_section_in_its_region(tmp_path):
    script = memory_script(load_target(target_file(tmp_path)))
    assert "WEIGHTS (rwx) : ORIGIN = 0x00200000, LENGTH = 0x200000" in script
    assert "__tinsmith_stack_placed = 1;\nINCLUDE sections.ld" in script
    assert "  .ext_weights : ALIGN(16)\n  {\n    *(.ext_weights .ext_weights.*)\n  } > WEIGHTS" in script
    assert "  .fast_bss (NOLOAD) : ALIGN(16)\n  {\n    *(.fast_bss .fast_bss.*)\n  } > FAST_RAM" in script
    plain = memory_script(load_target("cortex-m7"))
    assert "SECTIONS" not in plain and "placed" not in plain and plain.endswith("INCLUDE sections.ld\n")


# --- generated code --------------------------------------------------------------------------

def test_constants_section_is_macro_guarded(tmp_path):
    plain = compile_graph(GRAPHS / "mlp.yaml").files["mlp.cpp"]
    placed = compile_graph(GRAPHS / "mlp.yaml", constants_section=".ext_weights").files["mlp.cpp"]
    assert "TINSMITH_PLACE_SECTIONS" not in plain and "section(" not in plain
    assert "#if defined(TINSMITH_PLACE_SECTIONS)\nextern const float w1[2048] " \
           "__attribute__((section(\".ext_weights\")));" in placed
    # without the macro the placed source compiles to the same object as the plain one
    (tmp_path / "plain.cpp").write_text(plain)
    (tmp_path / "placed.cpp").write_text(placed)
    include = str(ROOT / "runtime_cpp" / "include")
    for name, defines in (("plain", []), ("placed", []), ("placed_def", ["-DTINSMITH_PLACE_SECTIONS"])):
        source = tmp_path / f"{name.split('_')[0]}.cpp"
        (tmp_path / "mlp.hpp").write_text(compile_graph(GRAPHS / "mlp.yaml").files["mlp.hpp"])
        (tmp_path / "mlp.h").write_text(compile_graph(GRAPHS / "mlp.yaml").files["mlp.h"])
        subprocess.run(["g++", "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-c", str(source), "-I", str(tmp_path),
                        "-I", include, *defines, "-o", str(tmp_path / f"{name}.o")], check=True)
    sections = lambda o: subprocess.run(["objdump", "-h", str(tmp_path / o)], capture_output=True, text=True).stdout
    assert ".ext_weights" not in sections("placed.o") and ".ext_weights" in sections("placed_def.o")
    strip = lambda o: [l for l in sections(o).splitlines()[2:]]
    assert strip("plain.o") == strip("placed.o")


def test_bad_section_on_the_command_line(tmp_path):
    proc = tinsmith("generate", str(GRAPHS / "mlp.yaml"), "-o", str(tmp_path / "out"), "--constants-section", ".text")
    assert proc.returncode == 1 and "error: '.text' cannot name the constants' linker section" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()
    with pytest.raises(TinsmithError, match="both be copied to RAM and placed"):
        compile_graph(GRAPHS / "mlp.yaml", constants_in_ram=True, constants_section=".w")


# --- on the emulated Cortex-M7 ----------------------------------------------------------------

def _symbols(elf: Path) -> dict[str, int]:
    out = subprocess.run(["arm-none-eabi-nm", "-C", str(elf)], capture_output=True, text=True, check=True).stdout
    rows = [line.split(maxsplit=2) for line in out.splitlines()]
    return {row[2]: int(row[0], 16) for row in rows if len(row) == 3}


def _build(target: Path | str, build_dir: Path, *settings: str) -> Path:
    elf = build_dir / "mlp" / "firmware" / "mlp.elf"
    scons("-Q", f"target={target}", f"build_dir={build_dir}", f"graphs={GRAPHS / 'mlp.yaml'}", *settings, str(elf))
    return elf


@needs_arm
def test_placed_firmware_runs_with_symbols_in_their_regions(tmp_path):
    placed_target = target_file(tmp_path)
    placed = _build(placed_target, tmp_path / "placed")
    plain = _build("cortex-m7", tmp_path / "plain")
    symbols = _symbols(placed)
    # every constant the model keeps (the generator may fold or repack some): in the weights region
    constants = {k: v for k, v in symbols.items() if k.startswith("mlp::(anonymous namespace)::constants::")}
    assert "mlp::(anonymous namespace)::constants::w1" in constants
    assert all(address in WEIGHTS for address in constants.values()), constants
    assert symbols["(anonymous namespace)::workspace"] in FAST_RAM
    assert symbols["__stack_limit"] in FAST_RAM and symbols["__stack_top"] in FAST_RAM
    assert symbols["__stack_top"] - symbols["__stack_limit"] == 16 * 1024
    plain_symbols = _symbols(plain)
    assert plain_symbols["mlp::(anonymous namespace)::constants::w1"] < 0x00200000
    assert plain_symbols["__stack_top"] < 0x20200000

    x = oracle.seeded_inputs("mlp", 3)["x"]
    data = x.astype("<f4").tobytes()
    placed_run = run_on_emulator(load_target(placed_target), placed, data)
    plain_run = run_on_emulator("cortex-m7", plain, data)
    assert placed_run.output == plain_run.output
    got = np.frombuffer(placed_run.output, dtype="<f4")
    np.testing.assert_allclose(got, oracle.evaluate("mlp", {"x": x})["probs"].reshape(-1), rtol=1e-5, atol=1e-6)
    assert 0 < placed_run.stack_bytes < 16 * 1024  # measured on the stack in FAST_RAM


@needs_arm
def test_per_build_placement_moves_the_constants(tmp_path):
    target = target_file(tmp_path, placement="")
    elf = _build(target, tmp_path / "b", "placement=constants=weights:.flash_weights")
    assert ".flash_weights" in (tmp_path / "b" / "mlp" / "mlp.cpp").read_text()
    assert _symbols(elf)["mlp::(anonymous namespace)::constants::w1"] in WEIGHTS
    x = oracle.seeded_inputs("mlp", 4)["x"]
    got = np.frombuffer(run_on_emulator(load_target(target), elf, x.astype("<f4").tobytes()).output, dtype="<f4")
    np.testing.assert_allclose(got, oracle.evaluate("mlp", {"x": x})["probs"].reshape(-1), rtol=1e-5, atol=1e-6)
