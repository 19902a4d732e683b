"""Single-operator int8 TFLite models (tests/data/tflite, made by `models/make_int8.py
--operators`) compiled for the host and compared with the TFLite Micro interpreter on seeded
inputs over the whole int8 range: every output bit-exact. They reach what the four models do
not: a standalone RELU, MUL with a fused RELU6, ADD with a fused ReLU, pools and PAD + CONCATENATION,
softmax over an odd row after a scale, convolutions with SAME padding on odd sizes and a
depth multiplier."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tinsmith.pipeline import lower

DATA = Path(__file__).resolve().parent / "data" / "tflite"
MODELS = sorted(p.stem for p in DATA.glob("*.tflite"))
tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")


def test_the_operator_models_are_there():
    assert {"relu", "mul_relu", "add_relu", "mul", "avg_pool", "max_pool", "pad_concat", "softmax_beta",
            "conv_relu6", "depthwise"} <= set(MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_operator_is_bit_exact_with_tflite_micro(name, tmp_path):
    from host_program import run_on_host  # what run_compiled computes on the host, without SCons
    path = DATA / f"{name}.tflite"
    graph = lower(path)
    interp = tflm.Interpreter.from_file(str(path))
    rng = np.random.default_rng(len(name))
    for _ in range(3):
        feeds = {}
        for i, value in enumerate(graph.inputs):
            x = rng.integers(-128, 128, graph.types[value].shape).astype(np.int8)
            interp.set_input(x, i)
            feeds[value] = x
        interp.invoke()
        got = run_on_host(path, feeds, tmp_path, graph)
        for i, value in enumerate(graph.outputs):
            np.testing.assert_array_equal(got[value], interp.get_output(i), err_msg=f"{name} output {value}")
