"""Measure the int8 TFLite models (models/*_int8.tflite) on the emulated Cortex-M4, and the kws
network quantized by ONNX Runtime's quantizer (QDQ ONNX, models/make_qdq.py) next to its .tflite.

    python benchmarks/int8.py            # builds build/int8/..., runs QEMU, prints a Markdown table
    python benchmarks/int8.py --per-kernel [MODEL ...]   # also each kernel's instructions
    python benchmarks/int8.py --write docs/BENCHMARKS.md  # the table into its int8 section
    python benchmarks/int8.py --target cortex-m55 --write docs/BENCHMARKS.md  # another core (PEERS)

With --per-kernel the firmware is built once more with the kernel hook (TINSMITH_KERNEL_HOOK) and
each kernel's instructions are printed, largest first, with its op and MACs.

Per model: instructions one inference executes (QEMU -icount, deterministic), workspace and
stack from the build report, against TensorFlow Lite Micro with CMSIS-NN on the same emulated
core (the reference figures below, measured on the same models' MLPerf Tiny architectures).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tinsmith.cli import _input_bytes, _scons_build  # noqa: E402
from tinsmith.pipeline import lower  # noqa: E402
from tinsmith.targets import load_target  # noqa: E402
from tinsmith.targets.qemu import kernel_instructions, run_on_emulator  # noqa: E402

TARGET = "cortex-m4"  # or --target NAME: one of PEERS
MODELS = ("kws_dscnn", "vww_mobilenet", "ic_resnet8", "ad_autoencoder")
# TFLM + CMSIS-NN on each emulated core: instructions per inference and arena bytes. On the M55
# CMSIS-NN runs its Helium kernels; on the M33 the DSP ones, whose arenas are the M4's.
PEERS = {
    "cortex-m4": ("Cortex-M4", {"kws_dscnn": (7.7e6, 22.8e3), "vww_mobilenet": (24.1e6, 100.7e3),
                                "ic_resnet8": (29.9e6, 55.0e3), "ad_autoencoder": (0.60e6, 20.5e3)}),
    "cortex-m33": ("Cortex-M33", {"kws_dscnn": (7.68e6, 22.8e3), "vww_mobilenet": (24.05e6, 100.7e3),
                                  "ic_resnet8": (29.94e6, 55.0e3), "ad_autoencoder": (0.596e6, 20.5e3)}),
    "cortex-m55": ("Cortex-M55", {"kws_dscnn": (1.82e6, 27.4e3), "vww_mobilenet": (6.56e6, 100.7e3),
                                  "ic_resnet8": (4.91e6, 55.0e3), "ad_autoencoder": (0.156e6, 27.2e3)}),
}
TFLM_CMSIS_NN = PEERS[TARGET][1]


BUILD = ROOT / "build" / "int8"


QDQ_MODELS = ("kws_dscnn",)  # quantized by ONNX Runtime (int8 activations, per-channel int8 weights)


def _seeded_input(graph) -> bytes:
    rng = np.random.default_rng(0)
    inputs = {n: rng.integers(-128, 128, graph.types[n].shape).astype(graph.types[n].numpy_dtype)
              if graph.types[n].dtype != "float32" else rng.normal(0.0, 1.0, graph.types[n].shape).astype(np.float32)
              for n in graph.inputs}
    return _input_bytes(graph, inputs)


def qdq_model(name: str) -> Path:
    """models/make_qdq.py's QDQ ONNX file of `name` (made once, in build/int8)."""
    path = BUILD / f"{name}_qdq.onnx"
    if not path.exists():
        sys.path.insert(0, str(ROOT / "models"))
        import make_qdq
        BUILD.mkdir(parents=True, exist_ok=True)
        make_qdq.quantize(name, path)
    return path


def measure(name: str, path: Path | None = None) -> dict:
    path = path or ROOT / "models" / f"{name}_int8.tflite"
    graph = lower(path)
    build_dir = BUILD
    program = _scons_build(path, build_dir, TARGET, graph=graph)
    run = run_on_emulator(load_target(TARGET), program, _seeded_input(graph), timeout=600)
    report = json.loads(next(build_dir.rglob(f"{graph.name}.json")).read_text())
    return {"model": name, "instructions": run.instructions, "workspace": report["ram"]["workspace_bytes"],
            "stack": report["ram"].get("stack_bytes"), "macs": report["macs"]}


def per_kernel(name: str) -> list[dict]:
    """Each kernel's instructions (firmware built again with the kernel hook, next to the model's
    generated code in build/int8/NAME/firmware-hook), with its op and MACs from the report."""
    path = ROOT / "models" / f"{name}_int8.tflite"
    graph = lower(path)
    _scons_build(path, BUILD, TARGET, graph=graph)
    work = BUILD / graph.name
    script = work / "SConstruct.kernel-hook"
    script.write_text(f"""\
import os, sys
sys.path.insert(0, {str(ROOT)!r})
from tinsmith.targets.firmware_scons import firmware_program
env = Environment(ENV=os.environ.copy())
firmware_program(env, {TARGET!r}, ".", {graph.name!r}, build_dir="firmware-hook",
                 extra_ccflags=["-DTINSMITH_KERNEL_HOOK"])
""")
    subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", "-f", script.name], cwd=work, check=True,
                   stdout=subprocess.DEVNULL)
    target = load_target(TARGET)
    run = run_on_emulator(target, work / "firmware-hook" / f"{graph.name}.elf", _seeded_input(graph), timeout=600)
    counts = kernel_instructions(target, run) or []
    report = json.loads((work / f"{graph.name}.json").read_text())
    return [{"name": n.get("name"), "op": n.get("op"), "macs": n.get("macs"), "instructions": c}
            for n, c in zip(report["nodes"], counts)]


def main() -> int:
    global TARGET, TFLM_CMSIS_NN, BUILD
    args = sys.argv[1:]
    if "--target" in args:
        TARGET = args.pop(args.index("--target") + 1)
        args.remove("--target")
        TFLM_CMSIS_NN = PEERS[TARGET][1]
        BUILD = ROOT / "build" / ("int8" if TARGET == "cortex-m4" else f"int8-{TARGET}")
    if "--per-kernel" in args:
        for name in [a for a in args if not a.startswith("--")] or MODELS:
            rows = per_kernel(name)
            total = sum(r["instructions"] for r in rows)
            print(f"\n{name}: {total:,} instructions in kernels")
            print("| kernel | op | MACs | instructions | share | instr./MAC |")
            print("|---|---|---:|---:|---:|---:|")
            for r in sorted(rows, key=lambda r: -r["instructions"]):
                per_mac = f"{r['instructions'] / r['macs']:.2f}" if r.get("macs") else ""
                print(f"| {r['name']} | {r['op']} | {r.get('macs') or 0:,} | {r['instructions']:,} | "
                      f"{r['instructions'] / max(total, 1):.1%} | {per_mac} |")
        return 0
    lines = ["| model | instructions | TFLM + CMSIS-NN | ratio | workspace | TFLM arena | ratio | stack | MACs "
             "| instr./MAC |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows = [(name, measure(name)) for name in MODELS]
    # the same networks quantized by ONNX Runtime, against the same TFLM + CMSIS-NN figures
    rows += [(name, {**measure(f"{name}_qdq", qdq_model(name)), "model": f"{name} (QDQ ONNX)"}) for name in QDQ_MODELS]
    for name, r in rows:
        instr, arena = TFLM_CMSIS_NN[name]
        lines.append(f"| {r['model']} | {r['instructions'] / 1e6:.2f} M | {instr / 1e6:.2f} M "
                     f"| {r['instructions'] / instr:.2f} | {r['workspace'] / 1e3:.1f} KB | {arena / 1e3:.1f} KB "
                     f"| {r['workspace'] / arena:.2f} | {r['stack']} | {r['macs']:,} "
                     f"| {r['instructions'] / r['macs']:.2f} |")
    print("\n".join(lines))
    if "--write" in args:
        write_section(Path(args[args.index("--write") + 1]), lines)
    return 0


def section_title() -> str:
    return f"## {PEERS[TARGET][0]}: int8 models against TFLite Micro with CMSIS-NN"


def write_section(doc: Path, table: list[str]) -> None:
    """Replace (or add, before the host comparison) the int8 section of the benchmarks document;
    the rest of it is left as it is (benchmarks/firmware.py keeps what follows its own table)."""
    title = section_title()
    option = "" if TARGET == "cortex-m4" else f" --target {TARGET}"
    section = [title, "",
               f"Written by `python benchmarks/int8.py{option} --write docs/BENCHMARKS.md`: the int8 `.tflite` models of",
               f"`models/` (float32 versions in the table above) on the emulated {PEERS[TARGET][0]}, one inference on",
               "QEMU with `-icount`. The TFLM + CMSIS-NN columns are reference measurements of the same",
               "architectures as int8 `.tflite` files on the same emulated core, not re-run by the script.",
               "The QDQ ONNX row is the kws network quantized by ONNX Runtime's `quantize_static`",
               "(`models/make_qdq.py`: int8 activations, per-channel int8 weights), against the same figures.",
               "", *table, ""]
    old = doc.read_text().splitlines()
    if title in old:
        start = old.index(title)
        end = next((i for i in range(start + 1, len(old)) if old[i].startswith("## ")), len(old))
    else:
        # a new core's section goes after the last int8 section, before the host comparison
        start = end = next((i for i, line in enumerate(old) if line.startswith("## Host")), len(old))
    doc.write_text("\n".join(old[:start] + section + old[end:]) + "\n")


if __name__ == "__main__":
    sys.exit(main())
