"""The x86-64 level targets (host-x86-64-v3, host-x86-64-v4): built by the repository's SConstruct,
their vector kernels as wide as the level's unit, and the compiled models agree with the NumPy
reference. (The build machine has AVX-512, so both levels run here.)"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tinsmith.pipeline import lower
from tinsmith.reference import evaluate
from tinsmith.targets import load_target
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
        graph = lower(ROOT / "graphs" / f"{name}.yaml")
        rng = np.random.default_rng(3)
        inputs = {n: rng.standard_normal(graph.types[n].shape).astype(np.float32) for n in graph.inputs}
        (tmp_path / "in.bin").write_bytes(b"".join(inputs[n].astype("<f4").tobytes() for n in graph.inputs))
        subprocess.run([str(folder / f"{name}_runner"), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                       check=True)
        data, offset = (tmp_path / "out.bin").read_bytes(), 0
        want, lengths = evaluate(graph, inputs), summation_lengths(graph)
        for out in graph.outputs:
            got = np.frombuffer(data, "<f4", graph.types[out].size, offset).reshape(graph.types[out].shape)
            offset += graph.types[out].nbytes
            assert within_tolerance(got, want[out], lengths[out], 1e-5, 1e-6)[0], (name, out)
