"""ONNX DeformConv (2-D) as GridSamplePixels and MatMul: each tap of each output position reads
the input at its regular position moved by a learned offset, so the taps' values are bilinear
samples of X (zero outside, as the operator defines), which GridSamplePixels computes from a
grid of the moved positions. Scaled by the optional mask, those columns [C x kH kW, oH oW] times the
weights [oC, C/group x kH kW] per group are the convolution, plus the bias.
"""
from __future__ import annotations

import numpy as np

from tinsmith.builders.registry import builder
from tinsmith.ops.conv import windows
from tinsmith.ops.registry import Attr, OpError


def _i64(values) -> np.ndarray:
    return np.array(values, np.int64)


@builder("DeformConv", inputs=(3, 5),
         attrs=[Attr("dilations", "ints", None), Attr("group", "int", 1), Attr("kernel_shape", "ints", None),
                Attr("offset_group", "int", 1), Attr("pads", "ints", None), Attr("strides", "ints", None)])
def deform_conv(g, inputs, attrs):
    """Y[n, o] = B[o] + sum over c, taps: W[o, c, tap] * mask * X[n, c](position + offset), bilinear."""
    x, w, offset = inputs[:3]
    bias = inputs[3] if len(inputs) > 3 and inputs[3] else None
    mask = inputs[4] if len(inputs) > 4 and inputs[4] else None
    xs, ws, offs = (tuple(g.type_of(v).shape) for v in (x, w, offset))
    if len(xs) != 4 or len(ws) != 4:
        raise OpError(f"DeformConv takes 2-D images: X [N, C, H, W] and W [oC, C/group, kH, kW], got X {list(xs)} "
                      f"and W {list(ws)}", input=0)
    n, c, height, width = xs
    out_c, kh, kw = ws[0], ws[2], ws[3]
    group, offset_group = attrs["group"], attrs["offset_group"]
    if attrs["kernel_shape"] is not None and list(attrs["kernel_shape"]) != [kh, kw]:
        raise OpError(f"DeformConv kernel_shape {attrs['kernel_shape']} differs from W's {[kh, kw]}", attr="kernel_shape")
    if c % group or out_c % group or ws[1] * group != c or c % offset_group:
        raise OpError(f"DeformConv: {c} input channels, W {list(ws)}, group {group} and offset_group "
                      f"{offset_group} do not divide evenly", attr="group")
    wins = windows((height, width), (kh, kw), attrs)
    oh, ow = wins[0].out_size, wins[1].out_size
    taps = kh * kw
    if offs != (n, offset_group * 2 * taps, oh, ow):
        raise OpError(f"DeformConv offset has shape {list(offs)}, expected {[n, offset_group * 2 * taps, oh, ow]}",
                      input=2)
    if mask is not None and tuple(g.type_of(mask).shape) != (n, offset_group * taps, oh, ow):
        raise OpError(f"DeformConv mask has shape {list(g.type_of(mask).shape)}, expected "
                      f"{[n, offset_group * taps, oh, ow]}", input=4)
    # the regular position of every tap of every output, [taps, oH, oW] per axis
    rows = wins[0].positions().T  # [kh, oh]
    cols = wins[1].positions().T  # [kw, ow]
    base_h = np.broadcast_to(rows[:, None, :, None], (kh, kw, oh, ow)).reshape(taps, oh, ow)
    base_w = np.broadcast_to(cols[None, :, None, :], (kh, kw, oh, ow)).reshape(taps, oh, ow)
    # offsets [N, G, taps, 2 (h, w), oH, oW], added to the regular positions
    moved = g.add("Reshape", [offset, g.constant(_i64([n, offset_group, taps, 2, oh, ow]), "shape")])[0]
    base = np.stack([base_h, base_w], axis=1).astype(np.float32)  # [taps, 2, oH, oW]
    moved = g.add("Add", [moved, g.constant(base, "positions")])[0]
    # the sampler's grid: [N G, taps oH, oW, 2 (w, h: innermost axis first)]
    grid = g.add("Transpose", [moved], {"perm": [0, 1, 2, 4, 5, 3]})[0]
    grid = g.add("Reshape", [grid, g.constant(_i64([n * offset_group, taps * oh, ow, 2]), "shape")])[0]
    grid = g.add("Slice", [grid, g.constant(_i64([1]), "starts"), g.constant(_i64([-3]), "ends"),
                           g.constant(_i64([3]), "axes"), g.constant(_i64([-1]), "steps")])[0]  # (h, w) -> (w, h)
    images = g.add("Reshape", [x, g.constant(_i64([n * offset_group, c // offset_group, height, width]), "shape")])[0]
    sampled = g.add("GridSamplePixels", [images, grid], {"mode": "linear", "padding_mode": "zeros"})[0]
    # [N G, C/G, taps oH, oW] -> [N, G, C/G, taps, oH oW], scaled by the mask of its offset group
    sampled = g.add("Reshape", [sampled, g.constant(_i64([n, offset_group, c // offset_group, taps, oh * ow]),
                                                    "shape")])[0]
    if mask is not None:
        m = g.add("Reshape", [mask, g.constant(_i64([n, offset_group, 1, taps, oh * ow]), "shape")])[0]
        sampled = g.add("Mul", [sampled, m])[0]
    # columns per convolution group: [N, group, C/group taps, oH oW]; weights [group, oC/group, C/group taps]
    columns = g.add("Reshape", [sampled, g.constant(_i64([n, group, (c // group) * taps, oh * ow]), "shape")])[0]
    weights = g.add("Reshape", [w, g.constant(_i64([group, out_c // group, (c // group) * taps]), "shape")])[0]
    y = g.add("MatMul", [weights, columns])[0]
    y = g.add("Reshape", [y, g.constant(_i64([n, out_c, oh, ow]), "shape")])[0]
    if bias is not None:
        y = g.add("Add", [y, g.add("Reshape", [bias, g.constant(_i64([out_c, 1, 1]), "shape")])[0]])[0]
    return [y]
