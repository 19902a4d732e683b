"""The firmware example in examples/firmware: a separate project that loads the tinsmith tool
from its own SConstruct, cross-compiles for a Cortex-M4 (and, with `target=`, every other core
Tinsmith has a board for) and runs on QEMU."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "firmware"

from conftest import emulated_core
from tinsmith.targets.qemu import emulator_command


def expected_output() -> str:
    """The example's model in NumPy, on the window main.c builds (weights as gesture.yaml seeds them)."""
    def normal(shape, seed, scale):
        return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32).astype(np.float64)
    window = np.zeros(48)
    for i in range(0, 48, 3):
        window[i] = 1.5 if (i // 3) % 2 else -1.5
        window[i + 1] = np.float32(0.1)
        window[i + 2] = 1.0
    h = np.maximum(window @ normal((48, 24), 1, 0.2) + normal((24,), 2, 0.05), 0)
    logits = h @ normal((24, 4), 3, 0.3) + normal((4,), 4, 0.05)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    best = int(p.argmax())
    return f"gesture: class {best}, confidence {int(p[best] * 1000 + 0.5)}/1000"


@pytest.mark.parametrize("core", [emulated_core(name) for name in
                                  ("cortex-m4", "cortex-m33", "cortex-m55", "rv32imac", "rv32imafc")])
def test_firmware_example_builds_and_runs_on_qemu(tmp_path, core):
    project = tmp_path / "firmware"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("build", ".sconsign*"))
    chosen = [] if core == "cortex-m4" else [f"target={core}"]  # the Cortex-M4 is the example's default
    build = subprocess.run([sys.executable, "-m", "SCons", "-Q", f"tinsmith={ROOT}", *chosen], cwd=project,
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    assert f"gesture [{core}]: RAM" in build.stdout  # the build prints the model's summary
    run = subprocess.run(emulator_command(core, project / "build" / "firmware.elf"), cwd=project, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    # QEMU writes the semihosting console to its stderr.
    assert run.stderr.strip() == expected_output()
