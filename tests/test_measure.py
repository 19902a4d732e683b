"""The report knows the memory: code, constants and static RAM measured from the target's
object file agree with its symbol table, and the worst-case stack from the compiler's frames
and the machine code's call graph is never below what the call really uses on QEMU (stack
painting) and not far above it. Budgets fail with the largest consumers named."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tinsmith.measure import HOSTED_EXTERNAL_CALL_BYTES, BudgetError, check_budgets, measure_model, summary
from tinsmith.measure.binutils import Function, Instruction
from tinsmith.measure.frames import frame_from_disassembly, qualified_name
from tinsmith.pipeline import compile_graph, write_files
from tinsmith.targets import load_target
from tinsmith.targets.qemu import run_on_emulator

ROOT = Path(__file__).resolve().parents[1]
# The hand-written examples: small enough for every target, optimisation level and board.
# tests/test_targets.py covers every graph in graphs/ on the Cortex-M4.
GRAPHS = [ROOT / "graphs" / f"{name}.yaml" for name in ("branches", "encoder", "mlp")]
TARGETS = ("cortex-m4", "host")
# Emulated: the M4 (hard float: libm), and the M0+ (soft float: libgcc's helpers on every path).
EMULATED = ("cortex-m4", "cortex-m0plus")
SEED = 7
# Stack the measured call may leave unused of the bound: only paths the test's inputs do not
# take (libm's error handling: with_errnof, __math_oflowf, __errno, a few frames of at most
# 32 bytes each). On these graphs the bound has been exact; 128 bytes still catches a
# doubled frame or a callee counted twice.
STACK_SLACK = 128
# Constants the compiler folds into instructions or literal pools in .text (one-element
# scalars) leave no .rodata symbol; anything larger must be there, byte for byte.
FOLDED_CONSTANT_BYTES = 16

needs_cross = pytest.mark.skipif(shutil.which("arm-none-eabi-g++") is None, reason="needs arm-none-eabi-g++")
needs_qemu = pytest.mark.skipif(shutil.which("qemu-system-arm") is None, reason="needs qemu-system-arm")

STACK_FLAGS = ["-fstack-usage", "-fcallgraph-info=su"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every example graph generated, its model compiled for the host and (with test
    firmware) for the emulated targets, with -fstack-usage and -fcallgraph-info=su, by one
    SCons run."""
    if shutil.which("arm-none-eabi-g++") is None:
        pytest.skip("needs arm-none-eabi-g++")
    work = tmp_path_factory.mktemp("measure")
    names = []
    for graph in GRAPHS:
        compiled = compile_graph(graph)
        write_files(compiled.files, work / compiled.graph.name)
        names.append(compiled.graph.name)
    (work / "SConstruct").write_text(f"""\
import os, sys
sys.path.insert(0, {str(ROOT)!r})
from tinsmith.targets.firmware_scons import configure_toolchain, firmware_program

env = Environment(ENV=os.environ.copy())
host = configure_toolchain(env, "host", extra_ccflags={STACK_FLAGS + ["-Werror"]!r})
host.Replace(CPPPATH=[{str(ROOT / "runtime_cpp" / "include")!r}])
for name in {names!r}:
    for target in {list(EMULATED)!r}:
        firmware_program(env, target, name, name, build_dir=f"build/{{name}}/{{target}}",
                         extra_ccflags={STACK_FLAGS + ["-Werror"]!r})
    host.Object(f"build/{{name}}/host/{{name}}.o", f"{{name}}/{{name}}.cpp", CPPPATH=[name] + host["CPPPATH"])
""")
    done = subprocess.run([sys.executable, "-m", "SCons", "-Q", f"-j{max(2, os.cpu_count() or 1)}"], cwd=work,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return {"work": work, "names": dict(zip((g.stem for g in GRAPHS), names))}


def _paths(built, graph: Path, target: str) -> tuple[dict, Path]:
    name = built["names"][graph.stem]
    plan = json.loads((built["work"] / name / f"{name}.plan.json").read_text())
    return plan, built["work"] / "build" / name / target / f"{name}.o"


def _report(built, graph: Path, target: str, **kwargs) -> dict:
    plan, obj = _paths(built, graph, target)
    return measure_model(plan, obj, target, **kwargs)


def _nm_functions(target: str, obj: Path) -> list[tuple[str, int, int]]:
    """(section, address, size) of each function body in `obj`, from nm's System V listing;
    folded duplicates (two names, one body) once."""
    nm = load_target(target).toolchain.command("nm")
    listing = subprocess.run([nm, "-S", "--size-sort", "-f", "sysv", str(obj)], capture_output=True, text=True,
                             check=True).stdout
    bodies = set()
    for line in listing.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) == 7 and fields[3] == "FUNC":
            bodies.add((fields[6], int(fields[1], 16), int(fields[4], 16)))
    return sorted(bodies)


def _nm_objects(target: str, obj: Path) -> dict[str, int]:
    """Demangled read-only data symbols and their sizes."""
    nm = load_target(target).toolchain.command("nm")
    listing = subprocess.run([nm, "-S", "-C", str(obj)], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in listing.splitlines():
        m = re.match(r"^[0-9a-f]+ ([0-9a-f]+) [rR] (.+)$", line)
        if m:
            found[m.group(2)] = int(m.group(1), 16)
    return found


# --- sizes -------------------------------------------------------------------------------

@needs_cross
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("graph", GRAPHS, ids=lambda p: p.stem)
def test_code_bytes_are_the_functions(built, graph, target):
    report = _report(built, graph, target)
    _, obj = _paths(built, graph, target)
    bodies = _nm_functions(target, obj)
    code = report["flash"]["code_bytes"]
    # Sections hold the function bodies plus padding to each next function's alignment
    # (2 or 4 bytes on Thumb, 16 on x86-64).
    assert sum(size for _, _, size in bodies) <= code <= sum(size for _, _, size in bodies) + 16 * len(bodies)
    listed = report["flash"]["functions"]
    assert sorted(f["bytes"] for f in listed) == sorted(size for _, _, size in bodies)
    assert listed == sorted(listed, key=lambda f: (-f["bytes"], f["name"]))


@needs_cross
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("graph", GRAPHS, ids=lambda p: p.stem)
def test_constants_and_static_ram(built, graph, target):
    report = _report(built, graph, target)
    plan, obj = _paths(built, graph, target)
    flash = report["flash"]
    assert flash["constant_data_bytes"] == plan["flash"]["constant_bytes"]
    symbols = _nm_objects(target, obj)
    name = plan["graph"]
    for constant in plan["constants"]:
        symbol = f"{name}::(anonymous namespace)::constants::{constant['name']}"
        if constant["bytes"] > FOLDED_CONSTANT_BYTES:
            assert symbols.get(symbol) == constant["bytes"], constant["name"]
        else:
            assert symbols.get(symbol, constant["bytes"]) == constant["bytes"], constant["name"]
    kept = sum(c["bytes"] for c in plan["constants"] if c["bytes"] > FOLDED_CONSTANT_BYTES)
    assert flash["constant_bytes"] >= kept
    assert flash["constant_bytes"] >= sum(symbols.values())
    assert report["ram"]["static_bytes"] == 0 and flash["data_init_bytes"] == 0
    assert flash["total_bytes"] == flash["code_bytes"] + flash["constant_bytes"] + flash["other_bytes"]
    ram = report["ram"]
    assert ram["total_bytes"] == ram["workspace_bytes"] + ram["stack_bytes"]
    # The generator's figures pass through untouched.
    assert {k: ram[k] for k in plan["ram"]} == plan["ram"]
    assert report["macs"] == plan["macs"] and report["plan"] == plan["plan"] and report["target"] == target


# --- stack -------------------------------------------------------------------------------

def _harness_frame(built, graph: Path, target: str) -> int:
    """Stack the test firmware's own wrapper around NAME_call takes when the compiler did
    not inline it (a graph with more than four arguments passes the rest on the stack from
    there), from the compiler's .su of the firmware main."""
    name = built["names"][graph.stem]
    su = (built["work"] / "build" / name / target / f"{name}_firmware.su").read_text()
    frames = [int(line.split("\t")[1]) for line in su.splitlines() if "{anonymous}::run()" in line]
    return frames[0] if frames else 0


def _inputs(plan: dict) -> bytes:
    rng = np.random.default_rng(SEED)
    return b"".join(rng.standard_normal(v["bytes"] // 4).astype("<f4").tobytes() for v in plan["inputs"])


@needs_cross
@needs_qemu
@pytest.mark.parametrize("target", EMULATED)
@pytest.mark.parametrize("graph", GRAPHS, ids=lambda p: p.stem)
def test_stack_bound_holds_on_the_emulator(built, graph, target):
    plan, obj = _paths(built, graph, target)
    elf = obj.with_suffix(".elf")
    report = measure_model(plan, obj, target)
    reported = report["ram"]["stack_bytes"]
    run = run_on_emulator(target, elf, _inputs(plan))
    measured = run.stack_bytes - _harness_frame(built, graph, target)
    assert 0 < measured <= reported <= measured + STACK_SLACK, (measured, reported, report["ram"]["stack_detail"]["path"])
    # The firmware holds the same library code the probe image linked.
    with_firmware = measure_model(plan, obj, target, firmware=elf)
    assert with_firmware["ram"]["stack_bytes"] == reported
    assert with_firmware["flash"]["library_code_bytes"] == report["flash"]["library_code_bytes"] > 0


@needs_cross
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("graph", GRAPHS, ids=lambda p: p.stem)
def test_stack_detail_says_how_each_function_was_bounded(built, graph, target):
    report = _report(built, graph, target)
    detail = report["ram"]["stack_detail"]
    name = report["graph"]
    functions = {f["name"]: f for f in detail["functions"]}
    entries = {e["name"]: e for e in detail["entries"]}
    assert f"{name}_call" in entries and any(n.startswith(f"{name}::call(") for n in entries)
    assert report["ram"]["stack_bytes"] == max(e["bytes"] for e in entries.values())
    # The deepest path is a chain of calls whose frames sum to the figure.
    path = detail["path"]
    assert path[0] == detail["entry"] and all(b in functions[a]["calls"] for a, b in zip(path, path[1:]))
    assert sum(functions[f]["frame_bytes"] for f in path) == report["ram"]["stack_bytes"]
    for f in functions.values():
        assert f["frame_bytes"] is not None and f["frame_bytes"] >= 0
        if f["origin"] == "model":
            assert f["bounded_by"] == f"compiler ({name}.ci)"
        elif target == "host":
            assert f["origin"] == "external" and f["frame_bytes"] == HOSTED_EXTERNAL_CALL_BYTES
        else:
            assert f["origin"] == "library" and f["bounded_by"] == "disassembly of probe image"
    if target == "host":
        assert detail["hosted"] and any(f["origin"] == "external" for f in functions.values())
        assert path[-1] in functions and functions[path[-1]]["origin"] == "external"


@needs_cross
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("graph", GRAPHS, ids=lambda p: p.stem)
def test_call_graph_agrees_with_the_compiler(built, graph, target):
    """Every call between the model's own functions that GCC's call graph (.ci) lists is in
    the call graph read from the machine code, and the frames agree with the .su file."""
    report = _report(built, graph, target)
    _, obj = _paths(built, graph, target)
    functions = {f["symbol"]: f for f in report["ram"]["stack_detail"]["functions"]}
    by_name = {f["name"]: s for s, f in functions.items()}
    edges = re.findall(r'edge: \{ sourcename: "(?:[^"]*:)?([^":]+)" targetname: "(?:[^"]*:)?([^":]+)"',
                       obj.with_suffix(".ci").read_text())
    internal = [(a, b) for a, b in edges if a in functions and b in functions and functions[a]["origin"] == "model"
                and functions[b]["origin"] == "model"]
    assert internal, "the examples call at least one kernel or run() from an entry point"
    for a, b in internal:
        assert b in {by_name[c] for c in functions[a]["calls"]}, (a, b)
    via_su = _report(built, graph, target, callgraph_info=obj.with_suffix(".none"))
    assert via_su["ram"]["stack_bytes"] == report["ram"]["stack_bytes"]
    assert any(".su" in n for n in via_su["ram"]["stack_detail"]["notes"])


@needs_cross
@pytest.mark.parametrize("target", EMULATED + ("host",))
def test_disassembly_frames_match_the_compiler(built, target):
    """The rules that bound library functions from their disassembly give GCC's own figure
    for every function GCC described: the model's, the firmware main's and the bare-metal
    runtime's (naked functions included)."""
    from tinsmith.measure.binutils import read_binary
    from tinsmith.measure.frames import read_callgraph_info
    compared = 0
    for ci in sorted((built["work"] / "build").glob(f"*/{target}/**/*.ci")):
        binary = read_binary(load_target(target), ci.with_suffix(".o"))
        for symbol, frame in read_callgraph_info(ci).items():
            if symbol in binary.functions:
                assert frame_from_disassembly(binary.arch, binary.functions[symbol], "-").bytes == frame.bytes, \
                    (ci.name, symbol)
                compared += 1
    assert compared >= 15  # the host has no firmware: the three models' functions only


def _fn(*lines: str) -> Function:
    instructions = []
    for i, line in enumerate(lines):
        mnemonic, _, operands = line.partition(" ")
        instructions.append(Instruction(2 * i, mnemonic, operands.strip(), None))
    return Function("f", ".text", 0, 2 * len(lines), tuple(instructions))


def test_frames_from_disassembly():
    # Thumb: 5 registers, 2 double registers, 40 bytes, and a pre-indexed store of 8.
    fn = _fn("push {r4, r5, r6, r7, lr}", "vpush {d8-d9}", "sub sp, #40", "strd r0, r1, [sp, #-8]!",
             "str r3, [sp, #4]", "add r7, sp, #0", "add sp, #40", "vpop {d8-d9}", "pop {r4, r5, r6, r7, pc}")
    assert frame_from_disassembly("arm", fn, "x").bytes == 20 + 16 + 40 + 8
    assert frame_from_disassembly("arm", _fn("stmdb sp!, {r4, r5, r6, r7, r8, lr}", "sub.w sp, sp, #1024",
                                             "vstmdb sp!, {s16-s17}"), "x").bytes == 24 + 1024 + 8
    alloca = frame_from_disassembly("arm", _fn("push {r7, lr}", "sub.w sp, sp, r3", "mov sp, r7"), "x")
    assert alloca.bytes is None and "run-time amount" in alloca.why_unbounded
    # x86-64: the return address, two pushes and 0x28 bytes.
    fn = _fn("push %rbp", "push %rbx", "sub $0x28,%rsp", "mov %rsp,%rbp", "add $0x28,%rsp", "pop %rbx", "pop %rbp")
    assert frame_from_disassembly("x86-64", fn, "x").bytes == 8 + 16 + 0x28
    assert frame_from_disassembly("x86-64", _fn("sub %rax,%rsp"), "x").bytes is None


def test_qualified_names_match_between_su_and_demangler():
    assert qualified_name("void m::{anonymous}::run(const float*, float*, unsigned char*)") == \
        qualified_name("m::(anonymous namespace)::run(float const*, float*, unsigned char*) [clone .isra.0]") == \
        "m::{anonymous}::run"
    assert qualified_name("void m::call(const Input_x&, Output_y&, Workspace&)") == \
        qualified_name("m::call(tinsmith::Buffer<float, 1u, 64u> const&, tinsmith::Buffer<float, 1u, 10u>&, "
                       "tinsmith::Workspace<176u>&)") == "m::call"
    assert qualified_name("void m_call(const float*, float*, void*)") == qualified_name("m_call") == "m_call"


UNBOUNDED = {
    "alloca": ("float vla_call(const float* x, int n) {\n"
               "  float* t = (float*)__builtin_alloca(4u * (unsigned)n);\n"
               "  for (int i = 0; i < n; ++i) t[i] = x[i] * 2.0f;\n"
               "  return t[n - 1];\n}\n",
               "vla_call: its frame grows at run time (alloca or a variable-length array)"),
    "pointer": ("float vla_call(float (*f)(float), float x) { return f(x) + 1.0f; }\n",
                "<indirect call>: a call through a pointer can reach any code"),
}


@needs_cross
@pytest.mark.parametrize("case", UNBOUNDED)
def test_unbounded_stack_is_explicit(tmp_path, case):
    source, reason = UNBOUNDED[case]
    (tmp_path / "vla.c").write_text(source)
    target = load_target("cortex-m4")
    subprocess.run([target.toolchain.command("cc"), *target.cpu_flags, "-Os", "-ffunction-sections",
                    *STACK_FLAGS, "-c", str(tmp_path / "vla.c"), "-o", str(tmp_path / "vla.o")], check=True)
    plan = {"graph": "vla", "inputs": [], "outputs": [], "macs": 0, "constants": [], "plan": [],
            "ram": {"workspace_bytes": 0, "workspace_lower_bound_bytes": 0}, "flash": {"constant_bytes": 0}}
    report = measure_model(plan, tmp_path / "vla.o", target)
    ram = report["ram"]
    assert ram["stack_bytes"] is None and ram["total_bytes"] is None
    assert ram["stack_unbounded_because"] == reason
    assert "stack unbounded" in summary(report)
    with pytest.raises(BudgetError) as info:
        check_budgets(report, 1 << 20, None)
    assert str(info.value).splitlines()[0] == (
        f"error: vla [cortex-m4]: RAM budget 1048576 bytes cannot be checked: the stack is unbounded ({reason})")
    check_budgets(report, None, 1 << 20)  # flash is still known


# --- budgets and summary -------------------------------------------------------------------

@needs_cross
def test_ram_budget_names_the_largest_values_and_the_stack(built):
    graph = next(g for g in GRAPHS if g.stem == "encoder")
    report = _report(built, graph, "cortex-m4")
    ram = report["ram"]
    budget = ram["total_bytes"] - 1
    with pytest.raises(BudgetError) as info:
        check_budgets(report, budget, None)
    values = sorted(report["plan"], key=lambda v: (-v["bytes"], v["offset"], v["value"]))[:3]
    largest = ", ".join(f"{v['value']} {v['bytes']} bytes at offset {v['offset']}" for v in values)
    path = " -> ".join(re.sub(r"^.*\{anonymous\}::|\(.*$", "", n.replace("(anonymous namespace)", "{anonymous}"))
                       for n in ram["stack_detail"]["path"])
    assert str(info.value).splitlines() == [
        f"error: encoder [cortex-m4]: RAM budget {budget} bytes exceeded by 1: needs {ram['total_bytes']} "
        f"(workspace {ram['workspace_bytes']}: largest values {largest}; "
        f"stack {ram['stack_bytes']}: deepest path {path})",
        f"note: shrink the largest consumers, or raise the budget (needs {ram['total_bytes'] / 1024:.1f} KiB RAM, "
        f"{report['flash']['total_bytes'] / 1024:.1f} KiB flash)"]
    assert path.startswith("encoder_call -> run -> ")
    check_budgets(report, ram["total_bytes"], None)


@needs_cross
def test_flash_budget_names_the_largest_constants_and_functions(built):
    graph = next(g for g in GRAPHS if g.stem == "mlp")
    report = _report(built, graph, "cortex-m4")
    flash = report["flash"]
    with pytest.raises(BudgetError) as info:
        check_budgets(report, 1 << 20, 4096)
    message = str(info.value).splitlines()[0]
    assert message.startswith(f"error: mlp [cortex-m4]: flash budget 4096 bytes exceeded by {flash['total_bytes'] - 4096}: "
                              f"needs {flash['total_bytes']} (constants {flash['constant_bytes']}: largest w1 8192 bytes, "
                              f"w2 1280 bytes, b1 128 bytes; code {flash['code_bytes']}: largest functions run ")
    assert message.endswith(f"; besides, {flash['library_code_bytes']} bytes of library code it calls")
    with pytest.raises(BudgetError) as info:
        check_budgets(report, 16, 16)
    assert [re.search(r"\[cortex-m4\]: (\w+) budget 16 bytes exceeded", line).group(1)
            for line in str(info.value).splitlines()[:2]] == ["RAM", "flash"]
    check_budgets(report, 1 << 20, 1 << 20)
    check_budgets(report, None, None)


@needs_cross
@pytest.mark.parametrize("target", TARGETS)
def test_summary(built, target):
    graph = next(g for g in GRAPHS if g.stem == "mlp")
    report = _report(built, graph, target)
    ram, flash = report["ram"], report["flash"]

    def b(n):
        return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB"

    stack = f"stack {b(ram['stack_bytes'])}" + (", informative on the host" if target == "host" else "")
    extra = f", other {b(flash['other_bytes'])}" if flash["other_bytes"] else ""
    library = f"; calls {b(flash['library_code_bytes'])} of library code" if flash["library_code_bytes"] else ""
    assert summary(report) == (
        f"mlp [{target}]: RAM {b(ram['total_bytes'])} (workspace {b(ram['workspace_bytes'])}, "
        f"lower bound {b(ram['workspace_lower_bound_bytes'])}, {stack}) | flash {b(flash['total_bytes'])} "
        f"(code {b(flash['code_bytes'])}, constants {b(flash['constant_bytes'])}{extra}{library}) | "
        f"{report['macs']:,} MACs")


@needs_cross
def test_report_is_deterministic_and_json(built):
    graph = GRAPHS[0]
    first, second = (_report(built, graph, "cortex-m4") for _ in range(2))
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    assert str(built["work"]) not in json.dumps(first)
