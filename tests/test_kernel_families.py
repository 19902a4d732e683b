"""The float convolution, matrix-product and window families each have one loop-nest driver
(codegen/generate/functors/conv_nest.py, matrix.py, window_nest.py): every float Conv, ConvNHWC,
ConvTranspose, Gemm and MatMul kernel, and every pool (float, channels last, TFLite int8/int16,
QLinear), on every kind of target is that driver with a schedule and a micro-kernel. Counted: the
driver's calls while a graph is compiled, and which micro-kernel each call was given."""
from __future__ import annotations

from pathlib import Path

import pytest

from tinsmith.generate.functors import conv_nest, matrix, window_nest
from tinsmith.pipeline import compile_graph

ROOT = Path(__file__).resolve().parents[1]

CONV_GRAPHS = {
    "regular": ("[1, 3, 9, 9]", "[8, 3, 3, 3]", "Conv", "pads: [1, 1, 1, 1]"),
    "depthwise": ("[1, 8, 9, 9]", "[8, 1, 3, 3]", "Conv", "pads: [1, 1, 1, 1], group: 8"),
    "pointwise": ("[1, 8, 6, 6]", "[12, 8, 1, 1]", "Conv", "group: 1"),
    "grouped": ("[1, 8, 7, 7]", "[6, 4, 3, 3]", "Conv", "group: 2, strides: [2, 2]"),
    "one-d": ("[1, 4, 20]", "[5, 4, 3]", "Conv", "pads: [1, 1]"),
    "transposed": ("[1, 4, 5, 5]", "[4, 3, 3, 3]", "ConvTranspose", "strides: [2, 2]"),
}
# micro-kernel class per (target, graph) where it is not the portable ScalarDot
MICRO = {
    ("cortex-m4", "regular"): "RegisterBlock", ("cortex-m4", "depthwise"): "RegisterBlock",
    ("cortex-m4", "pointwise"): "RegisterBlock", ("cortex-m4", "grouped"): "RegisterBlock",
    ("host", "regular"): "NhwcConv", ("host", "depthwise"): "NhwcConv", ("host", "pointwise"): "NhwcConv",
    ("host", "grouped"): "RegisterBlock",  # grouped convolutions other than depthwise stay NCHW
}


def conv_yaml(x: str, w: str, op: str, attrs: str) -> str:
    return (f"graph: g\ninputs:\n  x: {{dtype: float32, shape: {x}}}\noutputs: [y]\nconstants:\n"
            f"  w: {{random: normal, shape: {w}, seed: 1}}\n"
            f"nodes:\n  - {{op: {op}, inputs: [x, w], outputs: [y], attrs: {{{attrs}}}}}\n")


def counting(monkeypatch, module, name: str) -> list:
    """Record the arguments of every call of module.name (called through the module's globals)."""
    calls, original = [], getattr(module, name)

    def counted(*args):
        calls.append(args)
        return original(*args)
    monkeypatch.setattr(module, name, counted)
    return calls


@pytest.mark.parametrize("target", ["cpp", "host", "cortex-m4", "cortex-m0plus"])
@pytest.mark.parametrize("case", sorted(CONV_GRAPHS))
def test_every_float_convolution_is_the_one_nest(case, target, tmp_path, monkeypatch):
    path = tmp_path / "g.yaml"
    path.write_text(conv_yaml(*CONV_GRAPHS[case]))
    nests = counting(monkeypatch, conv_nest, "channel_blocks")
    spaces = counting(monkeypatch, conv_nest, "_space")
    compile_graph(path, target=None if target == "cpp" else target)
    micro = {type(args[1]).__name__ for args in spaces}
    # one run of the nest for the kernel, and one for the in-place variant of a pointwise
    # convolution, whose access order the memory plan traces (inplace.py)
    assert len(nests) == 1 + ("PixelBlock" in micro)
    assert micro - {"PixelBlock"} == {MICRO.get((target, case), "ScalarDot")}, micro


# with transB the weights are a graph input: a constant B is stored transposed at build time
# (optimize's gemm_weights_by_row), and the product reads it as [K, N]
GEMM = ("graph: g\ninputs:\n  x: {{dtype: float32, shape: [{m}, 20]}}\n{w_input}outputs: [y]\nconstants:\n"
        "{w_constant}  b: {{random: normal, shape: [13], seed: 2}}\n"
        "nodes:\n  - {{op: Gemm, inputs: [x, w, b], outputs: [y], attrs: {{transB: {t}, alpha: 0.5}}}}\n")
MATMUL = ("graph: g\ninputs:\n  x: {dtype: float32, shape: [2, 3, 5, 20]}\noutputs: [y]\nconstants:\n"
          "  w: {random: normal, shape: [3, 20, 13], seed: 1}\n"
          "nodes:\n  - {op: MatMul, inputs: [x, w], outputs: [y]}\n")


@pytest.mark.parametrize("target,rows,trans_b,micro", [
    ("cpp", 4, 0, "scalar_dot"), ("cortex-m0plus", 1, 0, "scalar_dot"),
    ("host", 1, 0, "row_accumulate"), ("host", 1, 1, "block"),  # lane_dot's block
    ("cortex-m4", 1, 0, "row_accumulate"), ("cortex-m4", 1, 1, "block"), ("cortex-m4", 4, 1, "scalar_dot")])
def test_every_float_matrix_product_is_the_one_nest(target, rows, trans_b, micro, tmp_path, monkeypatch):
    path = tmp_path / "g.yaml"
    w_input = "  w: {dtype: float32, shape: [13, 20]}\n" if trans_b else ""
    w_constant = "" if trans_b else "  w: {random: normal, shape: [20, 13], seed: 1}\n"
    path.write_text(GEMM.format(m=rows, w_input=w_input, w_constant=w_constant, t=trans_b))
    calls = counting(monkeypatch, matrix, "matrix_product")
    compile_graph(path, target=None if target == "cpp" else target)
    assert [c[2].__name__ for c in calls] == [micro]


def test_a_batched_matmul_is_the_one_nest(tmp_path, monkeypatch):
    path = tmp_path / "g.yaml"
    path.write_text(MATMUL)
    calls = counting(monkeypatch, matrix, "matrix_product")
    compile_graph(path, target="cortex-m4")
    ((ops, schedule, micro),) = calls
    assert ops.shape == (2, 3, 5, 13) and ops.k == 20 and micro is matrix.scalar_dot


@pytest.mark.parametrize("graph,micro", [("kws_dscnn", "PixelBlock"), ("ic_resnet8", "RowBlock")])
def test_the_in_place_variant_and_the_row_pipeline_are_the_one_nest(graph, micro, monkeypatch):
    """The Cortex-M4 builds of kws (pointwise convolutions in place) and ResNet-8 (a row pipeline)
    run those kernels as schedules of the same nest, with their own micro-kernels."""
    spaces = counting(monkeypatch, conv_nest, "_space")
    compile_graph(ROOT / "graphs" / f"{graph}.yaml", target="cortex-m4")
    used = {type(args[1]).__name__ for args in spaces}
    assert micro in used and used <= {micro, "RegisterBlock", "ScalarDot"}, used


# --- the window family ---------------------------------------------------------------------------
POOL_ATTRS = "kernel_shape: [3, 3], strides: [2, 2], pads: [1, 1, 1, 1]"
QLINEAR = "x_scale: 0.05, x_zero_point: 1, y_scale: 0.04, y_zero_point: 2, dtype: int8"
WINDOW_GRAPHS = {  # op, input type and shape, attributes
    "MaxPool": ("MaxPool", "float32", "[1, 8, 9, 9]", POOL_ATTRS),
    "MaxPool int8": ("MaxPool", "int8", "[1, 8, 9, 9]", POOL_ATTRS),
    "AveragePool": ("AveragePool", "float32", "[1, 8, 9, 9]", POOL_ATTRS + ", count_include_pad: 1"),
    "LpPool": ("LpPool", "float32", "[1, 8, 9, 9]", POOL_ATTRS + ", p: 3"),
    "GlobalAveragePool": ("GlobalAveragePool", "float32", "[1, 8, 5, 5]", ""),
    "GlobalMaxPool": ("GlobalMaxPool", "float32", "[1, 8, 5, 5]", ""),
    "GlobalLpPool": ("GlobalLpPool", "float32", "[1, 8, 5, 5]", "p: 2"),
    "MaxPoolIndices": ("MaxPoolIndices", "float32", "[1, 8, 9, 9]", POOL_ATTRS),
    "AveragePoolNHWC": ("AveragePoolNHWC", "float32", "[1, 9, 9, 8]", POOL_ATTRS),
    "MaxPoolNHWC": ("MaxPoolNHWC", "float32", "[1, 9, 9, 8]", POOL_ATTRS),
    "QAvgPool": ("QAvgPool", "int8", "[1, 9, 9, 8]", POOL_ATTRS),
    "QMaxPool": ("QMaxPool", "int16", "[1, 9, 9, 8]", POOL_ATTRS + ", act_min: -32768, act_max: 32767"),
    "QLinearAveragePool": ("QLinearAveragePool", "int8", "[1, 8, 9, 9]", POOL_ATTRS + ", " + QLINEAR),
    "QLinearGlobalAveragePool": ("QLinearGlobalAveragePool", "int8", "[1, 8, 5, 5]", QLINEAR),
}
# (micro-kernel class, schedule.taps) per graph, on every target (a pool alone stays NCHW on the
# host: the layout pass turns channels last only what follows a channels-last convolution)
WINDOW_MICRO = {
    "MaxPool": ("MaxSelect", "tiles"), "MaxPool int8": ("MaxSelect", "tiles"), "AveragePool": ("WindowSum", "tiles"),
    "LpPool": ("WindowSum", "tiles"), "GlobalAveragePool": ("WindowSum", "whole"),
    "GlobalMaxPool": ("MaxSelect", "whole"), "GlobalLpPool": ("WindowSum", "whole"),
    "MaxPoolIndices": ("MaxWithPosition", "tiles"), "AveragePoolNHWC": ("LaneReduce", "tiles"),
    "MaxPoolNHWC": ("LaneReduce", "tiles"), "QAvgPool": ("RoundedAverage", "clamped"),
    "QMaxPool": ("QuantizedMax", "clamped"), "QLinearAveragePool": ("QLinearAverage", "clamped"),
    "QLinearGlobalAveragePool": ("QLinearGlobalAverage", "whole"),
}


@pytest.mark.parametrize("target", ["cpp", "host", "cortex-m4", "cortex-m0plus"])
@pytest.mark.parametrize("case", sorted(WINDOW_GRAPHS))
def test_every_pool_is_the_one_window_nest(case, target, tmp_path, monkeypatch):
    op, dtype, shape, attrs = WINDOW_GRAPHS[case]
    path = tmp_path / "g.yaml"
    path.write_text(f"graph: g\ninputs:\n  x: {{dtype: {dtype}, shape: {shape}}}\noutputs: [y]\n"
                    f"nodes:\n  - {{op: {op}, inputs: [x], outputs: [y], attrs: {{{attrs}}}}}\n")
    calls = counting(monkeypatch, window_nest, "window")
    compile_graph(path, target=None if target == "cpp" else target)
    assert [(type(micro).__name__, schedule.taps) for _, schedule, micro in calls] == [WINDOW_MICRO[case]]


@pytest.mark.parametrize("model,target,micro", [
    ("graphs/kws_dscnn.yaml", "cortex-m4", "WindowSum"),  # its AveragePool over the whole map: a Global pool
    ("graphs/kws_dscnn.yaml", "host", "LaneReduce"),  # channels last after the convolutions, host vectors
    ("graphs/ic_resnet8.yaml", "cortex-m55-speed", "LaneReduce"),
    ("models/ic_resnet8_int8.tflite", "cortex-m4", "RoundedAverage")])
def test_the_shipped_models_pools_are_the_one_window_nest(model, target, micro, monkeypatch):
    calls = counting(monkeypatch, window_nest, "window")
    compile_graph(ROOT / model, target=target)
    assert [type(c[2]).__name__ for c in calls] == [micro]
