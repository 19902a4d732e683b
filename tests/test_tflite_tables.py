"""int8 functions TFLite imports as tables (codegen/load/tflite_tables.py), against the TFLite Micro
interpreter on every int8 input (-128..127) for input and output quantizations from fine to coarse,
zero points at both ends: every entry equal."""
from __future__ import annotations

import numpy as np
import pytest

from tinsmith.load import tflite_tables as tables
from tflite_writer import Op, Tensor, model

tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
EVERY_INT8 = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
QUANTS = [((0.05, -6), (0.03, -100)), ((0.004, 20), (0.0021, -3)), ((0.1, 127), (0.02, -128)),
          ((0.5, -128), (0.25, 127)), ((0.0078125, 0), (0.0078125, 0)), ((0.03, 5), (0.3, 1))]


def interpreted(code: str, x_quant, y_quant, options=None) -> np.ndarray:
    data = model([Tensor("x", "int8", [1, 256], quant=x_quant), Tensor("y", "int8", [1, 256], quant=y_quant)],
                 [Op(code, [0], [1], options)], [0], [1])
    interp = tflm.Interpreter.from_bytes(data)
    interp.set_input(EVERY_INT8, 0)
    interp.invoke()
    return interp.get_output(0).reshape(-1)


@pytest.mark.parametrize("x_quant,y_quant", QUANTS)
def test_hard_swish_table_is_tflite_micros(x_quant, y_quant):
    np.testing.assert_array_equal(tables.hard_swish(*x_quant, *y_quant), interpreted("HARD_SWISH", x_quant, y_quant))


@pytest.mark.parametrize("alpha", [0.01, 0.2, 0.5, 1.7])
@pytest.mark.parametrize("x_quant,y_quant", QUANTS)
def test_leaky_relu_table_is_tflite_micros(x_quant, y_quant, alpha):
    want = interpreted("LEAKY_RELU", x_quant, y_quant, ("LeakyReluOptions", {"Alpha": alpha}))
    np.testing.assert_array_equal(tables.leaky_relu(*x_quant, *y_quant, alpha), want)


@pytest.mark.parametrize("x_quant,y_quant", QUANTS)
def test_abs_table_is_tflite_micros(x_quant, y_quant):
    np.testing.assert_array_equal(tables.abs_(*x_quant, *y_quant), interpreted("ABS", x_quant, y_quant))


@pytest.mark.parametrize("x_quant,y_quant", QUANTS)
def test_elu_table_is_tflite_micros(x_quant, y_quant):
    np.testing.assert_array_equal(tables.elu(*x_quant, *y_quant), interpreted("ELU", x_quant, y_quant))
