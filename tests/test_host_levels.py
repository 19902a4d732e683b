"""The x86-64 level targets (host-x86-64-v3, host-x86-64-v4): built by the repository's SConstruct,
their vector kernels as wide as the level's unit, and the compiled models agree with the NumPy
reference. The dispatching target (host-dispatch) holds all three levels in one library: each
level, pinned with TINSMITH_HOST_LEVEL, agrees with the reference, and unpinned it runs the
widest this CPU has. (The build machine has AVX-512, so every level runs here.)"""
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


def _exported(obj: Path) -> list[str]:
    """The symbols `obj` defines for other objects (weak and unique ones included), demangled."""
    listing = subprocess.run(["nm", "-C", "-g", "--defined-only", str(obj)], capture_output=True, text=True,
                             check=True).stdout
    return [line.split(None, 2)[2] for line in listing.splitlines() if line.strip()]


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


def test_each_level_is_its_own_source_with_its_own_flags_and_the_workspace_is_the_largest(dispatch_build):
    for name in GRAPHS:
        folder = dispatch_build / name
        sources = {"x86-64": folder / f"{name}.cpp", "x86-64-v3": folder / f"{name}_x86_64_v3.cpp",
                   "x86-64-v4": folder / f"{name}_x86_64_v4.cpp"}
        for level, width in (("x86-64", 4), ("x86-64-v3", 8), ("x86-64-v4", 16)):
            text = sources[level].read_text()
            assert f"namespace tinsmith_{level.replace('-', '_')} {{" in text
            assert f"f32x{width}" in text and not any(f"f32x{w}" in text for w in (4, 8, 16) if w > width)
        # each level's object is compiled by its own target (-march), into the one library
        members = subprocess.run(["ar", "t", str(folder / f"lib{name}.a")], capture_output=True, text=True,
                                 check=True).stdout.split()
        assert members == [f"{name}.o", f"{name}_x86_64_v3.o", f"{name}_x86_64_v4.o"]
        # a level's object defines its call() and nothing another object could take instead of
        # its own (no weak or unique symbols: an inline function compiled for AVX-512 must never
        # stand in for the baseline's copy)
        for member in members[1:]:
            defined = _exported(folder / member)
            level = member[len(name) + 1:-2]
            assert defined == [f"{name}::tinsmith_{level}::call(float const*, float*, unsigned char*)"], defined
        plan = json.loads((folder / f"{name}.plan.json").read_text())
        sizes = [lv["workspace_bytes"] for lv in plan["levels"]]
        assert [lv["name"] for lv in plan["levels"]] == list(DISPATCH_LEVELS)
        assert plan["ram"]["workspace_bytes"] == max(sizes)
        assert re.search(rf"kWorkspaceBytes = {max(sizes)};", (folder / f"{name}.hpp").read_text())
        # the report's code counts every level's object (the .text sections `size -A` lists)
        text = 0
        for member in members:
            listing = subprocess.run(["size", "-A", str(folder / member)], capture_output=True, text=True,
                                     check=True).stdout
            text += sum(int(m.group(1)) for m in re.finditer(r"^\.text\S*\s+(\d+)", listing, re.M))
        code = json.loads((folder / f"{name}.json").read_text())["flash"]["code_bytes"]
        assert code == text > 0


@pytest.mark.parametrize("level", DISPATCH_LEVELS)
def test_every_level_of_the_dispatching_build_agrees_with_the_reference(dispatch_build, level, tmp_path):
    feature = {"x86-64": "sse2", "x86-64-v3": "avx2", "x86-64-v4": "avx512f"}[level]
    if not _cpu_has(feature):
        pytest.skip(f"this machine has no {feature}")
    for name in GRAPHS:
        _check_against_reference(name, dispatch_build / name, tmp_path, pin=level)


def test_a_threaded_dispatching_build_computes_the_same_bytes_on_every_thread_count(dispatch_build, scons_cmd,
                                                                                   tmp_path):
    """threads=2: each level, pinned, on 1 and 2 threads computes the bytes the linear build's level
    does; the levels' objects do not compile the worker pool (NAME.cpp's copy runs them)."""
    name = GRAPHS[0]
    folder = tmp_path / "build"
    scons_cmd("-Q", "-j2", f"target={DISPATCH}", f"graphs={ROOT / 'graphs' / f'{name}.yaml'}", f"build_dir={folder}",
              "threads=2")
    for member in (f"{name}_x86_64_v3.o", f"{name}_x86_64_v4.o"):
        level = member[len(name) + 1:-2]
        assert sorted(_exported(folder / name / member)) == [f"{name}::tinsmith_{level}::{f}" for f in (
            "call(float const*, float*, unsigned char*)", "init()", "set_threads(int)")]
    for level in DISPATCH_LEVELS:
        want = _check_against_reference(name, dispatch_build / name, tmp_path, pin=level)
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


def _commands(proc) -> list[str]:
    return [line for line in proc.stdout.splitlines() if line and not line.startswith("scons: ")]


def test_a_dispatching_build_redoes_exactly_what_changed(dispatch_build, scons_cmd):
    """Nothing changed: nothing runs. One level's object gone: that object alone is compiled again,
    with its level's flags, to the same bytes, so nothing that links it is redone."""
    settings = _dispatch_settings(dispatch_build)
    assert scons_cmd("-q", *settings, check=False).returncode == 0
    name = GRAPHS[0]
    (dispatch_build / name / f"{name}_x86_64_v4.o").unlink()
    done = _commands(scons_cmd("-Q", *settings))
    assert len(done) == 1 and "-march=x86-64-v4" in done[0] and done[0].endswith(f"{name}_x86_64_v4.cpp"), done
    assert scons_cmd("-q", *settings, check=False).returncode == 0


def test_a_level_s_own_flags_recompile_that_level_only(tmp_path, scons_cmd):
    """A user's dispatching target whose x86-64-v4 level is a file of theirs: changing that level's
    optimisation recompiles its object, archives the library and links the runner again; the
    generated sources keep their bytes and the other levels' objects are not compiled again."""
    import shutil
    from tinsmith.targets import TARGETS
    level = tmp_path / "my-v4.yaml"
    shutil.copy(TARGETS["host-x86-64-v4"], level)
    level.write_text(level.read_text().replace("target: host-x86-64-v4", "target: my-v4"))
    mine = tmp_path / "my-dispatch.yaml"
    mine.write_text(TARGETS[DISPATCH].read_text().replace("target: host-dispatch", "target: my-dispatch")
                    .replace("target: host-x86-64-v4,", "target: my-v4.yaml,"))
    name = "ad_autoencoder"
    settings = [f"target={mine}", f"graphs={ROOT / 'graphs' / f'{name}.yaml'}", f"build_dir={tmp_path / 'build'}"]
    scons_cmd("-Q", "-j2", *settings)
    folder = tmp_path / "build" / name
    sources = {p.name: p.read_bytes() for p in folder.glob("*.cpp")}
    level.write_text(level.read_text().replace("optimize: -O2", "optimize: -O3"))
    done = _commands(scons_cmd("-Q", *settings))
    compiles = [line for line in done if " -c " in line]
    assert len(compiles) == 1 and "-O3" in compiles[0] and compiles[0].endswith(f"{name}_x86_64_v4.cpp"), done
    assert any(line.startswith("ar ") for line in done) and any(line.endswith("libtinsmith.a") for line in done)
    assert {p.name: p.read_bytes() for p in folder.glob("*.cpp")} == sources
    assert _level_run(name, folder) == "x86-64-v4"


def test_library_only_generation_holds_every_level_source(tmp_path, tinsmith_cmd):
    """`tinsmith generate --library-only --target host-dispatch` writes what the library compiles:
    the headers, NAME.cpp and a source per further level (no runner, no plan)."""
    proc = tinsmith_cmd("generate", str(ROOT / "graphs" / "mlp.yaml"), "-o", str(tmp_path), "--target", DISPATCH,
                        "--library-only")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.cpp", "mlp.h", "mlp.hpp", "mlp_x86_64_v3.cpp",
                                                          "mlp_x86_64_v4.cpp"]
