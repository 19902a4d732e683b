"""MaxPoolIndices: the flat positions of MaxPool's maxima (ONNX MaxPool's optional Indices output,
which the ONNX importer turns into this node beside the MaxPool that computes the values, so a
MaxPool whose indices nobody reads costs nothing more).

An index counts positions in the unpadded input tensor: ((n C + c) H + h) W + w in row-major
order (storage_order 0), or with the spatial axes taken column-major ((n C + c) W + w) H + h
(storage_order 1). The first maximum in window order wins; NaN never does, as in MaxPool.
"""
from __future__ import annotations

import itertools

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ops.conv import AUTO_PAD, gather_taps, windows
from tinsmith.ops.pooling import pool_facts, pool_windows
from tinsmith.ops.registry import Attr, InferArgs, OpError, define

POOL_ATTRS = [Attr("auto_pad", "string", "NOTSET", AUTO_PAD),
              Attr("ceil_mode", "int", 0, (0, 1)), Attr("dilations", "ints", None), Attr("kernel_shape", "ints"),
              Attr("pads", "ints", None), Attr("strides", "ints", None), Attr("storage_order", "int", 0, (0, 1))]


def spatial_strides(shape, storage_order: int) -> list[int]:
    """Strides of the spatial axes within one (n, c) plane: row-major, or column-major."""
    dims = list(shape)
    order = range(len(dims) - 1, -1, -1) if storage_order == 0 else range(len(dims))
    strides, step = [0] * len(dims), 1
    for d in order:
        strides[d] = step
        step *= dims[d]
    return strides


def _infer(args: InferArgs) -> list[TensorType]:
    wins = pool_windows(args, "MaxPoolIndices")
    x = args.types[0]
    if x.dtype != "float32":
        raise OpError(f"input 0 has element type {x.dtype}, expected float32", input=0)
    return [TensorType("int64", x.shape[:2] + tuple(w.out_size for w in wins))]


def _reference(xs, attrs):
    x = xs[0].astype(np.float64)
    wins = windows(x.shape[2:], attrs["kernel_shape"], attrs, bool(attrs["ceil_mode"]))
    n, c = x.shape[:2]
    plane = int(np.prod(x.shape[2:]))
    out_shape = (n, c) + tuple(w.out_size for w in wins)
    best = np.full(out_shape, float(np.finfo(np.float32).min))
    where = np.zeros(out_shape, np.int64)
    base = (np.arange(n)[:, None] * c + np.arange(c)[None, :]) * plane
    base = base.reshape((n, c) + (1,) * len(wins))
    strides = spatial_strides(x.shape[2:], attrs["storage_order"])
    for taps in itertools.product(*[range(w.kernel) for w in wins]):
        v, real = gather_taps(x, wins, taps)
        flat = np.zeros((), np.int64)
        for win, k, s in zip(wins, taps, strides):
            flat = np.add.outer(flat, win.positions()[:, k] * s)
        take = real & (v > best)
        best = np.where(take, v, best)
        where = np.where(take, base + flat, where)
    return [where]


define("MaxPoolIndices", inputs=1, infer=_infer, reference=_reference, attrs=POOL_ATTRS,
       prepare=lambda args, outs: pool_facts(pool_windows(args, "MaxPoolIndices")))
