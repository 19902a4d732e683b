"""Measure the int8 TFLite models (models/*_int8.tflite) on the emulated Cortex-M4.

    python benchmarks/int8.py            # builds build/int8/..., runs QEMU, prints a Markdown table

Per model: instructions one inference executes (QEMU -icount, deterministic), workspace and
stack from the build report, against TensorFlow Lite Micro with CMSIS-NN on the same emulated
core (the reference figures below, measured on the same models' MLPerf Tiny architectures).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codegen.cli import _input_bytes, _scons_build  # noqa: E402
from codegen.pipeline import lower  # noqa: E402
from codegen.targets import load_target  # noqa: E402
from codegen.targets.qemu import run_on_emulator  # noqa: E402

TARGET = "cortex-m4"
MODELS = ("kws_dscnn", "vww_mobilenet", "ic_resnet8", "ad_autoencoder")
# TFLM + CMSIS-NN on the emulated Cortex-M4: instructions per inference and arena bytes
TFLM_CMSIS_NN = {"kws_dscnn": (7.7e6, 22.8e3), "vww_mobilenet": (24.1e6, 100.7e3),
                 "ic_resnet8": (29.9e6, 55.0e3), "ad_autoencoder": (0.60e6, 20.5e3)}


def measure(name: str) -> dict:
    path = ROOT / "models" / f"{name}_int8.tflite"
    graph = lower(path)
    build_dir = ROOT / "build" / "int8"
    program = _scons_build(path, build_dir, TARGET, graph=graph)
    rng = np.random.default_rng(0)
    inputs = {n: rng.integers(-128, 128, graph.types[n].shape).astype(graph.types[n].numpy_dtype)
              for n in graph.inputs}
    run = run_on_emulator(load_target(TARGET), program, _input_bytes(graph, inputs), timeout=600)
    report = json.loads(next(build_dir.rglob(f"{graph.name}.json")).read_text())
    return {"model": name, "instructions": run.instructions, "workspace": report["ram"]["workspace_bytes"],
            "stack": report["ram"].get("stack_bytes"), "macs": report["macs"]}


def main() -> int:
    print("| model | instructions | TFLM + CMSIS-NN | ratio | workspace | TFLM arena | ratio | stack |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in MODELS:
        r = measure(name)
        instr, arena = TFLM_CMSIS_NN[name]
        print(f"| {name} | {r['instructions'] / 1e6:.2f} M | {instr / 1e6:.2f} M | {r['instructions'] / instr:.2f} | "
              f"{r['workspace'] / 1e3:.1f} KB | {arena / 1e3:.1f} KB | {r['workspace'] / arena:.2f} | {r['stack']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
