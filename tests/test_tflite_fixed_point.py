"""TFLite's integer operators whose arithmetic is fixed-point 1/sqrt or log, or a rescaled square:
RSQRT (int8, int16), L2_NORMALIZATION (int8), LOG_SOFTMAX (int8) and SQUARED_DIFFERENCE (int8, int16,
int32). Models written by tests/tflite_writer.py, imported, compiled and run on the host and the
emulated Cortex-M4, against the TensorFlow Lite Micro interpreter on the same inputs: every output
bit-exact. The NumPy definitions (codegen/quant/fixed_point_functions.py), which also make the
int8 RSQRT table, are checked against the interpreter over many quantizations first."""
from __future__ import annotations

import numpy as np
import pytest

from tinsmith.errors import GraphError
from tinsmith.ops.quantized_fixed_point import rsqrt_values
from tinsmith.pipeline import lower
from tinsmith.quant import fixed_point_functions as ff
from tflite_writer import Op, Tensor, model

tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")

EVERY_INT8 = np.arange(-128, 128, dtype=np.int8)
LOG_SOFTMAX_Q = ff.LOG_SOFTMAX_OUTPUT_QUANT


def tflm_outputs(data: bytes, feeds: list[np.ndarray], count: int = 1) -> list[np.ndarray]:
    interp = tflm.Interpreter.from_bytes(data, arena_size=1 << 21)
    for i, x in enumerate(feeds):
        interp.set_input(x, i)
    interp.invoke()
    return [interp.get_output(i) for i in range(count)]


def unary(code: str, dtype: str, shape, x_quant, y_quant, options=None) -> bytes:
    tensors = [Tensor("x", dtype, list(shape), quant=x_quant), Tensor("y", dtype, list(shape), quant=y_quant)]
    return model(tensors, [Op(code, [0], [1], options)], [0], [1])


# --- the NumPy definitions against the interpreter ------------------------------------------------
RSQRT_QUANTS = [((0.05, -128), (0.02, -5)), ((0.3, 10), (0.01, 0)), ((0.001, -100), (0.5, 3)),
                ((2.0, 127), (0.001, -128)), ((0.0039, 0), (0.08, 100))]


@pytest.mark.parametrize("x_quant,y_quant", RSQRT_QUANTS)
def test_int8_rsqrt_table_matches_tflite_micro(x_quant, y_quant):
    """Every input from the zero point up (TFLite Micro refuses the ones below)."""
    x = EVERY_INT8[EVERY_INT8 >= x_quant[1]].reshape(1, -1)
    (want,) = tflm_outputs(unary("RSQRT", "int8", x.shape, x_quant, y_quant), [x])
    attrs = {"x_scale": x_quant[0], "x_zero_point": x_quant[1], "y_scale": y_quant[0], "y_zero_point": y_quant[1]}
    np.testing.assert_array_equal(rsqrt_values(x, attrs, "int8"), want)


@pytest.mark.parametrize("x_scale,y_scale", [(0.001, 0.0005), (0.3, 2e-5), (1e-5, 0.01), (3e-4, 3e-4)])
def test_int16_rsqrt_matches_tflite_micro_on_every_input(x_scale, y_scale):
    x = np.arange(0, 32768, dtype=np.int16).reshape(1, -1)
    (want,) = tflm_outputs(unary("RSQRT", "int16", x.shape, (x_scale, 0), (y_scale, 0)), [x])
    attrs = {"x_scale": x_scale, "x_zero_point": 0, "y_scale": y_scale, "y_zero_point": 0}
    np.testing.assert_array_equal(rsqrt_values(x, attrs, "int16"), want)


def test_l2_normalization_and_log_softmax_match_tflite_micro():
    """Rows of 1 to 300 values, zero points at both ends, a row all at the zero point (sum 0),
    input scales from 0.004 to 40 (log softmax: past 32 every difference saturates)."""
    rng = np.random.default_rng(3)
    for zp, depth in ((0, 7), (-3, 1), (100, 64), (-128, 300), (127, 5)):
        x = rng.integers(-128, 128, (4, depth)).astype(np.int8)
        x[0] = zp
        (want,) = tflm_outputs(unary("L2_NORMALIZATION", "int8", x.shape, (0.1, zp), (1 / 128, 0),
                                     ("L2NormOptions", {})), [x])
        np.testing.assert_array_equal(ff.l2_normalization_int8(x, zp), want, err_msg=f"l2 {zp} {depth}")
    for scale, depth in ((0.1, 10), (1.0, 5), (0.01, 100), (0.05, 1), (0.3, 40), (0.0039, 256), (4.0, 9), (40.0, 3)):
        x = rng.integers(-128, 128, (5, depth)).astype(np.int8)
        x[0] = 7  # a row of equal values
        (want,) = tflm_outputs(unary("LOG_SOFTMAX", "int8", x.shape, (scale, 3), LOG_SOFTMAX_Q), [x])
        np.testing.assert_array_equal(ff.log_softmax_int8(x, scale), want, err_msg=f"log_softmax {scale} {depth}")


# --- compiled models against the interpreter -----------------------------------------------------
def int8_model() -> bytes:
    """L2_NORMALIZATION, LOG_SOFTMAX and two SQUARED_DIFFERENCEs (with a second input, and with a
    broadcast constant) on int8 data, all reading x [3, 5, 17] (255 values: nearly every int8), and
    RSQRT of r (TFLite Micro refuses inputs below the zero point: r holds every value from it up)."""
    shape = [3, 5, 17]
    tensors = [Tensor("x", "int8", shape, quant=(0.05, -7)), Tensor("b", "int8", [5, 1], quant=(0.12, 20)),
               Tensor("r", "int8", [12, 19], quant=(0.05, RSQRT_ZERO_POINT)),
               Tensor("c", "int8", [17], np.arange(-120, 120, 14, dtype=np.int8)[:17].copy(), (0.03, -2)),
               Tensor("rsqrt", "int8", [12, 19], quant=(0.02, -100)),
               Tensor("l2", "int8", shape, quant=(1 / 128, 0)),
               Tensor("log_softmax", "int8", shape, quant=LOG_SOFTMAX_Q),
               Tensor("sqdiff", "int8", shape, quant=(0.15, -128)),
               Tensor("sqdiff_const", "int8", shape, quant=(0.01, -60))]
    ops = [Op("RSQRT", [2], [4]), Op("L2_NORMALIZATION", [0], [5], ("L2NormOptions", {})),
           Op("LOG_SOFTMAX", [0], [6]), Op("SQUARED_DIFFERENCE", [0, 1], [7]), Op("SQUARED_DIFFERENCE", [0, 3], [8])]
    return model(tensors, ops, [0, 1, 2], [4, 5, 6, 7, 8])


RSQRT_ZERO_POINT = -100  # r: every int8 value from -100 to 127


def int16_model() -> bytes:
    """RSQRT and SQUARED_DIFFERENCE on int16 data, SQUARED_DIFFERENCE on int32."""
    tensors = [Tensor("x", "int16", [4, 300], quant=(0.001, 0)), Tensor("b", "int16", [300], quant=(0.0007, 0)),
               Tensor("i", "int32", [2, 6]), Tensor("j", "int32", [6]),
               Tensor("rsqrt", "int16", [4, 300], quant=(0.0003, 0)),
               Tensor("sqdiff", "int16", [4, 300], quant=(0.002, 0)),
               Tensor("sqdiff_int32", "int32", [2, 6])]
    ops = [Op("RSQRT", [0], [4]), Op("SQUARED_DIFFERENCE", [0, 1], [5]), Op("SQUARED_DIFFERENCE", [2, 3], [6])]
    return model(tensors, ops, [0, 1, 2, 3], [4, 5, 6])


def int8_feeds(seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    every = EVERY_INT8[::-1][:255].reshape(3, 5, 17)
    b = rng.integers(-128, 128, (5, 1)).astype(np.int8)
    r = np.arange(RSQRT_ZERO_POINT, 128, dtype=np.int8).reshape(12, 19)
    flat = np.full((3, 5, 17), -7, np.int8)  # every row at the zero point, and every row equal
    return [[every, b, r], [rng.integers(-128, 128, (3, 5, 17)).astype(np.int8), b, r[::-1].copy()],
            [flat, -b, np.full((12, 19), RSQRT_ZERO_POINT + 1, np.int8)]]


def int16_feeds(seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 32768, (4, 300)).astype(np.int16)
    x[0, :8] = [0, 1, 2, 3, 4, 32767, 16384, 100]
    b = rng.integers(-32768, 32768, (300,)).astype(np.int16)
    i = rng.integers(-60000, 60000, (2, 6)).astype(np.int32)
    j = rng.integers(-60000, 60000, (6,)).astype(np.int32)  # squares past 2^31 wrap, as TFLite's do
    ends = np.where(rng.integers(0, 2, (300,)) > 0, 32767, -32768).astype(np.int16)
    return [[x, b, i, j], [x[::-1].copy(), ends, -i, j]]


def compare(tmp_path, data: bytes, feeds, target: str) -> None:
    from tinsmith.cli import run_compiled
    from host_program import run_on_host
    path = tmp_path / "model.tflite"
    path.write_bytes(data)
    graph = lower(path)
    for xs in feeds:
        inputs = dict(zip(graph.inputs, xs))
        got = run_on_host(path, inputs, tmp_path, graph) if target == "host" else \
            run_compiled(path, inputs, tmp_path, graph, target)
        for name, want in zip(graph.outputs, tflm_outputs(data, xs, len(graph.outputs))):
            assert got[name].dtype == want.dtype
            np.testing.assert_array_equal(got[name], want, err_msg=f"{name} on {target}")


def test_the_importer_chooses_the_integer_primitives(tmp_path):
    path = tmp_path / "m.tflite"
    path.write_bytes(int8_model())
    assert [n.op for n in lower(path).nodes] == ["QLookup", "QL2Normalization", "QLogSoftmax", "QSquaredDifference",
                                                 "QSquaredDifference"]
    path.write_bytes(int16_model())
    assert [n.op for n in lower(path).nodes] == ["QRsqrt", "QSquaredDifference", "Sub", "Mul"]


def test_int8_operators_are_bit_exact_on_the_host(tmp_path):
    compare(tmp_path, int8_model(), int8_feeds(1), "host")


def test_int16_and_int32_operators_are_bit_exact_on_the_host(tmp_path):
    compare(tmp_path, int16_model(), int16_feeds(2), "host")


def test_int8_operators_are_bit_exact_on_the_cortex_m4(tmp_path):
    compare(tmp_path, int8_model(), int8_feeds(3)[:2], "cortex-m4")


def test_int16_operators_are_bit_exact_on_the_cortex_m4(tmp_path):
    compare(tmp_path, int16_model(), int16_feeds(4)[:1], "cortex-m4")


# --- what stays refused, by name ----------------------------------------------------------------
@pytest.mark.parametrize("data,message", [
    (unary("LOG_SOFTMAX", "int8", [2, 4], (0.1, 0), (1 / 256, -128)),
     r"operator 0 \(LOG_SOFTMAX\): int8 LOG_SOFTMAX with output scale 0.00390625 and zero point -128 "
     r"\(TFLite requires 0.0625 and 127\)"),
    (unary("LOG_SOFTMAX", "int8", [2, 4], (2.0 ** -26, 0), LOG_SOFTMAX_Q),
     r"operator 0 \(LOG_SOFTMAX\): int8 LOG_SOFTMAX with input scale 1.49\d*e-08 \(TFLite Micro's Prepare stops"),
    (unary("RSQRT", "int16", [2, 4], (0.1, 3), (0.1, 0)),
     r"operator 0 \(RSQRT\): int16 data with zero points 3 and 0 \(TFLite Micro requires 0\)"),
    (unary("L2_NORMALIZATION", "int8", [2, 4], (0.1, 0), (1 / 128, 0),
           ("L2NormOptions", {"FusedActivationFunction": 1})),
     r"operator 0 \(L2_NORMALIZATION\): a fused activation \(TFLite Micro takes none\)"),
    (unary("L2_NORMALIZATION", "int16", [2, 4], (0.1, 0), (1 / 128, 0), ("L2NormOptions", {})),
     r"operator 0 \(L2_NORMALIZATION\) on int16 data \(Tinsmith supports L2_NORMALIZATION on float32, int8\)"),
    (unary("RSQRT", "uint8", [2, 4], (0.1, 3), (0.1, 0)),
     r"operator 0 \(RSQRT\) on uint8 data \(Tinsmith supports RSQRT on float32, int8, int16\)"),
], ids=["log_softmax_output_quant", "log_softmax_tiny_scale", "rsqrt_int16_zero_point", "l2_fused_activation",
        "l2_int16", "rsqrt_uint8"])
def test_forms_tflite_micro_does_not_run_are_refused_by_name(tmp_path, data, message):
    path = tmp_path / "m.tflite"
    path.write_bytes(data)
    with pytest.raises(GraphError, match=message):
        lower(path)


def long_rows_model() -> bytes:
    """SOFTMAX over rows of 300 (a row of equal values takes the last rounding shift to 31, where
    a mask 2^31 - 1 in int32 would overflow) and LOG_SOFTMAX over rows of 4,095 (the longest whose
    int32 sum of equal values stays below 2^31: log_x sees 4,095 * 2^19)."""
    tensors = [Tensor("x", "int8", [3, 300], quant=(0.1, 3)), Tensor("w", "int8", [2, 4095], quant=(0.05, -7)),
               Tensor("softmax", "int8", [3, 300], quant=(1 / 256, -128)),
               Tensor("log_softmax", "int8", [2, 4095], quant=LOG_SOFTMAX_Q)]
    ops = [Op("SOFTMAX", [0], [2], ("SoftmaxOptions", {"Beta": 1.0})), Op("LOG_SOFTMAX", [1], [3])]
    return model(tensors, ops, [0, 1], [2, 3])


def test_rows_at_the_ends_of_the_int32_sums_are_bit_exact_on_the_host(tmp_path):
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (3, 300)).astype(np.int8)
    x[0] = 40
    x[1, ::2] = 127
    w = rng.integers(-128, 128, (2, 4095)).astype(np.int8)
    w[0] = -128
    compare(tmp_path, long_rows_model(), [[x, w]], "host")


def test_l2_normalization_at_the_end_of_the_int32_sum_matches_tflite_micro():
    """Rows of 33,025 values 255 from the zero point: the sum of squares 2,147,450,625, the largest
    below 2^31 (1/sqrt's input normalised from its top bits), and rows of one value at either end."""
    x = np.full((3, 33025), 127, np.int8)
    x[1, ::3] = -128
    x[2] = -128
    for zp in (-128, 127, 0):
        (want,) = tflm_outputs(unary("L2_NORMALIZATION", "int8", x.shape, (0.1, zp), (1 / 128, 0),
                                     ("L2NormOptions", {})), [x])
        np.testing.assert_array_equal(ff.l2_normalization_int8(x, zp), want, err_msg=f"zero point {zp}")
    ends = np.array([[127], [-128], [0]], np.int8)
    (want,) = tflm_outputs(unary("L2_NORMALIZATION", "int8", ends.shape, (0.1, -128), (1 / 128, 0),
                                 ("L2NormOptions", {})), [ends])
    np.testing.assert_array_equal(ff.l2_normalization_int8(ends, -128), want)
