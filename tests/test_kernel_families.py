"""The float convolution, matrix-product and window families each have one loop-nest driver
(codegen/generate/functors/conv_nest.py, matrix.py, window_nest.py): every float Conv, ConvNHWC,
ConvTranspose, Gemm and MatMul kernel, and every pool (float, channels last, TFLite int8/int16,
QLinear), on every kind of target is that driver with a schedule and a micro-kernel. So are the
elementwise family with the table functions (elementwise_nest.py) and the reductions
(reduction_nest.py). Counted: the driver's calls while a graph is compiled, and which micro-kernel
each call was given."""
from __future__ import annotations

import inspect
import math
import types
from pathlib import Path

import numpy as np
import pytest

from tinsmith.generate.functors import conv_nest, elementwise_nest, matrix, quantized_driver, reduction_nest, window_nest
from tinsmith.pipeline import compile_graph
from tests.sweep.combos import all_combos, graph_yaml
from tests.sweep.probes import PROBES

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


# --- the elementwise, table-function and reduction families ---------------------------------------
# One graph per case from the sweep's probes (tests/sweep/probes.py), with the element types given.
def probe_graph(tmp_path, op: str, tag: str = "", **types: str) -> Path:
    """The sweep's graph of op's probe (the one with `tag`) with its slots set to `types`."""
    (combo,) = [c for c in all_combos([p for p in PROBES if p.op == op and p.tag == tag])
                if dict(c.types) == types]
    path = tmp_path / f"{combo.name}.yaml"
    path.write_text(graph_yaml(combo))
    return path


# (op, tag, slot types) -> the micro-kernel class and the schedule's order
ELEMENTWISE_CASES = {
    "Add": (("Add", "", {"T": "float32"}), "ScalarFormula", "axes"),
    "Mod-int": (("Mod", "", {"T": "int16"}), "ScalarFormula", "axes"),
    "Less": (("Less", "", {"T": "float32"}), "ScalarFormula", "axes"),
    "Clip": (("Clip", "inputs", {"T": "int8"}), "Clamp", "axes"),
    "Cast": (("Cast", "", {"T": "float32", "U": "int16"}), "Convert", "flat"),
    "QAdd": (("QAdd", "", {"X": "int8"}), "Rescale", "axes"),
    "QDiv": (("QDiv", "", {"X": "int8"}), "Rescale", "axes"),
    "Requantize": (("Requantize", "", {"X": "int8", "W": "int16"}), "Rescale", "axes"),
    "QLookup": (("QLookup", "", {"X": "int8", "W": "int8"}), "Lookup", "axes"),
}


@pytest.mark.parametrize("target", ["cpp", "host", "cortex-m4", "cortex-m0plus"])
@pytest.mark.parametrize("case", sorted(ELEMENTWISE_CASES))
def test_every_elementwise_and_table_kernel_is_the_one_nest(case, target, tmp_path, monkeypatch):
    (op, tag, types), micro, order = ELEMENTWISE_CASES[case]
    path = probe_graph(tmp_path, op, tag, **types)
    calls = counting(monkeypatch, elementwise_nest, "elementwise")
    compile_graph(path, target=None if target == "cpp" else target)
    assert [(type(m).__name__, s.order) for _, s, m in calls] == [(micro, order)]
    nest = calls[0][0]
    assert all(o is None or len(o.strides) == len(nest.shape) for o in nest.operands)


def test_a_broadcast_operand_reads_stride_zero_along_its_broadcast_axes(tmp_path, monkeypatch):
    """The strides come from prepare: [3, 1] against an output [2, 3, 4] reads (0, 1, 0)."""
    path = tmp_path / "g.yaml"
    path.write_text("graph: g\ninputs:\n  x: {dtype: float32, shape: [2, 3, 4]}\n  b: {dtype: float32, shape: [3, 1]}\n"
                    "outputs: [y]\nnodes:\n  - {op: Sub, inputs: [x, b], outputs: [y]}\n")
    calls = counting(monkeypatch, elementwise_nest, "elementwise")
    compile_graph(path)
    ((nest, schedule, micro),) = calls
    assert nest.shape == (2, 3, 4) and [o.strides for o in nest.operands] == [(12, 4, 1), (0, 1, 0)]


def test_helium_qadd_is_the_one_nest_with_sixteen_lanes(tmp_path, monkeypatch):
    path = tmp_path / "g.yaml"
    path.write_text(probe_graph(tmp_path, "QAdd", X="int8").read_text().replace("[3, 7]", "[2, 16]")
                    .replace("[7]", "[2, 16]"))  # both inputs of the output's shape, 16 lanes a step
    calls = counting(monkeypatch, elementwise_nest, "elementwise")
    compile_graph(path, target="cortex-m55")
    assert [(type(m).__name__, s.order, s.lanes) for _, s, m in calls] == [("LaneCall", "flat", 16)]


# op, tag, slot types -> the micro-kernel class
REDUCTION_CASES = {
    "Softmax": (("Softmax", "", {"T": "float32"}), "Passes"),
    "ArgMax": (("ArgMax", "", {"T": "int8"}), "Passes"),
    "CumSum": (("CumSum", "I", {"T": "float32", "I": "int32"}), "Passes"),
    "TopK": (("TopK", "", {"T": "float32"}), "Passes"),
    "ReduceSum": (("ReduceSum", "", {"T": "float32"}), "Accumulator"),
    "ReduceMax": (("ReduceMax", "", {"T": "int32"}), "Accumulator"),
    "ReduceLogSumExp": (("ReduceLogSumExp", "", {"T": "float32"}), "Passes"),
    "QSoftmax": (("QSoftmax", "", {"X": "int8"}), "Passes"),
    "InstanceNormalization": (("InstanceNormalization", "", {"T": "float32"}), "Passes"),
    "BatchNormalization": (("BatchNormalization", "", {"T": "float32"}), "Passes"),
    "DynamicQuantizeLinear": (("DynamicQuantizeLinear", "", {"T": "float32"}), "Passes"),
}


@pytest.mark.parametrize("target", ["cpp", "host", "cortex-m4", "cortex-m0plus"])
@pytest.mark.parametrize("case", sorted(REDUCTION_CASES))
def test_every_reduction_is_the_one_nest(case, target, tmp_path, monkeypatch):
    (op, tag, types), micro = REDUCTION_CASES[case]
    path = probe_graph(tmp_path, op, tag, **types)
    calls = counting(monkeypatch, reduction_nest, "reduction")
    compile_graph(path, target=None if target == "cpp" else target)
    assert [type(m).__name__ for _, s, m in calls] == [micro]
    nest = calls[0][0]
    assert nest.axes and all(0 <= a < len(nest.shape) for a in nest.axes)


def test_helium_qmean_is_the_one_nest_four_channels_a_step(tmp_path, monkeypatch):
    """Its schedule merges H and W into one loop and counts the channels in blocks of 4 lanes."""
    path = tmp_path / "g.yaml"
    path.write_text(probe_graph(tmp_path, "QMean", X="int8").read_text().replace("[1, 5, 5, 2]", "[2, 5, 3, 8]"))
    calls = counting(monkeypatch, reduction_nest, "reduction")
    compile_graph(path, target="cortex-m55")
    ((nest, schedule, micro),) = calls
    assert (nest.shape, nest.axes, schedule.merged, schedule.lanes) == ((2, 5, 3, 8), (1, 2), True, 4)
    assert nest.merged() == reduction_nest.ReductionNest((2, 15, 8), (1,))


def test_the_int16_softmax_is_the_one_reduction_nest(monkeypatch):
    """TFLite's int16 SOFTMAX (Int16Softmax, a fixed-type primitive the sweep's probes leave out)."""
    calls = counting(monkeypatch, reduction_nest, "reduction")
    compile_graph(ROOT / "conformance" / "tflite" / "models" / "softmax_beta_int16.tflite", target="cortex-m4")
    assert [(type(m).__name__, s.reduced) for _, s, m in calls] == [("Passes", ("c",))]


def test_the_int16_gelu_table_is_the_one_elementwise_nest(monkeypatch):
    """TFLite's int16 GELU (Int16Lookup, a fixed-type primitive the sweep's probes leave out)."""
    calls = counting(monkeypatch, elementwise_nest, "elementwise")
    compile_graph(ROOT / "conformance" / "tflite" / "models" / "gelu_int16.tflite", target="cortex-m4")
    assert [(type(m).__name__, s.order) for _, s, m in calls] == [("InterpolatedTable", "axes")]


# --- the signal library and LRN ---------------------------------------------------------------------
# TFLite Micro's audio front end, every signal operator of the six families on a small frame (the
# tables are small and made up: the kernels' loop structure is what is counted here; the bits are
# checked against the interpreter in tests/test_tflite_signal.py)
SIGNAL_CHAIN = """graph: front_end
inputs:
  x: {{dtype: int16, shape: [16]}}
outputs: [features]
constants:
  hann: {{value: {hann}, dtype: int16}}
  weights: {{value: [4096, 2048, 4096, 1024, 2048, 4096], dtype: int16}}
  unweights: {{value: [0, 2048, 0, 3072, 2048, 0], dtype: int16}}
  starts: {{value: [1, 2, 4], dtype: int16}}
  wstarts: {{value: [0, 1, 3], dtype: int16}}
  widths: {{value: [1, 2, 3], dtype: int16}}
  lut: {{value: {lut}, dtype: int16}}
  log_table: {{value: {log_table}, dtype: uint16}}
nodes:
  - {{op: SignalWindow, inputs: [x, hann], outputs: [windowed], attrs: {{shift: 12}}}}
  - {{op: SignalFftAutoScale, inputs: [windowed], outputs: [scaled, shift]}}
  - {{op: SignalEnergy, inputs: [scaled], outputs: [energy], attrs: {{start_index: 1, end_index: 6}}}}
  - {{op: SignalFilterBank, inputs: [energy, weights, unweights, starts, wstarts, widths], outputs: [bands],
     attrs: {{num_channels: 2}}}}
  - {{op: SignalFilterBankSquareRoot, inputs: [bands, shift], outputs: [amplitude]}}
  - {{op: SignalFilterBankSpectralSubtraction, inputs: [amplitude], outputs: [denoised, noise],
     attrs: {{smoothing: 410, one_minus_smoothing: 15974, alternate_smoothing: 983,
             alternate_one_minus_smoothing: 15401, smoothing_bits: 10, min_signal_remaining: 819,
             spectral_subtraction_bits: 14}}}}
  - {{op: SignalPCAN, inputs: [denoised, noise, lut], outputs: [agc], attrs: {{snr_shift: 6}}}}
  - {{op: SignalFilterBankLog, inputs: [agc, log_table], outputs: [features],
     attrs: {{input_correction_bits: 3, output_scale: 64}}}}
"""
# the micro-kernel each signal operator's nest is given, in the chain's order
SIGNAL_ELEMENTWISE = ["windowed", "squares", "root", "subtracted", "gained", "log"]
SIGNAL_REDUCTIONS = [(None, "Passes"), (((1, 1), (2, 2), (4, 3)), "Passes")]  # auto scale; the bank's segments


def signal_chain(tmp_path) -> Path:
    from tinsmith.ops.tflm_signal import log_table
    path = tmp_path / "front_end.yaml"
    path.write_text(SIGNAL_CHAIN.format(hann=[4096 - 256 * abs(i - 8) for i in range(16)],
                                        lut=[(7 * i) % 300 for i in range(125)], log_table=log_table().tolist()))
    return path


@pytest.mark.parametrize("target", ["cpp", "host", "cortex-m4", "cortex-m0plus"])
def test_the_signal_operators_are_the_elementwise_and_reduction_nests(target, tmp_path, monkeypatch):
    """Window, Energy (a region of its bins, the rest 0), the square root, spectral subtraction (its
    noise estimate a further operand), PCAN and the log are the elementwise nest; auto scale (no kept
    axis) and the filter bank (a ragged reduction: each channel's run of bins, the next channel's
    sum carried) the reduction nest."""
    path = signal_chain(tmp_path)
    elementwise_calls = counting(monkeypatch, elementwise_nest, "elementwise")
    reductions = counting(monkeypatch, reduction_nest, "reduction")
    compile_graph(path, target=None if target == "cpp" else target)
    assert [m.__name__ for _, s, m in elementwise_calls] == SIGNAL_ELEMENTWISE
    assert [(n.segments or None, type(m).__name__) for n, s, m in reductions] == SIGNAL_REDUCTIONS
    energy = elementwise_calls[1][0]
    assert energy.region == ((1, 6),) and energy.operands[0].strides == (2,)


@pytest.mark.parametrize("target", ["cpp", "host", "cortex-m4", "cortex-m0plus"])
@pytest.mark.parametrize("shape,size", [("[2, 5, 3, 3]", 3), ("[1, 16, 7]", 4)])
def test_lrn_is_the_one_window_nest_across_the_channels(shape, size, target, tmp_path, monkeypatch):
    """LRN's window runs over the channels: the nest sees (batch, channels, positions) channels last,
    the positions in a loop of their own."""
    path = tmp_path / "g.yaml"
    path.write_text(f"graph: g\ninputs:\n  x: {{dtype: float32, shape: {shape}}}\noutputs: [y]\n"
                    f"nodes:\n  - {{op: LRN, inputs: [x], outputs: [y], attrs: {{size: {size}}}}}\n")
    calls = counting(monkeypatch, window_nest, "window")
    compile_graph(path, target=None if target == "cpp" else target)
    ((nest, schedule, micro),) = calls
    dims = [int(d) for d in shape.strip("[]").split(",")]
    assert (type(micro).__name__, schedule.channel_loop, nest.channels_last) == ("LocalResponse", True, True)
    assert (nest.batch, nest.in_spatial, nest.channels) == (dims[0], (dims[1],), math.prod(dims[2:]))


# --- the int8 kernels and ONNX's integer products on their drivers -----------------------------------
def depthwise_yaml(multiplier: int) -> str:
    """An int8 3x3 depthwise over 3 channels, `multiplier` outputs per channel, padded."""
    oc = 3 * multiplier
    w = [[[[(7 * i + 3 * j + k) % 11 - 5 for k in range(oc)] for j in range(3)] for i in range(3)]]
    return (f"graph: g\ninputs:\n  x: {{dtype: int8, shape: [1, 6, 5, 3], quant: {{scale: 0.05, zero_point: 2}}}}\n"
            f"outputs: [y]\nconstants:\n  w: {{value: {w}, dtype: int8}}\n"
            f"  b: {{value: {list(range(oc))}, dtype: int32}}\n  m: {{value: {[1 << 30] * oc}, dtype: int32}}\n"
            f"  s: {{value: {[-3] * oc}, dtype: int32}}\nnodes:\n  - {{op: QDepthwise, inputs: [x, w, b, m, s], "
            f"outputs: [y], attrs: {{strides: [1, 1], dilations: [1, 1], pads: [1, 1, 1, 1], x_zero_point: 2, "
            f"y_scale: 0.1, y_zero_point: -1, depth_multiplier: {multiplier}}}}}\n")


@pytest.mark.parametrize("target,multiplier", [("cpp", 1), ("cpp", 2), ("cortex-m4", 2), ("host", 2),
                                               ("cortex-m0plus", 1)])
def test_a_depthwise_of_any_multiplier_is_the_int8_driver(target, multiplier, tmp_path, monkeypatch):
    """The portable QDepthwise (every multiplier but 1 on every target) is depthwise_nest with the
    scalar micro-kernel: one run of the nest, its taps' offsets from the nest for each inside tile."""
    from tinsmith.generate.functors import quantized_scalar
    path = tmp_path / "g.yaml"
    path.write_text(depthwise_yaml(multiplier))
    nests = counting(monkeypatch, quantized_driver, "window_tiles")
    taps = counting(monkeypatch, quantized_driver, "tap_offsets")
    channels = counting(monkeypatch, quantized_scalar, "depthwise_channels")
    compile_graph(path, target=None if target == "cpp" else target)
    assert len(nests) == 1 and len(taps) == 9 and len(channels) == 9  # 3 x 3 tiles, none wholly in the padding


@pytest.mark.parametrize("op", ["ConvInteger", "QLinearConv"])
def test_onnx_integer_convolutions_are_the_convolution_nest(op, tmp_path, monkeypatch):
    path = probe_graph(tmp_path, op, **({"X": "int8", "W": "int8", "Z": "int32"} if op == "QLinearConv"
                                        else {"X": "int8", "W": "int8"}))
    spaces = counting(monkeypatch, conv_nest, "_space")
    compile_graph(path, target="cortex-m4")
    assert {type(args[1]).__name__ for args in spaces} == {"IntegerDot"}


@pytest.mark.parametrize("op", ["MatMulInteger", "QLinearMatMul"])
def test_onnx_integer_products_are_the_matrix_nest(op, tmp_path, monkeypatch):
    from tinsmith.generate.functors import quantized_onnx
    path = probe_graph(tmp_path, op, X="uint8", W="int8")
    calls = counting(monkeypatch, quantized_onnx, "matrix_product")
    compile_graph(path, target="cortex-m4")
    assert [c[2].__qualname__.split(".")[0] for c in calls] == ["integer_dot"]


@pytest.mark.parametrize("op,method", [("QConv2D", "conv_pixels"), ("QFullyConnected", "fc_rows")])
def test_the_host_int8_kernels_are_the_driver_with_an_accumulator_row(op, method, tmp_path, monkeypatch):
    from tinsmith.generate.functors import host_int8
    path = probe_graph(tmp_path, op, "const", X="int8", W="int8", Z="int32")  # constant weights: packed
    blocks = counting(monkeypatch, host_int8.AccumulatorRow, method)
    compile_graph(path, target="host")
    assert blocks


def test_the_host_int8_depthwise_is_the_driver_with_an_accumulator_row(tmp_path, monkeypatch):
    from tinsmith.generate.functors import host_int8
    path = tmp_path / "g.yaml"
    path.write_text(depthwise_yaml(1))
    channels = counting(monkeypatch, host_int8, "depthwise_row")
    compile_graph(path, target="host")
    assert len(channels) == 9


# --- every registration of the six families reaches its driver ---------------------------------------
DRIVERS = {
    "convolution": {conv_nest.convolution, quantized_driver.conv_nest, quantized_driver.pointwise_nest,
                    quantized_driver.depthwise_nest, quantized_driver.fc_nest},
    "matrix": {matrix.matrix_product, quantized_driver.fc_nest},
    "window": {window_nest.window},
    "elementwise": {elementwise_nest.elementwise},
    "table": {elementwise_nest.elementwise},
    "reduction": {reduction_nest.reduction},
}
# the kernels of the six families that still write their own loops (docs/KERNELS.md, section 3): none
OWN_LOOPS: set[tuple[str, str]] = set()


def _codes(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def reached(fn, seen: set) -> set:
    """The tinsmith functions and classes `fn` names, its own and its nested functions' code, the
    functions those name in turn (a module's functions through `module.name`), and its closure's."""
    if fn in seen:
        return set()
    seen.add(fn)
    if inspect.isclass(fn):
        return {fn}.union(*(reached(m, seen) for m in vars(fn).values() if inspect.isfunction(m)))
    names = {n for code in _codes(fn.__code__) for n in code.co_names}
    found = [fn.__globals__.get(n) for n in names]
    found += [getattr(m, n, None) for m in found if isinstance(m, types.ModuleType) for n in names]
    found += [cell.cell_contents for cell in fn.__closure__ or ()]
    ours = [f for f in found if (inspect.isfunction(f) or inspect.isclass(f))
            and getattr(f, "__module__", "").startswith("tinsmith.")]
    return {fn}.union(*(reached(f, seen) for f in ours))


def test_every_registration_of_the_six_families_reaches_its_driver():
    """No kernel of the convolution, matrix, window, elementwise, reduction or table family writes
    its loops past its family's driver (but those named in OWN_LOOPS, which do)."""
    import tinsmith.generate.backends  # noqa: F401  (every kernel set's functors registered)
    from tinsmith.generate.kernel_sets import KERNEL_SETS
    bypassing = {(name, op) for name, kernel_set in KERNEL_SETS.items() for op, rows in kernel_set.traits.items()
                 for row in rows if row.family in DRIVERS and not reached(row.fn, set()) & DRIVERS[row.family]}
    assert bypassing == OWN_LOOPS


@pytest.mark.parametrize("region", [((1, 3), (2, 4)), ((0, 4), (0, 2)), ((2, 2), (1, 3))])
def test_an_elementwise_region_and_its_fill_write_every_element_once(region):
    """The nest's `within`: the micro-kernel's box and the fill's slabs around it cover a [4, 5]
    output exactly once (the trace the memory planner uses), the micro-kernel's stores only inside."""
    from tinsmith.generate.loop_ir import Const, Kernel, Param, annotate
    from tinsmith.planners.access import NEVER, trace
    nest = elementwise_nest.ElementwiseNest("y", (4, 5), (elementwise_nest.Operand("x", "float32", (5, 1)),))
    stmts = elementwise_nest.elementwise(nest.within(region, Const(0.0, "float32")), elementwise_nest.AXES,
                                         lambda xs, idx: ([], xs[0]))
    kernel = annotate(Kernel("k", (Param("x", "float32", 20, False), Param("y", "float32", 20, True)), tuple(stmts)))
    access = trace(kernel).buffers
    y, x = access["y"], access["x"]
    assert (y.first_write != NEVER).all() and (y.first_write == y.last_write).all()
    inside = np.zeros((4, 5), bool)
    inside[region[0][0]:region[0][1], region[1][0]:region[1][1]] = True
    assert ((x.last_read >= 0).reshape(4, 5) == inside).all()
