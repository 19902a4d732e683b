"""Channels-last (NHWC) forms of convolution and pooling, which the layout pass (codegen/layout.py)
puts in place of Conv and the pools on targets whose kernels want channels innermost.

    ConvNHWC(X[N, D1.., C], W[k1.., C/group, M], B[M]) -> Y[N, O1.., M]   (X[N, C, D1..] with input_nchw)
    AveragePoolNHWC(X[N, D1.., C]) -> Y[N, O1.., C]     (AveragePool's attributes)
    MaxPoolNHWC(X[N, D1.., C]) -> Y[N, O1.., C]         (MaxPool's attributes)

Weights are stored taps first, output channels last (HWIO): one tap's weights for consecutive
output channels are consecutive, so a kernel whose vectors run over output channels loads them
whole. Only group 1 and depthwise (group == C == M) are defined; other groupings stay NCHW.
Geometry, attributes and the reference are the NCHW primitives' own, seen through a transpose,
so the two layouts cannot disagree on padding, output shapes or rounding.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ops.conv import _WINDOW_ATTRS, ConvGeometry, _conv_reference, conv_geometry
from tinsmith.ops.pooling import _POOL_ATTRS, _pool_reference, pool_facts, pool_windows
from tinsmith.ops.registry import PRIMITIVES, Attr, InferArgs, OpError, define


def to_first(shape: Sequence[int]) -> tuple[int, ...]:
    """(N, D1.., C) as (N, C, D1..)."""
    return (shape[0], shape[-1]) + tuple(shape[1:-1])


def to_last(shape: Sequence[int]) -> tuple[int, ...]:
    """(N, C, D1..) as (N, D1.., C)."""
    return (shape[0],) + tuple(shape[2:]) + (shape[1],)


def perm_to_last(rank: int) -> tuple[int, ...]:
    return (0,) + tuple(range(2, rank)) + (1,)


def perm_to_first(rank: int) -> tuple[int, ...]:
    return (0, rank - 1) + tuple(range(1, rank - 1))


def weights_to_hwio(w: np.ndarray) -> np.ndarray:
    """[M, C/group, k1..] as [k1.., C/group, M]."""
    return np.ascontiguousarray(np.transpose(w, tuple(range(2, w.ndim)) + (1, 0)))


def weights_to_oihw(w: np.ndarray) -> np.ndarray:
    """[k1.., C/group, M] as [M, C/group, k1..]."""
    r = w.ndim
    return np.ascontiguousarray(np.transpose(w, (r - 1, r - 2) + tuple(range(r - 2))))


def _nchw_args(args: InferArgs) -> InferArgs:
    """The same node seen in the model's layout (input 0 NCHW, weights OIHW)."""
    types = list(args.types)
    x = types[0]
    if x is None or x.rank < 3:
        raise OpError(f"input must have rank 3 or more (N, D1, ..., C), got {x}", input=0)
    if not args.attrs.get("input_nchw"):
        types[0] = TensorType(x.dtype, to_first(x.shape))
    if len(types) > 1 and types[1] is not None:
        w = types[1]
        if w.rank != x.rank:
            raise OpError(f"weights must have rank {x.rank} like the input, got {w}", input=1)
        types[1] = TensorType(w.dtype, (w.shape[-1], w.shape[-2]) + tuple(w.shape[:-2]))
    return InferArgs(tuple(types), args.attrs, (None,) * len(types))


def conv_nhwc_geometry(args: InferArgs):
    nchw = _nchw_args(args)
    group, wins = conv_geometry(nchw)
    x, w = nchw.types[0], args.types[1]
    if group != 1 and args.attrs.get("input_nchw"):
        raise OpError("a depthwise ConvNHWC reads its input channels last (input_nchw 0)", attr="input_nchw")
    if group != 1 and not (group == x.shape[1] == w.shape[-1]):
        raise OpError(f"ConvNHWC takes group 1 or depthwise (group = channels = outputs), got group {group}",
                      attr="group")
    return group, wins


def _infer_conv(args: InferArgs) -> list[TensorType]:
    _, wins = conv_nhwc_geometry(args)
    x, w = args.types[0], args.types[1]
    return [TensorType("float32", (x.shape[0],) + tuple(win.out_size for win in wins) + (w.shape[-1],))]


def _conv_reference_nhwc(xs, attrs):
    x = xs[0] if attrs.get("input_nchw") else np.transpose(xs[0], perm_to_first(xs[0].ndim))
    rest = [weights_to_oihw(xs[1])] + list(xs[2:])
    y = _conv_reference([x] + rest, attrs)[0]
    return [np.ascontiguousarray(np.transpose(y, perm_to_last(y.ndim)))]


def _conv_macs(args: InferArgs, outs) -> int:
    w = args.types[1]
    return outs[0].size * int(np.prod(w.shape[:-1]))


def _prepare_conv(args: InferArgs, outs) -> dict:
    """As Conv's: the group count, the windows and the geometry (in the model's channel counts)."""
    group, wins = conv_nhwc_geometry(args)
    x, w = _nchw_args(args).types[0], args.types[1]
    geometry = ConvGeometry(x.shape[0], x.shape[1], w.shape[-1], group, tuple(wins))
    return {"group": group, "windows": tuple(wins), "geometry": geometry}


# input_nchw 1: the input is read in the model's layout (N, C, D1..), as a network's first
# convolution reads its image, so that no transposed copy of the image is made (group 1 only).
define("ConvNHWC", inputs=(2, 3), infer=_infer_conv, reference=_conv_reference_nhwc, macs=_conv_macs,
       attrs=_WINDOW_ATTRS + [Attr("group", "int", 1), Attr("input_nchw", "int", 0, (0, 1))],
       prepare=_prepare_conv)


# --- pools ----------------------------------------------------------------------------------
def _pool(op: str):
    nchw = PRIMITIVES[op]

    def infer(args: InferArgs) -> list[TensorType]:
        (y,) = nchw.infer(_nchw_args(args))
        return [TensorType(y.dtype, to_last(y.shape))]

    def reference(xs, attrs: Mapping):
        x = np.transpose(xs[0], perm_to_first(xs[0].ndim))
        y = _pool_reference(op)([x], attrs)[0]
        return [np.ascontiguousarray(np.transpose(y, perm_to_last(y.ndim)))]

    def prepare(args: InferArgs, outs) -> dict:
        include_pad = op == "AveragePool" and bool(args.attrs["count_include_pad"])
        return pool_facts(pool_windows(_nchw_args(args), op), channels_last=True, count_include_pad=include_pad)

    extra = [Attr("count_include_pad", "int", 0, (0, 1))] if op == "AveragePool" else \
        [Attr("storage_order", "int", 0, (0, 1))]
    define(op + "NHWC", inputs=1, infer=infer, reference=reference, attrs=_POOL_ATTRS + extra, prepare=prepare)


_pool("AveragePool")
_pool("MaxPool")
