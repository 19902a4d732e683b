"""The element types TFLite Micro runs for DIV (int8), PRELU (int16 data, int8 alpha), CUMSUM (int8),
FILL (a constant or a run-time value), EMBEDDING_LOOKUP (an int8 table, to int8 or, dequantized,
to float32), QUANTIZE (int32 requantized to int8 or int16) and MEAN over axes other than H and W
(int8, int16): models written by tests/tflite_writer.py, imported, compiled and run on the host and
the emulated Cortex-M4, every output bit-exact with the TFLite Micro interpreter; the int8 DIV
reference checked against it on every pair of inputs, and the compiled kernel against the reference;
the forms TFLite Micro refuses refused by name."""
from __future__ import annotations

import numpy as np
import pytest

from tinsmith.errors import GraphError
from tinsmith.ops.quantized_fixed_point import div_values
from tinsmith.pipeline import lower
from tinsmith.quant import fixed_point as fp
from tflite_writer import Op, Tensor, model

from test_tflite_integer_forms import Writer, _refusal, compare, lower_data, run_tflm

X8 = (0.05, 3)


def tflm_model() -> tuple[bytes, list[np.ndarray]]:
    m = Writer(19)
    a8 = m.input("a8", "int8", (2, 3, 8), X8)
    m.feeds[-1][m.feeds[-1] == X8[1]] = 4  # (a divisor too)
    b8 = m.input("b8", "int8", (3, 1), (0.02, -10))
    m.feeds[-1][m.feeds[-1] == -10] = 11  # (no division by zero, which TFLite leaves undefined)
    x16 = m.input("x16", "int16", (2, 3, 8), (0.0005, 40))
    ids = m.input("ids", "int32", (4,))
    m.feeds[-1] = np.int32([4, 0, 2, 4])
    value = m.input("value", "float32", ())
    acc = m.input("acc", "int32", (2, 3, 8), (0.0004, 7))
    m.feeds[-1] = m.rng.integers(-300000, 300000, (2, 3, 8)).astype(np.int32)
    m.op("DIV", [a8, b8], "div_int8", "int8", (2, 3, 8), (0.1, 2), ("DivOptions", {}))
    m.op("DIV", [a8, a8], "div_same_relu_int8", "int8", (2, 3, 8), (0.04, -128),
         ("DivOptions", {"FusedActivationFunction": 1}))
    alpha = m.add("alpha", "int8", [8], m.rng.integers(-128, 128, 8).astype(np.int8), (0.004, -20))
    m.op("PRELU", [x16, alpha], "prelu_int16", "int16", (2, 3, 8), (0.0007, -40))
    axis = m.add("axis", "int32", [], np.int32(2))
    m.op("CUMSUM", [a8, axis], "cumsum_int8", "int8", (2, 3, 8), (0.2, -1), ("CumsumOptions", {}))
    m.op("CUMSUM", [a8, m.add("axis0", "int32", [], np.int32(0))], "cumsum_exclusive_reverse_int8", "int8",
         (2, 3, 8), X8, ("CumsumOptions", {"Exclusive": True, "Reverse": True}))
    dims = m.add("dims", "int32", [2], np.int32([2, 3]))
    m.op("FILL", [dims, value], "fill_float32", "float32", (2, 3))
    m.op("FILL", [dims, m.add("seven", "int8", [], np.int8(-7), X8)], "fill_int8", "int8", (2, 3), X8)
    table = m.add("table", "int8", [5, 6], m.rng.integers(-128, 128, (5, 6)).astype(np.int8), (0.0213, 0))
    m.op("EMBEDDING_LOOKUP", [ids, table], "embedding_hybrid", "float32", (4, 6))
    m.op("EMBEDDING_LOOKUP", [ids, table], "embedding_int8", "int8", (4, 6), (0.0213, 0))
    m.op("QUANTIZE", [acc], "quantize_int32_to_int8", "int8", (2, 3, 8), (0.5, -3))
    m.op("QUANTIZE", [acc], "quantize_int32_to_int16", "int16", (2, 3, 8), (0.0007, 0))
    reducer = ("ReducerOptions", {"KeepDims": True})
    m.op("MEAN", [a8, m.axes("mean_axes", [0, 2])], "mean_int8", "int8", (1, 3, 1), (0.03, -5), reducer)
    m.op("MEAN", [x16, m.axes("mean_axis", [-1])], "mean_int16", "int16", (2, 3, 1), (0.0007, 0), reducer)
    return m.write(), m.feeds


@pytest.mark.parametrize("target", ["host", "cortex-m4"])
def test_tflm_forms_are_bit_exact(target, tmp_path):
    data, feeds = tflm_model()
    compare(tmp_path, data, feeds, run_tflm(data, feeds), target)


def test_the_oracle_disagrees_with_a_naive_computation():
    """TFLite Micro's int8 CUMSUM starts its sums at the rescaled input offset: a nonzero zero point
    counts once more."""
    data, feeds = tflm_model()
    want = dict(zip(lower_data(data).outputs, run_tflm(data, feeds)))
    sums = np.cumsum(feeds[0].astype(np.int64) - X8[1], axis=2)
    assert np.abs(np.clip(np.round(sums * X8[0] / 0.2) - 1, -128, 127) - want["cumsum_int8"]).max() >= 1


DIV_QUANTS = [((0.05, 3), (0.02, -10), (0.1, 2), 0), ((0.1, -128), (0.003, 0), (0.5, -5), 1),
              ((0.02, 0), (0.02, 0), (0.02, 0), 0), ((0.3, 127), (0.01, -128), (1.5, 100), 3)]


def _every_pair_reference(a_quant, b_quant, y_quant, activation) -> np.ndarray:
    """The QDiv reference (NumPy) of every int8 pair, [256, 256] indexed by (a + 128, b + 128)."""
    every = np.arange(-128, 128)
    lo, hi = fp.activation_range({0: "none", 1: "relu", 3: "relu6"}[activation], *y_quant)
    attrs = {"a_scale": a_quant[0], "a_zero_point": a_quant[1], "b_scale": b_quant[0], "b_zero_point": b_quant[1],
             "y_scale": y_quant[0], "y_zero_point": y_quant[1], "act_min": lo, "act_max": hi}
    return div_values(every[:, None], every[None, :], attrs)


def _div_model(a_quant, b_quant, y_quant, activation, a_shape, b_shape) -> bytes:
    tensors = [Tensor("a", "int8", list(a_shape), quant=a_quant), Tensor("b", "int8", list(b_shape), quant=b_quant),
               Tensor("y", "int8", [256, 256], quant=y_quant)]
    return model(tensors, [Op("DIV", [0, 1], [2], ("DivOptions", {"FusedActivationFunction": activation}))],
                 [0, 1], [2])


@pytest.mark.parametrize("a_quant,b_quant,y_quant,activation", DIV_QUANTS)
def test_int8_div_reference_matches_tflm_on_every_pair(a_quant, b_quant, y_quant, activation):
    """All 65,536 pairs at once (those dividing by zero, undefined in TFLite, left out); the
    quantizations reach the pairs where TFLite's final shift passes 31 (0 / b among them)."""
    every = np.arange(-128, 128).astype(np.int8)
    a, b = np.meshgrid(every, every, indexing="ij")
    want = run_tflm(_div_model(a_quant, b_quant, y_quant, activation, (256, 256), (256, 256)), [a, b])[0]
    got = _every_pair_reference(a_quant, b_quant, y_quant, activation)
    defined = b.astype(int) != b_quant[1]
    np.testing.assert_array_equal(got[defined], want[defined])
    if (a_quant, b_quant) == ((0.02, 0), (0.02, 0)):  # 0 / -128: the shift passes 31, the result is not 0
        assert want[128, 0] == got[128, 0] == y_quant[1] + 1


@pytest.mark.parametrize("a_quant,b_quant,y_quant,activation,target",
                         [(*quants, "host") for quants in DIV_QUANTS] + [(*DIV_QUANTS[2], "cortex-m4")])
def test_int8_div_kernel_matches_the_reference_on_every_pair(a_quant, b_quant, y_quant, activation, target,
                                                             tmp_path):
    """The compiled QDiv kernel on every pair (a column of dividends broadcast against a row of
    divisors), division by zero included, bit-exact with the NumPy reference; (0.02, 0) throughout
    reaches shifts of 32 and more, which C++ must compute without the undefined shift."""
    want = _every_pair_reference(a_quant, b_quant, y_quant, activation)
    every = np.arange(-128, 128).astype(np.int8)
    data = _div_model(a_quant, b_quant, y_quant, activation, (256, 1), (1, 256))
    compare(tmp_path, data, [every.reshape(256, 1), every.reshape(1, 256)], [want], target)


def test_forms_tflm_refuses_are_refused_by_name():
    def single(code, x, others, y, options=None):
        tensors = [x, *others, y]
        return model(tensors, [Op(code, list(range(len(tensors) - 1)), [len(tensors) - 1], options)], [0],
                     [len(tensors) - 1])
    q16 = (0.0005, 0)
    prelu = single("PRELU", Tensor("x", "int16", [4], quant=q16),
                   [Tensor("alpha", "int16", [4], np.int16([1, 2, 3, 4]), q16)], Tensor("y", "int16", [4], quant=q16))
    _refusal(prelu, r"operator 0 \(PRELU\): int16 PRELU with int16 alpha to int16 \(TFLite Micro takes "
                    r"int8 alpha")
    for scales, zp, says in (([0.1, 0.2], [0, 0], "2 scales and zero point 0"), (0.1, 4, "1 scales and zero point 4")):
        table = Tensor("t", "int8", [2, 3], np.int8([[1, 2, 3], [4, 5, 6]]), (scales, zp))
        lookup = model([Tensor("ids", "int32", [1]), table, Tensor("y", "float32", [1, 3])],
                       [Op("EMBEDDING_LOOKUP", [0, 1], [2])], [0], [2])
        _refusal(lookup, rf"operator 0 \(EMBEDDING_LOOKUP\): an int8 EMBEDDING_LOOKUP table quantized with {says} "
                         r"\(TFLite Micro applies one scale, the first, and requires zero point 0\)")
    div16 = single("DIV", Tensor("a", "int16", [4], quant=q16), [Tensor("b", "int16", [4], np.int16([1, 2, 3, 4]), q16)],
                   Tensor("y", "int16", [4], quant=q16), ("DivOptions", {}))
    _refusal(div16, r"operator 0 \(DIV\) on int16 data \(Tinsmith supports DIV on float32, int32, int8\)")
    cumsum16 = single("CUMSUM", Tensor("x", "int16", [4], quant=q16), [Tensor("axis", "int32", [], np.int32(0))],
                      Tensor("y", "int16", [4], quant=q16), ("CumsumOptions", {}))
    _refusal(cumsum16, r"operator 0 \(CUMSUM\) on int16 data \(Tinsmith supports CUMSUM on float32, int32, int8\)")
    wide = single("DIV", Tensor("a", "int8", [4], quant=(1.0, 0)), [Tensor("b", "int8", [4], np.int8([1, 2, 3, 4]),
                                                                           (1e-4, 0))],
                  Tensor("y", "int8", [4], quant=(1e-4, 0)), ("DivOptions", {}))
    _refusal(wide, r"operator 0 \(DIV\): int8 DIV with a scale ratio a_scale / \(b_scale y_scale\) of 1e\+08")


def test_a_qdiv_needing_a_left_shift_is_refused_in_a_graph_file(tmp_path):
    """TFLite's int8 DIV only shifts its quotient right: a scale ratio of 2^22 or more is refused at
    the node, with the file's line."""
    (tmp_path / "g.yaml").write_text(
        "graph: g\n"
        "inputs:\n"
        "  a: {dtype: int8, shape: [4], quant: {scale: 1.0, zero_point: 0}}\n"
        "  b: {dtype: int8, shape: [4], quant: {scale: 0.0001, zero_point: 0}}\n"
        "outputs: [y]\n"
        "nodes:\n"
        "  - {op: QDiv, inputs: [a, b], outputs: [y], attrs: {a_scale: 1.0, b_scale: 0.0001, y_scale: 0.0001}}\n")
    with pytest.raises(GraphError, match=r"g.yaml:7:\d+: error: QDiv node 'qdiv_y': the scale ratio a_scale / "
                                         r"\(b_scale y_scale\) is 1e\+08; TFLite's int8 DIV shifts its quotient right "
                                         r"only, which needs a ratio below 2\^22"):
        lower(tmp_path / "g.yaml")
