"""ONNX DFT as matrix products: with the signal length known when the graph is built, a
discrete Fourier transform along one axis is a product with constant cosine and sine
matrices (length x length numbers each), which the MatMul kernels compute. That costs
O(n^2) per signal instead of an FFT's O(n log n), and is meant for the short signals of
embedded feature extraction (frames of a few hundred samples at most)."""
from __future__ import annotations

import numpy as np

from tinsmith.builders.registry import builder
from tinsmith.ops.common import normalize_axis
from tinsmith.ops.registry import Attr, OpError


def _constant_int(g, name: str | None, what: str, index: int) -> int | None:
    if not name:
        return None
    value = g.value_of(name)
    if value is None:
        raise OpError(f"DFT {what} must be a constant, known when the graph is built", input=index)
    return int(np.asarray(value).reshape(-1)[0])


def _matrices(n_in: int, length: int, bins: int, inverse: bool, onesided: bool) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2 pi k n / length for n < n_in (input index) and k < bins (output index),
    scaled for the inverse transform; float64, then float32."""
    n = np.arange(n_in).reshape(-1, 1)
    k = np.arange(bins).reshape(1, -1)
    if inverse and onesided:  # rows: input bins 0..length/2 of a real signal's transform; columns: samples
        angle = 2 * np.pi * ((n * k) % length) / length
        weight = np.where((n == 0) | ((length % 2 == 0) & (n == length // 2)), 1.0, 2.0) / length
        return (weight * np.cos(angle)).astype(np.float32), (weight * np.sin(angle)).astype(np.float32)
    angle = 2 * np.pi * ((n * k) % length) / length
    scale = 1.0 / length if inverse else 1.0
    return (scale * np.cos(angle)).astype(np.float32), (scale * np.sin(angle)).astype(np.float32)


@builder("DFT", inputs=(1, 3), attrs=[Attr("axis", "int", 1), Attr("inverse", "int", 0, (0, 1)),
                                      Attr("onesided", "int", 0, (0, 1))])
def dft(g, inputs, attrs):
    """ONNX DFT of a real ([..., 1]) or complex ([..., 2]) signal along `axis` (the attribute
    of opsets 17-19, or the constant third operand of opset 20; without either, axis 1), zero-
    padded or cut to dft_length; onesided keeps bins 0..length/2 (forward) or takes them
    (inverse, a real result)."""
    x = inputs[0]
    shape = list(g.type_of(x).shape)
    rank = len(shape)
    if rank < 3 or shape[-1] not in (1, 2):
        raise OpError(f"DFT input has shape {shape}; expected [batch, ..., 1 or 2]", input=0)
    axis_operand = _constant_int(g, inputs[2] if len(inputs) > 2 else None, "axis", 2)
    axis = normalize_axis(axis_operand if axis_operand is not None else attrs["axis"], rank)
    if axis in (0, rank - 1):
        raise OpError(f"DFT axis {axis} must be a signal axis, not the batch or complex one", attr="axis")
    inverse, onesided = bool(attrs["inverse"]), bool(attrs["onesided"])
    if onesided and not inverse and shape[-1] == 2:
        raise OpError("DFT onesided applies to real input only", attr="onesided")
    n_in = shape[axis]
    length = _constant_int(g, inputs[1] if len(inputs) > 1 else None, "dft_length", 1)
    if length is None:
        length = 2 * (n_in - 1) if inverse and onesided else n_in
    if length <= 0:
        raise OpError(f"DFT length {length} must be positive", input=1)
    if inverse and onesided:
        used, bins = min(n_in, length // 2 + 1), length
    else:
        used, bins = min(n_in, length), (length // 2 + 1 if onesided else length)
    cos, sin = _matrices(used, length, bins, inverse, onesided)

    def part(k: int) -> str:  # real (0) or imaginary (1) part, signal axis last, first `used` samples
        p = g.add("Slice", [x, g.constant(np.array([k, 0], np.int64), "starts"),
                            g.constant(np.array([k + 1, used], np.int64), "ends"),
                            g.constant(np.array([rank - 1, axis], np.int64), "axes")])[0]
        perm = [d for d in range(rank - 1) if d != axis] + [axis, rank - 1]
        p = g.add("Transpose", [p], {"perm": perm})[0]
        return g.add("Reshape", [p, g.constant(np.array([shape[d] for d in perm[:-2]] + [used], np.int64),
                                               "shape")])[0]

    def times(value: str, matrix: np.ndarray) -> str:
        return g.add("MatMul", [value, g.constant(matrix, "dft")])[0]
    re = part(0)
    im = part(1) if shape[-1] == 2 else None
    sign = 1.0 if inverse else -1.0  # e^(sign i angle)
    if inverse and onesided:  # x_n = sum_k w_k (Re X_k cos - Im X_k sin)
        outs = [times(re, cos) if im is None else g.add("Sub", [times(re, cos), times(im, sin)])[0]]
    else:
        out_re, out_im = times(re, cos), times(re, sign * sin)
        if im is not None:
            out_re = g.add("Sub", [out_re, times(im, sign * sin)])[0]
            out_im = g.add("Add", [out_im, times(im, cos)])[0]
        outs = [out_re, out_im]
    # back to the input's layout: [..., bins at `axis`, ..., 1] for each part, then side by side
    others = [shape[d] for d in range(rank - 1) if d != axis]
    inverse_perm = list(np.argsort([d for d in range(rank - 1) if d != axis] + [axis]))
    placed = []
    for o in outs:
        o = g.add("Reshape", [o, g.constant(np.array(others + [bins, 1], np.int64), "shape")])[0]
        placed.append(g.add("Transpose", [o], {"perm": [int(p) for p in inverse_perm] + [rank - 1]})[0])
    return [placed[0] if len(placed) == 1 else g.add("Concat", placed, {"axis": rank - 1})[0]]
