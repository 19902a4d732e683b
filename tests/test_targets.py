"""Every graph in graphs/ on the firmware targets: builds for host, Cortex-M4 and Cortex-M0+;
on an emulated Cortex-M4 it computes what the host computes, uses no more stack than the
report says, and links no heap, exception or RTTI support; budgets fail the build."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tinsmith.pipeline import lower
from tinsmith.targets.qemu import run_on_emulator

ROOT = Path(__file__).resolve().parents[1]
GRAPHS = sorted((ROOT / "graphs").glob("*.yaml"))
FORBIDDEN = ("malloc", "free", "_sbrk", "__cxa_throw", "__cxa_allocate_exception", "__gxx_personality_v0",
             "_Unwind_Resume")
FORBIDDEN_PREFIXES = ("_Znw", "_Zna", "_ZdlPv", "_ZdaPv", "_ZTI", "_ZTS", "_ZTV")

pytestmark = pytest.mark.skipif(
    not (shutil.which("arm-none-eabi-g++") and shutil.which("qemu-system-arm")),
    reason="needs arm-none-eabi-g++ and qemu-system-arm (sh setup.sh installs them)")


def scons(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", "-C", str(ROOT), *args],
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def builds(graph_builds) -> dict[str, Path]:
    """Every graph built for the host (runners) and the Cortex-M4 (firmware), shared by the session."""
    return {"host": graph_builds("host"), "m4": graph_builds("cortex-m4")}


def seeded(graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {n: rng.standard_normal(graph.types[n].shape).astype(np.float32) for n in graph.inputs}


def test_every_graph_builds_for_cortex_m0plus(tmp_path):
    proc = scons("target=cortex-m0plus", f"build_dir={tmp_path}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for g in GRAPHS:
        report = json.loads((tmp_path / g.stem / f"{g.stem}.json").read_text())
        assert report["target"] == "cortex-m0plus" and report["flash"]["code_bytes"] > 0


@pytest.mark.parametrize("path", GRAPHS, ids=lambda p: p.stem)
def test_cortex_m4_agrees_with_the_host(builds, path, tmp_path):
    graph = lower(path)
    inputs = seeded(graph)
    data = b"".join(inputs[n].astype("<f4").tobytes() for n in graph.inputs)
    folder = builds["host"] / graph.name
    (tmp_path / "in.bin").write_bytes(data)
    subprocess.run([str(folder / f"{graph.name}_runner"), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                   check=True)
    host = (tmp_path / "out.bin").read_bytes()
    elf = builds["m4"] / graph.name / "firmware" / f"{graph.name}.elf"
    run = run_on_emulator("cortex-m4", elf, data, timeout=300)
    assert len(run.output) == len(host)
    got, want = np.frombuffer(run.output, "<f4"), np.frombuffer(host, "<f4")
    # Same algorithm, different libm (newlib vs glibc) and FPU contraction: 1e-5 relative,
    # with an absolute floor of 1e-6 of the output's scale for values that cancel to ~0.
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * float(np.abs(want).max()))

    report = json.loads((builds["m4"] / graph.name / f"{graph.name}.json").read_text())
    assert report["ram"]["stack_bytes"] >= run.stack_bytes, "the report must bound the stack really used"
    assert report["ram"]["workspace_bytes"] <= 1.05 * report["ram"]["workspace_lower_bound_bytes"]

    symbols = subprocess.run(["arm-none-eabi-nm", "-C", "--defined-only", str(elf)], capture_output=True,
                             text=True, check=True).stdout
    raw = subprocess.run(["arm-none-eabi-nm", "--defined-only", str(elf)], capture_output=True,
                         text=True, check=True).stdout
    names = {line.split()[-1] for line in raw.splitlines() if line.strip()}
    bad = sorted(n for n in names if n in FORBIDDEN or n.startswith(FORBIDDEN_PREFIXES))
    assert not bad, bad
    assert f"{graph.name}_call" in symbols


def test_a_budget_smaller_than_the_model_fails_the_build(tmp_path):
    proc = scons("target=cortex-m4", f"build_dir={tmp_path}", f"graphs={ROOT / 'graphs' / 'encoder.yaml'}",
                 "ram_budget=1024", "flash_budget=4096")
    assert proc.returncode != 0
    said = proc.stdout + proc.stderr
    assert "RAM budget 1024 bytes" in said and "flash budget 4096 bytes" in said, said
    assert "Traceback" not in said
    assert not (tmp_path / "encoder" / "libencoder.a").exists()


def test_constants_stay_in_flash_unless_copied_to_ram(builds, tmp_path):
    graph = lower(ROOT / "graphs" / "mlp.yaml")
    in_flash = json.loads((builds["m4"] / "mlp" / "mlp.json").read_text())
    assert in_flash["ram"]["static_bytes"] == 0 and in_flash["flash"]["constant_bytes"] >= 9000
    elf = tmp_path / "mlp" / "firmware" / "mlp.elf"
    proc = scons("target=cortex-m4", f"build_dir={tmp_path}", f"graphs={ROOT / 'graphs' / 'mlp.yaml'}",
                 "constants_in_ram=1", str(elf))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    in_ram = json.loads((tmp_path / "mlp" / "mlp.json").read_text())
    assert in_ram["ram"]["static_bytes"] >= 9000 and in_ram["flash"]["constant_bytes"] < 100
    assert "copied to RAM at startup" in (tmp_path / "mlp" / "mlp.cpp").read_text()
    data = b"".join(a.astype("<f4").tobytes() for a in seeded(graph).values())
    flash_run = run_on_emulator("cortex-m4", builds["m4"] / "mlp" / "firmware" / "mlp.elf", data)
    assert run_on_emulator("cortex-m4", elf, data).output == flash_run.output
