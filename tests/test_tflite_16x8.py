"""TFLite's 16x8 quantization (int16 activations, int8 weights, int64 or int32 bias): models written by
tests/tflite_writer.py, imported, compiled and run on the host and the emulated Cortex-M4, against the
TensorFlow Lite Micro interpreter on the same inputs, every output bit-exact. One model holds many
operators reading one input (each its own graph output), so one build covers every variant: int64,
int32 and no bias, SAME and VALID padding, strides, dilations, depth multipliers, fused
activations, per-channel scales, and accumulators far beyond int32 (which the int64 path keeps); a
second model holds the int16 elementwise operators, pools and MEAN."""
from __future__ import annotations

import numpy as np
import pytest

from tinsmith.errors import GraphError
from tinsmith.pipeline import lower
from tflite_writer import Op, Tensor, conv_options, model

tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")

X_SHAPE = (1, 7, 6, 4)
X_SCALE = 0.002


class Model16x8:
    """A model being written: int16 input x, operators reading it, each output a graph output."""

    def __init__(self, seed: int, x_shape=X_SHAPE):
        self.rng = np.random.default_rng(seed)
        self.tensors = [Tensor("x", "int16", list(x_shape), quant=(X_SCALE, 0))]
        self.ops: list[Op] = []
        self.outputs: list[int] = []

    def add(self, tensor: Tensor) -> int:
        self.tensors.append(tensor)
        return len(self.tensors) - 1

    def weights(self, name, shape, channels: int, axis: int, bias: str | None, bias_bits: int = 20):
        """Per-channel int8 weights (scales an order of magnitude apart) and a bias of `bias` type."""
        scales = self.rng.uniform(0.002, 0.03, channels)
        zeros = np.zeros(channels, np.int64)
        w = self.add(Tensor(f"{name}_w", "int8", list(shape), self.rng.integers(-127, 128, shape).astype(np.int8),
                            (scales, zeros), axis))
        if bias is None:
            return [w, -1]
        data = self.rng.integers(-(1 << bias_bits), 1 << bias_bits, (channels,)).astype(bias)
        return [w, self.add(Tensor(f"{name}_b", bias, [channels], data, (scales * X_SCALE, zeros)))]

    def op(self, code, name, inputs, y_shape, y_scale, options) -> None:
        y = self.add(Tensor(name, "int16", list(y_shape), quant=(y_scale, 0)))
        self.ops.append(Op(code, inputs, [y], options))
        self.outputs.append(y)

    def write(self) -> bytes:
        return model(self.tensors, self.ops, [0], self.outputs)


def conv_family_model() -> bytes:
    """CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED at 16x8 in their variants, all reading x."""
    m = Model16x8(19)
    c = X_SHAPE[3]
    m.op("CONV_2D", "conv_same_relu", [0, *m.weights("c1", (5, 3, 3, c), 5, 0, "int64")], (1, 7, 6, 5), 0.01,
         conv_options(0, act=1))
    m.op("CONV_2D", "conv_valid_s2_int32_bias", [0, *m.weights("c2", (3, 3, 2, c), 3, 0, "int32")], (1, 3, 3, 3),
         0.02, conv_options(1, stride=2))
    m.op("CONV_2D", "conv_pointwise_no_bias", [0, *m.weights("c3", (6, 1, 1, c), 6, 0, None)], (1, 7, 6, 6),
         0.004, conv_options(1))
    # a bias of 2^40: the sums leave int32 far behind, which only the int64 accumulator holds
    m.op("CONV_2D", "conv_dilated_wide_sums", [0, *m.weights("c4", (2, 2, 2, c), 2, 0, "int64", 40)],
         (1, 7, 6, 2), 1000.0, conv_options(0, dilation=2, act=1))
    m.op("DEPTHWISE_CONV_2D", "depthwise_same_relu6", [0, *m.weights("d1", (1, 3, 3, c), c, 3, "int64")],
         (1, 7, 6, c), 0.003, conv_options(0, act=3, depth_multiplier=1))
    m.op("DEPTHWISE_CONV_2D", "depthwise_valid_s2_m2", [0, *m.weights("d2", (1, 3, 3, 2 * c), 2 * c, 3, "int64")],
         (1, 3, 2, 2 * c), 0.002, conv_options(1, stride=2, depth_multiplier=2))
    # FULLY_CONNECTED: per-tensor weights, the 168 input values as 7 rows of 24
    for name, bias, bits in (("fc_int64_bias", "int64", 20), ("fc_int32_bias", "int32", 20),
                             ("fc_wide_sums", "int64", 38)):
        scale = m.rng.uniform(0.002, 0.03)
        w = m.add(Tensor(f"{name}_w", "int8", [5, 24], m.rng.integers(-127, 128, (5, 24)).astype(np.int8), (scale, 0)))
        b = m.add(Tensor(f"{name}_b", bias, [5], m.rng.integers(-(1 << bits), 1 << bits, (5,)).astype(bias),
                         (scale * X_SCALE, 0)))
        m.op("FULLY_CONNECTED", name, [0, w, b], (7, 5), 0.05 if bits < 30 else 500.0, ("FullyConnectedOptions", {}))
    return m.write()


def tflm_outputs(data: bytes, x: np.ndarray, count: int) -> list[np.ndarray]:
    interp = tflm.Interpreter.from_bytes(data)
    interp.set_input(x, 0)
    interp.invoke()
    return [interp.get_output(i) for i in range(count)]


def inputs(seed: int, shape=X_SHAPE) -> list[np.ndarray]:
    """Seeded inputs over the int16 range, and one at its two ends (the widest products)."""
    rng = np.random.default_rng(seed)
    ends = np.where(rng.integers(0, 2, shape) > 0, 32767, -32768).astype(np.int16)
    return [rng.integers(-32768, 32768, shape).astype(np.int16), ends]


def compare(tmp_path, data: bytes, target: str, xs) -> None:
    from tinsmith.cli import run_compiled
    path = tmp_path / "model16x8.tflite"
    path.write_bytes(data)
    graph = lower(path)
    for x in xs:
        got = run_compiled(path, {graph.inputs[0]: x}, tmp_path, graph, target)
        want = tflm_outputs(data, x, len(graph.outputs))
        for name, expected in zip(graph.outputs, want):
            assert got[name].dtype == np.int16
            np.testing.assert_array_equal(got[name], expected, err_msg=f"{name} on {target}")


def test_conv_family_imports_with_tflites_accumulators():
    graph = lower_bytes(conv_family_model())
    accumulators = {n.outputs[0]: n.attrs.get("accumulator") for n in graph.nodes
                    if n.op in ("QConv2D", "QDepthwise", "QFullyConnected")}
    assert accumulators["conv_valid_s2_int32_bias"] == "int32"
    assert accumulators["fc_int32_bias"] == "int32"
    assert accumulators["conv_pointwise_no_bias"] == "int64"  # TFLite Micro's path without a bias
    assert accumulators["conv_same_relu"] == accumulators["depthwise_valid_s2_m2"] == "int64"


def lower_bytes(data: bytes):
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.tflite"
        path.write_bytes(data)
        return lower(path)


def test_conv_family_is_bit_exact_on_the_host(tmp_path):
    compare(tmp_path, conv_family_model(), "host", inputs(1) + inputs(2)[:1])


def test_conv_family_is_bit_exact_on_the_cortex_m4(tmp_path):
    compare(tmp_path, conv_family_model(), "cortex-m4", inputs(3))


def _single(code, x_zp=0, bias="int64", options=None, w_shape=(1, 3, 3, 4), axis=3) -> bytes:
    m = Model16x8(5)
    m.tensors[0] = Tensor("x", "int16", list(X_SHAPE), quant=(X_SCALE, x_zp))
    m.op(code, "y", [0, *m.weights("w", w_shape, w_shape[axis], axis, bias)], (1, 7, 6, w_shape[axis]), 0.01,
         options or conv_options(0, depth_multiplier=1))
    return m.write()


def test_depthwise_with_an_int32_bias_is_refused():
    with pytest.raises(GraphError, match=r"operator 0 \(DEPTHWISE_CONV_2D\): 16x8 data with a int32 bias "
                                         r"\(TFLite Micro takes int64\)"):
        lower_bytes(_single("DEPTHWISE_CONV_2D", bias="int32"))


def test_a_zero_point_on_int16_data_is_refused():
    with pytest.raises(GraphError, match=r"operator 0 \(CONV_2D\): 16x8 data with input and output zero points 3 "
                                         r"and 0 \(TFLite requires 0 for int16 data\)"):
        lower_bytes(_single("CONV_2D", x_zp=3, w_shape=(4, 3, 3, 4), axis=0, options=conv_options(0)))


def wide_fully_connected_model() -> bytes:
    """A fully connected layer whose weights (640 of magnitude 100 to 127 per row) let int16 inputs
    sum beyond int32: the Cortex-M4 kernel cannot prove 32-bit sums exact and accumulates on SMLALD."""
    m = Model16x8(23, (2, 640))
    signs = np.where(m.rng.integers(0, 2, (3, 640)) > 0, 1, -1)
    w = (signs * m.rng.integers(100, 128, (3, 640))).astype(np.int8)
    w[0] = np.where(np.arange(640) % 2, 127, -127)  # an alternating row: sums at both ends
    scale = 0.004
    wi = m.add(Tensor("fc_w", "int8", [3, 640], w, (scale, 0)))
    b = m.add(Tensor("fc_b", "int64", [3], np.array([1 << 33, -(1 << 32), 5], np.int64), (scale * X_SCALE, 0)))
    m.op("FULLY_CONNECTED", "fc_beyond_int32", [0, wi, b], (2, 3), 700.0, ("FullyConnectedOptions", {}))
    return m.write()


def test_sums_beyond_int32_are_exact_on_the_cortex_m4(tmp_path):
    rng = np.random.default_rng(7)
    ends = np.where(np.arange(640) % 2, 32767, -32768).astype(np.int16)
    xs = [np.stack([ends, -1 - ends]), rng.integers(-32768, 32768, (2, 640)).astype(np.int16)]
    compare(tmp_path, wide_fully_connected_model(), "cortex-m4", xs)


def test_an_int16_qadd_with_a_zero_point_is_refused_in_a_graph_file(tmp_path):
    """TFLite's int16 ADD keeps (x - zero point) << 15 in int32 only for zero points 0."""
    (tmp_path / "g.yaml").write_text(
        "graph: g\n"
        "inputs:\n"
        "  a: {dtype: int16, shape: [4], quant: {scale: 0.001, zero_point: 3}}\n"
        "  b: {dtype: int16, shape: [4], quant: {scale: 0.001, zero_point: 0}}\n"
        "outputs: [y]\n"
        "nodes:\n"
        "  - {op: QAdd, inputs: [a, b], outputs: [y], attrs: {a_scale: 0.001, a_zero_point: 3, b_scale: 0.001,\n"
        "     y_scale: 0.002, act_min: -32768, act_max: 32767}}\n")
    with pytest.raises(GraphError, match=r"g.yaml:7:\d+: error: QAdd node 'qadd_y': a_zero_point must be 0 for int16 "
                                         r"data, got 3"):
        lower(tmp_path / "g.yaml")


def elementwise_model() -> bytes:
    """ADD, SUB, MUL (with a broadcast constant), the pools, MEAN, RELU, LEAKY_RELU and a requantizing
    QUANTIZE on int16 data, all reading x: TFLite Micro's int16 arithmetic for each."""
    m = Model16x8(29)
    c = m.add(Tensor("c", "int16", [4], m.rng.integers(-32768, 32768, 4).astype(np.int16), (0.0013, 0)))
    for code, name, scale, opts in (("ADD", "add_relu", 0.003, ("AddOptions", {"FusedActivationFunction": 1})),
                                    ("SUB", "sub", 0.004, ("SubOptions", {})),
                                    ("MUL", "mul", 0.05, ("MulOptions", {}))):
        m.op(code, name, [0, c], X_SHAPE, scale, opts)
    m.op("AVERAGE_POOL_2D", "average_pool", [0], (1, 4, 3, 4), X_SCALE, ("Pool2DOptions", {
        "Padding": 0, "FilterHeight": 3, "FilterWidth": 2, "StrideH": 2, "StrideW": 2}))
    m.op("MAX_POOL_2D", "max_pool_relu6", [0], (1, 3, 3, 4), X_SCALE, ("Pool2DOptions", {
        "Padding": 1, "FilterHeight": 2, "FilterWidth": 2, "StrideH": 2, "StrideW": 2, "FusedActivationFunction": 3}))
    axes = m.add(Tensor("axes", "int32", [2], np.int32([1, 2])))
    m.op("MEAN", "mean", [0, axes], (1, 1, 1, 4), 0.0011, ("ReducerOptions", {"KeepDims": True}))
    m.op("RELU", "relu", [0], X_SHAPE, 0.0015, None)
    m.op("QUANTIZE", "requantized", [0], X_SHAPE, 0.0045, None)
    m.op("LEAKY_RELU", "leaky_relu", [0], X_SHAPE, 0.0017, ("LeakyReluOptions", {"Alpha": 0.3}))
    return m.write()


@pytest.mark.parametrize("target", ["host", "cortex-m4"])
def test_elementwise_and_windows_are_bit_exact(target, tmp_path):
    compare(tmp_path, elementwise_model(), target, inputs(11))


def test_sub_and_leaky_relu_import_onto_their_quantized_primitives():
    """int16 SUB and LEAKY_RELU are QSub and QLeakyRelu with zero points 0 (TFLite's int16 rule);
    test_elementwise_and_windows_are_bit_exact runs them against TFLite Micro."""
    graph = lower_bytes(elementwise_model())
    ops = {n.outputs[0]: n for n in graph.nodes}
    assert ops["sub"].op == "QSub" and ops["leaky_relu"].op == "QLeakyRelu"
    assert ops["sub"].attrs["a_zero_point"] == ops["leaky_relu"].attrs["x_zero_point"] == 0
    assert ops["leaky_relu"].attrs["alpha"] == pytest.approx(0.3)


# --- int16 LOGISTIC, TANH and SOFTMAX: TFLite Micro's interpolated tables ------------------------------
ALL_INT16 = np.arange(-32768, 32768, dtype=np.int16)
# power-of-two scales (the table's own 2^-12, and 2^-11, which TANH alone takes as it is), scales
# within TFLite's 1e-3 of a power of two in log2, and general ones down to a shift of 24
TABLE_SCALES = (2 ** -12, 2 ** -11, 2 ** -12 * 1.0004, 2 ** -11 * 0.9996, 2 ** -10, 0.001, 0.0003, 0.01, 0.5, 1e-7)


def _single_op_model(code: str, x_scale: float, shape, options=None) -> bytes:
    tensors = [Tensor("x", "int16", list(shape), quant=(x_scale, 0)),
               Tensor("y", "int16", list(shape), quant=(1 / 32768, 0))]
    return model(tensors, [Op(code, [0], [1], options)], [0], [1])


def _tflm_single(data: bytes, x: np.ndarray) -> np.ndarray:
    interp = tflm.Interpreter.from_bytes(data, arena_size=1 << 20)
    interp.set_input(x, 0)
    interp.invoke()
    return interp.get_output(0)


@pytest.mark.parametrize("code", ["LOGISTIC", "TANH"])
@pytest.mark.parametrize("x_scale", TABLE_SCALES)
def test_int16_logistic_and_tanh_references_match_tflm_on_every_input(code, x_scale):
    """The imported node's NumPy reference (which its kernel follows step by step) against TFLite
    Micro on all 65536 inputs, for TFLite Micro's multiplier and shift of each input scale."""
    from tinsmith.ops.registry import PRIMITIVES
    data = _single_op_model(code, x_scale, ALL_INT16.shape)
    node, consts = _only_node(data)
    assert node.op == "Int16Activation"
    got = PRIMITIVES[node.op].reference([ALL_INT16, consts[node.inputs[1]]], node.attrs)[0]
    np.testing.assert_array_equal(got, _tflm_single(data, ALL_INT16))


def _only_node(data: bytes):
    graph = lower_bytes(data)
    (node,) = [n for n in graph.nodes if n.op not in ("Identity",)]
    return node, {name: c.data for name, c in graph.constants.items()}


@pytest.mark.parametrize("x_scale,beta", [(0.001, 1.0), (0.0004, 0.5), (0.01, 2.0), (1e-5, 1.0), (0.5, 1.0)])
def test_int16_softmax_reference_matches_tflm(x_scale, beta):
    """Int16Softmax's reference, with the tables the importer builds, against TFLite Micro on rows of
    1, 10 and 300 values over the whole int16 range and close together."""
    from tinsmith.ops.registry import PRIMITIVES
    rng = np.random.default_rng(int(x_scale * 1e6))
    for shape in ((3, 1), (6, 10), (2, 300)):
        x = rng.integers(-32768, 32768, shape).astype(np.int16)
        x[-1] = rng.integers(-300, 300, shape[1])
        data = _single_op_model("SOFTMAX", x_scale, shape, ("SoftmaxOptions", {"Beta": beta}))
        node, consts = _only_node(data)
        got = PRIMITIVES[node.op].reference([x] + [consts[i] for i in node.inputs[1:]], node.attrs)[0]
        np.testing.assert_array_equal(got, _tflm_single(data, x), err_msg=f"{shape}")


def tables_model() -> bytes:
    """int16 LOGISTIC, TANH (power-of-two and general input scales) and SOFTMAX, all reading x."""
    m = Model16x8(31, (3, 40))
    m.tensors[0] = Tensor("x", "int16", [3, 40], quant=(0.0004, 0))
    for code, name in (("LOGISTIC", "logistic"), ("TANH", "tanh")):
        m.op(code, name, [0], (3, 40), 1 / 32768, None)
    m.op("SOFTMAX", "softmax", [0], (3, 40), 1 / 32768, ("SoftmaxOptions", {"Beta": 1.0}))
    return m.write()


@pytest.mark.parametrize("target", ["host", "cortex-m4"])
def test_int16_table_functions_are_bit_exact(target, tmp_path):
    rng = np.random.default_rng(5)
    x = rng.integers(-32768, 32768, (3, 40)).astype(np.int16)
    x[2] = rng.integers(-400, 400, 40)  # a row of close values: many exps count in the softmax
    compare(tmp_path, tables_model(), target, [x, np.linspace(-32768, 32767, 120).astype(np.int16).reshape(3, 40)])


def test_int16_hard_swish_is_refused_with_the_reason():
    data = _single_op_model("HARD_SWISH", 0.001, (4,))
    with pytest.raises(GraphError, match=r"operator 0 \(HARD_SWISH\): int16 data: neither TFLite Micro nor TFLite "
                                         r"runs HARD_SWISH on int16"):
        lower_bytes(data)
    with pytest.raises(RuntimeError):  # (the claim, checked: TFLite Micro refuses it)
        _tflm_single(data, np.zeros(4, np.int16))


# --- a graph file's int16 nodes without act_min / act_max clamp to int16's range -----------------------
def _half_rounded_up(acc: np.ndarray) -> np.ndarray:
    """acc * 0.5 as TFLite's 16x8 requantization rounds it (half up), saturated to int16."""
    return np.clip(np.floor(acc / 2 + 0.5), -32768, 32767).astype(np.int16)


@pytest.mark.parametrize("target", ["host", "cortex-m4"])
def test_int16_nodes_without_act_limits_clamp_to_int16(tmp_path, target):
    """QConv2D, QDepthwise and QFullyConnected of int16 data written without act_min / act_max: the
    outputs reach past int8's range (the clamp defaults to the output type's), against NumPy sums."""
    from tinsmith.cli import run_compiled
    rng = np.random.default_rng(3)
    x = rng.integers(-3000, 3000, (1, 4, 4, 2)).astype(np.int16)
    consts = {"cw": rng.integers(-127, 128, (3, 3, 3, 2)).astype(np.int8),
              "dw": rng.integers(-127, 128, (1, 3, 3, 2)).astype(np.int8),
              "fw": rng.integers(-127, 128, (3, 32)).astype(np.int8),
              "b3": np.int64([5000, -70000, 9]), "b2": np.int64([-40000, 30001]),
              "m3": np.full(3, 1 << 30, np.int32), "s3": np.zeros(3, np.int32),
              "m2": np.full(2, 1 << 30, np.int32), "s2": np.zeros(2, np.int32)}
    np.savez(tmp_path / "w.npz", **consts)
    common = "x_zero_point: 0, y_scale: 0.5, y_zero_point: 0, accumulator: int64"
    (tmp_path / "g.yaml").write_text(
        "graph: g\n"
        "inputs:\n"
        "  x: {dtype: int16, shape: [1, 4, 4, 2], quant: {scale: 1.0, zero_point: 0}}\n"
        "outputs: [conv, depthwise, fc]\n"
        "constants:\n" + "".join(f"  {k}: {{file: w.npz, key: {k}, dtype: {v.dtype}}}\n" for k, v in consts.items()) +
        "nodes:\n"
        f"  - {{op: QConv2D, inputs: [x, cw, b3, m3, s3], outputs: [conv], attrs: {{pads: [1, 1, 1, 1], {common}}}}}\n"
        f"  - {{op: QDepthwise, inputs: [x, dw, b2, m2, s2], outputs: [depthwise], attrs: {{pads: [1, 1, 1, 1], "
        f"depth_multiplier: 1, {common}}}}}\n"
        f"  - {{op: QFullyConnected, inputs: [x, fw, b3, m3, s3], outputs: [fc], attrs: {{{common}}}}}\n")
    xi = np.pad(x.astype(np.int64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    conv = np.zeros((1, 4, 4, 3), np.int64)
    depthwise = np.zeros((1, 4, 4, 2), np.int64)
    for oy in range(4):
        for ox in range(4):
            patch = xi[0, oy:oy + 3, ox:ox + 3, :]
            conv[0, oy, ox] = np.einsum("hwc,ohwc->o", patch, consts["cw"].astype(np.int64))
            depthwise[0, oy, ox] = np.einsum("hwc,hwc->c", patch, consts["dw"][0].astype(np.int64))
    want = {"conv": _half_rounded_up(conv + consts["b3"]),
            "depthwise": _half_rounded_up(depthwise + consts["b2"]),
            "fc": _half_rounded_up(x.reshape(1, 32).astype(np.int64) @ consts["fw"].T.astype(np.int64) + consts["b3"])}
    assert max(np.abs(w.astype(np.int64)).max() for w in want.values()) > 10000  # far past int8's range
    got = run_compiled(tmp_path / "g.yaml", {"x": x}, tmp_path / "build", target_name=target)
    for name, expected in want.items():
        np.testing.assert_array_equal(got[name], expected, err_msg=name)


@pytest.mark.parametrize("code,x_scale,beta,message", [
    ("LOGISTIC", 1e-40, None, r"int16 LOGISTIC with input scale [0-9.e-]+, too small for TFLite's int32 rescaling"),
    ("TANH", 5.0, None, r"int16 TANH with input scale 5.0, too large for TFLite's int32 rescaling"),
    ("TANH", 1e-12, None, r"int16 TANH with input scale [0-9.e-]+, too small for TFLite's int32 rescaling \(its "
                           r"input shift would be 31\)"),
    ("SOFTMAX", 0.001, -1.0, r"int16 SOFTMAX with beta -1.0 \(TFLite Micro's int16 softmax takes a positive beta\)"),
    ("SOFTMAX", 0.001, float("nan"), r"int16 SOFTMAX with beta nan")])
def test_int16_tables_outside_tflites_arithmetic_are_refused(code, x_scale, beta, message):
    """Scales and betas TFLite Micro's int32 arithmetic cannot take: a located refusal, no traceback."""
    options = None if beta is None else ("SoftmaxOptions", {"Beta": beta})
    with pytest.raises(GraphError, match=message):
        lower_bytes(_single_op_model(code, x_scale, (4,), options))


# --- operator codes written the way Google's ai-edge-quantizer writes them -------------------------
def _only_new_builtin_codes(data: bytes) -> bytes:
    """The model with every operator code's deprecated_builtin_code set to 0, its builtin_code kept:
    what ai-edge-quantizer 0.10 writes for the DEQUANTIZE and QUANTIZE it adds around the operators
    it leaves in float (TFLite's readers take the larger of the two fields)."""
    from ai_edge_litert.tools import flatbuffer_utils
    m = flatbuffer_utils.read_model_from_bytearray(bytearray(data))
    for code in m.operatorCodes:
        code.deprecatedBuiltinCode = 0
    return bytes(flatbuffer_utils.convert_object_to_bytearray(m))


def test_operator_codes_in_the_new_field_only_are_read_as_tflite_reads_them(tmp_path):
    """int16 x -> DEQUANTIZE -> float -> QUANTIZE -> int16 y with DEQUANTIZE (6) and QUANTIZE (114) in
    builtin_code alone: the tflite package's BuiltinCode() returns the deprecated field (0, ADD) for
    codes below 127, which made the importer read this DEQUANTIZE as an ADD."""
    pytest.importorskip("ai_edge_litert")
    tensors = [Tensor("x", "int16", [2, 50], quant=(0.002, 0)), Tensor("f", "float32", [2, 50]),
               Tensor("y", "int16", [2, 50], quant=(0.0031, 0))]
    data = _only_new_builtin_codes(model(tensors, [Op("DEQUANTIZE", [0], [1]), Op("QUANTIZE", [1], [2])], [0], [2]))
    graph = lower_bytes(data)
    assert "Add" not in {n.op for n in graph.nodes}
    x = np.random.default_rng(7).integers(-32768, 32768, (2, 50)).astype(np.int16)
    compare(tmp_path, data, "host", [x, ALL_INT16[:100].reshape(2, 50)])


def _buffers_after_the_flatbuffer(data: bytes) -> bytes:
    """The model with every buffer's data moved after the flatbuffer (schema 3b: offset from the
    file's start and size, 16-byte aligned), as ai-edge-quantizer writes models past 256 KiB."""
    from ai_edge_litert.tools import flatbuffer_utils
    m = flatbuffer_utils.read_model_from_bytearray(bytearray(data))
    moved = {k: bytes(b.data) for k, b in enumerate(m.buffers) if b.data is not None and len(b.data)}
    for k in moved:  # placeholders (non-zero, so written): the serialized length does not change after
        m.buffers[k].data, m.buffers[k].offset, m.buffers[k].size = None, 1, 1
    head = len(flatbuffer_utils.convert_object_to_bytearray(m))
    tail, at = b"", (head + 15) // 16 * 16
    for k, raw in moved.items():
        m.buffers[k].offset, m.buffers[k].size = at + len(tail), len(raw)
        tail += raw + b"\0" * (-len(raw) % 16)
    flat = bytes(flatbuffer_utils.convert_object_to_bytearray(m))
    assert len(flat) == head
    return flat + b"\0" * (at - head) + tail


def test_weights_stored_after_the_flatbuffer_are_read(tmp_path):
    """The wide fully connected layer with its weights and bias stored by offset and size: the
    compiled model equals TFLite Micro's on the same model with them inside the flatbuffer (TFLite
    Micro's Python interpreter runs the offset form without the data, see docs/TFLITE.md)."""
    pytest.importorskip("ai_edge_litert")
    from tinsmith.cli import run_compiled
    inline = wide_fully_connected_model()
    path = tmp_path / "offsets.tflite"
    path.write_bytes(_buffers_after_the_flatbuffer(inline))
    graph = lower(path)
    x = np.random.default_rng(3).integers(-32768, 32768, (2, 640)).astype(np.int16)
    got = run_compiled(path, {graph.inputs[0]: x}, tmp_path, graph, "host")
    np.testing.assert_array_equal(got[graph.outputs[0]], tflm_outputs(inline, x, 1)[0])


def test_a_tensor_listed_twice_among_the_outputs_is_refused():
    """A model whose outputs name one tensor twice (a probe moved an output onto another output's
    tensor) is a located error, not two parameters of one name in the generated header."""
    tensors = [Tensor("x", "int16", [4], quant=(0.002, 0)), Tensor("y", "int16", [4], quant=(1 / 32768, 0))]
    data = model(tensors, [Op("LOGISTIC", [0], [1])], [0], [1, 1])
    with pytest.raises(GraphError, match=r"outputs 0 and 1 of the model are the same tensor 'y': the model lists "
                                         r"this output twice"):
        lower_bytes(data)
