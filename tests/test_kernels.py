"""Fused and vectorized kernels against the primitives' NumPy references, for every backend, over
shapes that hit every edge of the blocking: sizes that are not multiples of the vector width or
of the register block, 1x1 inputs, odd channel counts, padding on every side, strides of 2.

The cortex-m backend's kernels are portable C++ too, so they are compiled and run here with the
host compiler (the firmware tests run them on the emulated core)."""
from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tinsmith.pipeline import compile_graph, lower, write_files
from tinsmith.reference import evaluate
from tinsmith.verify import RUNTIME_INCLUDE

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

# (target given to compile_graph, extra compiler flags)
TARGETS = {"cpp": (None, []), "host": ("host", []), "host-native": ("host-native", ["-march=native"]),
           "cortex-m4": ("cortex-m4", []),
           # the host's kernels in the model's NCHW layout (the host targets otherwise run convolutions channels last)
           "host-nchw": (str(Path(__file__).parent / "data" / "host-nchw.yaml"), [])}


def run(graph_text: str, target: str, tmp_path: Path, seed: int = 0) -> tuple[dict, dict, object]:
    """Compile the graph for `target`, run it on seeded inputs; (compiled outputs, reference, compiled)."""
    path = tmp_path / "g.yaml"
    tmp_path.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(graph_text))
    name_of_target, flags = TARGETS[target]
    compiled = compile_graph(path, target=name_of_target)
    g = compiled.graph
    rng = np.random.default_rng(seed)
    inputs = {n: rng.standard_normal(g.types[n].shape).astype(np.float32) for n in g.inputs}
    out = tmp_path / "out"
    write_files(compiled.files, out)
    name, NAME = g.name, g.name.upper()
    lines = [f'#include "{name}.h"', "#include <cstdio>",
             f"alignas(16) static unsigned char ws[{NAME}_WORKSPACE_BYTES > 0 ? {NAME}_WORKSPACE_BYTES : 1];"]
    for n in g.inputs:
        values = ", ".join(f"{float(v).hex()}f" for v in inputs[n].reshape(-1))
        lines.append(f"static const float in_{n}[{g.types[n].size}] = {{{values}}};")
    for n in g.outputs:
        lines.append(f"static float out_{n}[{g.types[n].size}];")
    args = [f"in_{n}" for n in g.inputs] + [f"out_{n}" for n in g.outputs] + ["ws"]
    lines += ["int main() {", f"  {name}_init_ws(ws);", f"  {name}_call({', '.join(args)});"]
    for n in g.outputs:
        lines.append(f"  for (unsigned i = 0; i < {g.types[n].size}u; ++i) std::printf(\"%a\\n\", "
                     f"static_cast<double>(out_{n}[i]));")
    lines += ["  return 0;", "}"]
    (out / "main.cpp").write_text("\n".join(lines) + "\n")
    exe = out / "prog"
    cmd = ["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-O2", *flags, f"-I{out}", f"-I{RUNTIME_INCLUDE}",
           str(out / f"{name}.cpp"), str(out / "main.cpp"), "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    flat = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    got, offset = {}, 0
    for n in g.outputs:
        t = g.types[n]
        got[n] = np.array([float.fromhex(v) for v in flat[offset:offset + t.size]], np.float32).reshape(t.shape)
        offset += t.size
    return got, evaluate(lower(path), inputs), compiled


def assert_close(got: dict, want: dict) -> None:
    for n in want:
        np.testing.assert_allclose(got[n], want[n], rtol=1e-5, atol=1e-5, err_msg=n)


def conv_graph(c: int, h: int, w: int, m: int, k: int, pad: int, stride: int, group: int, tail: str) -> str:
    """x -> Conv (bias) -> tail activation, plus a second output so the first stays an intermediate."""
    act = {"relu": "{op: Relu, inputs: [c1], outputs: [a1]}",
           "clip": "{op: Clip, inputs: [c1], outputs: [a1], attrs: {min: 0.0, max: 0.5}}",
           "residual": "{op: Add, inputs: [c1, r], outputs: [a1]}",
           "bias_relu": "{op: Add, inputs: [c1, b2], outputs: [s1]}\n  - {op: Relu, inputs: [s1], outputs: [a1]}",
           }[tail]
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w + 2 * pad - k) // stride + 1
    extra_inputs = f"\n  r: {{dtype: float32, shape: [1, {m}, {oh}, {ow}]}}" if tail == "residual" else ""
    return f"""\
        graph: g
        inputs:
          x: {{dtype: float32, shape: [1, {c}, {h}, {w}]}}{extra_inputs}
        outputs: [y]
        constants:
          w: {{random: normal, shape: [{m}, {c // group}, {k}, {k}], seed: 1, scale: 0.3}}
          b: {{random: normal, shape: [{m}], seed: 2}}
          b2: {{random: normal, shape: [{m}, 1, 1], seed: 3}}
        nodes:
          - {{op: Conv, inputs: [x, w, b], outputs: [c1], attrs: {{pads: [{pad}, {pad}, {pad}, {pad}],
              strides: [{stride}, {stride}], group: {group}}}}}
          - {act}
          - {{op: Mul, inputs: [a1, a1], outputs: [y]}}
        """.replace("\n  - ", "\n          - ").replace("\n  r:", "\n          r:")


CONVS = [
    # c, h, w, m, k, pad, stride, group, tail
    (3, 5, 17, 6, 3, 1, 1, 1, "relu"),      # 17 = 2 * 8 + 1: one position after the last block
    (5, 7, 13, 9, 3, 1, 1, 1, "bias_relu"),  # 9 channels: two blocks of 4 and one left over
    (1, 1, 1, 3, 3, 1, 1, 1, "relu"),       # 1x1 input: every tap but the centre in the padding
    (4, 9, 11, 4, 3, 1, 2, 1, "clip"),      # stride 2: no vector loads along the row
    (7, 6, 19, 7, 3, 1, 1, 7, "clip"),      # depthwise, odd channel count
    (6, 10, 10, 6, 3, 1, 2, 6, "relu"),     # depthwise, stride 2
    (5, 4, 7, 11, 1, 0, 1, 1, "residual"),  # pointwise: 28 positions on one axis, residual add
    (3, 2, 3, 5, 1, 0, 1, 1, "relu"),       # pointwise, 6 positions: fewer than one vector
    (2, 8, 8, 3, 5, 2, 1, 1, "residual"),   # 5x5 window, two edge positions each side
    (3, 5, 9, 2, 3, 0, 1, 1, "relu"),       # no padding: only interior tiles
]


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("case", CONVS, ids=lambda c: "x".join(map(str, c[:8])) + "-" + c[8])
def test_fused_blocked_conv_matches_reference(case, target, tmp_path):
    got, want, compiled = run(conv_graph(*case), target, tmp_path)
    assert_close(got, want)
    kernels = compiled.model.kernels
    conv = next(k for k in kernels if k.node.op in ("Conv", "ConvNHWC"))
    if conv.node.op == "ConvNHWC" and case[8] == "residual":
        # the residual is a graph input: its channels-last copy is made in the convolution's own
        # cluster, so the add cannot wait inside the convolution's kernel (fuse.py's rule)
        assert [k.node.op for k in kernels] == ["Transpose", "ConvNHWC", "Add", "Transpose"]
        return
    # the activation (and the bias add), then the square, run inside the convolution's kernel:
    # one kernel, nothing stored in the workspace (channels-last targets: besides the transposes
    # of the graph's inputs and outputs, tests/test_channels_last.py)
    assert [n.op for n in conv.fused] == {"relu": ["Relu"], "clip": ["Clip"], "residual": ["Add"],
                                          "bias_relu": ["Add", "Relu"]}[case[8]] + ["Mul"]
    boundary = [k for k in kernels if k.node.op == "Transpose"]
    assert len(kernels) == 1 + len(boundary) and (boundary or compiled.plan.workspace_bytes == 0)


def gemm_graph(k: int, n: int, trans_b: int, bias_shape: str) -> str:
    b_shape = [n, k] if trans_b else [k, n]
    return f"""\
        graph: g
        inputs:
          x: {{dtype: float32, shape: [1, {k}]}}
        outputs: [y]
        constants:
          w: {{random: normal, shape: {b_shape}, seed: 1, scale: 0.3}}
          c: {{random: normal, shape: {bias_shape}, seed: 2}}
        nodes:
          - {{op: Gemm, inputs: [x, w, c], outputs: [h], attrs: {{transB: {trans_b}, alpha: 0.5, beta: 2.0}}}}
          - {{op: Relu, inputs: [h], outputs: [y]}}
        """


GEMMS = [(1, 1, 0, "[1]"), (5, 7, 0, "[7]"), (19, 37, 0, "[1, 37]"), (64, 16, 0, "[16]"),
         (1, 1, 1, "[1]"), (5, 7, 1, "[7]"), (19, 37, 1, "[1]"), (64, 16, 1, "[16]")]


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("case", GEMMS, ids=lambda c: f"k{c[0]}-n{c[1]}-t{c[2]}-c{c[3]}")
def test_fused_gemv_matches_reference(case, target, tmp_path):
    got, want, compiled = run(gemm_graph(*case), target, tmp_path)
    assert_close(got, want)
    assert [n.op for n in compiled.model.kernels[0].fused] == ["Relu"]


def test_gelu_chain_needs_three_kernels_and_no_stored_chain_values(tmp_path):
    text = """\
        graph: g
        inputs:
          x: {dtype: float32, shape: [3, 37]}
        outputs: [y]
        nodes:
          - {op: Gelu, inputs: [x], outputs: [y]}
        """
    for target in ("cpp", "host"):
        got, want, compiled = run(text, target, tmp_path / target)
        assert_close(got, want)
        # x/sqrt(2) -> erf -> +1 is one kernel; 0.5*x and the final product are two more
        assert len(compiled.model.kernels) == 3
        assert len(compiled.plan.placements) == 2
