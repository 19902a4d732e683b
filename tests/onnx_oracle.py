"""ONNX models compiled by Tinsmith and compared with ONNX Runtime (or, where ONNX Runtime
does not implement an attribute, ONNX's reference evaluator): many small models built on the
host into one program (conformance/batch.py), and graphs of graphs/ built by SCons for the
host and the Cortex-M4 and run there (QEMU)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
HAS_FIRMWARE_TOOLS = bool(shutil.which("arm-none-eabi-g++") and shutil.which("qemu-system-arm"))


def expected(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], reference: bool = False) -> list[np.ndarray]:
    """The model's outputs by ONNX Runtime, or by onnx.reference with `reference`."""
    if reference:
        from onnx.reference import ReferenceEvaluator
        return [np.asarray(y) for y in ReferenceEvaluator(model).run(None, dict(feeds))]
    import onnxruntime as ort
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(feeds))


def assert_close(got: np.ndarray, want: np.ndarray, what: str, rtol: float = 1e-4) -> None:
    """rtol 1e-4, plus an absolute 1e-5 of the output's largest magnitude for elements that
    cancel to about zero (both sides sum in float32, in different orders)."""
    want = np.asarray(want, np.float64)
    scale = float(np.abs(want).max()) if want.size else 0.0
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=1e-5 * max(scale, 1e-3),
                               err_msg=what)


def run_on_host(models: Mapping[str, onnx.ModelProto], feeds: Mapping[str, Mapping[str, np.ndarray]],
                folder: Path) -> dict[str, list[np.ndarray]]:
    """Compile every model for the host into one program and run each on its feeds;
    returns NAME -> outputs (in the model's output order)."""
    from tinsmith.pipeline import compile_graph
    from conformance.batch import build_batches
    from conformance.execute import Signature

    folder.mkdir(parents=True, exist_ok=True)
    compiled, signatures = [], {}
    for name, model in models.items():
        path = folder / f"{name}.onnx"
        path.write_bytes(model.SerializeToString())
        c = compile_graph(path, target="host")
        g = c.graph

        def io(names):
            return tuple((n, g.types[n].numpy_dtype, tuple(g.types[n].shape)) for n in names)
        signatures[name] = (Signature(io(g.inputs), io(g.outputs)), g)
        compiled.append((g.name, c.files))
    programs, failures = build_batches(compiled, folder / "build", jobs=2, batch_size=64, log=lambda _: None)
    assert not failures, failures
    results = {}
    for name in models:
        signature, g = signatures[name]
        data = b"".join(np.ascontiguousarray(feeds[name][n], dtype="<f4").tobytes() for n in g.inputs)
        (folder / f"{name}.in").write_bytes(data)
        subprocess.run(programs[g.name].command(str(folder / f"{name}.in"), str(folder / f"{name}.out")),
                       check=True)
        raw, offset, outs = (folder / f"{name}.out").read_bytes(), 0, []
        for _, dtype, shape in signature.outputs:
            count = int(np.prod(shape, dtype=np.int64))
            outs.append(np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"), count=count,
                                      offset=offset).reshape(shape))
            offset += count * np.dtype(dtype).itemsize
        results[name] = outs
    return results


def run_cases(cases: Mapping[str, tuple[onnx.ModelProto, Mapping[str, np.ndarray]]], folder: Path
              ) -> dict[str, list[np.ndarray]]:
    """run_on_host for cases given as NAME -> (model, feeds)."""
    return run_on_host({n: m for n, (m, _) in cases.items()}, {n: f for n, (_, f) in cases.items()}, folder)


def build_graphs(graphs: Sequence[Path], folder: Path) -> Path:
    """Build graphs of graphs/ with SCons: host runners in folder/host, Cortex-M4 firmware in
    folder/m4."""
    def scons(*args: str) -> None:
        proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", "-C", str(ROOT), *args],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    listed = ",".join(str(g) for g in graphs)
    scons(f"build_dir={folder / 'host'}", f"graphs={listed}")
    elfs = [str(folder / "m4" / g.stem / "firmware" / f"{g.stem}.elf") for g in graphs]
    scons("target=cortex-m4", f"build_dir={folder / 'm4'}", f"graphs={listed}", *elfs)
    return folder


def run_graph(folder: Path, name: str, x: np.ndarray, where: str) -> np.ndarray:
    """The float32 output of graph `name` (one input, one output) on the host or the Cortex-M4."""
    data = np.ascontiguousarray(x, "<f4").tobytes()
    if where == "host":
        build = folder / "host" / name
        (build / "in.bin").write_bytes(data)
        subprocess.run([str(build / f"{name}_runner"), str(build / "in.bin"), str(build / "out.bin")], check=True)
        return np.frombuffer((build / "out.bin").read_bytes(), "<f4")
    from tinsmith.targets.qemu import run_on_emulator
    run = run_on_emulator("cortex-m4", folder / "m4" / name / "firmware" / f"{name}.elf", data, timeout=300)
    return np.frombuffer(run.output, "<f4")


def check_example_graph(name: str, model: onnx.ModelProto, inputs: Sequence[np.ndarray], where: str,
                        base: Path) -> None:
    """graphs/NAME.yaml (imported from `model`) on the host or the Cortex-M4 against ONNX Runtime
    on `model`, for each input; both builds are made once under `base`."""
    folder = base / f"{name}_builds"
    if not (folder / "m4" / name / "firmware" / f"{name}.elf").exists():
        build_graphs([ROOT / "graphs" / f"{name}.yaml"], folder)
    feed = model.graph.input[0].name
    for k, x in enumerate(inputs):
        (want,) = expected(model, {feed: x})
        assert_close(run_graph(folder, name, x, where).reshape(want.shape), want, f"{name} on {where}, input {k}")
