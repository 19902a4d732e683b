"""DeformConv (GridSamplePixels and MatMul) compiled for the host and compared with NumPy of the
operator's definition written here and with ONNX's reference evaluator: random offsets reaching past
the image, masks, groups, offset groups, strides, dilations, padding, bias, odd sizes."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_oracle import assert_close, expected, run_cases
from tinsmith.ops.conv import windows


def _case(name, x_shape, w_shape, group=1, offset_group=1, mask=False, bias=False, seed=0, **attrs):
    rng = np.random.default_rng(seed)
    n, c, h, w = x_shape
    kh, kw = w_shape[2:]
    wins = windows((h, w), (kh, kw), attrs)
    oh, ow = wins[0].out_size, wins[1].out_size
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32),
             "w": rng.standard_normal(w_shape).astype(np.float32),
             "offset": (rng.standard_normal((n, offset_group * 2 * kh * kw, oh, ow)) * 1.7).astype(np.float32)}
    inputs = ["x", "w", "offset"]
    if bias or mask:
        feeds["b"] = rng.standard_normal(w_shape[0]).astype(np.float32) if bias else np.zeros(w_shape[0], np.float32)
        inputs.append("b")
    if mask:
        feeds["mask"] = rng.uniform(0, 1, (n, offset_group * kh * kw, oh, ow)).astype(np.float32)
        inputs.append("mask")
    node = helper.make_node("DeformConv", inputs, ["y"], group=group, offset_group=offset_group,
                            kernel_shape=[kh, kw], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape)
                                            for k, v in feeds.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, w_shape[0], oh, ow])])
    return name, (helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), feeds)


CASES = dict([
    _case("dc_plain", (1, 2, 5, 6), (3, 2, 3, 3)),
    _case("dc_pads_stride", (2, 3, 7, 5), (4, 3, 2, 3), pads=[1, 0, 1, 2], strides=[2, 1], bias=True, seed=1),
    _case("dc_dilated_mask", (1, 4, 8, 7), (2, 4, 3, 2), dilations=[2, 1], mask=True, seed=2),
    _case("dc_groups", (1, 4, 6, 6), (6, 2, 2, 2), group=2, offset_group=2, mask=True, bias=True, seed=3,
          pads=[1, 1, 1, 1]),
    _case("dc_1x1", (1, 3, 1, 1), (2, 3, 1, 1), offset_group=3, seed=4),
])


def _bilinear(img: np.ndarray, y: float, x: float) -> float:
    """img at (y, x), zero outside: the four neighbours that lie inside, weighted."""
    h, w = img.shape
    if y <= -1 or y >= h or x <= -1 or x >= w:
        return 0.0
    y0, x0 = int(np.floor(y)), int(np.floor(x))
    total = 0.0
    for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
        for xx, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
            if 0 <= yy < h and 0 <= xx < w:
                total += wy * wx * img[yy, xx]
    return total


def deform_conv_numpy(model, feeds) -> np.ndarray:
    """The operator's definition, loop by loop, in float64."""
    attrs = {a.name: helper.get_attribute_value(a) for a in model.graph.node[0].attribute}
    x, w, off = (feeds[k].astype(np.float64) for k in ("x", "w", "offset"))
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    group, og = attrs["group"], attrs["offset_group"]
    sh, sw = attrs.get("strides", [1, 1])
    dh, dw = attrs.get("dilations", [1, 1])
    pt, pl = attrs.get("pads", [0, 0, 0, 0])[:2]
    oh, ow = off.shape[2:]
    mask = feeds["mask"].astype(np.float64) if "mask" in feeds else np.ones((n, og * kh * kw, oh, ow))
    y = np.zeros((n, oc, oh, ow))
    for b, o, i, j in np.ndindex(n, oc, oh, ow):
        gi = o // (oc // group)
        for ci in range(cg):
            ch = gi * cg + ci
            g = ch // (c // og)
            for ki, kj in np.ndindex(kh, kw):
                k = ki * kw + kj
                py = i * sh - pt + ki * dh + off[b, g * 2 * kh * kw + 2 * k, i, j]
                px = j * sw - pl + kj * dw + off[b, g * 2 * kh * kw + 2 * k + 1, i, j]
                y[b, o, i, j] += w[o, ci, ki, kj] * mask[b, g * kh * kw + k, i, j] * _bilinear(x[b, ch], py, px)
    if "b" in feeds:
        y += feeds["b"].reshape(1, -1, 1, 1)
    return y


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("deform_conv")
    return run_cases(CASES, folder)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_numpy(compiled, name):
    model, feeds = CASES[name]
    want = deform_conv_numpy(model, feeds)
    (got,) = compiled[name]
    assert got.shape == want.shape
    assert_close(got, want, name)
    if name != "dc_1x1":  # (ONNX's reference evaluator divides by zero on a 1x1 image)
        (reference,) = expected(model, feeds, reference=True)
        assert_close(got, reference, f"{name} (ONNX reference)")
