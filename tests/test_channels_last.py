"""Channels-last layout: the layout pass keeps what a graph computes and its API, and the NHWC
kernels (ConvNHWC regular, depthwise and pointwise; AveragePoolNHWC, MaxPoolNHWC) match their
NumPy references on every backend, over shapes that hit every edge of the blocking: channel
counts that are not multiples of 16, 8 or 4 lanes (odd ones included), rows not divisible by the
position block, 1x1 inputs, strides of 2, padding on every side, windows wholly in the padding.
Besides the targets of test_kernels, the kernels host-native gives an AVX2 machine (8 lanes,
16 registers: tests/data/host-avx2.yaml) are built and run here."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tinsmith.ir import TensorType
from tinsmith.layout import channels_last
from tinsmith.ops import PRIMITIVES, InferArgs
from tinsmith.ops.channels_last import weights_to_hwio, weights_to_oihw
from tinsmith.pipeline import lower
from tinsmith.reference import evaluate
from test_kernels import TARGETS, assert_close, run

# host-native as an AVX2 machine gets it (8 lanes, 16 registers), built here with -mavx2 -mfma
AVX2 = ("host-avx2", (str(Path(__file__).parent / "data" / "host-avx2.yaml"), ["-mavx2", "-mfma"]))
KERNEL_TARGETS = list(TARGETS) + [AVX2[0]]


@pytest.fixture(autouse=True)
def _avx2_target(monkeypatch):
    monkeypatch.setitem(TARGETS, *AVX2)


GRAPHS = ["kws_dscnn", "vww_mobilenet", "ic_resnet8", "ad_autoencoder", "branches", "encoder", "mlp"]
ROOT_DIR = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", GRAPHS)
def test_layout_pass_keeps_the_graph_api_and_its_values(name):
    g = lower(ROOT_DIR / "graphs" / f"{name}.yaml")
    h = channels_last(g)
    assert (h.inputs, h.outputs) == (g.inputs, g.outputs)
    assert [h.types[v] for v in h.inputs + h.outputs] == [g.types[v] for v in g.inputs + g.outputs]
    rng = np.random.default_rng(0)
    inputs = {n: rng.standard_normal(g.types[n].shape).astype(np.float32) for n in g.inputs}
    want, got = evaluate(g, inputs), evaluate(h, inputs)
    for out in g.outputs:
        np.testing.assert_allclose(got[out], want[out], rtol=1e-5, atol=1e-6, err_msg=out)
    convs = sum(n.op == "Conv" for n in g.nodes)
    assert sum(n.op == "ConvNHWC" for n in h.nodes) == convs
    assert not any(n.op == "Conv" for n in h.nodes)


def test_layout_pass_moves_layouts_only_at_the_boundary():
    h = channels_last(lower(ROOT_DIR / "graphs" / "vww_mobilenet.yaml"))
    transposes = [n for n in h.nodes if n.op == "Transpose"]
    # the first convolution reads the image as it is; the pooled features leave NCHW
    assert len(transposes) == 1 and h.nodes[0].op == "ConvNHWC" and h.nodes[0].attrs["input_nchw"] == 1
    assert h.nodes[-4].op == "Transpose" and h.nodes[-5].op == "AveragePoolNHWC"


def test_weights_round_trip():
    w = np.arange(5 * 3 * 2 * 4, dtype=np.float32).reshape(5, 3, 2, 4)
    assert weights_to_hwio(w).shape == (2, 4, 3, 5)
    np.testing.assert_array_equal(weights_to_oihw(weights_to_hwio(w)), w)


def test_conv_nhwc_refuses_other_groupings():
    from tinsmith.ops.registry import OpError
    args = InferArgs((TensorType("float32", (1, 5, 5, 4)), TensorType("float32", (3, 3, 2, 4))),
                     {"group": 2, "auto_pad": "NOTSET"}, (None, None))
    with pytest.raises(OpError, match="group 1 or depthwise"):
        PRIMITIVES["ConvNHWC"].infer(args)


def conv_nhwc_graph(c: int, h: int, w: int, m: int, k: int, pad: int, stride: int, depthwise: bool,
                    tail: str, input_nchw: bool = False) -> str:
    """x (NHWC, or NCHW read as it is) -> ConvNHWC (bias) -> tail, squared so the convolution's
    output is an intermediate."""
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    act = {"relu": "{op: Relu, inputs: [c1], outputs: [a1]}",
           "residual": "{op: Add, inputs: [c1, r], outputs: [a1]}"}[tail]
    extra = f"\n          r: {{dtype: float32, shape: [1, {oh}, {ow}, {m}]}}" if tail == "residual" else ""
    group = c if depthwise else 1
    return f"""\
        graph: g
        inputs:
          x: {{dtype: float32, shape: {[1, c, h, w] if input_nchw else [1, h, w, c]}}}{extra}
        outputs: [y]
        constants:
          w: {{random: normal, shape: [{k}, {k}, {c // group}, {m}], seed: 1, scale: 0.3}}
          b: {{random: normal, shape: [{m}], seed: 2}}
        nodes:
          - {{op: ConvNHWC, inputs: [x, w, b], outputs: [c1], attrs: {{pads: [{pad}, {pad}, {pad}, {pad}],
              strides: [{stride}, {stride}], group: {group}, input_nchw: {int(input_nchw)}}}}}
          - {act}
          - {{op: Mul, inputs: [a1, a1], outputs: [y]}}
        """


CONVS = [
    # c, h, w, m, k, pad, stride, depthwise, tail
    (3, 5, 17, 37, 3, 1, 1, False, "relu"),   # 37 = 2 x 16 + 4 + 1 channels; 17 positions a row
    (5, 7, 13, 20, 3, 1, 1, False, "residual"),  # 20 = 16 + 4; rows of 13 (a block of 8 and 5)
    (1, 1, 1, 3, 3, 1, 1, False, "relu"),     # 1x1 input, every tap but the centre in the padding
    (4, 9, 11, 24, 3, 1, 2, False, "relu"),   # stride 2; 24 = 16 + 8
    (2, 8, 8, 64, 5, 2, 1, False, "residual"),  # 5x5 window, 4 x 16 channels: a full block
    (1, 11, 7, 12, 4, 1, 2, False, "relu"),   # one input channel, even window
    (3, 5, 9, 2, 3, 0, 1, False, "relu"),     # no padding: only interior tiles; 2 channels
    (7, 6, 19, 7, 3, 1, 1, True, "relu"),     # depthwise, odd channel count
    (48, 10, 10, 48, 3, 1, 2, True, "residual"),  # depthwise, stride 2, 48 = 3 x 16
    (20, 3, 5, 20, 3, 1, 1, True, "relu"),    # depthwise, rows shorter than a block
    (1, 1, 1, 1, 3, 2, 1, True, "relu"),      # depthwise, windows wholly in the padding
    (11, 4, 7, 19, 1, 0, 1, False, "residual"),  # pointwise: 28 positions on one axis
    (64, 5, 5, 72, 1, 0, 1, False, "relu"),   # pointwise, 25 positions, 72 = 4 x 16 + 8
    (16, 6, 6, 32, 1, 0, 2, False, "relu"),   # 1x1 with stride 2: not a matrix product
]


@pytest.mark.parametrize("target", KERNEL_TARGETS)
@pytest.mark.parametrize("case", CONVS, ids=lambda c: "x".join(map(str, c[:7])) + ("-dw" if c[7] else "") + "-" + c[8])
def test_conv_nhwc_matches_reference(case, target, tmp_path):
    got, want, compiled = run(conv_nhwc_graph(*case), target, tmp_path)
    assert_close(got, want)
    (kernel,) = compiled.model.kernels
    assert [n.op for n in kernel.fused] == {"relu": ["Relu"], "residual": ["Add"]}[case[8]] + ["Mul"]


NCHW_INPUTS = [
    # c, h, w, m, k, pad, stride: a network's first convolution reading its image as it is
    (3, 9, 11, 8, 3, 1, 2),    # 8 channels: a half vector on AVX-512
    (1, 7, 5, 20, 3, 1, 1),    # one input channel, rows of 5
    (5, 4, 7, 19, 1, 0, 1),    # pointwise over the flattened positions
]


@pytest.mark.parametrize("target", KERNEL_TARGETS)
@pytest.mark.parametrize("case", NCHW_INPUTS, ids=lambda c: "x".join(map(str, c)))
def test_conv_nhwc_reading_nchw_matches_reference(case, target, tmp_path):
    got, want, _ = run(conv_nhwc_graph(*case, False, "relu", input_nchw=True), target, tmp_path)
    assert_close(got, want)


POOLS = [
    # op, c, h, w, kernel, stride, pad, count_include_pad
    ("AveragePoolNHWC", 37, 5, 5, 5, 1, 0, 0),   # global average over 37 channels
    ("AveragePoolNHWC", 20, 7, 9, 3, 2, 1, 0),   # padded windows: divisor counts real taps
    ("AveragePoolNHWC", 5, 7, 9, 3, 2, 1, 1),    # divisor counts the padding too
    ("MaxPoolNHWC", 24, 6, 7, 2, 2, 0, 0),
    ("MaxPoolNHWC", 3, 5, 5, 3, 1, 1, 0),        # padding never wins, negative inputs included
    ("AveragePoolNHWC", 64, 8, 8, 8, 8, 0, 0),   # ResNet-8's pool
]


@pytest.mark.parametrize("target", KERNEL_TARGETS)
@pytest.mark.parametrize("case", POOLS, ids=lambda c: "-".join(map(str, c)))
def test_pool_nhwc_matches_reference(case, target, tmp_path):
    op, c, h, w, k, s, p, include = case
    extra = f", count_include_pad: {include}" if op.startswith("Average") else ""
    graph = f"""\
        graph: g
        inputs:
          x: {{dtype: float32, shape: [1, {h}, {w}, {c}]}}
        outputs: [y]
        nodes:
          - {{op: {op}, inputs: [x], outputs: [y], attrs: {{kernel_shape: [{k}, {k}], strides: [{s}, {s}],
              pads: [{p}, {p}, {p}, {p}]{extra}}}}}
        """
    got, want, _ = run(graph, target, tmp_path)
    assert_close(got, want)


@pytest.mark.parametrize("target", ["host", "host-native"])
def test_host_graph_keeps_its_layout_and_fuses_conv_chains(target, tmp_path):
    """A Conv -> Relu -> Conv(depthwise) -> Add(constant [m, 1, 1]) -> Relu chain built for the
    host: NCHW in and out, ConvNHWC inside, every activation fused."""
    graph = """\
        graph: g
        inputs:
          x: {dtype: float32, shape: [1, 3, 9, 10]}
        outputs: [y]
        constants:
          w1: {random: normal, shape: [24, 3, 3, 3], seed: 1, scale: 0.3}
          w2: {random: normal, shape: [24, 1, 3, 3], seed: 2, scale: 0.3}
          b2: {random: normal, shape: [24, 1, 1], seed: 3}
        nodes:
          - {op: Conv, inputs: [x, w1], outputs: [c1], attrs: {pads: [1, 1, 1, 1]}}
          - {op: Relu, inputs: [c1], outputs: [a1]}
          - {op: Conv, inputs: [a1, w2], outputs: [c2], attrs: {pads: [1, 1, 1, 1], strides: [2, 2], group: 24}}
          - {op: Add, inputs: [c2, b2], outputs: [s2]}
          - {op: Relu, inputs: [s2], outputs: [y]}
        """
    got, want, compiled = run(graph, target, tmp_path)
    assert_close(got, want)
    # the first convolution reads the NCHW input as it is: one transpose, back to NCHW at the end
    assert [k.node.op for k in compiled.model.kernels] == ["ConvNHWC", "ConvNHWC", "Transpose"]
