"""The cortex-m backend's register-blocked kernels on the emulated Cortex-M4 against the NumPy
reference, over shapes that hit every edge of their blocking: channel counts not divisible by
the block of 4, rows not divisible by the block of positions (3 for a window, 6 for a pointwise
convolution), 1x1 inputs, odd channel counts, strides of 2, padding on every side, and Gemm
outputs not divisible by the block of 12.

Every case is one branch of a single graph (its own input and output), so one firmware build
and one QEMU run cover them all. The same firmware built with the kernel hook
(TINSMITH_KERNEL_HOOK) counts each kernel's instructions for the report's per-layer table."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tinsmith.measure.page import render_page
from tinsmith.measure.report import with_kernel_instructions
from tinsmith.pipeline import compile_graph, lower, write_files
from tinsmith.reference import evaluate
from tinsmith.targets.qemu import kernel_instructions, run_on_emulator

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.skipif(shutil.which("arm-none-eabi-g++") is None, reason="needs arm-none-eabi-g++"),
    pytest.mark.skipif(shutil.which("qemu-system-arm") is None, reason="needs qemu-system-arm"),
]

CONVS = [
    # c, h, w, m, k, pad, stride, group, activation
    (3, 5, 17, 6, 3, 1, 1, 1, "relu"),     # 15 interior positions: 5 blocks of 3; 6 = 4 + 2 channels
    (5, 7, 13, 9, 3, 1, 1, 1, "clip"),     # 11 interior positions: 3 blocks of 3 and 2 left over
    (1, 1, 1, 3, 3, 1, 1, 1, "relu"),      # 1x1 input: every tap but the centre in the padding
    (4, 9, 11, 5, 3, 1, 2, 1, "clip"),     # stride 2
    (2, 8, 8, 3, 5, 2, 1, 1, "relu"),      # 5x5 window: two edge positions on each side
    (3, 5, 9, 2, 3, 0, 1, 1, "none"),      # no padding: interior tiles only
    (7, 6, 19, 7, 3, 1, 1, 7, "clip"),     # depthwise, odd channel count
    (6, 10, 10, 6, 3, 1, 2, 6, "relu"),    # depthwise, stride 2
    (5, 4, 7, 11, 1, 0, 1, 1, "relu"),     # pointwise: 28 positions = 4 blocks of 6 and 4; 11 channels
    (3, 1, 1, 5, 1, 0, 1, 1, "relu"),      # pointwise, one position
    (9, 3, 4, 4, 1, 0, 1, 1, "none"),      # pointwise, 12 positions: two full blocks
]
GEMMS = [
    # k, n, transB
    (20, 29, 0),   # 29 = 2 blocks of 12 and 5 left over
    (7, 8, 0),     # fewer outputs than one block
    (33, 12, 0),   # one block exactly
    (5, 1, 0),     # one output
    (19, 13, 1),   # transB: dot products, 13 = 3 blocks of 4 and 1
]
ACTIVATIONS = {"relu": "{{op: Relu, inputs: [{0}], outputs: [{1}]}}",
               "clip": "{{op: Clip, inputs: [{0}], outputs: [{1}], attrs: {{min: 0.0, max: 0.5}}}}"}


def batch_graph() -> str:
    """Every case as one branch x<i> -> kernel (+ fused activation) -> y<i>."""
    inputs, outputs, constants, nodes = [], [], [], []
    for i, (c, h, w, m, k, pad, stride, group, act) in enumerate(CONVS):
        inputs.append(f"  x{i}: {{dtype: float32, shape: [1, {c}, {h}, {w}]}}")
        constants += [f"  w{i}: {{random: normal, shape: [{m}, {c // group}, {k}, {k}], seed: {2 * i + 1}, scale: 0.3}}",
                      f"  b{i}: {{random: normal, shape: [{m}], seed: {2 * i + 2}}}"]
        conv_out = f"y{i}" if act == "none" else f"c{i}"
        nodes.append(f"  - {{op: Conv, inputs: [x{i}, w{i}, b{i}], outputs: [{conv_out}], attrs: "
                     f"{{pads: [{pad}, {pad}, {pad}, {pad}], strides: [{stride}, {stride}], group: {group}}}}}")
        if act != "none":
            nodes.append("  - " + ACTIVATIONS[act].format(conv_out, f"y{i}"))
        outputs.append(f"y{i}")
    for j, (k, n, trans_b) in enumerate(GEMMS):
        i = len(CONVS) + j
        inputs.append(f"  x{i}: {{dtype: float32, shape: [1, {k}]}}")
        shape = [n, k] if trans_b else [k, n]
        constants += [f"  w{i}: {{random: normal, shape: {shape}, seed: {2 * i + 1}, scale: 0.3}}",
                      f"  b{i}: {{random: normal, shape: [{n}], seed: {2 * i + 2}}}"]
        nodes += [f"  - {{op: Gemm, inputs: [x{i}, w{i}, b{i}], outputs: [g{i}], attrs: {{transB: {trans_b}}}}}",
                  "  - " + ACTIVATIONS["relu"].format(f"g{i}", f"y{i}")]
        outputs.append(f"y{i}")
    return "\n".join(["graph: blocks", "inputs:", *inputs, f"outputs: [{', '.join(outputs)}]", "constants:",
                      *constants, "nodes:", *nodes]) + "\n"


def test_blocked_kernels_match_reference_on_cortex_m4(tmp_path):
    path = tmp_path / "blocks.yaml"
    path.write_text(batch_graph())
    compiled = compile_graph(path, target="cortex-m4")
    # every case ran through a kernel of the cortex-m backend, not the portable fallback
    assert all(k.node.op in ("Conv", "Gemm") for k in compiled.model.kernels)
    write_files(compiled.files, tmp_path / "blocks")
    (tmp_path / "SConstruct").write_text(f"""\
import os, sys
sys.path.insert(0, {str(ROOT)!r})
from tinsmith.targets.firmware_scons import firmware_program
env = Environment(ENV=os.environ.copy())
firmware_program(env, "cortex-m4", "blocks", "blocks", build_dir="build", extra_ccflags=["-Werror"])
firmware_program(env, "cortex-m4", "blocks", "blocks", build_dir="build-hook",
                 extra_ccflags=["-Werror", "-DTINSMITH_KERNEL_HOOK"])
""")
    done = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env={**os.environ})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning" not in (done.stdout + done.stderr).lower()

    graph = lower(path)
    rng = np.random.default_rng(7)
    inputs = {n: rng.standard_normal(graph.types[n].shape).astype(np.float32) for n in graph.inputs}
    want = evaluate(graph, inputs)
    run = run_on_emulator("cortex-m4", tmp_path / "build" / "blocks.elf",
                          b"".join(inputs[n].tobytes() for n in graph.inputs), timeout=300)
    offset = 0
    for name in graph.outputs:
        expected = np.asarray(want[name], np.float32)
        got = np.frombuffer(run.output, np.float32, expected.size, offset).reshape(expected.shape)
        offset += expected.nbytes
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=name)
    assert offset == len(run.output)

    # Built with the kernel hook, the same firmware counts each kernel's instructions: the same
    # outputs, a count for every kernel, adding up to the whole call's.
    hooked = run_on_emulator("cortex-m4", tmp_path / "build-hook" / "blocks.elf",
                             b"".join(inputs[n].tobytes() for n in graph.inputs), timeout=300)
    assert hooked.output == run.output
    assert kernel_instructions("cortex-m4", run) is None
    counts = kernel_instructions("cortex-m4", hooked)
    report = json.loads((tmp_path / "blocks" / "blocks.plan.json").read_text())
    assert len(counts) == len(report["nodes"]) and all(c > 0 for c in counts)
    assert abs(sum(counts) - run.instructions) <= 0.01 * run.instructions  # the hook calls: a few each
    # kernels with more MACs take more instructions (the MACs range over two orders of magnitude)
    macs = [node["macs"] for node in report["nodes"]]
    assert counts[macs.index(max(macs))] > 10 * counts[macs.index(min(macs))]
    page = render_page(with_kernel_instructions(report, counts))
    assert f"{sum(counts):,}" in page and "instructions</th>" in page
