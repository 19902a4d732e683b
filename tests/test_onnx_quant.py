"""ONNX quantized models against ONNX Runtime: the quantized operators one by one (zero points at
both ends of their range, per-axis scales orders of magnitude apart, ties that round to even),
QDQ patterns folded and not, and the kws DS-CNN quantized by onnxruntime's quantize_static
(models/make_qdq.py) on the host and on the emulated Cortex-M4. Every integer output is within
1 LSB of ONNX Runtime's (float outputs of a DequantizeLinear: within one step of its scale).
Convolutions and matrix products whose numbers fit (int8 or uint8 activations, int8 weights with
zero points 0) run as QConv2D / QDepthwise / QFullyConnected on the int8 kernels
(codegen/quant/onnx_fast.py); the tests say which path each case takes.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tinsmith.cli import run_compiled  # noqa: E402
from tinsmith.pipeline import lower  # noqa: E402
from host_program import run_on_host  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "models"))
ONNX_TYPES = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "int16": TensorProto.INT16,
              "int32": TensorProto.INT32, "float32": TensorProto.FLOAT}
RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}


def ort_outputs(path: Path, feeds: dict, optimized: bool = True) -> list[np.ndarray]:
    options = ort.SessionOptions()
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, feeds)


def tinsmith_outputs(path: Path, feeds: dict, build: Path, target: str = "host") -> list[np.ndarray]:
    """Tinsmith's outputs: on the host without SCons (tests/host_program.py: these tests are about
    the numbers of a hundred small graphs), on any other target through `tinsmith run`'s path."""
    graph = lower(path)
    feeds = {name: feeds[name] for name in graph.inputs}
    got = (run_on_host(path, feeds, build, graph) if target == "host"
           else run_compiled(path, feeds, build, graph, target))
    return [got[name] for name in graph.outputs]


def lsb_distance(got: np.ndarray, want: np.ndarray, scale: float = 1.0) -> float:
    """The largest difference in steps of `scale` (1 for integers)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    return float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max() / scale) if got.size else 0.0


def save(tmp_path: Path, nodes, inputs, outputs, initializers, opset: int = 21, name: str = "q") -> Path:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)  # (outputs declared without shapes)
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def tensor(name: str, data) -> "onnx.TensorProto":
    return numpy_helper.from_array(np.asarray(data), name)


def value(name: str, dtype: str, shape) -> "onnx.ValueInfoProto":
    return helper.make_tensor_value_info(name, ONNX_TYPES[dtype], list(shape))


def ints(rng, dtype: str, shape) -> np.ndarray:
    lo, hi = RANGES[dtype]
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def check(tmp_path: Path, path: Path, feeds: dict, scales=None, lsb: float = 1.0) -> None:
    """Tinsmith's outputs within `lsb` of ONNX Runtime's, default and unoptimized sessions alike."""
    got = tinsmith_outputs(path, feeds, tmp_path / "build")
    for optimized in (True, False):
        want = ort_outputs(path, feeds, optimized)
        for k, (g, w) in enumerate(zip(got, want)):
            d = lsb_distance(g, w, 1.0 if scales is None else scales[k])
            assert d <= lsb, f"output {k}: {d} LSB from ONNX Runtime ({'default' if optimized else 'unoptimized'})"


# --- QuantizeLinear / DequantizeLinear ---------------------------------------------------------
SCALES_APART = np.array([1e-4, 3e-3, 0.25, 7.0, 120.0], np.float32)  # six orders of magnitude


@pytest.mark.parametrize("dtype,zp_at", [("int8", 0), ("int8", 1), ("uint8", 0), ("uint8", 1),
                                         ("int16", 0), ("int16", 1)])
def test_quantize_linear_per_axis_ties_and_saturation(tmp_path, dtype, zp_at):
    rng = np.random.default_rng(1)
    shape = (2, 5, 3, 1)  # axis 1 carries one scale per channel
    lo, hi = RANGES[dtype]
    zp = np.array([lo, hi, (lo + hi) // 2, lo + 1, hi - 1][::1 if zp_at == 0 else -1], dtype)
    scale = SCALES_APART.reshape(5, 1, 1)
    # ties (k + 0.5) * scale round to even; values far past the range saturate
    x = ((rng.integers(-400, 400, shape) + 0.5 * rng.integers(0, 2, shape)) * scale).astype(np.float32)
    x[0, :, 0, 0] = np.float32(1e9)
    x[1, :, 0, 0] = np.float32(-1e9)
    path = save(tmp_path, [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1)],
                [value("x", "float32", shape)], [value("y", dtype, shape)],
                [tensor("s", SCALES_APART), tensor("z", zp)])
    check(tmp_path, path, {"x": x}, lsb=0)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32"])
def test_dequantize_linear_per_tensor_and_per_axis(tmp_path, dtype):
    rng = np.random.default_rng(2)
    x = ints(rng, dtype, (3, 5)) if dtype != "int32" else rng.integers(-2**24, 2**24, (3, 5)).astype(np.int32)
    zp = np.array([0] * 5, dtype) if dtype == "int32" else np.array([*RANGES[dtype], 0, 1, RANGES[dtype][1] - 2],
                                                                     dtype)
    path = save(tmp_path, [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=1),
                           helper.make_node("DequantizeLinear", ["x", "s1", "z1"], ["y1"])],
                [value("x", dtype, x.shape)], [value("y", "float32", x.shape), value("y1", "float32", x.shape)],
                [tensor("s", SCALES_APART), tensor("z", zp), tensor("s1", np.float32(0.0625)),
                 tensor("z1", np.array(zp[0], dtype))])
    check(tmp_path, path, {"x": x}, lsb=0)


def test_dynamic_quantize_linear(tmp_path):
    x = np.random.default_rng(3).normal(0.5, 3.0, (4, 7)).astype(np.float32)
    path = save(tmp_path, [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])],
                [value("x", "float32", x.shape)],
                [value("y", "uint8", x.shape), value("s", "float32", []), value("z", "uint8", [])], [])
    check(tmp_path, path, {"x": x})


# --- QLinearConv, ConvInteger ------------------------------------------------------------------
CONV_CASES = {
    # name: (x dtype, x zp, input shape (N, C, H, W), weights (M, C/group, KH, KW), attrs, the op it runs as)
    "int8_zp_low_pads_stride": ("int8", -128, (1, 3, 7, 6), (5, 3, 3, 3), dict(pads=[1, 0, 2, 1], strides=[2, 1]),
                                "QConv2D"),
    "int8_zp_high_dilated": ("int8", 127, (2, 4, 6, 7), (3, 4, 2, 3), dict(dilations=[2, 1], pads=[1, 1, 1, 1]),
                             "QConv2D"),
    "uint8_zp_0_depthwise": ("uint8", 0, (1, 5, 5, 5), (5, 1, 3, 3), dict(group=5, pads=[1, 1, 1, 1]), "QDepthwise"),
    "uint8_zp_255_1x1_input": ("uint8", 255, (1, 7, 1, 1), (5, 7, 1, 1), {}, "QConv2D"),
    "int8_depth_multiplier_2": ("int8", 9, (1, 3, 6, 5), (6, 1, 3, 2), dict(group=3, auto_pad="SAME_LOWER"),
                                "QDepthwise"),
    "int8_groups_odd": ("int8", 3, (1, 6, 4, 5), (9, 2, 3, 2), dict(group=3, auto_pad="SAME_UPPER"), "QLinearConv"),
}


@pytest.mark.parametrize("per_channel", [True, False], ids=["per_channel", "per_tensor"])
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_qlinear_conv(tmp_path, case, per_channel):
    dtype, x_zp, x_shape, w_shape, attrs, runs_as = CONV_CASES[case]
    rng = np.random.default_rng(4)
    m = w_shape[0]
    # per output channel, orders apart; or one scale
    w_scale = np.resize(SCALES_APART * 1e-2, m).astype(np.float32) if per_channel else np.float32(0.003)
    x_scale, y_scale = np.float32(0.05), np.float32(0.02)
    bias = rng.integers(-3000, 3000, m).astype(np.int32)
    y_zp = {"int8": -5, "uint8": 128}[dtype]
    path = save(tmp_path, [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                                            **attrs)],
                [value("x", dtype, x_shape)], [helper.make_tensor_value_info("y", ONNX_TYPES[dtype], None)],
                [tensor("xs", x_scale), tensor("xz", np.array(x_zp, dtype)), tensor("w", ints(rng, "int8", w_shape)),
                 tensor("ws", w_scale), tensor("wz", np.zeros(np.shape(w_scale), np.int8)), tensor("ys", y_scale),
                 tensor("yz", np.array(y_zp, dtype)), tensor("b", bias)], opset=10 + 11)
    assert runs_as in _folded_ops(path)
    check(tmp_path, path, {"x": ints(rng, dtype, x_shape)})


@pytest.mark.parametrize("w_dtype,w_zp", [("int8", 3), ("uint8", 128)])
def test_qlinear_conv_with_weight_zero_points_keeps_its_scalar_kernel(tmp_path, w_dtype, w_zp):
    """The int8 kernels take weights with zero point 0: others stay QLinearConv, and still match."""
    rng = np.random.default_rng(16)
    path = save(tmp_path, [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"],
                                            pads=[1, 1, 1, 1])],
                [value("x", "uint8", (1, 3, 5, 5))], [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                [tensor("xs", np.float32(0.05)), tensor("xz", np.uint8(100)),
                 tensor("w", ints(rng, w_dtype, (4, 3, 3, 3))),
                 tensor("ws", np.float32(0.004)), tensor("wz", np.array(w_zp, w_dtype)), tensor("ys", np.float32(0.1)),
                 tensor("yz", np.uint8(7))])
    ops = _folded_ops(path)
    assert "QLinearConv" in ops and "QConv2D" not in ops, ops
    check(tmp_path, path, {"x": ints(rng, "uint8", (1, 3, 5, 5))})


@pytest.mark.parametrize("dtype,w_dtype,x_zp,w_zp,runs_as", [("uint8", "uint8", 0, 255, "ConvInteger"),
                                                            ("uint8", "uint8", 255, 0, "ConvInteger"),
                                                            ("int8", "int8", -128, 127, "ConvInteger"),
                                                            ("uint8", "int8", 131, 0, "QConv2D"),
                                                            ("int8", "int8", -7, 0, "QConv2D")])
def test_conv_integer(tmp_path, dtype, w_dtype, x_zp, w_zp, runs_as):
    rng = np.random.default_rng(5)
    x_shape, w_shape = (1, 3, 5, 6), (4, 3, 3, 2)
    if "int8" in (dtype, w_dtype) and not _ort_has("ConvInteger", dtype, w_dtype):
        pytest.skip(f"ONNX Runtime has no {dtype} x {w_dtype} ConvInteger")
    path = save(tmp_path, [helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 0, 1, 1])],
                [value("x", dtype, x_shape)], [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                [tensor("w", ints(rng, w_dtype, w_shape)), tensor("xz", np.array(x_zp, dtype)),
                 tensor("wz", np.array(w_zp, w_dtype))])
    assert runs_as in _folded_ops(path)
    check(tmp_path, path, {"x": ints(rng, dtype, x_shape)}, lsb=0)


def _ort_has(op: str, dtype: str, w_dtype: str | None = None) -> bool:
    """Whether ONNX Runtime runs `op` on these input types (it may accept a model it cannot run)."""
    x = value("x", dtype, [1, 1, 2, 2])
    try:
        model = helper.make_model(helper.make_graph(
            [helper.make_node(op, ["x", "w"], ["y"])], "probe", [x],
            [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
            initializer=[tensor("w", np.ones((1, 1, 1, 1), w_dtype or dtype))]),
            opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        session.run(None, {"x": np.ones((1, 1, 2, 2), dtype)})
        return True
    except Exception:
        return False


# --- QLinearMatMul, MatMulInteger ---------------------------------------------------------------
@pytest.mark.parametrize("dtype,b_dtype,a_zp,a_shape,b_shape,per_column,runs_as", [
    ("int8", "int8", -128, (3, 5), (5, 4), True, "QFullyConnected"),
    ("int8", "int8", 127, (2, 3, 7), (7, 5), False, "QFullyConnected"),
    ("uint8", "int8", 0, (1, 9), (9, 3), True, "QFullyConnected"),
    ("uint8", "int8", 201, (2, 2, 3), (3, 6), False, "QFullyConnected"),
    ("uint8", "uint8", 0, (1, 9), (9, 3), True, "QLinearMatMul"),  # b's zero point 128
    ("uint8", "uint8", 255, (2, 2, 3), (2, 3, 6), False, "QLinearMatMul")])  # batched b
def test_qlinear_matmul(tmp_path, dtype, b_dtype, a_zp, a_shape, b_shape, per_column, runs_as):
    rng = np.random.default_rng(6)
    n = b_shape[-1]
    b_scale = np.resize(SCALES_APART * 1e-2, n).astype(np.float32) if per_column else np.float32(0.004)
    y_zp = {"int8": 7, "uint8": 120}[dtype]
    b_zp = np.zeros(np.shape(b_scale), b_dtype) if b_dtype == "int8" else np.full(np.shape(b_scale), 128, b_dtype)
    path = save(tmp_path, [helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])],
                [value("a", dtype, a_shape)], [helper.make_tensor_value_info("y", ONNX_TYPES[dtype], None)],
                [tensor("as", np.float32(0.03)), tensor("az", np.array(a_zp, dtype)),
                 tensor("b", ints(rng, b_dtype, b_shape)), tensor("bs", b_scale), tensor("bz", b_zp),
                 tensor("ys", np.float32(0.05)), tensor("yz", np.array(y_zp, dtype))])
    assert runs_as in _folded_ops(path)
    check(tmp_path, path, {"a": ints(rng, dtype, a_shape)})


def _wide_conv_integer(tmp_path, w_zp) -> tuple[Path, np.ndarray, np.ndarray]:
    """A grouped, padded uint8 ConvInteger whose sums reach 360 products of about 255 * 255 (past
    2^24, where a float32 sum would round): the model, its input and its weights."""
    rng = np.random.default_rng(11)
    x = rng.integers(240, 256, (1, 80, 5, 6)).astype(np.uint8)
    w = rng.integers(0, 256, (6, 40, 3, 3)).astype(np.uint8)
    w[::2] = rng.integers(250, 256, (3, 40, 3, 3))
    path = save(tmp_path, [helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 0, 1], group=2)],
                [value("x", "uint8", x.shape)], [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                [tensor("w", w), tensor("xz", np.uint8(0)), tensor("wz", np.asarray(w_zp, np.uint8))])
    assert "ConvInteger" in _folded_ops(path)
    return path, x, w


def test_conv_integer_sums_past_float32(tmp_path):
    path, x, _ = _wide_conv_integer(tmp_path, 7)
    check(tmp_path, path, {"x": x}, lsb=0)


def test_conv_integer_per_channel_weight_zero_points_against_numpy(tmp_path):
    """A weight zero point per output channel (ONNX allows it; ONNX Runtime takes one value): the
    compiled kernel against integer arithmetic written here."""
    w_zp = np.array([0, 128, 3, 255, 0, 9], np.int64)
    path, x, w = _wide_conv_integer(tmp_path, w_zp)
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 0), (1, 1)))
    wz = w.astype(np.int64) - w_zp.reshape(6, 1, 1, 1)
    want = np.zeros((1, 6, 4, 6), np.int64)
    for m in range(6):
        g = m // 3
        for oy in range(4):
            for ox in range(6):
                want[0, m, oy, ox] = (xp[0, 40 * g:40 * g + 40, oy:oy + 3, ox:ox + 3] * wz[m]).sum()
    assert want.max() > 2 ** 24
    (got,) = tinsmith_outputs(path, {"x": x}, tmp_path / "build")
    np.testing.assert_array_equal(got, want.astype(np.int32))


@pytest.mark.parametrize("dtype,b_dtype,a_zp,b_zp,runs_as", [("uint8", "uint8", 0, [255, 0, 17], "MatMulInteger"),
                                                            ("uint8", "uint8", 255, [0, 128, 255], "MatMulInteger"),
                                                            ("int8", "int8", -128, [127, -128, 0], "MatMulInteger"),
                                                            ("uint8", "int8", 255, [0, 0, 0], "QFullyConnected"),
                                                            ("int8", "int8", 127, [0, 0, 0], "QFullyConnected")])
def test_matmul_integer(tmp_path, dtype, b_dtype, a_zp, b_zp, runs_as):
    rng = np.random.default_rng(7)
    path = save(tmp_path, [helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])],
                [value("a", dtype, (2, 4, 5))], [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                [tensor("b", ints(rng, b_dtype, (5, 3))), tensor("az", np.array(a_zp, dtype)),
                 tensor("bz", np.array(b_zp, b_dtype))])
    assert runs_as in _folded_ops(path)
    check(tmp_path, path, {"a": ints(rng, dtype, (2, 4, 5))}, lsb=0)


# --- QDQ patterns ----------------------------------------------------------------------------
def _qdq(tmp_path, float_nodes, x_shape, consts, out_name="y", x_scale=0.04, x_zp=-3, y_scale=0.05, y_zp=-128,
         dtype="int8", weight_dq=(), name="qdq"):
    """x (int8) -> DequantizeLinear -> float_nodes -> QuantizeLinear -> y, weights given as
    DequantizeLinear of integer constants (`weight_dq`: (float name, int data, scales, axis))."""
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"])]
    inits = [tensor("xs", np.float32(x_scale)), tensor("xz", np.array(x_zp, dtype)), tensor("ys", np.float32(y_scale)),
             tensor("yz", np.array(y_zp, dtype)), *consts]
    for fname, data, scales, axis in weight_dq:
        nodes.append(helper.make_node("DequantizeLinear", [f"{fname}_q", f"{fname}_s", f"{fname}_z"], [fname],
                                      axis=axis))
        inits += [tensor(f"{fname}_q", data), tensor(f"{fname}_s", np.asarray(scales, np.float32)),
                  tensor(f"{fname}_z", np.zeros(np.shape(scales), data.dtype))]
    nodes += float_nodes + [helper.make_node("QuantizeLinear", [out_name, "ys", "yz"], ["y_q"])]
    return save(tmp_path, nodes, [value("x", dtype, x_shape)],
                [helper.make_tensor_value_info("y_q", ONNX_TYPES[dtype], None)], inits, name=name)


def _folded_ops(path: Path) -> set[str]:
    return {n.op for n in lower(path).nodes}


@pytest.mark.parametrize("activation", ["none", "relu", "clip"])
def test_qdq_conv_folds_with_its_activation(tmp_path, activation):
    rng = np.random.default_rng(8)
    w_scale = np.resize(SCALES_APART * 1e-2, 6).astype(np.float32)
    bias_scale = (np.float32(0.04) * w_scale).astype(np.float32)
    act = {"none": [], "relu": [helper.make_node("Relu", ["c"], ["a"])],
           "clip": [helper.make_node("Clip", ["c", "lo", "hi"], ["a"])]}[activation]
    path = _qdq(tmp_path, [helper.make_node("Conv", ["xf", "wf", "bf"], ["c"], pads=[1, 1, 1, 1])] + act,
                (1, 3, 5, 4), [tensor("lo", np.float32(-0.3)), tensor("hi", np.float32(2.0))],
                out_name="a" if act else "c", y_zp=-20,
                weight_dq=[("wf", ints(rng, "int8", (6, 3, 3, 3)), w_scale, 0),
                           ("bf", rng.integers(-5000, 5000, 6).astype(np.int32), bias_scale, 0)])
    ops = _folded_ops(path)
    assert "QConv2D" in ops and "Conv" not in ops and not ops & {"Relu", "Clip"}, ops
    check(tmp_path, path, {"x": ints(rng, "int8", (1, 3, 5, 4))})


def test_qdq_gemm_and_matmul_fold(tmp_path):
    rng = np.random.default_rng(9)
    w_scale = np.resize(SCALES_APART * 1e-2, 5).astype(np.float32)
    path = _qdq(tmp_path, [helper.make_node("Gemm", ["xf", "wf", "bf"], ["g"], transB=1),
                           helper.make_node("QuantizeLinear", ["g", "gs", "gz"], ["gq"]),
                           helper.make_node("DequantizeLinear", ["gq", "gs", "gz"], ["gd"]),
                           helper.make_node("MatMul", ["gd", "vf"], ["y"])],
                (3, 7), [tensor("gs", np.float32(0.1)), tensor("gz", np.array(4, np.int8))], y_zp=127,
                weight_dq=[("wf", ints(rng, "int8", (5, 7)), w_scale, 0),
                           ("bf", rng.integers(-900, 900, 5).astype(np.int32),
                            (np.float32(0.04) * w_scale).astype(np.float32), 0),
                           ("vf", ints(rng, "int8", (5, 2)), np.array([0.02, 0.0007], np.float32), 1)])
    ops = _folded_ops(path)
    assert ops & {"Gemm", "MatMul"} == set() and "QFullyConnected" in ops, ops
    check(tmp_path, path, {"x": ints(rng, "int8", (3, 7))})


def test_qdq_add_and_average_pools_fold_and_max_pool_runs_through_qdq(tmp_path):
    rng = np.random.default_rng(10)
    nodes = [helper.make_node("MaxPool", ["xf"], ["m"], kernel_shape=[2, 2], pads=[1, 0, 0, 1]),
             helper.make_node("QuantizeLinear", ["m", "xs", "xz"], ["mq"]),
             helper.make_node("DequantizeLinear", ["mq", "xs", "xz"], ["md"]),
             helper.make_node("AveragePool", ["xf"], ["p"], kernel_shape=[2, 2], pads=[1, 0, 0, 1]),
             helper.make_node("QuantizeLinear", ["p", "ps", "pz"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "ps", "pz"], ["pd"]),
             helper.make_node("Add", ["md", "pd"], ["s"]),
             helper.make_node("QuantizeLinear", ["s", "ss", "sz"], ["sq"]),
             helper.make_node("DequantizeLinear", ["sq", "ss", "sz"], ["sd"]),
             helper.make_node("GlobalAveragePool", ["sd"], ["y"])]
    path = _qdq(tmp_path, nodes, (1, 3, 5, 6), [tensor("ps", np.float32(0.03)), tensor("pz", np.array(-128, np.int8)),
                                                 tensor("ss", np.float32(0.07)), tensor("sz", np.array(127, np.int8))],
                x_zp=127, y_zp=-128, y_scale=0.06)
    ops = _folded_ops(path)
    assert {"QLinearAdd", "QLinearAveragePool", "QLinearGlobalAveragePool", "MaxPool"} <= ops, ops
    assert not ops & {"Add", "AveragePool", "GlobalAveragePool"}, ops
    check(tmp_path, path, {"x": ints(rng, "int8", (1, 3, 5, 6))})


# --- the kws DS-CNN quantized by onnxruntime ----------------------------------------------------
@pytest.fixture(scope="module")
def kws_qdq(tmp_path_factory) -> Path:
    """models/make_qdq.py's kws_dscnn, with the int8 logits and pooled features as outputs too."""
    import make_qdq
    folder = tmp_path_factory.mktemp("kws_qdq")
    path = make_qdq.quantize("kws_dscnn", folder / "kws_dscnn_qdq.onnx")
    model = onnx.load(str(path))
    for name in ("fc_out_QuantizeLinear_Output", "pool_out_QuantizeLinear_Output"):
        model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.INT8, None))
    model = onnx.shape_inference.infer_shapes(model)
    onnx.save(model, str(path))
    return path


def _kws_check(path: Path, build: Path, seeds, target: str) -> None:
    import make_models
    net = make_models.build("kws_dscnn")
    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    scales = [float(inits["probs_scale"]), 1.0, 1.0]  # probs is float (a DequantizeLinear's output)
    for seed in seeds:
        feeds = {"mfcc": make_models.sample_input(net, seed=seed)}
        got = tinsmith_outputs(path, feeds, build, target)
        for optimized in (True, False):
            want = ort_outputs(path, feeds, optimized)
            for k, (g, w) in enumerate(zip(got, want)):
                d = lsb_distance(g, w, scales[k])
                session = "default" if optimized else "unoptimized"
                assert d <= 1.0 + 1e-6, f"seed {seed}, output {k}: {d} LSB ({session})"


def test_kws_qdq_folds_into_integer_operators_on_the_int8_kernels(kws_qdq):
    """Convolutions on the int8 kernels, NHWC from the input's reshape to the pool: no transposes."""
    ops = [n.op for n in lower(kws_qdq).nodes]
    assert ops.count("QConv2D") == 5 and ops.count("QDepthwise") == 4 and "QFullyConnected" in ops, ops
    assert "QLinearGlobalAveragePool" in ops
    assert not {"Conv", "Gemm", "GlobalAveragePool", "QLinearConv", "QLinearMatMul", "Transpose"} & set(ops), ops
    # left: the input's QuantizeLinear, and DequantizeLinear -> Softmax -> QuantizeLinear -> DequantizeLinear
    assert ops.count("QuantizeLinear") == 2 and ops.count("DequantizeLinear") == 2, ops


@pytest.mark.parametrize("target,seeds", [("host", range(3)), ("host-native", [3])])
def test_kws_qdq_matches_onnxruntime_on_the_host(kws_qdq, tmp_path, target, seeds):
    """Portable kernels (host) and the vector ones over NHWC int8 (host-native)."""
    _kws_check(kws_qdq, tmp_path, seeds, target)


def test_kws_qdq_matches_onnxruntime_on_the_cortex_m4(kws_qdq, tmp_path):
    _kws_check(kws_qdq, tmp_path, [7], "cortex-m4")


def test_kws_qdq_with_uint8_activations_matches_onnxruntime(tmp_path):
    import make_qdq
    path = make_qdq.quantize("kws_dscnn", tmp_path / "kws_dscnn_qdq_u8.onnx", activations="uint8")
    model = onnx.load(str(path))
    model.graph.output.append(helper.make_tensor_value_info("fc_out_QuantizeLinear_Output", TensorProto.UINT8, None))
    model.graph.output.append(helper.make_tensor_value_info("pool_out_QuantizeLinear_Output", TensorProto.UINT8, None))
    onnx.save(onnx.shape_inference.infer_shapes(model), str(path))
    graph = lower(path)
    ops = [n.op for n in graph.nodes]
    assert ops.count("QConv2D") == 5 and ops.count("QDepthwise") == 4 and "QLinearConv" not in ops, ops
    # uint8 -> int8 at the input, and back where the uint8 outputs and the fully connected layer read
    assert ops.count("Requantize") == 4, ops
    assert graph.types[graph.outputs[1]].dtype == "uint8"
    _kws_check(path, tmp_path / "build", range(2), "host")
    _kws_check(path, tmp_path / "build-m4", [5], "cortex-m4")


@pytest.mark.parametrize("name,folded", [
    ("ic_resnet8", {"QConv2D", "QLinearAdd", "QLinearAveragePool", "QFullyConnected"}),
    ("ad_autoencoder", {"QFullyConnected"})])
def test_other_mlperf_tiny_models_in_qdq_match_onnxruntime(tmp_path, name, folded):
    """Residual adds folded (ic_resnet8); BatchNormalization on dense layers, which ONNX Runtime's
    pre-processing leaves in, running between Q/DQ pairs (ad_autoencoder)."""
    import make_models
    import make_qdq
    path = make_qdq.quantize(name, tmp_path / f"{name}_qdq.onnx")
    assert folded <= {n.op for n in lower(path).nodes}
    model = onnx.load(str(path))
    out = model.graph.output[0].name
    scale = float(next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == f"{out}_scale"))
    net = make_models.build(name)
    check(tmp_path, path, {net.input_name: make_models.sample_input(net, seed=11)}, scales=[scale])


def test_a_pattern_that_does_not_qualify_runs_through_quantize_and_dequantize(tmp_path):
    """A bias whose scale is not input scale x weight scale cannot be added to the int32 sums: the
    Conv stays a float Conv between DequantizeLinear and QuantizeLinear, and still matches."""
    rng = np.random.default_rng(12)
    w_scale = np.full(4, 0.01, np.float32)
    path = _qdq(tmp_path, [helper.make_node("Conv", ["xf", "wf", "bf"], ["y"])], (1, 2, 4, 4), [], y_zp=0,
                weight_dq=[("wf", ints(rng, "int8", (4, 2, 2, 2)), w_scale, 0),
                           ("bf", rng.integers(-50, 50, 4).astype(np.int32), np.full(4, 0.003, np.float32), 0)])
    ops = _folded_ops(path)
    assert "Conv" in ops and "QLinearConv" not in ops, ops
    check(tmp_path, path, {"x": ints(rng, "int8", (1, 2, 4, 4))})


def test_unsupported_quantization_forms_are_named(tmp_path):
    from tinsmith.errors import GraphError
    blocked = save(tmp_path, [helper.make_node("DequantizeLinear", ["x", "s"], ["y"], axis=1, block_size=2)],
                   [value("x", "int8", (2, 4))], [value("y", "float32", (2, 4))],
                   [tensor("s", np.ones((2, 2), np.float32))], name="blocked")
    with pytest.raises(GraphError, match="blocked quantization"):
        lower(blocked)
    computed = save(tmp_path, [helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                                                ["y"])],
                    [value("a", "int8", (2, 3)), value("as", "float32", [])], [value("y", "int8", (2, 2))],
                    [tensor("az", np.int8(0)), tensor("b", np.ones((3, 2), np.int8)), tensor("bs", np.float32(1)),
                     tensor("bz", np.int8(0)), tensor("ys", np.float32(1)), tensor("yz", np.int8(0))],
                    name="computed")
    with pytest.raises(GraphError, match="must be a constant"):
        lower(computed)


def test_qdq_moves_run_on_the_integers(tmp_path):
    """Transpose and Reshape between Q/DQ of one scale and zero point move the int8 values; a
    Reshape between different quantizations stays in float."""
    rng = np.random.default_rng(13)
    nodes = [helper.make_node("Transpose", ["xf"], ["t"], perm=[0, 2, 1]),
             helper.make_node("QuantizeLinear", ["t", "xs", "xz"], ["tq"]),
             helper.make_node("DequantizeLinear", ["tq", "xs", "xz"], ["td"]),
             helper.make_node("Reshape", ["td", "shape"], ["y"])]
    path = _qdq(tmp_path, nodes, (2, 3, 4), [tensor("shape", np.array([2, 12], np.int64))], x_zp=127,
                y_scale=0.04, y_zp=127)
    ops = [n.op for n in lower(path).nodes]
    assert ops == ["Transpose", "Reshape"], ops
    check(tmp_path, path, {"x": ints(rng, "int8", (2, 3, 4))}, lsb=0)
    requantized = _qdq(tmp_path, [helper.make_node("Reshape", ["xf", "shape"], ["y"])], (2, 3, 4),
                       [tensor("shape", np.array([6, 4], np.int64))], y_scale=0.03, name="requantized")
    assert "DequantizeLinear" in {n.op for n in lower(requantized).nodes}
    check(tmp_path, requantized, {"x": ints(rng, "int8", (2, 3, 4))})


@pytest.mark.parametrize("dtype,x_zp", [("int8", -128), ("uint8", 255)])
def test_qdq_strided_average_pool_folds(tmp_path, dtype, x_zp):
    rng = np.random.default_rng(14)
    path = _qdq(tmp_path, [helper.make_node("AveragePool", ["xf"], ["y"], kernel_shape=[3, 2], strides=[2, 3],
                                            pads=[1, 0, 2, 1])],
                (2, 3, 7, 8), [], dtype=dtype, x_zp=x_zp, y_zp={"int8": 5, "uint8": 0}[dtype], y_scale=0.013)
    assert "QLinearAveragePool" in _folded_ops(path)
    check(tmp_path, path, {"x": ints(rng, dtype, (2, 3, 7, 8))})


def test_matmul_integer_per_row_zero_points_against_numpy(tmp_path):
    """a's zero point per row (ONNX allows it; ONNX Runtime takes one value): the compiled kernel
    against integer arithmetic written here."""
    from tinsmith.reference import evaluate
    rng = np.random.default_rng(15)
    a_zp, b_zp = np.array([0, 255, 17, 128], np.uint8), np.array([255, 0, 3], np.uint8)
    b = ints(rng, "uint8", (5, 3))
    path = save(tmp_path, [helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])],
                [value("a", "uint8", (2, 4, 5))], [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                [tensor("b", b), tensor("az", a_zp), tensor("bz", b_zp)])
    a = ints(rng, "uint8", (2, 4, 5))
    want = (a.astype(np.int64) - a_zp.reshape(4, 1).astype(np.int64)) @ (b.astype(np.int64) - b_zp.astype(np.int64))
    (got,) = tinsmith_outputs(path, {"a": a}, tmp_path / "build")
    np.testing.assert_array_equal(got, want.astype(np.int32))
    graph = lower(path)
    np.testing.assert_array_equal(evaluate(graph, {"a": a})[graph.outputs[0]], want.astype(np.int32))


def test_float_requantization_of_a_tflite_primitive_is_checked(tmp_path):
    """QConv2D with requantize: float (what a rewritten QLinearConv becomes) takes a float32 scale
    and no shift; a graph file that gives it TFLite's int32 multiplier and shift is refused at
    its line."""
    from tinsmith.errors import GraphError
    good = """graph: f
inputs:
  x: {dtype: int8, shape: [1, 2, 2, 1]}
outputs: [y]
constants:
  w: {value: [[[[3]]]], dtype: int8}
  scale: {value: [0.25], dtype: float32}
  mult: {value: [1073741824], dtype: int32}
  shift: {value: [0], dtype: int32}
nodes:
  - op: QConv2D
    inputs: [x, w, "", %s]
    outputs: [y]
    attrs: {y_scale: 0.1, y_zero_point: -3, x_zero_point: 1, requantize: float}
"""
    (tmp_path / "good.yaml").write_text(good % 'scale, ""')
    graph = lower(tmp_path / "good.yaml")
    assert graph.types["y"].dtype == "int8"
    from tinsmith.reference import evaluate
    x = np.array([-128, 1, 2, 127], np.int8).reshape(1, 2, 2, 1)
    # (x - 1) * 3 * 0.25, ties to even: -96.75 -> -97, 0, 0.75 -> 1, 94.5 -> 94; plus -3, saturated
    np.testing.assert_array_equal(evaluate(graph, {"x": x})["y"].reshape(-1), [-100, -3, -2, 91])
    (tmp_path / "bad.yaml").write_text(good % "mult, shift")
    with pytest.raises(GraphError, match=r"bad\.yaml:12:.*scale must be float32") as e:
        lower(tmp_path / "bad.yaml")
    assert "Traceback" not in str(e.value)


def test_integer_operators_on_the_cortex_m4_dsp_kernels(tmp_path):
    """ConvInteger (depthwise, uint8 input), MatMulInteger (int32 sums) and a per-tensor uint8
    QLinearConv on the Cortex-M4's DSP kernels, against ONNX Runtime."""
    rng = np.random.default_rng(17)
    nodes = [helper.make_node("ConvInteger", ["x", "dw", "xz"], ["sums"], group=4, pads=[1, 1, 1, 1]),
             helper.make_node("MatMulInteger", ["a", "b", "az"], ["products"]),
             helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], strides=[2, 1])]
    inits = [tensor("dw", ints(rng, "int8", (4, 1, 3, 3))), tensor("xz", np.uint8(77)),
             tensor("b", ints(rng, "int8", (9, 6))), tensor("az", np.int8(-5)),
             tensor("xs", np.float32(0.02)), tensor("w", ints(rng, "int8", (6, 4, 3, 2))),
             tensor("ws", np.float32(0.003)),
             tensor("wz", np.int8(0)), tensor("ys", np.float32(0.04)), tensor("yz", np.uint8(131))]
    path = save(tmp_path, nodes, [value("x", "uint8", (1, 4, 7, 6)), value("a", "int8", (3, 9))],
                [helper.make_tensor_value_info(n, t, None) for n, t in
                 (("sums", TensorProto.INT32), ("products", TensorProto.INT32), ("y", TensorProto.UINT8))], inits)
    assert {"QDepthwise", "QFullyConnected", "QConv2D"} <= _folded_ops(path)
    feeds = {"x": ints(rng, "uint8", (1, 4, 7, 6)), "a": ints(rng, "int8", (3, 9))}
    got = tinsmith_outputs(path, feeds, tmp_path / "build", "cortex-m4")
    want = ort_outputs(path, feeds)
    for k, lsb in enumerate((0, 0, 1)):
        assert lsb_distance(got[k], want[k]) <= lsb, k
