"""Cores added as a target file and nothing else (docs/KERNELS.md, "adding a core"): the
Cortex-M33 on QEMU's mps2-an505 and the Cortex-M55 on mps3-an547 draw on the Cortex-M4's kernel
sets (arm-dsp, fpu-registers, cpp), the M55 on its Helium int8 kernels first; the 32-bit RISC-V
cores rv32imac and rv32imafc on QEMU's virt board draw on cpp (and fpu-registers with the F
extension), with a runtime of their own (runtime_cpp/baremetal/*_riscv.c). Every graph in
graphs/ computes on each what the host
computes, and the int8 models are bit-exact with the TensorFlow Lite Micro interpreter."""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from tinsmith.generate.backends import backend_for
from tinsmith.pipeline import lower
from tinsmith.targets import load_target
from tinsmith.targets.qemu import run_on_emulator
from conftest import ROOT, emulated_core

GRAPHS = sorted((ROOT / "graphs").glob("*.yaml"))
ARM_CORES = ("cortex-m33", "cortex-m55", "cortex-m55-speed")
RISCV_CORES = ("rv32imac", "rv32imafc")


CORES = [emulated_core(name) for name in ARM_CORES + RISCV_CORES]


@pytest.mark.parametrize("core", [emulated_core(name) for name in ARM_CORES])
def test_a_new_core_is_a_target_file_over_existing_kernel_sets(core):
    backend, caps = backend_for(load_target(core))
    # the M55 adds its Helium int8 kernels ahead of the M4's sets; cortex-m55-speed the float
    # vector kernels as well (the host's, spelled with Helium's VFMA and VMAXNM)
    chains = {"cortex-m33": ["arm-dsp"], "cortex-m55": ["helium", "arm-dsp"],
              "cortex-m55-speed": ["helium", "arm-dsp", "vectors"]}
    assert backend.chain() == ["cortex-m", *chains[core], "fpu-registers", "cpp"]
    assert caps.dsp and caps.fpu != "none" and caps.float_registers == 32


def test_riscv_cores_draw_on_the_portable_kernels_and_their_int8_register_blocks():
    backend, caps = backend_for(load_target("rv32imac"))
    assert [s.name for s in backend.parents] == ["int-registers", "cpp"] and caps.fpu == "none" and not caps.dsp
    backend, caps = backend_for(load_target("rv32imafc"))
    assert caps.kernels == ("int-registers", "fpu-registers", "cpp") and caps.fpu == "f" and caps.float_registers == 32
    assert [s.name for s in backend.parents] == ["int-registers", "fpu-registers", "cpp"]


@pytest.fixture(scope="module", params=CORES)
def builds(request, graph_builds):
    """Every graph built for the core (firmware) and for the host (runners), shared by the session."""
    core = request.param
    return core, {"host": graph_builds("host"), core: graph_builds(core)}


def test_every_graph_agrees_with_the_host(builds, tmp_path):
    core, out = builds
    for path in GRAPHS:
        graph = lower(path)
        rng = np.random.default_rng(11)
        data = b"".join(rng.standard_normal(graph.types[n].shape).astype("<f4").tobytes() for n in graph.inputs)
        folder = out["host"] / graph.name
        (tmp_path / "in.bin").write_bytes(data)
        subprocess.run([str(folder / f"{graph.name}_runner"), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                       check=True)
        want = np.frombuffer((tmp_path / "out.bin").read_bytes(), "<f4")
        run = run_on_emulator(core, out[core] / graph.name / "firmware" / f"{graph.name}.elf", data, timeout=300)
        got = np.frombuffer(run.output, "<f4")
        # as on the Cortex-M4: newlib's (picolibc's) libm and the FPU's contraction against glibc's
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * float(np.abs(want).max()), err_msg=graph.name)
        assert run.instructions and run.instructions > 0
        # the report's worst case bounds the stack the call used
        report = json.loads((out[core] / graph.name / f"{graph.name}.json").read_text())
        assert 0 < run.stack_bytes <= report["ram"]["stack_bytes"], graph.name


@pytest.mark.parametrize("builds", [emulated_core(name) for name in RISCV_CORES], indirect=True)
def test_riscv_frames_from_disassembly_match_the_compiler(builds):
    """The RISC-V rules that bound library functions' frames give GCC's own figure for every
    function of every graph's model object (the Arm rules are tests/test_measure.py's)."""
    core, out = builds
    from tinsmith.measure.binutils import read_binary
    from tinsmith.measure.frames import frame_from_disassembly, read_callgraph_info
    compared = 0
    for path in GRAPHS:
        ci = out[core] / path.stem / f"{path.stem}.ci"
        binary = read_binary(load_target(core), ci.with_suffix(".o"))
        for symbol, frame in read_callgraph_info(ci).items():
            if symbol in binary.functions:
                assert frame_from_disassembly("riscv", binary.functions[symbol], "-").bytes == frame.bytes, symbol
                compared += 1
    assert compared >= 30


def test_riscv_millicode_and_register_moves_count_toward_the_frame():
    from tinsmith.measure.binutils import Function, Instruction
    from tinsmith.measure.frames import frame_from_disassembly

    def fn(*lines):
        body = tuple(Instruction(2 * i, *(line.split(" ", 1) + [""])[:2], None) for i, line in enumerate(lines))
        return Function("f", ".text", 0, 2 * len(lines), body)
    # picolibc's prologue: ra and s0..s2 saved by millicode (16 bytes), then 32 of its own
    assert frame_from_disassembly("riscv", fn("jal t0,80001dd2 <__riscv_save_3>", "add sp,sp,-32", "mv a0,s0",
                                              "add sp,sp,32", "j 80001df6 <__riscv_restore_3>"), "-").bytes == 48
    # the millicode itself: down 64, back up 32 by a register li set
    assert frame_from_disassembly("riscv", fn("add sp,sp,-64", "li t1,-32", "sw s6,32(sp)", "sub sp,sp,t1",
                                              "jr t0"), "-").bytes == 64
    assert frame_from_disassembly("riscv", fn("add sp,sp,-16", "sub sp,sp,a5"), "-").bytes is None


INT8_MODELS = ("kws_dscnn", "vww_mobilenet", "ic_resnet8", "ad_autoencoder")


@pytest.fixture(scope="module")
def int8_models():
    """name -> (model path, lowered graph, seeded input, the TFLite Micro interpreter's output):
    the same for every core, so worked out once."""
    tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    models = {}
    for name in INT8_MODELS:
        path = ROOT / "models" / f"{name}_int8.tflite"
        interp = tflm.Interpreter.from_file(str(path))
        x = np.random.default_rng(7).integers(-128, 128, interp.get_input_details(0)["shape"]).astype(np.int8)
        interp.set_input(x, 0)
        interp.invoke()
        models[name] = (path, lower(path), x, np.array(interp.get_output(0)))
    return models


# cortex-m55-speed runs int8 with cortex-m55's kernels (its float vectors come later in the chain)
@pytest.mark.parametrize("core", [c for c in CORES if c.values[0] != "cortex-m55-speed"])
def test_int8_models_are_bit_exact(core, int8_models, tmp_path_factory):
    from shared_builds import run_built, these_graphs
    # the four models' firmware by one SCons run (as `run_compiled` builds each, the same tool)
    built = these_graphs(tmp_path_factory.getbasetemp(), f"int8-models-{core}", core,
                         [path for path, *_ in int8_models.values()])
    for name, (path, graph, x, want) in int8_models.items():
        got = run_built(built, core, graph, {graph.inputs[0]: x})[graph.outputs[0]]
        np.testing.assert_array_equal(got, want, err_msg=name)


# A loop of known length between two counter reads: `li` and then 1000 times `addi`, `bnez`.
KNOWN_LOOP = r"""
#include "measure.h"
#include "semihost.h"
int main(void) {
  tinsmith_ticks_start();
  const uint64_t t0 = tinsmith_ticks_now();
  const uint64_t t1 = tinsmith_ticks_now();
  __asm__ volatile("  li t0, 1000\n1:\n  addi t0, t0, -1\n  bnez t0, 1b\n" ::: "t0");
  const uint64_t t2 = tinsmith_ticks_now();
  const int out = tinsmith_sh_open("tinsmith_out.bin", TINSMITH_SH_WRITE_BINARY);
  const int stats = tinsmith_sh_open("tinsmith_stats.txt", TINSMITH_SH_WRITE_BINARY);
  const int ok = out >= 0 && stats >= 0 && tinsmith_sh_close(out) &&
                 tinsmith_sh_write_field(stats, "call_stack_bytes", 0) &&
                 tinsmith_sh_write_field(stats, "call_ticks", t2 - t1) &&
                 tinsmith_sh_write_field(stats, "tick_overhead", t1 - t0) && tinsmith_sh_close(stats);
  return ok ? 0 : 2;
}
"""


@pytest.mark.parametrize("core", [emulated_core(name) for name in RISCV_CORES])
def test_riscv_counter_counts_the_instructions_of_a_known_loop(core, tmp_path):
    """minstret, as QEMU's -icount advances it, converted by the target's clock: the loop's 2001
    instructions exactly (the reads around it cost what the overhead measurement subtracts)."""
    from tinsmith.targets import BAREMETAL_DIR
    from tinsmith.targets.firmware import memory_script
    target = load_target(core)
    (tmp_path / "main.c").write_text(KNOWN_LOOP)
    (tmp_path / "memory.ld").write_text(memory_script(target))
    sources = [str(tmp_path / "main.c")] + [str(BAREMETAL_DIR / name) for name in target.board.runtime]
    flags = dict.fromkeys([*target.ccflags, *target.cflags, *target.linkflags])  # a specs file only once
    subprocess.run([target.toolchain.command("link"), *target.cpu_flags, target.optimize, *flags,
                    f"-I{BAREMETAL_DIR}", f"-L{BAREMETAL_DIR}",
                    "-T", str(tmp_path / "memory.ld"), *sources, "-o", str(tmp_path / "loop.elf")], check=True)
    run = run_on_emulator(core, tmp_path / "loop.elf", b"")
    assert run.instructions == 2001


def test_missing_riscv_tools_are_named_with_their_packages(tinsmith_cmd, tmp_path, monkeypatch):
    proc = tinsmith_cmd("build", str(ROOT / "graphs" / "mlp.yaml"), "--target", "rv32imac", "--build-dir",
                        str(tmp_path / "b"), cwd=tmp_path, env={"PATH": "/nonexistent"})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "error: the compiler for target 'rv32imac', riscv64-unknown-elf-g++, is not on PATH" in proc.stderr
    assert "apt-get install gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf" in proc.stderr
    from tinsmith.targets.qemu import EmulatorError
    (tmp_path / "fw.elf").write_bytes(b"\x7fELF")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(EmulatorError) as info:
        run_on_emulator("rv32imac", tmp_path / "fw.elf", b"")
    assert str(info.value).splitlines() == [
        "error: emulator 'qemu-system-riscv32' for target 'rv32imac' is not on PATH",
        "note: on Debian or Ubuntu: apt-get install qemu-system-misc"]


@pytest.mark.parametrize("old, new, message", [
    ("runtime: [startup_riscv.c,", "runtime: [startup_nowhere.c,", "'runtime' names 'startup_nowhere.c', which is not in"),
    ("runtime: [startup_riscv.c,", "runtime: [../baremetal/startup_riscv.c,", "'runtime' names '../baremetal/startup_riscv.c'"),
    ("system_includes: [../../runtime_cpp/baremetal/riscv_cxx]", "system_includes: [nowhere]",
     "system include folder 'nowhere' does not exist"),
])
def test_a_target_files_runtime_and_system_includes_are_checked_where_written(tmp_path, old, new, message):
    from tinsmith.targets import TargetError
    text = (ROOT / "codegen" / "targets" / "rv32imac.yaml").read_text()
    path = ROOT / "codegen" / "targets" / "rv32imac.yaml"
    line = next(i for i, l in enumerate(text.splitlines(), 1) if old in l)
    bad = tmp_path / "bad.yaml"
    # system_includes are relative to the file: keep the folder where the built-in one points
    bad.write_text(text.replace(old, new).replace("../../runtime_cpp", str(path.parents[2] / "runtime_cpp")))
    with pytest.raises(TargetError) as info:
        load_target(bad)
    assert str(info.value).startswith(f"{bad}:{line}:") and message in str(info.value)
