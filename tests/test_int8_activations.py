"""TFLite's int8 LOGISTIC and TANH: single-operator .tflite models (written by tests/tflite_writer.py)
imported, compiled and run, against the TensorFlow Lite Micro interpreter on the whole int8 input
range: every output bit-exact. The build-time tables (codegen/quant/activations.py) are also
checked directly against the interpreter over many input quantizations, including the
zero points at both ends of the range and scales where the radius saturates most inputs."""
from __future__ import annotations

import numpy as np
import pytest

from tinsmith.errors import GraphError
from tinsmith.pipeline import lower
from tinsmith.quant.activations import OUTPUT_QUANT, int8_table
from tflite_writer import single_operator

tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
BUILTIN = {"logistic": 14, "tanh": 28}
EVERY_INT8 = np.arange(-128, 128, dtype=np.int8)
# (scale, zero point): saturating almost everywhere, typical, tiny, and zero points at both ends
QUANTS = [(1.7, 0), (0.05, 3), (0.0039215686, -128), (0.3, 127), (0.001, -5), (0.0625, 0), (0.02, -128),
          (0.125, 127)]


def tflm_outputs(model: bytes, x: np.ndarray) -> np.ndarray:
    interp = tflm.Interpreter.from_bytes(model)
    interp.set_input(x, 0)
    interp.invoke()
    return interp.get_output(0)


@pytest.mark.parametrize("function", sorted(BUILTIN))
def test_tables_match_tflite_micro(function):
    rng = np.random.default_rng(11)
    quants = QUANTS + [(float(10.0 ** rng.uniform(-4, 0.5)), int(rng.integers(-128, 128))) for _ in range(24)]
    for scale, zp in quants:
        model = single_operator(BUILTIN[function], "int8", [1, 256], (scale, zp), OUTPUT_QUANT[function])
        want = tflm_outputs(model, EVERY_INT8.reshape(1, 256)).reshape(-1)
        np.testing.assert_array_equal(int8_table(function, scale, zp), want, err_msg=f"{function} {scale} {zp}")


@pytest.mark.parametrize("function,quant", [(f, q) for f in sorted(BUILTIN) for q in QUANTS[1:5]])
def test_compiled_operator_is_bit_exact_on_the_host(function, quant, tmp_path):
    from host_program import run_on_host  # what run_compiled computes on the host, without SCons
    path = tmp_path / f"{function}.tflite"
    # an odd NHWC shape whose 3*5*17 = 255 elements, plus one more run, cover every int8 value
    path.write_bytes(single_operator(BUILTIN[function], "int8", [1, 3, 5, 17], quant, OUTPUT_QUANT[function]))
    graph = lower(path)
    (x_name,), (y_name,) = graph.inputs, graph.outputs
    assert [n.op for n in graph.nodes] == ["QLookup"]
    for x in (EVERY_INT8[:255].reshape(1, 3, 5, 17), EVERY_INT8[::-1][:255].reshape(1, 3, 5, 17)):
        got = run_on_host(path, {x_name: x}, tmp_path, graph)[y_name]
        np.testing.assert_array_equal(got, tflm_outputs(path.read_bytes(), x), err_msg=f"{function} {quant}")


def test_compiled_operator_is_bit_exact_on_the_cortex_m4(tmp_path):
    from tinsmith.cli import run_compiled
    path = tmp_path / "tanh.tflite"
    path.write_bytes(single_operator(BUILTIN["tanh"], "int8", [1, 256], (0.04, -7), OUTPUT_QUANT["tanh"]))
    graph = lower(path)
    x = EVERY_INT8.reshape(1, 256)
    got = run_compiled(path, {graph.inputs[0]: x}, tmp_path, graph, "cortex-m4")[graph.outputs[0]]
    np.testing.assert_array_equal(got, tflm_outputs(path.read_bytes(), x))


def test_int16_is_reported_unsupported(tmp_path):
    """ELU runs on int8 through a table; on int16 (which TFLite Micro does not run either) it is refused
    by name (int16 LOGISTIC and TANH import: tests/test_tflite_16x8.py)."""
    path = tmp_path / "elu16.tflite"
    path.write_bytes(single_operator(111, "int16", [1, 8], (0.001, 0), (0.001, 0)))
    with pytest.raises(GraphError, match=r"operator 0 \(ELU\) on int16 data \(Tinsmith supports ELU on float32, int8\)"):
        lower(path)


def test_output_quantization_other_than_tflites_is_reported(tmp_path):
    path = tmp_path / "tanh_bad.tflite"
    path.write_bytes(single_operator(BUILTIN["tanh"], "int8", [1, 8], (0.01, 0), (1.0 / 256, -128)))
    with pytest.raises(GraphError, match=r"TANH with output scale 0.00390625 and zero point -128"):
        lower(path)
