"""The x86-64 level targets (host-x86-64-v3, host-x86-64-v4): built by the repository's SConstruct,
their vector kernels as wide as the level's unit, and the compiled models agree with the NumPy
reference. The dispatching target (host-dispatch) holds all three levels in one NAME.cpp, each
further level compiled for its level by a target pragma: each level, pinned with
TINSMITH_HOST_LEVEL, agrees with the reference, unpinned it runs the widest this CPU has, and no
code outside the further levels uses their registers. (The build machine has AVX-512, so every
level runs here.)"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tinsmith.pipeline import lower
from tinsmith.reference import evaluate
from tinsmith.targets import load_target
from tinsmith.targets.levels import PIN_VARIABLE
from tinsmith.tolerance import summation_lengths, within_tolerance

ROOT = Path(__file__).resolve().parents[1]
LEVELS = {"host-x86-64-v3": "avx2", "host-x86-64-v4": "avx512f"}
GRAPHS = ("kws_dscnn", "ad_autoencoder")


def _cpu_has(flag: str) -> bool:
    return flag in Path("/proc/cpuinfo").read_text().split()


@pytest.mark.parametrize("target", LEVELS)
def test_a_level_target_builds_and_agrees_with_the_reference(target, tmp_path, scons_cmd):
    if not _cpu_has(LEVELS[target]):
        pytest.skip(f"this machine has no {LEVELS[target]}")
    caps = load_target(target).capabilities
    assert (caps.simd_bits, caps.float_registers) == ((256, 16) if target.endswith("v3") else (512, 32))
    graphs = ",".join(str(ROOT / "graphs" / f"{g}.yaml") for g in GRAPHS)
    scons_cmd("-Q", "-j2", f"target={target}", f"graphs={graphs}", f"build_dir={tmp_path / 'build'}")
    for name in GRAPHS:
        folder = tmp_path / "build" / name
        width = caps.simd_bits // 32
        assert f"f32x{width}" in (folder / f"{name}.cpp").read_text()
        _check_against_reference(name, folder, tmp_path)


def _check_against_reference(name: str, folder: Path, tmp_path: Path, pin: str | None = None) -> bytes:
    """Run NAME_runner (with TINSMITH_HOST_LEVEL=pin) on seeded inputs, check every output against
    the NumPy reference within the float tolerance; returns the output bytes."""
    graph = lower(ROOT / "graphs" / f"{name}.yaml")
    rng = np.random.default_rng(3)
    inputs = {n: rng.standard_normal(graph.types[n].shape).astype(np.float32) for n in graph.inputs}
    (tmp_path / "in.bin").write_bytes(b"".join(inputs[n].astype("<f4").tobytes() for n in graph.inputs))
    env = {k: v for k, v in os.environ.items() if k != PIN_VARIABLE} | ({PIN_VARIABLE: pin} if pin else {})
    subprocess.run([str(folder / f"{name}_runner"), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                   check=True, env=env)
    data, offset = (tmp_path / "out.bin").read_bytes(), 0
    want, lengths = evaluate(graph, inputs), summation_lengths(graph)
    for out in graph.outputs:
        got = np.frombuffer(data, "<f4", graph.types[out].size, offset).reshape(graph.types[out].shape)
        offset += graph.types[out].nbytes
        assert within_tolerance(got, want[out], lengths[out], 1e-5, 1e-6)[0], (name, out, pin)
    return data


def _disassembly(obj: Path) -> dict[str, list[str]]:
    """Each function of `obj` (demangled name) -> its instructions, without addresses and comments."""
    listing = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", str(obj)], capture_output=True, text=True,
                             check=True).stdout
    functions, function = {}, None
    for line in listing.splitlines():
        if (m := re.match(r"^[0-9a-f]+ <(.*)>:$", line)):
            function = functions.setdefault(m.group(1), [])
        elif function is not None and "\t" in line:
            function.append(re.sub(r"[0-9a-f]+ <[^>]*>", "<address>", line.split("\t", 1)[1].split("#")[0]).strip())
    return functions


def _functions_using_wide_registers(obj: Path) -> set[str]:
    """The functions of `obj` (demangled) whose code uses AVX or AVX-512 registers (ymm, zmm, k)."""
    return {f for f, code in _disassembly(obj).items()
            if any(re.search(r"%(ymm|zmm)\d|%k[1-7]\b|\{%k", instruction) for instruction in code)}


def _check_only_the_further_levels_use_wide_registers(obj: Path, name: str) -> None:
    """The first level, the dispatcher and the worker pool run on any x86-64: only the further levels'
    code (compiled under their target pragmas) may use AVX registers, and both of them do."""
    wide = _functions_using_wide_registers(obj)
    outside = sorted(f for f in wide if not re.match(rf"{name}::tinsmith_x86_64_v[34]::", f))
    assert not outside, outside
    for level in ("v3", "v4"):
        assert any(f.startswith(f"{name}::tinsmith_x86_64_{level}::") for f in wide), level


DISPATCH = "host-dispatch"
DISPATCH_LEVELS = {"x86-64": None, "x86-64-v3": "host-x86-64-v3", "x86-64-v4": "host-x86-64-v4"}


@pytest.fixture(scope="module")
def dispatch_build(tmp_path_factory, scons_cmd):
    """GRAPHS built for host-dispatch by the repository's SConstruct, in a folder of their own."""
    folder = tmp_path_factory.mktemp("dispatch") / "build"
    scons_cmd("-Q", "-j2", *_dispatch_settings(folder))
    return folder


def _dispatch_settings(folder: Path) -> list[str]:
    graphs = ",".join(str(ROOT / "graphs" / f"{g}.yaml") for g in GRAPHS)
    return [f"target={DISPATCH}", f"graphs={graphs}", f"build_dir={folder}"]


def test_the_dispatching_target_lists_the_level_targets():
    target = load_target(DISPATCH)
    assert [(lv.name, lv.target.name) for lv in target.levels] == [
        ("x86-64", "host"), ("x86-64-v3", "host-x86-64-v3"), ("x86-64-v4", "host-x86-64-v4")]
    assert target.levels[0].requires == () and "avx512f" in target.levels[2].requires
    assert target.cpu_flags == () and target.levels[2].target.cpu_flags == ("-march=x86-64-v4",)


def test_every_level_is_in_the_one_source_under_its_own_pragma_and_the_workspace_is_the_largest(dispatch_build):
    for name in GRAPHS:
        folder = dispatch_build / name
        assert sorted(p.name for p in folder.glob("*.cpp")) == [f"{name}.cpp", f"{name}_runner.cpp"]
        text = (folder / f"{name}.cpp").read_text()
        # each level's code in its namespace, as wide as its vectors, the further ones after their pragma
        starts = [text.index(f"namespace tinsmith_{level.replace('-', '_')} {{") for level in DISPATCH_LEVELS]
        pragmas = [text.index(f'#pragma GCC target("arch={level}")') for level in ("x86-64-v3", "x86-64-v4")]
        assert starts[0] < pragmas[0] < starts[1] < pragmas[1] < starts[2]
        for i, width in enumerate((4, 8, 16)):
            code = text[starts[i]:starts[i + 1] if i < 2 else len(text)]
            assert f"f32x{width}" in code and not any(f"f32x{w}" in code for w in (4, 8, 16) if w > width)
        members = subprocess.run(["ar", "t", str(folder / f"lib{name}.a")], capture_output=True, text=True,
                                 check=True).stdout.split()
        assert members == [f"{name}.o"]
        _check_only_the_further_levels_use_wide_registers(folder / f"{name}.o", name)
        plan = json.loads((folder / f"{name}.plan.json").read_text())
        sizes = [lv["workspace_bytes"] for lv in plan["levels"]]
        assert [lv["name"] for lv in plan["levels"]] == list(DISPATCH_LEVELS)
        assert plan["ram"]["workspace_bytes"] == max(sizes)
        assert re.search(rf"kWorkspaceBytes = {max(sizes)};", (folder / f"{name}.hpp").read_text())
        # the report's code is the object's (the .text sections `size -A` lists): every level's
        listing = subprocess.run(["size", "-A", str(folder / f"{name}.o")], capture_output=True, text=True,
                                 check=True).stdout
        text_bytes = sum(int(m.group(1)) for m in re.finditer(r"^\.text\S*\s+(\d+)", listing, re.M))
        code = json.loads((folder / f"{name}.json").read_text())["flash"]["code_bytes"]
        assert code == text_bytes > 0


@pytest.mark.parametrize("level", DISPATCH_LEVELS)
def test_every_level_of_the_dispatching_build_agrees_with_the_reference(dispatch_build, level, tmp_path):
    feature = {"x86-64": "sse2", "x86-64-v3": "avx2", "x86-64-v4": "avx512f"}[level]
    if not _cpu_has(feature):
        pytest.skip(f"this machine has no {feature}")
    for name in GRAPHS:
        _check_against_reference(name, dispatch_build / name, tmp_path, pin=level)


def test_a_threaded_dispatching_build_computes_the_same_bytes_on_every_thread_count(dispatch_build, scons_cmd,
                                                                                   tmp_path):
    """threads=2: each level, pinned, computes on 2 threads the bytes it computes on 1, which match
    the reference; the worker pool is compiled for any x86-64 (before the further levels' pragmas).
    ic_resnet8, whose convolutions are split (kws's layers are too small to be)."""
    name = "ic_resnet8"
    folder = tmp_path / "build"
    scons_cmd("-Q", "-j2", f"target={DISPATCH}", f"graphs={ROOT / 'graphs' / f'{name}.yaml'}", f"build_dir={folder}",
              "threads=2")
    source = (folder / name / f"{name}.cpp").read_text()
    assert source.count("tinsmith::pool::run(") >= 3 * len(DISPATCH_LEVELS)  # every level's split clusters
    _check_only_the_further_levels_use_wide_registers(folder / name / f"{name}.o", name)
    for level in DISPATCH_LEVELS:
        want = _check_against_reference(name, folder / name, tmp_path, pin=level)
        for threads in ("1", "2"):
            env = {k: v for k, v in os.environ.items() if k != PIN_VARIABLE} | {PIN_VARIABLE: level}
            subprocess.run([str(folder / name / f"{name}_runner"), str(tmp_path / "in.bin"), str(tmp_path / "out.bin"),
                            threads], check=True, env=env)
            assert (tmp_path / "out.bin").read_bytes() == want, (level, threads)


def _level_run(name: str, folder: Path, pin: str | None = None) -> str:
    """The level NAME_runner says it ran on (run with no arguments, TINSMITH_HOST_LEVEL=pin)."""
    env = {k: v for k, v in os.environ.items() if k != PIN_VARIABLE} | ({PIN_VARIABLE: pin} if pin else {})
    out = subprocess.run([str(folder / f"{name}_runner")], capture_output=True, text=True, check=True, env=env).stdout
    return re.search(rf"^{name}: ran on (\S+)$", out, re.M).group(1)


def test_the_dispatcher_runs_the_widest_level_this_cpu_has(dispatch_build, tmp_path):
    if not all(_cpu_has(f) for f in ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")):
        pytest.skip("this machine has no AVX-512 (x86-64-v4)")
    for name in GRAPHS:
        folder = dispatch_build / name
        assert _level_run(name, folder) == "x86-64-v4"
        # pinned: the level named; a name that is no level is not taken (the widest runs)
        assert [_level_run(name, folder, pin) for pin in (*DISPATCH_LEVELS, "avx9000")] == [
            *DISPATCH_LEVELS, "x86-64-v4"]
    # what runs unpinned computes what the pinned AVX-512 level does, bit for bit, and not what
    # the SSE2 level does (4 lanes and no FMA round differently)
    name = "kws_dscnn"
    pinned = {level: _check_against_reference(name, dispatch_build / name, tmp_path, pin=level)
              for level in ("x86-64", "x86-64-v4")}
    assert pinned["x86-64"] != pinned["x86-64-v4"]
    assert _check_against_reference(name, dispatch_build / name, tmp_path) == pinned["x86-64-v4"]


def test_a_dispatching_build_redoes_nothing_when_nothing_changed(dispatch_build, scons_cmd):
    assert scons_cmd("-q", *_dispatch_settings(dispatch_build), check=False).returncode == 0


def _user_dispatch_target(folder: Path, v4_flags: str, optimize: str = "-O2") -> Path:
    """A user's dispatching target whose x86-64-v4 level is a file of theirs with these CPU flags."""
    from tinsmith.targets import TARGETS
    level = folder / "my-v4.yaml"
    level.write_text(TARGETS["host-x86-64-v4"].read_text().replace("target: host-x86-64-v4", "target: my-v4")
                     .replace("cpu_flags: [-march=x86-64-v4]", f"cpu_flags: [{v4_flags}]")
                     .replace("optimize: -O2", f"optimize: {optimize}"))
    mine = folder / "my-dispatch.yaml"
    mine.write_text(TARGETS[DISPATCH].read_text().replace("target: host-dispatch", "target: my-dispatch")
                    .replace("target: host-x86-64-v4,", "target: my-v4.yaml,"))
    return mine


def test_a_level_s_cpu_flags_are_its_pragma_and_the_one_source_compiles_warning_free(tmp_path):
    """Tuning flags of a level become its target pragma; GRAPH.cpp, compiled with the first level's
    flags and -Werror, holds that level's code and runs the graph like the linear build."""
    from tinsmith.paths import RUNTIME_DIR, RUNTIME_INCLUDE
    from tinsmith.pipeline import compile_graph, write_files
    mine = _user_dispatch_target(tmp_path, "-march=x86-64-v4, -mtune=icelake-server, -mprefer-vector-width=512")
    name = "ad_autoencoder"
    compiled = compile_graph(ROOT / "graphs" / f"{name}.yaml", target=mine)
    write_files(compiled.files, tmp_path / "out")
    text = (tmp_path / "out" / f"{name}.cpp").read_text()
    assert '#pragma GCC target("arch=x86-64-v4,tune=icelake-server,prefer-vector-width=512")' in text
    host = load_target("host")
    subprocess.run([host.toolchain.command("cxx"), host.optimize, *host.ccflags, *host.cxxflags, "-Werror",
                    f"-I{tmp_path / 'out'}", f"-I{RUNTIME_INCLUDE}", str(tmp_path / "out" / f"{name}.cpp"),
                    str(tmp_path / "out" / f"{name}_runner.cpp"), str(RUNTIME_DIR / "src" / "host_io.cpp"),
                    "-o", str(tmp_path / "out" / f"{name}_runner")],
                   check=True)
    if _cpu_has("avx512f"):
        assert _level_run(name, tmp_path / "out") == "x86-64-v4"
    for level in DISPATCH_LEVELS:
        _check_against_reference(name, tmp_path / "out", tmp_path, pin=level)


def test_a_level_s_pragma_compiles_its_kernels_to_the_instructions_of_its_own_target_s_build(tmp_path):
    """GCC compiles the kernels under `#pragma GCC target("arch=x86-64-v4")` (NAME.cpp, no -march)
    to exactly the instructions host-x86-64-v4's own build (-march=x86-64-v4) gives them."""
    from tinsmith.paths import RUNTIME_INCLUDE
    from tinsmith.pipeline import compile_graph, write_files
    name = "encoder"  # (small and quick, with kernels not inlined; the benchmark models: docs/KERNELS.md, section 10)
    kernels = {}
    for target_name in (DISPATCH, "host-x86-64-v4"):
        target, folder = load_target(target_name), tmp_path / target_name
        write_files(compile_graph(ROOT / "graphs" / f"{name}.yaml", target=target_name).files, folder)
        subprocess.run([target.toolchain.command("cxx"), *target.cpu_flags, target.optimize, *target.ccflags,
                        *target.cxxflags, f"-I{folder}", f"-I{RUNTIME_INCLUDE}", "-c", str(folder / f"{name}.cpp"),
                        "-o", str(folder / f"{name}.o")], check=True)
        prefix = f"{name}::tinsmith_x86_64_v4::" if target_name == DISPATCH else f"{name}::"
        kernels[target_name] = {f[len(prefix):]: code for f, code in _disassembly(folder / f"{name}.o").items()
                                if f.startswith(prefix) and "::kernels::" in f}
    assert kernels[DISPATCH] and kernels[DISPATCH] == kernels["host-x86-64-v4"]


@pytest.mark.parametrize("flags, optimize, message", [
    ("-march=x86-64-v4, -ffast-math", "-O2", "level 'x86-64-v4': CPU flag '-ffast-math' of target 'my-v4' has no "
                                             "target pragma to compile the level with"),
    ("-march=x86-64-v4", "-O3", "level 'x86-64-v4': target 'my-v4' has other optimize than the first level's 'host'"),
])
def test_a_level_whose_flags_one_source_cannot_compile_is_a_located_error(tmp_path, flags, optimize, message):
    from tinsmith.targets import TargetError
    mine = _user_dispatch_target(tmp_path, flags, optimize)
    with pytest.raises(TargetError) as error:
        load_target(mine)
    assert f"{mine}:" in str(error.value) and message in str(error.value), str(error.value)


def test_library_only_generation_is_the_one_source_any_compiler_builds(tmp_path, tinsmith_cmd):
    """`tinsmith generate --library-only --target host-dispatch` writes what the library compiles:
    NAME.cpp and the headers, as for host. Clang (libclang) takes its pragmas without a diagnostic; a
    compiler that does not make x86 code (arm-none-eabi-g++) builds the first level only."""
    import shutil
    from clang import cindex
    from tinsmith.paths import RUNTIME_INCLUDE
    from tinsmith.verify import builtin_include_args
    proc = tinsmith_cmd("generate", str(ROOT / "graphs" / "mlp.yaml"), "-o", str(tmp_path), "--target", DISPATCH,
                        "--library-only")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.cpp", "mlp.h", "mlp.hpp"]
    includes = [f"-I{tmp_path}", f"-I{RUNTIME_INCLUDE}"]
    tu = cindex.Index.create().parse(str(tmp_path / "mlp.cpp"), args=[
        "-x", "c++", "-std=c++17", "-Wall", "-Wextra", "--target=x86_64-linux-gnu", *includes, *builtin_include_args()])
    # (Clang, not GCC, warns of the vector helpers a model does not use, on host too: issue of its own)
    assert [str(d) for d in tu.diagnostics if "[-Wunused-function]" not in str(d)] == []
    if not shutil.which("arm-none-eabi-g++"):
        pytest.skip("no arm-none-eabi-g++")
    m4 = load_target("cortex-m4")
    subprocess.run(["arm-none-eabi-g++", *m4.cpu_flags, "-O2", "-std=c++17", "-fno-exceptions", "-fno-rtti", "-Wall",
                    "-Wextra", "-Werror", *includes, "-c", str(tmp_path / "mlp.cpp"), "-o", str(tmp_path / "mlp.o")],
                   check=True)
    symbols = subprocess.run(["arm-none-eabi-nm", "-C", str(tmp_path / "mlp.o")], capture_output=True, text=True,
                             check=True).stdout
    assert "mlp::tinsmith_x86_64::call" in symbols and "tinsmith_x86_64_v" not in symbols
