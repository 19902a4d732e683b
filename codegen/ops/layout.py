"""Primitives that move data without arithmetic: Reshape, Transpose, Concat."""
from __future__ import annotations

import math

import numpy as np

from codegen.ir import TensorType
from codegen.ops.common import normalize_axis, same_dtype
from codegen.ops.registry import Attr, InferArgs, OpError, define


def reshape_target(shape: tuple[int, ...], spec: np.ndarray, allowzero: int) -> tuple[int, ...]:
    """Resolve ONNX Reshape's target (0 copies a dimension, -1 is inferred)."""
    spec = [int(d) for d in np.asarray(spec).reshape(-1)]
    out = []
    for i, d in enumerate(spec):
        if d == 0 and not allowzero:
            if i >= len(shape):
                raise OpError(f"Reshape target {spec} copies dimension {i}, which the input "
                              f"{list(shape)} does not have", input=1)
            d = shape[i]
        elif d < -1:
            raise OpError(f"Reshape target {spec} has a negative dimension {d}", input=1)
        out.append(d)
    if out.count(-1) > 1:
        raise OpError(f"Reshape target {spec} has more than one -1", input=1)
    total = math.prod(shape)
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or total % known:
            raise OpError(f"cannot reshape {list(shape)} to {spec}", input=1)
        out[out.index(-1)] = total // known
    if math.prod(out) != total:
        raise OpError(f"cannot reshape {list(shape)} ({total} elements) to {out} "
                      f"({math.prod(out)} elements)", input=1)
    return tuple(out)


def _infer_reshape(args: InferArgs) -> list[TensorType]:
    data, shape = args.types
    if shape.dtype != "int64" or shape.rank != 1:
        raise OpError(f"Reshape's shape must be a 1-D int64 constant, got {shape}", input=1)
    return [TensorType(data.dtype, reshape_target(data.shape, args.values[1], args.attrs["allowzero"]))]


define("Reshape", inputs=2, infer=_infer_reshape, constant_inputs=[1],
       attrs=[Attr("allowzero", "int", 0, (0, 1))],
       reference=lambda xs, attrs: [xs[0].reshape(reshape_target(xs[0].shape, xs[1], attrs["allowzero"]))])


def transpose_perm(args_rank: int, perm: tuple[int, ...] | None) -> tuple[int, ...]:
    """The permutation a Transpose applies (reversed axes by default)."""
    if perm is None:
        return tuple(reversed(range(args_rank)))
    if sorted(perm) != list(range(args_rank)):
        raise OpError(f"perm {list(perm)} is not a permutation of 0..{args_rank - 1}", attr="perm")
    return perm


def _infer_transpose(args: InferArgs) -> list[TensorType]:
    x = args.types[0]
    perm = transpose_perm(x.rank, args.attrs["perm"])
    return [TensorType(x.dtype, tuple(x.shape[p] for p in perm))]


define("Transpose", inputs=1, infer=_infer_transpose, attrs=[Attr("perm", "ints", None)],
       reference=lambda xs, attrs: [np.transpose(xs[0], transpose_perm(xs[0].ndim, attrs["perm"]))])


def _infer_concat(args: InferArgs) -> list[TensorType]:
    dtype = same_dtype(args)
    first = args.types[0]
    axis = normalize_axis(args.attrs["axis"], first.rank)
    total = 0
    for i, t in enumerate(args.types):
        if t.rank != first.rank or any(d != e for j, (d, e) in enumerate(zip(t.shape, first.shape))
                                       if j != axis):
            raise OpError(f"Concat input {i} has shape {list(t.shape)}, which does not match input 0 "
                          f"{list(first.shape)} outside axis {axis}", input=i)
        total += t.shape[axis]
    return [TensorType(dtype, first.shape[:axis] + (total,) + first.shape[axis + 1:])]


define("Concat", inputs=(1, -1), infer=_infer_concat, attrs=[Attr("axis", "int")],
       reference=lambda xs, attrs: [np.concatenate(xs, axis=attrs["axis"])])
