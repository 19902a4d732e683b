"""Forms that real .tflite models from PyPI packages use (conformance/tflite/real_models.py found them),
written small with tests/tflite_writer.py and compared with an interpreter on seeded inputs:

- a LEAKY_RELU after a float CONV_2D (openWakeWord's speech embedding), whose fused vector epilogue
  holds a comparison: against TFLite Micro;
- float16 weights (DEQUANTIZE of a float16 constant, MediaPipe's models) and sparse weights (DENSIFY
  of a sparse constant, CSR, with and without blocks): against LiteRT, which runs both (TFLite Micro
  registers neither);
- MediaPipe's custom Convolution2DTransposeBias: against TFLite Micro running the builtin
  TRANSPOSE_CONV with the same bias, which is what the custom operator computes;
- and the refusals that name the form: an input sized at run time, MediaPipe's other custom
  operators, a sparse tensor read by an operator other than DENSIFY, damaged sparsity metadata.

Float32 outputs within 1e-5 relative (1e-6 absolute): one layer each, summed in orders that differ.
"""
from __future__ import annotations

import numpy as np
import pytest

from tflite_writer import Op, Tensor, conv_options, model
from tinsmith.errors import TinsmithError
from tinsmith.pipeline import lower

tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
RTOL, ATOL = 1e-5, 1e-6


def _micro(data: bytes, x: np.ndarray) -> np.ndarray:
    interp = tflm.Interpreter.from_bytes(data, arena_size=1 << 20)
    interp.set_input(x, 0)
    interp.invoke()
    return interp.get_output(0)


def _litert(data: bytes, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter
    interp = Interpreter(model_content=data)
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    return interp.get_tensor(interp.get_output_details()[0]["index"])


def _compiled(data: bytes, x: np.ndarray, tmp_path, name: str = "m") -> np.ndarray:
    from tinsmith.cli import run_compiled
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(data)
    graph = lower(path)
    return run_compiled(path, {graph.api_inputs[0]: x}, tmp_path / "build", graph, "host")[graph.api_outputs[0]]


def _refusal(data: bytes, tmp_path) -> str:
    path = tmp_path / "bad.tflite"
    path.write_bytes(data)
    with pytest.raises(TinsmithError) as e:
        lower(path)
    return str(e.value)


def _normal(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 1.0, shape).astype(np.float32)


def test_leaky_relu_after_a_convolution_matches_tflite_micro(tmp_path):
    """CONV_2D, LEAKY_RELU, MAXIMUM: the activation joins the convolution's vector epilogue as a
    select on a lane-wise comparison (it used to stop the generator with a KeyError)."""
    tensors = [Tensor("x", "float32", [1, 9, 9, 3]), Tensor("w", "float32", [16, 3, 3, 3], _normal([16, 3, 3, 3], 1)),
               Tensor("b", "float32", [16], _normal([16], 2)), Tensor("c", "float32", [1, 7, 7, 16]),
               Tensor("l", "float32", [1, 7, 7, 16]), Tensor("floor", "float32", [], np.array(-0.5, np.float32)),
               Tensor("y", "float32", [1, 7, 7, 16])]
    ops = [Op("CONV_2D", [0, 1, 2], [3], conv_options(1)),
           Op("LEAKY_RELU", [3], [4], ("LeakyReluOptions", {"Alpha": 0.2})), Op("MAXIMUM", [4, 5], [6])]
    data = model(tensors, ops, [0], [6])
    x = _normal([1, 9, 9, 3], 3)
    np.testing.assert_allclose(_compiled(data, x, tmp_path), _micro(data, x), rtol=RTOL, atol=ATOL)


def _conv_model(weights: list[Tensor], weight_ops: list[Op], w: int, b: int) -> bytes:
    """x [1, 6, 6, 4] -> CONV_2D 3x3 SAME (8 filters) with weights tensor w and bias tensor b, made by
    `weight_ops` from the constants `weights` (tensors 2 on)."""
    tensors = [Tensor("x", "float32", [1, 6, 6, 4]), Tensor("y", "float32", [1, 6, 6, 8]), *weights]
    return model(tensors, [*weight_ops, Op("CONV_2D", [0, w, b], [1], conv_options(0, act=1))], [0], [1])


def test_float16_weights_are_float32_constants(tmp_path):
    w16 = _normal([8, 3, 3, 4], 4).astype(np.float16)
    b16 = _normal([8], 5).astype(np.float16)
    weights = [Tensor("w16", "float16", [8, 3, 3, 4], w16), Tensor("w", "float32", [8, 3, 3, 4]),
               Tensor("b16", "float16", [8], b16), Tensor("b", "float32", [8])]
    data = _conv_model(weights, [Op("DEQUANTIZE", [2], [3]), Op("DEQUANTIZE", [4], [5])], 3, 5)
    x = _normal([1, 6, 6, 4], 6)
    got = _compiled(data, x, tmp_path)
    np.testing.assert_allclose(got, _litert(data, x), rtol=RTOL, atol=ATOL)
    # the same weights stored as float32, run by TFLite Micro
    dense = [Tensor("w", "float32", [8, 3, 3, 4], w16.astype(np.float32)),
             Tensor("b", "float32", [8], b16.astype(np.float32))]
    np.testing.assert_allclose(got, _micro(_conv_model(dense, [], 2, 3), x), rtol=RTOL, atol=ATOL)


def _csr_last_axis(dense: np.ndarray) -> tuple[np.ndarray, tuple]:
    """`dense` as MediaPipe stores pruned weights: every axis dense but the last, which is CSR (the
    kept values and their sparsity)."""
    rows = dense.reshape(-1, dense.shape[-1])
    keep = rows != 0
    segments = np.concatenate([[0], np.cumsum(keep.sum(axis=1))])
    indices = np.nonzero(keep)[1]
    levels = [*dense.shape[:-1], (segments, indices)]
    return rows[keep], (list(range(dense.ndim)), [], levels)


def _pruned(shape, seed: int, kept: float = 0.3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.normal(0.0, 1.0, shape) * (rng.random(shape) < kept)).astype(np.float32)


def _sparse_float16_conv(seed: int) -> bytes:
    """CONV_2D whose weights are DENSIFY of float16 values (CSR along the input channels), then
    DEQUANTIZE: MediaPipe's form."""
    values, sparsity = _csr_last_axis(_pruned([8, 3, 3, 4], seed).astype(np.float16))
    weights = [Tensor("w_sparse", "float16", [8, 3, 3, 4], values, sparsity=sparsity),
               Tensor("w16", "float16", [8, 3, 3, 4]), Tensor("w", "float32", [8, 3, 3, 4]),
               Tensor("b", "float32", [8], _normal([8], seed + 1))]
    return _conv_model(weights, [Op("DENSIFY", [2], [3]), Op("DEQUANTIZE", [3], [4])], 4, 5)


def test_sparse_float16_weights_are_densified(tmp_path):
    data = _sparse_float16_conv(7)
    x = _normal([1, 6, 6, 4], 9)
    np.testing.assert_allclose(_compiled(data, x, tmp_path), _litert(data, x), rtol=RTOL, atol=ATOL)


def test_block_sparse_weights_are_densified(tmp_path):
    """DENSIFY of float32 FULLY_CONNECTED weights [8, 16] in 1 x 4 blocks: rows dense, block columns
    CSR, each block dense (traversal order 0, 1, 2; block map [1])."""
    rng = np.random.default_rng(10)
    blocks = rng.random((8, 4)) < 0.5
    dense = (rng.normal(0.0, 1.0, (8, 16)) * np.repeat(blocks, 4, axis=1)).astype(np.float32)
    segments = np.concatenate([[0], np.cumsum(blocks.sum(axis=1))])
    indices = np.nonzero(blocks)[1]
    values = dense.reshape(8, 4, 4)[blocks].reshape(-1)
    sparsity = ([0, 1, 2], [1], [8, (segments, indices), 4])
    tensors = [Tensor("x", "float32", [2, 16]), Tensor("y", "float32", [2, 8]),
               Tensor("w_sparse", "float32", [8, 16], values, sparsity=sparsity), Tensor("w", "float32", [8, 16]),
               Tensor("b", "float32", [8], _normal([8], 11))]
    data = model(tensors, [Op("DENSIFY", [2], [3]), Op("FULLY_CONNECTED", [0, 3, 4], [1])], [0], [1])
    x = _normal([2, 16], 12)
    got = _compiled(data, x, tmp_path)
    np.testing.assert_allclose(got, _litert(data, x), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got, x @ dense.T + tensors[4].data, rtol=RTOL, atol=ATOL)


def _transpose_conv_models(padding_same: bool, stride: int) -> tuple[bytes, bytes]:
    """(MediaPipe's Convolution2DTransposeBias, the builtin TRANSPOSE_CONV with the same bias):
    x [1, 5, 5, 6] to 3 channels through a 3 x 3 window."""
    size = 5 * stride if padding_same else (5 - 1) * stride + 3
    w, b = _normal([3, 3, 3, 6], 13), _normal([3], 14)
    x, y = Tensor("x", "float32", [1, 5, 5, 6]), Tensor("y", "float32", [1, size, size, 3])
    options = np.array([1 if padding_same else 2, stride, stride], "<i4").tobytes()
    custom = model([x, y, Tensor("w", "float32", [3, 3, 3, 6], w), Tensor("b", "float32", [3], b)],
                   [Op("CUSTOM", [0, 2, 3], [1], custom="Convolution2DTransposeBias", custom_options=options)],
                   [0], [1])
    builtin = model([x, y, Tensor("w", "float32", [3, 3, 3, 6], w), Tensor("b", "float32", [3], b),
                     Tensor("shape", "int32", [4], np.array([1, size, size, 3], np.int32))],
                    [Op("TRANSPOSE_CONV", [4, 2, 0, 3], [1],
                        ("TransposeConvOptions", {"Padding": 0 if padding_same else 1, "StrideH": stride,
                                                  "StrideW": stride}))], [0], [1])
    return custom, builtin


@pytest.mark.parametrize("padding_same, stride", [(True, 2), (False, 2), (True, 1)])
def test_mediapipe_transpose_conv_bias_is_the_builtin_with_a_bias(padding_same, stride, tmp_path):
    custom, builtin = _transpose_conv_models(padding_same, stride)
    x = _normal([1, 5, 5, 6], 15)
    np.testing.assert_allclose(_compiled(custom, x, tmp_path), _micro(builtin, x), rtol=RTOL, atol=ATOL)


def test_transpose_conv_bias_with_options_of_another_layout_is_refused(tmp_path):
    custom, _ = _transpose_conv_models(True, 2)
    damaged = custom.replace(np.array([1, 2, 2], "<i4").tobytes(), np.array([7, 2, 2], "<i4").tobytes())
    assert "Convolution2DTransposeBias): its options (padding 7, strides 2 x 2) are not MediaPipe's" in \
        _refusal(damaged, tmp_path)


def test_an_input_sized_at_run_time_is_refused_by_name(tmp_path):
    data = model([Tensor("audio", "float32", [1, 1], signature=[-1, -1]), Tensor("y", "float32", [1, 1])],
                 [Op("RELU", [0], [1])], [0], [1])
    message = _refusal(data, tmp_path)
    assert "error: input 'audio' has a size set at run time (shape signature [-1, -1]; the file stores [1, 1] in " \
           "its place), and Tinsmith compiles static shapes" in message
    # a batch dimension left to run time is taken at its stored size
    ok = model([Tensor("x", "float32", [1, 4], signature=[-1, 4]), Tensor("y", "float32", [1, 4])],
               [Op("RELU", [0], [1])], [0], [1])
    (tmp_path / "ok.tflite").write_bytes(ok)
    assert lower(tmp_path / "ok.tflite").types["x"].shape == (1, 4)


def test_mediapipe_custom_operators_are_named(tmp_path):
    data = model([Tensor("x", "float32", [1, 4]), Tensor("y", "float32", [1, 4])],
                 [Op("CUSTOM", [0], [1], custom="TransformTensorBilinear")], [0], [1])
    assert "operator 0: the custom operator 'TransformTensorBilinear' is one of MediaPipe's own" in \
        _refusal(data, tmp_path)


def test_a_sparse_tensor_read_by_another_operator_is_refused(tmp_path):
    values, sparsity = _csr_last_axis(_pruned([8, 3, 3, 4], 16))
    weights = [Tensor("w_sparse", "float32", [8, 3, 3, 4], values, sparsity=sparsity),
               Tensor("b", "float32", [8], _normal([8], 17))]
    message = _refusal(_conv_model(weights, [], 2, 3), tmp_path)
    assert "operator 0 (CONV_2D): tensor 'w_sparse' is stored sparse, but it is read by an operator other than " \
           "DENSIFY" in message


@pytest.mark.parametrize("damage, expected", [
    (lambda levels: [*levels[:-1], (levels[-1][0] + 100, levels[-1][1])], "array segments that do not fit"),
    (lambda levels: [*levels[:-1], (levels[-1][0], levels[-1][1] + 9)], "indices outside its shape"),
    (lambda levels: levels[:-1], "do not fit its 4 dimensions"),
])
def test_damaged_sparsity_is_an_error_at_the_operator(damage, expected, tmp_path):
    values, (order, block_map, levels) = _csr_last_axis(_pruned([8, 3, 3, 4], 18))
    weights = [Tensor("w_sparse", "float32", [8, 3, 3, 4], values, sparsity=(order, block_map, damage(levels))),
               Tensor("w", "float32", [8, 3, 3, 4]), Tensor("b", "float32", [8], _normal([8], 19))]
    message = _refusal(_conv_model(weights, [Op("DENSIFY", [2], [3])], 3, 4), tmp_path)
    assert "operator 0 (DENSIFY): sparse tensor 'w_sparse'" in message and expected in message


@pytest.mark.parametrize("seed", range(2))
def test_damaged_sparse_float16_models_are_errors_never_tracebacks(seed, tmp_path):
    """A sparse float16 model (DENSIFY, DEQUANTIZE, CONV_2D) with bytes overwritten at random: each
    one imports or is an error located at the file."""
    import random
    source = _sparse_float16_conv(20)
    rng = random.Random(seed)
    path = tmp_path / "damaged.tflite"
    refused = 0
    for _ in range(150):
        data = bytearray(source)
        for _ in range(rng.choice((1, 3, 9))):
            data[rng.randrange(len(data))] = rng.randrange(256)
        path.write_bytes(bytes(data))
        try:
            lower(path)
        except TinsmithError as e:
            assert e.loc is not None and e.loc.path.endswith("damaged.tflite"), str(e)
            refused += 1
    assert refused > 0


def test_channels_last_layers_count_their_window_and_channels_in_the_summation_bound(tmp_path):
    """`check`'s float bound (n * eps, n the terms summed): a channels-last convolution sums kh * kw *
    input channels per group, a depthwise one kh * kw, a pool its window (it used to count 1)."""
    from tinsmith.tolerance import reduction_length
    tensors = [Tensor("x", "float32", [1, 8, 8, 5]), Tensor("w", "float32", [6, 3, 3, 5], _normal([6, 3, 3, 5], 22)),
               Tensor("c", "float32", [1, 8, 8, 6]), Tensor("d", "float32", [1, 3, 3, 6], _normal([1, 3, 3, 6], 23)),
               Tensor("e", "float32", [1, 8, 8, 6]), Tensor("y", "float32", [1, 4, 4, 6])]
    pool = ("Pool2DOptions", {"Padding": 1, "StrideH": 2, "StrideW": 2, "FilterHeight": 2, "FilterWidth": 2})
    ops = [Op("CONV_2D", [0, 1], [2], conv_options(0)),
           Op("DEPTHWISE_CONV_2D", [2, 3], [4], conv_options(0, depth_multiplier=1)), Op("MAX_POOL_2D", [4], [5], pool)]
    (tmp_path / "m.tflite").write_bytes(model(tensors, ops, [0], [5]))
    graph = lower(tmp_path / "m.tflite")
    lengths = sorted((node.op, reduction_length(graph, node)) for node in graph.nodes
                     if node.op in ("ConvNHWC", "MaxPoolNHWC"))
    assert lengths == [("ConvNHWC", 9), ("ConvNHWC", 45), ("MaxPoolNHWC", 4)]
