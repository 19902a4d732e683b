"""ONNX models compiled by Tinsmith and compared with ONNX Runtime (or, where ONNX Runtime
does not implement an attribute, ONNX's reference evaluator): many small models built on the
host into one program (conformance/batch.py), and graphs of graphs/ built by SCons for the
host and the Cortex-M4 and run there (QEMU)."""
from __future__ import annotations

import shutil
import subprocess
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


def run_graph(build: Path, name: str, x: np.ndarray, where: str, scratch: Path) -> np.ndarray:
    """The float32 output of graph `name` (one input, one output) on the host or the Cortex-M4,
    from `build`, the shared build of every graph for that target; the run's files go to `scratch`."""
    data = np.ascontiguousarray(x, "<f4").tobytes()
    if where == "host":
        scratch.mkdir(parents=True, exist_ok=True)
        (scratch / "in.bin").write_bytes(data)
        subprocess.run([str(build / name / f"{name}_runner"), str(scratch / "in.bin"), str(scratch / "out.bin")],
                       check=True)
        return np.frombuffer((scratch / "out.bin").read_bytes(), "<f4")
    from tinsmith.targets.qemu import run_on_emulator
    run = run_on_emulator("cortex-m4", build / name / "firmware" / f"{name}.elf", data, timeout=300)
    return np.frombuffer(run.output, "<f4")


def check_example_graph(name: str, model: onnx.ModelProto, inputs: Sequence[np.ndarray], where: str,
                        base: Path) -> None:
    """graphs/NAME.yaml (imported from `model`) on the host or the Cortex-M4 against ONNX Runtime
    on `model`, for each input; from the session's shared builds of every graph (tests/shared_builds.py),
    `base` being the session's basetemp."""
    from shared_builds import every_graph
    build = every_graph(base, where)
    feed = model.graph.input[0].name
    for k, x in enumerate(inputs):
        (want,) = expected(model, {feed: x})
        got = run_graph(build, name, x, where, base / f"{name}_runs" / f"{where}-{k}")
        assert_close(got.reshape(want.shape), want, f"{name} on {where}, input {k}")
