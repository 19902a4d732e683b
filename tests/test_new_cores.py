"""Cores added as a target file and nothing else (docs/KERNELS.md, "adding a core"): the
Cortex-M33 on QEMU's mps2-an505 and the Cortex-M55 on mps3-an547 draw on the Cortex-M4's kernel
sets (arm-dsp, fpu-registers, cpp). Every graph in graphs/ computes on each what the host
computes, and the int8 models are bit-exact with the TensorFlow Lite Micro interpreter."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from tinsmith.generate.backends import backend_for
from tinsmith.pipeline import lower
from tinsmith.targets import load_target
from tinsmith.targets.qemu import run_on_emulator
from conftest import ROOT

GRAPHS = sorted((ROOT / "graphs").glob("*.yaml"))
CORES = ("cortex-m33", "cortex-m55")

pytestmark = pytest.mark.skipif(shutil.which("qemu-system-arm") is None,
                                reason="needs qemu-system-arm (sh setup.sh installs it)")


@pytest.mark.parametrize("core", CORES)
def test_a_new_core_is_a_target_file_over_existing_kernel_sets(core):
    backend, caps = backend_for(load_target(core))
    assert backend.chain() == ["cortex-m", "arm-dsp", "fpu-registers", "cpp"]
    assert caps.dsp and caps.fpu != "none" and caps.float_registers == 32


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
        # as on the Cortex-M4: newlib's libm and the FPU's contraction against glibc's
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * float(np.abs(want).max()), err_msg=graph.name)
        assert run.instructions and run.instructions > 0


INT8_MODELS = ("kws_dscnn", "vww_mobilenet", "ic_resnet8", "ad_autoencoder")


@pytest.mark.parametrize("core", CORES)
def test_int8_models_are_bit_exact(core, tmp_path):
    tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    from tinsmith.cli import run_compiled
    for name in INT8_MODELS:
        path = ROOT / "models" / f"{name}_int8.tflite"
        graph = lower(path)
        interp = tflm.Interpreter.from_file(str(path))
        x = np.random.default_rng(7).integers(-128, 128, interp.get_input_details(0)["shape"]).astype(np.int8)
        interp.set_input(x, 0)
        interp.invoke()
        got = run_compiled(path, {graph.inputs[0]: x}, tmp_path / name, graph, core)[graph.outputs[0]]
        np.testing.assert_array_equal(got, interp.get_output(0), err_msg=name)
