"""The four int8 MLPerf Tiny models (models/*_int8.tflite, made by models/make_int8.py) imported,
compiled and run on the host and on the emulated Cortex-M4, against the TensorFlow Lite Micro
interpreter (the tflite-micro package) on the same inputs: every output bit-exact (0 LSB),
softmax included. Also the importer's contract: .tflite as a source for `run`, `--inputs` keyed by
the original tensor names, and every unsupported operator named at once.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from shared_builds import run_built
from tinsmith.pipeline import lower

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("kws_dscnn", "vww_mobilenet", "ic_resnet8", "ad_autoencoder")
tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")


def model_path(name: str) -> Path:
    return ROOT / "models" / f"{name}_int8.tflite"


def oracle(path: Path, x: np.ndarray) -> np.ndarray:
    interp = tflm.Interpreter.from_file(str(path))
    interp.set_input(x, 0)
    interp.invoke()
    return interp.get_output(0)


def inputs_for(path: Path, seed: int) -> np.ndarray:
    shape = tflm.Interpreter.from_file(str(path)).get_input_details(0)["shape"]
    return np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """`built(target)`: the folder where one SCons run built the four models for the target
    (runners on the host, firmware on a bare-metal target), once per session."""
    from shared_builds import these_graphs
    paths = [model_path(name) for name in MODELS]
    return lambda target: these_graphs(tmp_path_factory.getbasetemp(), f"int8-models-{target}", target, paths)


@pytest.mark.parametrize("name", MODELS)
def test_model_is_bit_exact_on_the_host(name, built):
    path = model_path(name)
    graph = lower(path)
    assert graph.types[graph.inputs[0]].dtype == "int8" and graph.types[graph.outputs[0]].dtype == "int8"
    for seed in range(3):
        x = inputs_for(path, seed)
        got = run_built(built("host"), "host", graph, {graph.inputs[0]: x})[graph.outputs[0]]
        np.testing.assert_array_equal(got, oracle(path, x), err_msg=f"{name}, input seed {seed}")


@pytest.mark.parametrize("name", MODELS)
def test_model_is_bit_exact_on_the_cortex_m4(name, built):
    path = model_path(name)
    graph = lower(path)
    x = inputs_for(path, 7)
    got = run_built(built("cortex-m4"), "cortex-m4", graph, {graph.inputs[0]: x})[graph.outputs[0]]
    np.testing.assert_array_equal(got, oracle(path, x))


def test_run_takes_inputs_by_original_tensor_names(tmp_path, tinsmith_cmd):
    path = model_path("kws_dscnn")
    x = inputs_for(path, 3)
    np.savez(tmp_path / "in.npz", **{"serving_default_mfcc:0": x})
    proc = tinsmith_cmd("run", str(path), "--inputs", "in.npz", "--output", "out.npz", "--target", "host",
                        cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = np.load(tmp_path / "out.npz")
    (got,) = out.values()
    np.testing.assert_array_equal(got, oracle(path, x))


def _set_opcode(data: bytearray, code, value: int) -> None:
    """Overwrite an OperatorCode's builtin code in place: its deprecated int8 field (vtable slot 4)
    and its int32 field (slot 10), where the converter wrote them."""
    import struct
    for slot, fmt in ((4, "<b"), (10, "<i")):
        offset = code._tab.Offset(slot)
        if offset:
            struct.pack_into(fmt, data, code._tab.Pos + offset, value)


def test_unsupported_operators_are_listed_at_once(tmp_path, tinsmith_cmd):
    """A model with several operators the importer lacks: one error names them all."""
    import tflite
    from tflite.utils import opcode2name
    data = bytearray(model_path("kws_dscnn").read_bytes())
    model = tflite.Model.GetRootAsModel(data, 0)
    replace = {"MEAN": tflite.BuiltinOperator.HASHTABLE_LOOKUP, "SOFTMAX": tflite.BuiltinOperator.LSH_PROJECTION}
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        name = opcode2name(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()))
        if name in replace:
            _set_opcode(data, code, replace[name])
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(bytes(data))
    proc = tinsmith_cmd("show", str(bad), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert re.search(r"error: unsupported TFLite operators: HASHTABLE_LOOKUP \(operator \d+\), LSH_PROJECTION "
                     r"\(operator \d+\)$",
                     proc.stderr, re.MULTILINE), proc.stderr


def test_import_writes_a_graph_file_that_computes_the_same(tmp_path, tinsmith_cmd):
    path = model_path("ic_resnet8")
    proc = tinsmith_cmd("import", str(path), "-o", "ic.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "ic.yaml").read_text()
    assert "quant: {scale: 0.0039215637, zero_point: -128}" in text  # the input's quantization
    x = inputs_for(path, 5)
    graph = lower(tmp_path / "ic.yaml")
    np.savez(tmp_path / "in.npz", **{graph.inputs[0]: x})
    proc = tinsmith_cmd("run", "ic.yaml", "--inputs", "in.npz", "--output", "out.npz", "--target", "host",
                        cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")[graph.outputs[0]], oracle(path, x))
