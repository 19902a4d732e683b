"""Convolutional operators: Conv, ConvTranspose, the pools and the channel normalizations.

1. The primitives' NumPy references against direct loops written here (nothing from tinsmith):
   output sizes from the ONNX formulas, every tap visited, padding skipped by an explicit test.
2. The compiled kernels against ONNX Runtime on the same single-node models (built with
   onnx.helper), over many attribute combinations, every graph built by ONE SCons run.
3. The ONNX backend node test cases for these ops, compiled the same way, against the outputs
   they ship with, at ONNX's tolerances (rtol 1e-3, atol 1e-7).
4. The loops generated: bounds tests only where padding can occur.

Tolerance rtol=1e-5, atol=1e-6 against NumPy in float64 and against ONNX Runtime (float32):
no output sums more than 40 products, and Conv's weights are scaled by 1/sqrt(terms summed) so
outputs stay near unit size; float32 sums in either order then differ by a few units in the last
place (measured: at most 1.2e-6 on outputs near 10, i.e. 1e-7 relative). The references, which
compute in float64, are compared at rtol=1e-6.
"""
from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper

from tinsmith.generate.functors.conv import Segment, plan_axis, tiles, transposed_phases
from tinsmith.ir import TensorType
from tinsmith.ops import PRIMITIVES, InferArgs, OpError, check_attrs
from tinsmith.ops.conv import TransposedAxis, Window

RTOL, ATOL = 1e-5, 1e-6


# === 1. references against direct loops =====================================================
def out_size(size, k, s, d, pb, pe, ceil_mode=False):
    """ONNX's output size for explicit pads (pools drop a last window starting in the end padding)."""
    value = (size + pb + pe - ((k - 1) * d + 1)) / s + 1
    o = math.ceil(value) if ceil_mode else math.floor(value)
    if ceil_mode and (o - 1) * s >= size + pb:
        o -= 1
    return o


def _defaults(n, strides, dilations, pads):
    return strides or [1] * n, dilations or [1] * n, pads or [0] * (2 * n)


def conv_loops(x, w, b=None, group=1, strides=None, dilations=None, pads=None):
    n = x.ndim - 2
    strides, dilations, pads = _defaults(n, strides, dilations, pads)
    outs = [out_size(x.shape[2 + d], w.shape[2 + d], strides[d], dilations[d], pads[d], pads[n + d])
            for d in range(n)]
    cg, mg = x.shape[1] // group, w.shape[0] // group
    y = np.zeros((x.shape[0], w.shape[0], *outs))
    for idx in np.ndindex(*y.shape):
        nb, m, o = idx[0], idx[1], idx[2:]
        acc = float(b[m]) if b is not None else 0.0
        for c in range(cg):
            for k in np.ndindex(*w.shape[2:]):
                pos = tuple(o[d] * strides[d] + k[d] * dilations[d] - pads[d] for d in range(n))
                if all(0 <= pos[d] < x.shape[2 + d] for d in range(n)):
                    acc += float(x[(nb, (m // mg) * cg + c) + pos]) * float(w[(m, c) + k])
        y[idx] = acc
    return y


def conv_transpose_loops(x, w, b=None, group=1, strides=None, dilations=None, pads=None, output_padding=None):
    n = x.ndim - 2
    strides, dilations, pads = _defaults(n, strides, dilations, pads)
    extra = output_padding or [0] * n
    outs = [strides[d] * (x.shape[2 + d] - 1) + extra[d] + (w.shape[2 + d] - 1) * dilations[d] + 1
            - pads[d] - pads[n + d] for d in range(n)]
    cg, mg = x.shape[1] // group, w.shape[1]
    y = np.zeros((x.shape[0], mg * group, *outs))
    for idx in np.ndindex(*x.shape):  # scatter: every input adds to one output per tap
        nb, c, i = idx[0], idx[1], idx[2:]
        for m in range(mg):
            for k in np.ndindex(*w.shape[2:]):
                pos = tuple(i[d] * strides[d] + k[d] * dilations[d] - pads[d] for d in range(n))
                if all(0 <= pos[d] < outs[d] for d in range(n)):
                    y[(nb, (c // cg) * mg + m) + pos] += float(x[idx]) * float(w[(c, m) + k])
    if b is not None:
        y += np.asarray(b, np.float64).reshape((1, -1) + (1,) * n)
    return y


def pool_loops(x, kind, kernel, strides=None, dilations=None, pads=None, ceil_mode=0, count_include_pad=0, p=2):
    n = x.ndim - 2
    strides, dilations, pads = _defaults(n, strides, dilations, pads)
    outs = [out_size(x.shape[2 + d], kernel[d], strides[d], dilations[d], pads[d], pads[n + d], ceil_mode)
            for d in range(n)]
    y = np.zeros((*x.shape[:2], *outs))
    for idx in np.ndindex(*y.shape):
        values, counted = [], 0
        for k in np.ndindex(*kernel):
            pos = tuple(idx[2 + d] * strides[d] + k[d] * dilations[d] - pads[d] for d in range(n))
            inside = all(0 <= pos[d] < x.shape[2 + d] for d in range(n))
            in_padding = all(pos[d] < x.shape[2 + d] + pads[n + d] for d in range(n))
            if inside:
                values.append(float(x[idx[:2] + pos]))
            counted += inside or (count_include_pad and in_padding)
        if kind == "max":
            y[idx] = max(values)
        elif kind == "avg":
            y[idx] = sum(values) / counted
        else:
            y[idx] = sum(abs(v) ** p for v in values) ** (1.0 / p)
    return y


def batch_norm_loops(x, scale, bias, mean, var, epsilon=1e-5):
    y = np.zeros(x.shape)
    for idx in np.ndindex(*x.shape):
        c = idx[1]
        y[idx] = (float(x[idx]) - mean[c]) / math.sqrt(float(var[c]) + float(np.float32(epsilon))) * scale[c] + bias[c]
    return y


def instance_norm_loops(x, scale, bias, epsilon=1e-5):
    y = np.zeros(x.shape)
    for nb, c in np.ndindex(*x.shape[:2]):
        plane = [float(v) for v in x[nb, c].reshape(-1)]
        mean = sum(plane) / len(plane)
        var = sum((v - mean) ** 2 for v in plane) / len(plane)
        y[nb, c] = (x[nb, c] - mean) / math.sqrt(var + float(np.float32(epsilon))) * scale[c] + bias[c]
    return y


def lrn_loops(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    y = np.zeros(x.shape)
    for idx in np.ndindex(*x.shape):
        c = idx[1]
        lo, hi = max(0, c - (size - 1) // 2), min(x.shape[1] - 1, c + math.ceil((size - 1) / 2))
        total = sum(float(x[(idx[0], j) + idx[2:]]) ** 2 for j in range(lo, hi + 1))
        y[idx] = float(x[idx]) / (bias + alpha / size * total) ** beta
    return y


def reference(op, xs, attrs=None):
    prim = PRIMITIVES[op]
    checked = check_attrs(prim.attrs, attrs or {}, f"{op} node 'n'")
    types = tuple(TensorType(str(a.dtype), a.shape) if a is not None else None for a in xs)
    inferred = list(prim.infer(InferArgs(types, checked, tuple(xs))))
    result = list(prim.reference(list(xs), checked))
    assert [r.shape for r in result] == [t.shape for t in inferred]
    return result[0]


@pytest.fixture
def rng():
    return np.random.default_rng(20240611)


def _rand(rng, *shape, low=-2.0, high=2.0):
    return rng.uniform(low, high, shape).astype(np.float32)


CONV_REFERENCE_CASES = [
    ((1, 2, 5, 6), (3, 2, 3, 3), True, {"pads": [1, 1, 1, 1]}),
    ((2, 4, 7, 5), (4, 2, 3, 2), True, {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [1, 2]}),
    ((1, 3, 6, 6), (6, 1, 3, 3), False, {"group": 3, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 9), (2, 2, 3), True, {"dilations": [3], "pads": [2, 4]}),
    ((1, 1, 3, 4, 4), (2, 1, 2, 3, 3), True, {"pads": [0, 1, 1, 1, 1, 0], "strides": [1, 2, 1]}),
    ((1, 1, 3, 3), (1, 1, 5, 5), False, {"pads": [2, 2, 2, 2]}),
]


@pytest.mark.parametrize("x_shape, w_shape, bias, attrs", CONV_REFERENCE_CASES)
def test_conv_reference_matches_loops(rng, x_shape, w_shape, bias, attrs):
    x, w = _rand(rng, *x_shape), _rand(rng, *w_shape)
    b = _rand(rng, w_shape[0]) if bias else None
    got = reference("Conv", [x, w] + ([b] if bias else []), attrs)
    want = conv_loops(x, w, b, attrs.get("group", 1), attrs.get("strides"), attrs.get("dilations"), attrs.get("pads"))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


CONV_TRANSPOSE_REFERENCE_CASES = [
    ((1, 1, 3, 3), (1, 2, 3, 3), True, {}),
    ((1, 2, 3, 4), (2, 2, 3, 3), False, {"strides": [3, 2], "pads": [1, 2, 0, 1], "output_padding": [1, 1]}),
    ((2, 4, 3, 3), (4, 1, 2, 3), True, {"group": 2, "strides": [2, 2], "dilations": [2, 1]}),
    ((1, 1, 4), (1, 3, 4), True, {"strides": [2], "dilations": [2], "pads": [1, 2]}),
    ((1, 1, 2, 3, 3), (1, 1, 2, 2, 2), False, {"strides": [2, 1, 3]}),
]


@pytest.mark.parametrize("x_shape, w_shape, bias, attrs", CONV_TRANSPOSE_REFERENCE_CASES)
def test_conv_transpose_reference_matches_loops(rng, x_shape, w_shape, bias, attrs):
    x, w = _rand(rng, *x_shape), _rand(rng, *w_shape)
    b = _rand(rng, w_shape[1] * attrs.get("group", 1)) if bias else None
    got = reference("ConvTranspose", [x, w] + ([b] if bias else []), attrs)
    want = conv_transpose_loops(x, w, b, attrs.get("group", 1), attrs.get("strides"), attrs.get("dilations"),
                                attrs.get("pads"), attrs.get("output_padding"))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


POOL_REFERENCE_CASES = [
    ("MaxPool", (1, 2, 6, 7), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ("MaxPool", (1, 1, 5, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", (1, 1, 4, 4, 4), {"kernel_shape": [2, 2, 2], "dilations": [2, 2, 2]}),
    ("MaxPool", (2, 3, 9), {"kernel_shape": [4], "pads": [3, 2]}),
    ("AveragePool", (1, 2, 6, 6), {"kernel_shape": [3, 3], "pads": [2, 2, 2, 2]}),
    ("AveragePool", (1, 2, 6, 6), {"kernel_shape": [3, 3], "pads": [2, 1, 0, 2], "count_include_pad": 1}),
    ("AveragePool", (1, 3, 2, 2), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [3, 3], "ceil_mode": 1,
                                   "count_include_pad": 1}),
    ("AveragePool", (1, 1, 7, 7), {"kernel_shape": [2, 3], "dilations": [2, 2], "strides": [2, 3], "ceil_mode": 1}),
    ("LpPool", (1, 2, 6, 6), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "p": 3}),
    ("LpPool", (1, 2, 8), {"kernel_shape": [2], "strides": [2], "p": 1}),
    ("LpPool", (1, 1, 5, 5), {"kernel_shape": [2, 2], "dilations": [2, 2]}),
]


@pytest.mark.parametrize("op, x_shape, attrs", POOL_REFERENCE_CASES)
def test_pool_reference_matches_loops(rng, op, x_shape, attrs):
    x = _rand(rng, *x_shape)
    kind = {"MaxPool": "max", "AveragePool": "avg", "LpPool": "lp"}[op]
    want = pool_loops(x, kind, attrs["kernel_shape"], attrs.get("strides"), attrs.get("dilations"), attrs.get("pads"),
                      attrs.get("ceil_mode", 0), attrs.get("count_include_pad", 0), attrs.get("p", 2))
    np.testing.assert_allclose(reference(op, [x], attrs), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op, p", [("GlobalAveragePool", None), ("GlobalMaxPool", None), ("GlobalLpPool", 2),
                                   ("GlobalLpPool", 3)])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 2, 7), (1, 2, 2, 3, 2)])
def test_global_pool_reference_matches_loops(rng, op, p, shape):
    x = _rand(rng, *shape)
    want = np.zeros(shape[:2] + (1,) * (len(shape) - 2))
    for nb, c in np.ndindex(*shape[:2]):
        values = [float(v) for v in x[nb, c].reshape(-1)]
        want[nb, c] = (sum(values) / len(values) if op == "GlobalAveragePool" else max(values)
                       if op == "GlobalMaxPool" else sum(abs(v) ** p for v in values) ** (1 / p))
    np.testing.assert_allclose(reference(op, [x], {"p": p} if p else {}), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape, epsilon", [((2, 3, 4, 5), 1e-5), ((4, 3), 1e-2), ((1, 2, 7), 0.5)])
def test_batch_norm_reference_matches_loops(rng, shape, epsilon):
    c = shape[1]
    x, scale, bias, mean = _rand(rng, *shape), _rand(rng, c), _rand(rng, c), _rand(rng, c)
    var = _rand(rng, c, low=0.1, high=2.0)
    got = reference("BatchNormalization", [x, scale, bias, mean, var], {"epsilon": epsilon, "momentum": 0.5})
    np.testing.assert_allclose(got, batch_norm_loops(x, scale, bias, mean, var, epsilon), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape, epsilon", [((2, 3, 4, 5), 1e-5), ((1, 2, 1, 3), 1e-2), ((2, 2, 6), 1e-5)])
def test_instance_norm_reference_matches_loops(rng, shape, epsilon):
    x, scale, bias = _rand(rng, *shape), _rand(rng, shape[1]), _rand(rng, shape[1])
    got = reference("InstanceNormalization", [x, scale, bias], {"epsilon": epsilon})
    np.testing.assert_allclose(got, instance_norm_loops(x, scale, bias, epsilon), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape, attrs", [((2, 5, 3, 3), {"size": 3}), ((1, 6, 2, 2), {"size": 4, "alpha": 0.1,
                                                                                      "beta": 0.5, "bias": 2.0}),
                                          ((1, 3, 4), {"size": 5, "alpha": 0.3, "beta": 1.0}),
                                          ((1, 4, 2, 2), {"size": 1})])
def test_lrn_reference_matches_loops(rng, shape, attrs):
    x = _rand(rng, *shape)
    want = lrn_loops(x, attrs["size"], attrs.get("alpha", 1e-4), attrs.get("beta", 0.75), attrs.get("bias", 1.0))
    np.testing.assert_allclose(reference("LRN", [x], attrs), want, rtol=1e-6, atol=1e-6)


# --- shape inference and errors -------------------------------------------------------------
def infer(op, shapes, attrs=None):
    prim = PRIMITIVES[op]
    checked = check_attrs(prim.attrs, attrs or {}, f"{op} node 'n'")
    types = tuple(TensorType("float32", s) if s is not None else None for s in shapes)
    return [t.shape for t in prim.infer(InferArgs(types, checked, (None,) * len(shapes)))]


@pytest.mark.parametrize("op, shapes, attrs, out", [
    ("Conv", [(1, 1, 5, 5), (1, 1, 3, 3)], {"auto_pad": "SAME_LOWER", "strides": [2, 2]}, (1, 1, 3, 3)),
    ("Conv", [(1, 1, 49, 10), (64, 1, 10, 4)], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, (1, 64, 25, 5)),
    ("Conv", [(1, 3, 8, 8), (4, 3, 3, 3)], {"auto_pad": "VALID", "pads": [1, 1, 1, 1]}, (1, 4, 6, 6)),
    ("Conv", [(2, 6, 9), (4, 3, 3), (4,)], {"group": 2, "dilations": [2], "pads": [1, 1]}, (2, 4, 7)),
    ("ConvTranspose", [(1, 1, 3, 3), (1, 2, 3, 3)], {"strides": [3, 2], "output_shape": [10, 8]}, (1, 2, 10, 8)),
    ("ConvTranspose", [(1, 1, 3, 3), (1, 2, 3, 3)], {"strides": [3, 2], "output_padding": [1, 1]}, (1, 2, 10, 8)),
    ("ConvTranspose", [(1, 1, 3, 3), (1, 2, 3, 3)], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, (1, 2, 6, 6)),
    ("ConvTranspose", [(3, 2, 3, 3), (2, 1, 3, 3)], {"group": 2}, (3, 2, 5, 5)),
    ("MaxPool", [(1, 1, 4, 4)], {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, (1, 1, 2, 2)),
    ("MaxPool", [(1, 1, 2, 2)], {"kernel_shape": [1, 1], "strides": [2, 2], "ceil_mode": 1}, (1, 1, 1, 1)),
    ("AveragePool", [(1, 3, 32, 32)], {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"}, (1, 3, 32, 32)),
    ("AveragePool", [(1, 3, 2, 2)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [3, 3],
                                     "ceil_mode": 1}, (1, 3, 1, 1)),
    ("GlobalAveragePool", [(2, 3, 5, 7)], {}, (2, 3, 1, 1)),
    ("BatchNormalization", [(2, 3), (3,), (3,), (3,), (3,)], {}, (2, 3)),
    ("LRN", [(1, 4, 3, 3)], {"size": 3}, (1, 4, 3, 3)),
])
def test_shapes(op, shapes, attrs, out):
    assert infer(op, shapes, attrs) == [out]


@pytest.mark.parametrize("op, shapes, attrs, message", [
    ("Conv", [(1, 4, 5, 5), (2, 3, 3, 3)], {}, "input has 4 channels but the weights [2, 3, 3, 3] with group 1 "
                                              "take 3 (3 per group)"),
    ("Conv", [(1, 4, 5, 5), (6, 2, 3, 3)], {"group": 4}, "group 4 must divide the number of output channels "
                                                        "(weights' axis 0) (6)"),
    ("Conv", [(1, 1, 5, 5), (1, 1, 3, 3)], {"pads": [1, 1]}, "pads [1, 1] must have 4 values, one per start and "
                                                            "end of each spatial axis"),
    ("Conv", [(1, 1, 5, 5), (1, 1, 3, 3)], {"kernel_shape": [3, 2]}, "kernel_shape [3, 2] does not match the "
                                                                    "weights' spatial shape [3, 3]"),
    ("Conv", [(1, 1, 2, 2), (1, 1, 3, 3)], {}, "spatial axis 0 of size 2 (padded 0+0) is smaller than the window: "
                                              "kernel 3, dilation 1"),
    ("Conv", [(1, 2, 5, 5), (3, 2, 3, 3), (2,)], {}, "bias must be float32[3], one per output channel, got "
                                                    "float32[2]"),
    ("Conv", [(1, 5), (1, 1, 3)], {}, "Conv input must have rank 3 or more (N, C, D1, ...), got [1, 5]"),
    ("MaxPool", [(1, 1, 5, 5)], {"kernel_shape": [2, 2], "strides": [0, 1]}, "strides [0, 1] must all be 1 or more"),
    ("BatchNormalization", [(1, 3, 2), (3,), (3,), (3,), (3,)], {"training_mode": 1},
     "only inference is supported (training_mode=0): fold statistics into the model before export"),
    ("InstanceNormalization", [(1, 3, 2), (2,), (3,)], {}, "input 1 must be float32[3], one value per channel, "
                                                          "got float32[2]"),
])
def test_errors(op, shapes, attrs, message):
    with pytest.raises(OpError) as info:
        infer(op, shapes, attrs)
    assert str(info.value) == message


def test_macs():
    conv = PRIMITIVES["Conv"]
    args = InferArgs((TensorType("float32", (1, 4, 8, 8)), TensorType("float32", (6, 2, 3, 3))),
                     check_attrs(conv.attrs, {"group": 2, "pads": [1, 1, 1, 1]}, "Conv"), (None, None))
    out = conv.infer(args)
    assert conv.macs(args, out) == 6 * 8 * 8 * 2 * 3 * 3


# === 4. loop structure =======================================================================


def test_plan_axis_clips_the_edges_and_keeps_the_interior_whole():
    assert plan_axis(Window(in_size=7, out_size=7, kernel=3, pad_begin=1, pad_end=1)) == (
        Segment(0, 1, 1, 2, 2), Segment(1, 5, 0, 3, 3, full=True), Segment(6, 1, 0, 2, 2))


def test_plan_axis_merges_long_edges_into_one_tested_segment():
    segments = plan_axis(Window(in_size=10, out_size=10, kernel=7, pad_begin=3, pad_end=3))
    assert segments == (Segment(0, 3, 0, 7, check_low=True), Segment(3, 4, 0, 7, 7, full=True),
                        Segment(7, 3, 0, 7, check_high=True))
    # AveragePool's divisors must be constants: nothing merged
    assert len(plan_axis(Window(10, 10, 7, 1, 1, 3, 3), exact_only=True)) == 7


def test_edge_rows_take_the_columns_whole():
    win = Window(in_size=8, out_size=8, kernel=3, pad_begin=1, pad_end=1)
    result = tiles([win, win])
    assert len(result) == 5  # top row, left / interior / right of the middle rows, bottom row
    assert [tuple(s.full for s in t) for t in result].count((True, True)) == 1
    assert sum(any(s.checked for s in t) for t in result) == 2


@pytest.mark.parametrize("axis", [TransposedAxis(3, 10, 3, 3, 1, 0), TransposedAxis(4, 9, 4, 2, 2, 1),
                                  TransposedAxis(5, 12, 1, 3, 1, 0), TransposedAxis(3, 8, 3, 2, 3, -1)])
def test_transposed_phases_cover_each_output_once_with_every_tap(axis):
    hits = []
    for phase in transposed_phases(axis):
        if phase is None:
            continue
        win = phase.window
        for q in range(win.out_size):
            o = q * phase.out_scale + phase.out_offset
            taps = []
            for j in range(win.kernel):
                i = q * win.stride + j * win.dilation - win.pad_begin
                if 0 <= i < win.in_size:
                    taps.append((i, phase.tap_base + j * phase.tap_step))
            hits.append((o, sorted(taps)))
    want = [(o, sorted((i, k) for i in range(axis.in_size) for k in range(axis.kernel)
                       if i * axis.stride + k * axis.dilation - axis.pad_begin == o))
            for o in range(axis.out_size)]
    assert sorted(hits) == want


def _kernels(tmp_path, nodes, inputs, constants=None):
    from tinsmith.pipeline import compile_graph
    doc = {"graph": "g", "inputs": {k: {"dtype": "float32", "shape": list(v)} for k, v in inputs.items()},
           "outputs": [n["outputs"][0] for n in nodes], "nodes": nodes}
    if constants:
        doc["constants"] = constants
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return {k.node.name: k.source for k in compile_graph(path).model.kernels}


def test_bounds_tests_only_where_padding_occurs(tmp_path):
    sources = _kernels(tmp_path, [
        {"op": "Conv", "name": "valid", "inputs": ["x", "w"], "outputs": ["a"]},
        {"op": "Conv", "name": "padded", "inputs": ["x", "w"], "outputs": ["b"], "attrs": {"pads": [1, 1, 1, 1]}},
        {"op": "MaxPool", "name": "pool", "inputs": ["x"], "outputs": ["c"],
         "attrs": {"kernel_shape": [2, 2], "strides": [2, 2]}}],
        {"x": (1, 2, 8, 8), "w": (3, 2, 3, 3)})
    assert "?" not in sources["valid"] and "?" not in sources["pool"].replace("> acc ?", "")
    padded = sources["padded"]
    interior = padded[padded.index("every tap inside the input"):]
    interior = interior[:interior.index("//")] if "//" in interior else interior
    assert "?" not in interior
    assert padded.count("bounds tested") == 2  # the top and bottom rows only


# === 2. compiled kernels against ONNX Runtime ===============================================
@dataclass
class Case:
    """One node: ONNX op, its inputs (name, shape) in ONNX order, attributes. Inputs listed in
    `constants` are compiled as inline constants (they are fed to ONNX Runtime all the same);
    `positive` ones are drawn from [0.5, 2]. Where ONNX Runtime lacks the op, `numpy` computes the
    expected output from the inputs (in float64)."""

    name: str
    op: str
    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    attrs: dict = field(default_factory=dict)
    constants: tuple[str, ...] = ()
    positive: tuple[str, ...] = ()
    numpy: Callable | None = None

    def values(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(zlib.crc32(self.name.encode()))
        result = {}
        for name, shape in self.inputs:
            if name in self.positive:
                v = rng.uniform(0.5, 2.0, shape)
            else:
                v = rng.standard_normal(shape)
                if name == "w":  # outputs near unit size: scale by 1/sqrt(terms summed)
                    v /= math.sqrt(math.prod(shape[1:]))
            result[name] = v.astype(np.float32)
        return result

    def onnx_model(self) -> onnx.ModelProto:
        node = helper.make_node(self.op, [n for n, _ in self.inputs], ["y"], **self.attrs)
        graph = helper.make_graph(
            [node], self.name, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in self.inputs],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10)


def _global_lp(x, p):
    x = x.astype(np.float64)
    return (np.abs(x) ** p).sum(axis=tuple(range(2, x.ndim)), keepdims=True) ** (1 / p)


def conv(name, x, w, b=None, const=False, **attrs):
    inputs = (("x", x), ("w", w)) + ((("b", b),) if b else ())
    return Case(name, "Conv", inputs, attrs, ("w", "b") if const else ())


def conv_t(name, x, w, b=None, **attrs):
    return Case(name, "ConvTranspose", (("x", x), ("w", w)) + ((("b", b),) if b else ()), attrs)


def unary(name, op, x, **attrs):
    return Case(name, op, (("x", x),), attrs)


CASES = [
    conv("conv_pad1", (1, 1, 5, 5), (1, 1, 3, 3), pads=[1, 1, 1, 1]),
    conv("conv_strided_asymmetric", (1, 1, 7, 5), (1, 1, 3, 3), strides=[2, 2], pads=[1, 0, 1, 0]),
    conv("conv_same_lower", (1, 1, 5, 5), (1, 1, 3, 3), auto_pad="SAME_LOWER", strides=[2, 2]),
    conv("conv_same_upper_even", (1, 2, 6, 6), (3, 2, 4, 4), (3,), auto_pad="SAME_UPPER"),
    conv("conv_valid", (1, 2, 6, 7), (2, 2, 3, 2), (2,), auto_pad="VALID", strides=[1, 2]),
    conv("conv_group_dilated", (2, 4, 6, 5), (6, 2, 3, 3), (6,), const=True, group=2, pads=[2, 1, 2, 1],
         dilations=[2, 1]),
    conv("conv_depthwise", (1, 6, 9, 9), (6, 1, 3, 3), (6,), const=True, group=6, strides=[2, 2],
         pads=[1, 1, 1, 1]),
    conv("conv_depthwise_x2", (1, 3, 6, 6), (6, 1, 3, 3), group=3, pads=[1, 1, 1, 1]),
    conv("conv_pointwise", (1, 8, 5, 5), (16, 8, 1, 1), (16,), const=True),
    conv("conv_1d", (2, 3, 10), (4, 3, 3), (4,), dilations=[2], pads=[2, 1]),
    conv("conv_3d", (1, 2, 4, 5, 6), (3, 2, 3, 3, 3), pads=[1, 1, 1, 1, 1, 1], strides=[1, 2, 1]),
    conv("conv_wide_pads", (1, 2, 8, 8), (2, 2, 5, 5), (2,), pads=[3, 3, 3, 3]),  # edges merged, tested
    conv("conv_kws_stem", (1, 1, 49, 10), (8, 1, 10, 4), (8,), const=True, auto_pad="SAME_UPPER",
         strides=[2, 2]),
    conv("conv_kernel_over_input", (1, 1, 3, 3), (1, 1, 5, 5), pads=[2, 2, 2, 2], kernel_shape=[5, 5]),
    conv_t("convt_default", (1, 1, 3, 3), (1, 2, 3, 3)),
    conv_t("convt_1d", (1, 1, 3), (1, 2, 3)),
    conv_t("convt_3d", (1, 1, 3, 4, 5), (1, 2, 3, 3, 3)),
    conv_t("convt_output_shape", (1, 1, 3, 3), (1, 2, 3, 3), strides=[3, 2], output_shape=[10, 8]),
    conv_t("convt_output_padding", (1, 1, 3, 3), (1, 2, 3, 3), strides=[3, 2], output_padding=[1, 1]),
    conv_t("convt_pads", (1, 1, 3, 3), (1, 2, 3, 3), strides=[3, 2], pads=[1, 2, 1, 2]),
    conv_t("convt_dilations", (1, 1, 3, 3), (1, 1, 2, 2), dilations=[2, 2]),
    conv_t("convt_same_upper", (1, 1, 3, 3), (1, 2, 3, 3), auto_pad="SAME_UPPER", strides=[2, 2]),
    conv_t("convt_group", (3, 2, 3, 3), (2, 1, 3, 3), (2,), group=2),
    conv_t("convt_upsample", (1, 4, 5, 5), (4, 3, 4, 4), (3,), strides=[2, 2], pads=[1, 1, 1, 1]),
    conv_t("convt_stride_dilation", (1, 2, 4, 5), (2, 2, 4, 3), strides=[2, 3], dilations=[2, 2], pads=[1, 0, 2, 1]),
    conv_t("convt_kernel_under_stride", (1, 2, 4, 4), (2, 2, 1, 1), (2,), strides=[2, 2]),
    # output_shape beyond the natural size: the extra positions are at the end, bias only
    conv_t("convt_output_shape_beyond", (1, 1, 3), (1, 1, 3), (1,), strides=[2], output_shape=[8],
           auto_pad="SAME_UPPER"),
    unary("max_default", "MaxPool", (1, 3, 8, 8), kernel_shape=[2, 2]),
    unary("max_pads", "MaxPool", (1, 2, 7, 7), kernel_shape=[3, 3], pads=[2, 2, 2, 2]),
    unary("max_stem", "MaxPool", (1, 2, 9, 9), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    unary("max_ceil", "MaxPool", (1, 1, 4, 4), kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    unary("max_ceil_drop_last", "MaxPool", (1, 1, 2, 2), kernel_shape=[1, 1], strides=[2, 2], ceil_mode=1),
    unary("max_dilations", "MaxPool", (1, 1, 4, 4), kernel_shape=[2, 2], dilations=[2, 2]),
    unary("max_3d", "MaxPool", (1, 1, 4, 4, 4), kernel_shape=[2, 2, 2], dilations=[2, 2, 2]),
    unary("max_same_upper", "MaxPool", (1, 1, 5, 5), kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
    unary("max_same_lower", "MaxPool", (1, 2, 6, 6), kernel_shape=[2, 2], auto_pad="SAME_LOWER"),
    unary("max_1d", "MaxPool", (1, 3, 10), kernel_shape=[2]),
    unary("max_storage_order", "MaxPool", (1, 1, 5, 5), kernel_shape=[2, 2], strides=[2, 2], storage_order=1),
    unary("max_wide_pads", "MaxPool", (1, 1, 10, 10), kernel_shape=[7, 7], pads=[3, 3, 3, 3]),
    unary("avg_default", "AveragePool", (1, 3, 8, 8), kernel_shape=[2, 2]),
    unary("avg_pads", "AveragePool", (1, 2, 7, 7), kernel_shape=[3, 3], pads=[2, 2, 2, 2]),
    unary("avg_pads_included", "AveragePool", (1, 2, 7, 7), kernel_shape=[3, 3], pads=[2, 1, 0, 2],
         count_include_pad=1),
    unary("avg_strides", "AveragePool", (1, 2, 11, 11), kernel_shape=[5, 5], strides=[3, 3]),
    unary("avg_ceil", "AveragePool", (1, 1, 4, 4), kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    unary("avg_ceil_on_pad", "AveragePool", (1, 3, 2, 2), kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[3, 3],
         ceil_mode=1, count_include_pad=1),
    unary("avg_ceil_included", "AveragePool", (1, 1, 7, 6), kernel_shape=[3, 2], pads=[1, 0, 1, 1], strides=[2, 2],
         ceil_mode=1, count_include_pad=1),
    unary("avg_dilations", "AveragePool", (1, 1, 4, 4), kernel_shape=[2, 2], dilations=[2, 2], ceil_mode=1),
    unary("avg_same_upper", "AveragePool", (1, 1, 5, 5), kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
    unary("avg_same_lower", "AveragePool", (1, 2, 6, 6), kernel_shape=[2, 2], auto_pad="SAME_LOWER"),
    unary("avg_1d", "AveragePool", (1, 3, 10), kernel_shape=[3], pads=[1, 1]),
    unary("avg_3d", "AveragePool", (1, 1, 5, 5, 5), kernel_shape=[2, 3, 2], strides=[2, 2, 1], pads=[1, 1, 0, 0, 1, 1]),
    unary("avg_kws_head", "AveragePool", (1, 4, 25, 5), kernel_shape=[25, 5]),
    unary("lp_p2", "LpPool", (1, 2, 6, 6), kernel_shape=[2, 2]),
    unary("lp_p3_pads", "LpPool", (1, 2, 6, 6), kernel_shape=[3, 3], p=3, pads=[1, 1, 1, 1]),
    unary("lp_p1_strides", "LpPool", (1, 2, 9), kernel_shape=[3], p=1, strides=[2]),
    unary("lp_same_upper", "LpPool", (1, 1, 5, 5), kernel_shape=[2, 2], p=4, auto_pad="SAME_UPPER"),
    unary("lp_dilations", "LpPool", (1, 1, 4, 4), kernel_shape=[2, 2], p=2, dilations=[2, 2]),
    unary("gap", "GlobalAveragePool", (2, 3, 5, 5)),
    unary("gap_1d", "GlobalAveragePool", (1, 4, 7)),
    unary("gmp", "GlobalMaxPool", (2, 3, 5, 5)),
    unary("gmp_3d", "GlobalMaxPool", (1, 2, 3, 2, 4)),
    # ONNX Runtime has no GlobalLpPool
    Case("glp", "GlobalLpPool", (("x", (1, 3, 4, 4)),), numpy=lambda x: _global_lp(x, 2)),
    Case("glp_p3", "GlobalLpPool", (("x", (1, 3, 6)),), {"p": 3}, numpy=lambda x: _global_lp(x, 3)),
    Case("bn", "BatchNormalization", (("x", (2, 3, 4, 5)), ("scale", (3,)), ("bias", (3,)), ("mean", (3,)),
                                      ("var", (3,))), {}, ("scale", "bias", "mean", "var"), ("var",)),
    Case("bn_eps", "BatchNormalization", (("x", (1, 4, 3)), ("scale", (4,)), ("bias", (4,)), ("mean", (4,)),
                                          ("var", (4,))), {"epsilon": 0.01, "momentum": 0.5}, (), ("var",)),
    Case("inorm", "InstanceNormalization", (("x", (2, 3, 4, 5)), ("scale", (3,)), ("bias", (3,))),
         {"epsilon": 0.01}),
    Case("inorm_1d", "InstanceNormalization", (("x", (1, 2, 9)), ("scale", (2,)), ("bias", (2,))), {},
         ("scale", "bias")),
    unary("lrn", "LRN", (2, 5, 3, 3), size=3),
    # ONNX Runtime takes odd sizes only
    Case("lrn_even", "LRN", (("x", (1, 6, 2, 3)),), {"size": 4, "alpha": 0.1, "beta": 0.5, "bias": 2.0},
         numpy=lambda x: lrn_loops(x, 4, 0.1, 0.5, 2.0)),
    unary("lrn_wide", "LRN", (1, 3, 2, 2), size=5, alpha=0.3, beta=1.0),
    unary("lrn_one", "LRN", (1, 4, 2, 2), size=1, alpha=0.5),
]


# === 3. the ONNX backend node test cases for these ops ======================================
# Every float32 case for these ops passes but the ones listed in ONNX_UNSUPPORTED.
ONNX_CASES = [
    "test_basic_conv_with_padding", "test_basic_conv_without_padding", "test_conv_with_strides_padding",
    "test_conv_with_strides_no_padding", "test_conv_with_strides_and_asymmetric_padding",
    "test_conv_with_autopad_same",
    "test_convtranspose", "test_convtranspose_1d", "test_convtranspose_3d", "test_convtranspose_output_shape",
    "test_convtranspose_pad", "test_convtranspose_kernel_shape", "test_convtranspose_pads",
    "test_convtranspose_dilations", "test_convtranspose_autopad_same", "test_convtranspose_group_2",
    "test_convtranspose_group_2_image_3",
    "test_maxpool_2d_precomputed_pads", "test_maxpool_2d_precomputed_strides",
    "test_maxpool_2d_precomputed_same_upper", "test_maxpool_1d_default", "test_maxpool_2d_default",
    "test_maxpool_3d_default", "test_maxpool_2d_same_upper", "test_maxpool_2d_same_lower", "test_maxpool_2d_pads",
    "test_maxpool_2d_strides", "test_maxpool_2d_ceil", "test_maxpool_2d_ceil_output_size_reduce_by_one",
    "test_maxpool_2d_dilations", "test_maxpool_3d_dilations", "test_maxpool_3d_dilations_use_ref_impl",
    "test_maxpool_3d_dilations_use_ref_impl_large",
    "test_averagepool_2d_precomputed_pads", "test_averagepool_2d_precomputed_pads_count_include_pad",
    "test_averagepool_2d_precomputed_strides", "test_averagepool_2d_precomputed_same_upper",
    "test_averagepool_1d_default", "test_averagepool_2d_default", "test_averagepool_3d_default",
    "test_averagepool_2d_same_upper", "test_averagepool_2d_same_lower", "test_averagepool_2d_pads",
    "test_averagepool_2d_pads_count_include_pad", "test_averagepool_2d_strides", "test_averagepool_2d_ceil",
    "test_averagepool_2d_ceil_last_window_starts_on_pad", "test_averagepool_2d_dilations",
    "test_averagepool_3d_dilations_small",
    "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_True",
    "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_False",
    "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True",
    "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_False",
    "test_lppool_1d_default", "test_lppool_2d_default", "test_lppool_3d_default", "test_lppool_2d_same_upper",
    "test_lppool_2d_same_lower", "test_lppool_2d_pads", "test_lppool_2d_strides", "test_lppool_2d_dilations",
    "test_globalaveragepool", "test_globalaveragepool_precomputed", "test_globalmaxpool",
    "test_globalmaxpool_precomputed",
    "test_batchnorm_example", "test_batchnorm_epsilon",
    "test_instancenorm_example", "test_instancenorm_epsilon",
    "test_lrn", "test_lrn_default",
]
ONNX_UNSUPPORTED = {
    "test_maxpool_2d_uint8": "uint8 tensors",
    # the ONNX importer computes Indices with a MaxPoolIndices node (tests/test_pool_indices.py)
    "test_maxpool_with_argmax_2d_precomputed_pads": "MaxPool's Indices output, not a graph file's MaxPool",
    "test_maxpool_with_argmax_2d_precomputed_strides": "MaxPool's Indices output, not a graph file's MaxPool",
    "test_batchnorm_example_training_mode": "training_mode=1",
    "test_batchnorm_epsilon_training_mode": "training_mode=1",
}
OPS = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool",
       "GlobalLpPool", "BatchNormalization", "InstanceNormalization", "LRN")


@pytest.fixture(scope="module")
def onnx_cases():
    """The ONNX node test cases with one node of these ops, by name (generated in-process)."""
    import warnings

    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    return {c.name: c for c in cases if len(c.model.graph.node) == 1 and c.model.graph.node[0].op_type in OPS}


def test_every_onnx_case_for_these_ops_is_covered(onnx_cases):
    assert set(onnx_cases) == set(ONNX_CASES) | set(ONNX_UNSUPPORTED)


def _attr(a: onnx.AttributeProto):
    """An ONNX attribute as graph YAML spells it (these ops have ints, floats and strings only)."""
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode()
    return [int(x) for x in v] if isinstance(v, list) else v


# === building and running ===================================================================
@dataclass
class Graph:
    """One graph YAML: its inputs (name -> array, in runner order), constants, nodes, and per
    output the expected value with its tolerances."""

    name: str
    inputs: dict = field(default_factory=dict)
    constants: dict = field(default_factory=dict)
    nodes: list = field(default_factory=list)
    expected: dict = field(default_factory=dict)  # output -> (array, rtol, atol)

    def yaml(self) -> str:
        doc = {"graph": self.name,
               "inputs": {n: {"dtype": "float32", "shape": list(v.shape)} for n, v in self.inputs.items()},
               "outputs": list(self.expected)}
        if self.constants:
            doc["constants"] = {n: {"value": v.tolist()} for n, v in self.constants.items()}
        doc["nodes"] = self.nodes
        return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None)


def _graphs(onnx_cases) -> dict[str, Graph]:
    import onnxruntime as ort
    graphs: dict[str, Graph] = {}
    for case in CASES:
        g = graphs.setdefault(case.op, Graph(f"cv_{case.op.lower()}"))
        values = case.values()
        if case.numpy is not None:
            want = case.numpy(*values.values())
        else:
            session = ort.InferenceSession(case.onnx_model().SerializeToString(),
                                           providers=["CPUExecutionProvider"])
            want = session.run(None, values)[0]
        names = []
        for name, _ in case.inputs:
            value_name = f"{case.name}_{name}"
            (g.constants if name in case.constants else g.inputs)[value_name] = values[name]
            names.append(value_name)
        g.nodes.append({"op": case.op, "name": case.name, "inputs": names, "outputs": [case.name],
                        **({"attrs": case.attrs} if case.attrs else {})})
        g.expected[case.name] = (want, RTOL, ATOL)
    for name in ONNX_CASES:
        case = onnx_cases[name]
        node = case.model.graph.node[0]
        g = graphs[node.op_type]
        ins, outs = case.data_sets[0]
        for info, value in zip(case.model.graph.input, ins):
            g.inputs[f"{name}_{info.name}"] = value
        g.nodes.append({"op": node.op_type, "name": name, "inputs": [f"{name}_{i}" if i else "" for i in node.input],
                        "outputs": [name], "attrs": {a.name: _attr(a) for a in node.attribute}})
        g.expected[name] = (outs[0], case.rtol, case.atol)
    return graphs


@pytest.fixture(scope="module")
def compiled(onnx_cases, tmp_path_factory, scons_cmd, runner_io):
    """Every graph built by one SCons run (-k: a broken graph fails only its own cases), each
    runner run once; (output name) -> (got, want, rtol, atol), and SCons's log."""
    graphs = _graphs(onnx_cases)
    src, build = tmp_path_factory.mktemp("conv_graphs"), tmp_path_factory.mktemp("conv_build")
    paths = []
    for g in graphs.values():
        (src / f"{g.name}.yaml").write_text(g.yaml())
        paths.append(str(src / f"{g.name}.yaml"))
    proc = scons_cmd("-Q", "-k", "-j2", f"graphs={','.join(paths)}", f"build_dir={build}", check=False)
    results = {}
    for g in graphs.values():
        runner = build / g.name / f"{g.name}_runner"
        if not runner.exists():
            continue
        got = runner_io(runner, list(g.inputs.values()), [(w.shape, np.float32) for w, _, _ in g.expected.values()],
                        src)
        for (out, (want, rtol, atol)), value in zip(g.expected.items(), got):
            results[out] = (value, want, rtol, atol)
    return results, proc.stdout + proc.stderr


def _check(compiled, name):
    results, log = compiled
    if name not in results:
        pytest.fail(f"the graph with {name} did not build:\n{log[-5000:]}")
    got, want, rtol, atol = results[name]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("case", [c.name for c in CASES])
def test_compiled_matches_onnxruntime(compiled, case):
    _check(compiled, case)


@pytest.mark.parametrize("case", ONNX_CASES)
def test_compiled_passes_onnx_node_case(compiled, case):
    _check(compiled, case)


def test_every_op_is_compiled():
    assert {c.op for c in CASES} == set(OPS)
