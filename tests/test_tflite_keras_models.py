"""Models converted by TensorFlow's TFLiteConverter from small Keras models (models/make_keras_tflite.py:
an LSTM keyword spotter as float32 and int8 (TensorFlow's converter has no 16x8 LSTM), a
convolutional net as float32, int8 and 16x8 .tflite files in tests/data/tflite/keras), compiled by Tinsmith and compared with the TFLite Micro interpreter on
seeded inputs: integer outputs bit-exact, float32 within 1e-5 relative (1e-6 absolute)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tinsmith.pipeline import lower

tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")

KERAS = Path(__file__).resolve().parent / "data" / "tflite" / "keras"
FILES = sorted(p.name for p in KERAS.glob("*.tflite"))


def seeded_input(shape, dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "float32":
        return rng.normal(0.0, 1.0, shape).astype(np.float32)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def interpreter_output(data: bytes, x: np.ndarray) -> np.ndarray:
    interp = tflm.Interpreter.from_bytes(data, arena_size=1 << 20)
    interp.set_input(x, 0)
    interp.invoke()
    return interp.get_output(0)


def test_every_kind_of_each_model_is_there():
    assert FILES == sorted([f"lstm_kws_{k}.tflite" for k in ("float32", "int8")] +
                           [f"conv_net_{k}.tflite" for k in ("float32", "int8", "16x8")])


@pytest.mark.parametrize("name", FILES)
def test_converted_model_matches_tflite_micro(name, tmp_path):
    # compiled for the host without SCons (tests/host_program.py): the numbers are the question
    # here, and the build's report and page of the unrolled LSTM cost several times its compile
    from host_program import run_on_host
    path = KERAS / name
    graph = lower(path)
    x_type = graph.types[graph.api_inputs[0]]
    for seed in (0, 1):
        x = seeded_input(x_type.shape, x_type.dtype, seed)
        got = run_on_host(path, {graph.api_inputs[0]: x}, tmp_path, graph)[graph.api_outputs[0]]
        want = interpreter_output(path.read_bytes(), x)
        assert got.dtype == want.dtype
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(got, want)
