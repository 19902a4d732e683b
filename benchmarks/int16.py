"""Measure a 16x8 network on the emulated Cortex-M4: the MLPerf Tiny kws DS-CNN architecture with
int16 activations, int8 per-channel weights and int64 biases, written without TensorFlow by
tests/tflite_writer.py (seeded weights, output scales chosen so activations use the int16 range).

    python benchmarks/int16.py                 # prints the table (and checks outputs against TFLite Micro)
    python benchmarks/int16.py --write docs/BENCHMARKS.md   # ... into its 16x8 section

In one run: the DSP kernels (quantized_dsp.py's 16x8 micro-kernels on the int8 driver) and the
portable ones (the same core with `dsp: false`), instructions per inference (QEMU -icount) and per
MAC of the convolutions, depthwise convolutions and the fully connected layer (firmware built with
the kernel hook), and the same architecture at int8 for comparison. The outputs of both builds are
compared with the TFLite Micro interpreter first (bit-exact, or the benchmark stops).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from tflite_writer import Op, Tensor, model  # noqa: E402
from tinsmith.cli import _input_bytes, _output_arrays, _scons_build  # noqa: E402
from tinsmith.pipeline import lower  # noqa: E402
from tinsmith.targets import load_target  # noqa: E402
from tinsmith.targets.qemu import kernel_instructions, run_on_emulator  # noqa: E402

BUILD = ROOT / "build" / "int16"
TARGET = "cortex-m4"
SECTION = "## 16x8 quantization (int16 activations), Cortex-M4"
BEFORE = "## Host: against ONNX Runtime"  # the section goes before this one
KIND = {"QConv2D": "convolution", "QDepthwise": "depthwise", "QFullyConnected": "fully connected"}


def kws_16x8(dtype: str = "int16") -> bytes:
    """The kws DS-CNN (conv 10x4/2 to 64 channels, four depthwise 3x3 + pointwise 64 blocks, average
    pool, fully connected to 12) with `dtype` activations (int16: 16x8, int64 biases; int8: int8,
    int32 biases), every layer a fused ReLU."""
    rng = np.random.default_rng(16)
    wide = dtype == "int16"
    tensors: list[Tensor] = []
    ops: list[Op] = []

    def add(t: Tensor) -> int:
        tensors.append(t)
        return len(tensors) - 1

    x_scale = 0.001
    x = add(Tensor("input", dtype, [1, 49, 10, 1], quant=(x_scale, 0)))

    def layer(code, x, x_scale, w_shape, axis, y_shape, options, k):
        channels = w_shape[axis]
        w_scales = rng.uniform(0.004, 0.01, channels)
        zeros = np.zeros(channels, np.int64)
        w = add(Tensor(f"w{len(ops)}", "int8", list(w_shape), rng.integers(-127, 128, w_shape).astype(np.int8),
                       (w_scales, zeros), axis))
        bias = "int64" if wide else "int32"
        b = add(Tensor(f"b{len(ops)}", bias, [channels], rng.integers(-5000, 5000, channels).astype(bias),
                       (w_scales * x_scale, zeros)))
        # the output's integers spread as the input's: sqrt(K) products of weights of deviation ~73
        y_scale = float(np.sqrt(k) * x_scale * 73.0 * w_scales.mean())
        y = add(Tensor(f"act{len(ops)}", dtype, list(y_shape), quant=(y_scale, 0 if wide else -128)))
        ops.append(Op(code, [x, w, b], [y], options))
        return y, y_scale

    relu = {"FusedActivationFunction": 1}
    x, x_scale = layer("CONV_2D", x, x_scale, (64, 10, 4, 1), 0, (1, 25, 5, 64),
                       ("Conv2DOptions", {"Padding": 0, "StrideH": 2, "StrideW": 2, **relu}), 40)
    for _ in range(4):
        x, x_scale = layer("DEPTHWISE_CONV_2D", x, x_scale, (1, 3, 3, 64), 3, (1, 25, 5, 64),
                           ("DepthwiseConv2DOptions", {"Padding": 0, "StrideH": 1, "StrideW": 1, "DepthMultiplier": 1,
                                                       **relu}), 9)
        x, x_scale = layer("CONV_2D", x, x_scale, (64, 1, 1, 64), 0, (1, 25, 5, 64),
                           ("Conv2DOptions", {"Padding": 1, "StrideH": 1, "StrideW": 1, **relu}), 64)
    pooled = add(Tensor("pooled", dtype, [1, 1, 1, 64], quant=(x_scale, tensors[x].quant[1])))
    ops.append(Op("AVERAGE_POOL_2D", [x], [pooled], ("Pool2DOptions", {
        "Padding": 1, "FilterHeight": 25, "FilterWidth": 5, "StrideH": 1, "StrideW": 1})))
    flat = add(Tensor("flat", dtype, [1, 64], quant=tensors[pooled].quant))
    ops.append(Op("RESHAPE", [pooled, add(Tensor("flat_shape", "int32", [2], np.int32([1, 64])))], [flat]))
    logits, _ = layer("FULLY_CONNECTED", flat, x_scale, (12, 64), 0, (1, 12), ("FullyConnectedOptions", {}), 64)
    return model(tensors, ops, [0], [logits])


def _input(graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    t = graph.types[graph.inputs[0]]
    info = np.iinfo(t.numpy_dtype)
    return {graph.inputs[0]: rng.integers(info.min, info.max + 1, t.shape).astype(t.numpy_dtype)}


def _tflm(data: bytes, x: np.ndarray) -> np.ndarray:
    from tflite_micro.python.tflite_micro import runtime as tflm
    interp = tflm.Interpreter.from_bytes(data)
    interp.set_input(x, 0)
    interp.invoke()
    return interp.get_output(0)


def _portable_target() -> Path:
    """The Cortex-M4 without the DSP extension's kernels: the portable int8 driver loops."""
    text = (ROOT / "codegen" / "targets" / "cortex-m4.yaml").read_text()
    path = BUILD / "cortex-m4-portable.yaml"
    path.write_text(text.replace("dsp: true", "dsp: false").replace("target: cortex-m4", "target: cortex-m4-portable"))
    return path


def measure(name: str, data: bytes, target) -> dict:
    """Instructions of one inference and per kernel (kernel hook), outputs checked against TFLite Micro."""
    folder = BUILD / f"{name}-{Path(str(target)).stem}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.tflite"
    path.write_bytes(data)
    graph = lower(path)
    inputs = _input(graph)
    program = _scons_build(path, folder, str(target), graph=graph)
    core = load_target(str(target))
    run = run_on_emulator(core, program, _input_bytes(graph, inputs), timeout=600)
    got = _output_arrays(graph, run.output)[graph.outputs[0]]
    want = _tflm(data, inputs[graph.inputs[0]])
    if not np.array_equal(got, want):
        raise SystemExit(f"{name} on {target}: outputs differ from TFLite Micro's")
    work = folder / graph.name
    (work / "SConstruct.kernel-hook").write_text(f"""\
import os, sys
sys.path.insert(0, {str(ROOT)!r})
from tinsmith.targets.firmware_scons import firmware_program
env = Environment(ENV=os.environ.copy())
firmware_program(env, {str(target)!r}, ".", {graph.name!r}, build_dir="firmware-hook",
                 extra_ccflags=["-DTINSMITH_KERNEL_HOOK"])
""")
    subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", "-f", "SConstruct.kernel-hook"], cwd=work,
                   check=True, stdout=subprocess.DEVNULL)
    hooked = run_on_emulator(core, work / "firmware-hook" / f"{graph.name}.elf", _input_bytes(graph, inputs),
                             timeout=600)
    report = json.loads((work / f"{graph.name}.json").read_text())
    per_kind: dict[str, list[int]] = {}
    for node, count in zip(report["nodes"], kernel_instructions(core, hooked) or []):
        if node.get("op") in KIND and node.get("macs"):
            sums = per_kind.setdefault(KIND[node["op"]], [0, 0])
            sums[0] += count
            sums[1] += node["macs"]
    return {"instructions": run.instructions, "macs": report["macs"], "per_kind": per_kind,
            "workspace": report["ram"]["workspace_bytes"]}


def table() -> list[str]:
    rows = [("kws DS-CNN 16x8, DSP kernels", measure("kws_16x8", kws_16x8(), TARGET)),
            ("kws DS-CNN 16x8, portable kernels", measure("kws_16x8", kws_16x8(), _portable_target())),
            ("kws DS-CNN int8, DSP kernels", measure("kws_int8", kws_16x8("int8"), TARGET))]
    kinds = list(KIND.values())
    lines = ["| build | instructions | ratio | workspace | MACs | instr./MAC | "
             + " | ".join(f"{k} instr./MAC" for k in kinds) + " |",
             "|---|---:|---:|---:|---:|---:|" + "---:|" * len(kinds)]
    base = rows[0][1]["instructions"]
    for label, r in rows:
        per = [f"{r['per_kind'][k][0] / r['per_kind'][k][1]:.2f}" if k in r["per_kind"] else "" for k in kinds]
        lines.append(f"| {label} | {r['instructions'] / 1e6:.2f} M | {r['instructions'] / base:.2f} | "
                     f"{r['workspace'] / 1e3:.1f} KB | {r['macs']:,} | {r['instructions'] / r['macs']:.2f} | "
                     + " | ".join(per) + " |")
    return lines


def write_section(doc: Path, lines: list[str]) -> None:
    text = doc.read_text()
    body = "\n".join([
        SECTION, "",
        "Written by `python benchmarks/int16.py --write docs/BENCHMARKS.md`: the MLPerf Tiny kws DS-CNN "
        "architecture at 16x8 (int16 activations, int8 per-channel weights, int64 biases; seeded weights "
        "written by tests/tflite_writer.py), one inference on QEMU with `-icount`, the outputs of every build "
        "checked against the TFLite Micro interpreter's first. In the same run: the portable kernels (the same "
        "core with `dsp: false`) and the same architecture at int8; ratios to the first row. Per-kind columns "
        "come from the kernel hook. No TFLite Micro firmware with its 16x8 kernels is in the repository, so "
        "there is no TFLM column.", "", *lines, ""])
    if SECTION in text:
        start = text.index(SECTION)
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + body + ("\n" + text[end + 1:] if end >= 0 else "")
    elif BEFORE in text:
        at = text.index(BEFORE)
        text = text[:at] + body + "\n" + text[at:]
    else:
        text = text.rstrip("\n") + "\n\n" + body
    doc.write_text(text)


def main() -> int:
    BUILD.mkdir(parents=True, exist_ok=True)
    lines = table()
    print("\n".join(lines))
    if "--write" in sys.argv:
        write_section(Path(sys.argv[sys.argv.index("--write") + 1]), lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
