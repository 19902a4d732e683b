"""`tinsmith validate`: the compiled model against the original model in its own runtime (ONNX
Runtime for kws_dscnn.onnx, the TFLite Micro interpreter for kws_dscnn_int8.tflite), on the host
and on the emulated Cortex-M4. The metrics it reports are checked against the same metrics
computed here with NumPy from the runtime's outputs and the compiled model's (`tinsmith run`);
a perturbed copy of each model, validated against the original, must fail.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, tinsmith

ort = pytest.importorskip("onnxruntime")
tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
onnx = pytest.importorskip("onnx")

TFLITE = ROOT / "models" / "kws_dscnn_int8.tflite"
METRIC_LINE = (r"output {name}: max abs (\S+) \(allowed (\S+)\), mean abs (\S+), RMSE (\S+), cosine (\S+), "
               r"top-1 (\S+)%")


@pytest.fixture(scope="module")
def kws_onnx(tmp_path_factory) -> Path:
    sys.path.insert(0, str(ROOT))
    from models import make_models
    return make_models.write_models(tmp_path_factory.mktemp("models"), ("kws_dscnn",))["kws_dscnn"]


@pytest.fixture(scope="module")
def kws_build(tmp_path_factory):
    """`kws_build(target)`: one build folder per target for the tests that validate kws_onnx
    itself, so that the model is generated and compiled once per target, not once per test."""
    folder = tmp_path_factory.mktemp("kws_builds")
    return lambda target: folder / target


def _validate(model: Path, tmp_path: Path, *args: str, build: Path | None = None):
    return tinsmith("validate", str(model), "--target", "host", "--build-dir", str(build or tmp_path / "build"),
                    "--json", str(tmp_path / "metrics.json"), *args, cwd=tmp_path)  # (host: one level is validated)


def _independent_metrics(got: np.ndarray, want: np.ndarray) -> dict:
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    g, w = got.ravel().astype(np.float64), want.ravel().astype(np.float64)
    return {"max_abs_error": diff.max(), "mean_abs_error": diff.mean(), "rmse": np.sqrt((diff ** 2).mean()),
            "cosine": g @ w / (np.linalg.norm(g) * np.linalg.norm(w))}


@pytest.mark.parametrize("target", ["host", "cortex-m4"])
def test_onnx_model_against_onnx_runtime(kws_onnx, tmp_path, target, kws_build):
    build = kws_build(target)
    proc = _validate(kws_onnx, tmp_path, "--target", target, "--samples", "2", build=build)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"kws_dscnn [{target}] against ONNX Runtime on 2 seeded random inputs (seed 0):")
    assert f"kws_dscnn [{target}] agrees with ONNX Runtime within the tolerance" in proc.stdout
    report = json.loads((tmp_path / "metrics.json").read_text())
    assert report["ok"] and report["samples"] == 2 and report["target"] == target
    (probs,) = report["outputs"]
    assert probs["name"] == "probs" and probs["top1"] == 1.0 and probs["ok"]
    assert probs["max_abs_error"] <= probs["allowed_max_abs_error"] and probs["cosine"] > 0.999999

    # the same numbers, independently: ONNX Runtime and `tinsmith run` on the seed-0 input
    from tinsmith.cli import seeded_inputs
    from tinsmith.pipeline import lower
    graph = lower(kws_onnx)
    x = seeded_inputs(graph, 0)
    np.savez(tmp_path / "in.npz", **x)
    run = tinsmith("run", str(kws_onnx), "--inputs", "in.npz", "--output", "out.npz", "--target", target,
                   "--build-dir", str(build), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    got = np.load(tmp_path / "out.npz")["probs"]
    want = ort.InferenceSession(str(kws_onnx), providers=["CPUExecutionProvider"]).run(None, x)[0]
    one = json.loads(tinsmith_json(kws_onnx, tmp_path, target, "--samples", "1", build=build))["outputs"][0]
    for key, value in _independent_metrics(got, want).items():
        assert one[key] == pytest.approx(value, rel=1e-9, abs=1e-15), key
    # and the build's report carries the latest validation
    build_report = json.loads((build / "kws_dscnn" / "kws_dscnn.json").read_text())
    assert build_report["validation"]["outputs"][0] == one


def tinsmith_json(model: Path, tmp_path: Path, target: str, *args: str, build: Path | None = None) -> str:
    proc = _validate(model, tmp_path, "--target", target, *args, build=build)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return (tmp_path / "metrics.json").read_text()


@pytest.mark.parametrize("target", ["host", "cortex-m4"])
def test_int8_tflite_model_against_tflite_micro_per_layer(tmp_path, target):
    proc = _validate(TFLITE, tmp_path, "--target", target, "--samples", "2", "--per-layer")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "against the TFLite Micro interpreter on 2 seeded random inputs" in proc.stdout
    report = json.loads((tmp_path / "metrics.json").read_text())
    # bit-exact with TFLite Micro: no error at all, output and every intermediate tensor
    assert report["outputs"][0]["max_abs_error"] == 0.0 and report["outputs"][0]["top1"] == 1.0
    assert len(report["layers"]) >= 10 and all(m["max_abs_error"] == 0.0 for m in report["layers"])
    assert "per layer (" in proc.stdout and "(QConv2D)" in proc.stdout and "(QDepthwise)" in proc.stdout


def _perturbed_onnx(original: Path, folder: Path, initializer: str) -> Path:
    model = onnx.load(str(original))
    for init in model.graph.initializer:
        if init.name == initializer:
            data = onnx.numpy_helper.to_array(init) * np.float32(1.05)
            init.CopyFrom(onnx.numpy_helper.from_array(data.astype(np.float32), init.name))
    path = folder / "kws_dscnn.onnx"  # the same graph name as the original's
    onnx.save(model, str(path))
    return path


def test_perturbed_onnx_model_fails_and_per_layer_names_the_layer(kws_onnx, tmp_path):
    folder = tmp_path / "perturbed"
    folder.mkdir()
    bad = _perturbed_onnx(kws_onnx, folder, "pw3_w")  # the third pointwise convolution's weights
    proc = _validate(bad, tmp_path, "--reference", str(kws_onnx), "--per-layer")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "error: kws_dscnn [host] differs from ONNX Runtime beyond the tolerance in " in proc.stderr
    report = json.loads((tmp_path / "metrics.json").read_text())
    assert not report["ok"]
    first_bad = next(m for m in report["layers"] if not m["ok"])
    assert first_bad["layer"].startswith("pw3"), report["layers"]
    assert all(m["ok"] for m in report["layers"][:report["layers"].index(first_bad)])


def test_perturbed_tflite_model_fails_on_the_cortex_m4(tmp_path):
    """One int8 weight of the last layer changed: the compiled copy no longer matches TFLite Micro
    running the original."""
    from tinsmith.load.tflite_model import _tflite
    data = bytearray(TFLITE.read_bytes())
    tfl = _tflite()
    model = tfl.Model.GetRootAsModel(bytes(data), 0)
    graph = model.Subgraphs(0)
    last = graph.Operators(graph.OperatorsLength() - 2)  # the fully connected layer before softmax
    weights = graph.Tensors(int(last.InputsAsNumpy()[1]))
    buffer = model.Buffers(weights.Buffer())
    start = buffer._tab.Vector(buffer._tab.Offset(4))  # the data vector's first byte
    for k in range(buffer.DataLength()):
        data[start + k] = (data[start + k] + 40) % 256
    bad = tmp_path / "perturbed" / TFLITE.name
    bad.parent.mkdir()
    bad.write_bytes(bytes(data))
    proc = _validate(bad, tmp_path, "--reference", str(TFLITE), "--target", "cortex-m4", "--samples", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL output " in proc.stdout and "differs from the TFLite Micro interpreter" in proc.stderr


def test_user_data_as_a_batch_and_as_a_folder(kws_onnx, tmp_path, kws_build):
    """Three samples in one .npz (leading batch dimension) or as three .npy files: the same metrics."""
    from tinsmith.pipeline import lower
    graph = lower(kws_onnx)
    shape = graph.types[graph.inputs[0]].shape
    batch = np.random.default_rng(5).standard_normal((3, *shape)).astype(np.float32)
    np.savez(tmp_path / "batch.npz", **{graph.inputs[0]: batch})
    folder = tmp_path / "samples"
    folder.mkdir()
    for k in range(3):
        np.save(folder / f"{k}.npy", batch[k])
    results = []
    for data in ("batch.npz", "samples"):
        proc = _validate(kws_onnx, tmp_path, "--data", data, build=kws_build("host"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"on 3 samples from {data}:" in proc.stdout
        results.append(json.loads((tmp_path / "metrics.json").read_text())["outputs"])
    assert results[0] == results[1]


def test_bad_usage_is_a_clear_error(kws_onnx, tmp_path, kws_build):
    graph = ROOT / "graphs" / "mlp.yaml"
    proc = _validate(graph, tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "is a graph file: validate needs the original model to compare with" in proc.stderr
    np.savez(tmp_path / "wrong.npz", x=np.zeros((2, 3), np.float32))
    proc = _validate(kws_onnx, tmp_path, "--data", "wrong.npz", build=kws_build("host"))
    assert proc.returncode == 1 and "wrong.npz lacks input" in proc.stderr, proc.stderr


def test_a_missing_runtime_is_named_with_its_package(kws_onnx, tmp_path):
    """Without ONNX Runtime (hidden from the import system here), the command says what to install."""
    import subprocess
    code = ("import sys; sys.modules['onnxruntime'] = None; from tinsmith.cli import main; "
            f"sys.exit(main(['validate', {str(kws_onnx)!r}, '--build-dir', {str(tmp_path / 'b')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert "validating a .onnx model needs ONNX Runtime (the Python package 'onnxruntime'), which is not " \
           "installed" in proc.stderr and "pip install onnxruntime" in proc.stderr
