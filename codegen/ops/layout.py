"""Primitives that move data without arithmetic: Reshape and its kin (Flatten, Squeeze, Unsqueeze),
Transpose, Concat, Expand, Tile, DepthToSpace, SpaceToDepth; and Dropout, a copy at inference."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ops.common import (FLOAT, broadcast_shapes, constant_ints, normalize_axis, require_dtypes,
                                same_dtype)
from tinsmith.ops.registry import Attr, InferArgs, OpError, Pattern, define


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
    # quantized data keeps its quantization: a reshape moves no values
    return [TensorType(data.dtype, reshape_target(data.shape, args.values[1], args.attrs["allowzero"]), data.quant)]


define("Reshape", pattern=Pattern.INJECTIVE, inputs=2, infer=_infer_reshape, constant_inputs=[1],
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


define("Transpose", pattern=Pattern.INJECTIVE, inputs=1, infer=_infer_transpose, attrs=[Attr("perm", "ints", None)],
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


define("Concat", pattern=Pattern.INJECTIVE, inputs=(1, -1), infer=_infer_concat, attrs=[Attr("axis", "int")],
       reference=lambda xs, attrs: [np.concatenate(xs, axis=attrs["axis"])])


# --- Flatten, Squeeze, Unsqueeze: reshapes with their own rules for the target shape -------------
def flatten_shape(shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    """Flatten's 2-D shape: the dimensions before `axis`, and from it on."""
    rank = len(shape)
    if not -rank <= axis <= rank:
        raise OpError(f"axis {axis} is out of range for Flatten of a tensor of rank {rank} "
                      f"(expected {-rank}..{rank})", attr="axis")
    axis = axis + rank if axis < 0 else axis
    return math.prod(shape[:axis]), math.prod(shape[axis:])


def _infer_flatten(args: InferArgs) -> list[TensorType]:
    x = args.types[0]
    return [TensorType(x.dtype, flatten_shape(x.shape, args.attrs["axis"]))]


define("Flatten", pattern=Pattern.INJECTIVE, inputs=1, attrs=[Attr("axis", "int", 1)], infer=_infer_flatten,
       reference=lambda xs, attrs: [xs[0].reshape(flatten_shape(xs[0].shape, attrs["axis"]))])


def squeeze_shape(shape: tuple[int, ...], axes: tuple[int, ...] | None) -> tuple[int, ...]:
    """The shape without the given axes (every axis of size 1 if none are given)."""
    if axes is None:
        return tuple(d for d in shape if d != 1)
    drop = {normalize_axis(a, len(shape), "axes") for a in axes}
    for a in sorted(drop):
        if shape[a] != 1:
            raise OpError(f"cannot squeeze axis {a} of shape {list(shape)}: its size is {shape[a]}, not 1",
                          attr="axes")
    return tuple(d for i, d in enumerate(shape) if i not in drop)


def unsqueeze_shape(shape: tuple[int, ...], axes: tuple[int, ...] | None) -> tuple[int, ...]:
    """The shape with 1s inserted at `axes` (positions in the output)."""
    if axes is None:
        raise OpError("Unsqueeze needs axes, as input 1 or attribute 'axes'", attr="axes")
    rank = len(shape) + len(axes)
    at = [normalize_axis(a, rank, "axes") for a in axes]
    if len(set(at)) != len(at):
        raise OpError(f"axes {list(axes)} name an axis twice", attr="axes")
    rest = iter(shape)
    return tuple(1 if i in at else next(rest) for i in range(rank))


def _axes_op(name: str, rule: Callable[[tuple[int, ...], tuple[int, ...] | None], tuple[int, ...]]) -> None:
    """Squeeze or Unsqueeze: axes from the attribute (before opset 13) or the constant input 1."""
    def infer(args: InferArgs) -> list[TensorType]:
        given = constant_ints(args, 1, f"{name}'s axes", rank=None)  # a scalar too, as ONNX Runtime takes
        if given is not None and args.attrs["axes"] is not None:
            raise OpError(f"give {name}'s axes either as attribute or as input, not both", attr="axes")
        axes = given if given is not None else args.attrs["axes"]
        return [TensorType(args.types[0].dtype, rule(args.types[0].shape, axes))]

    def reference(xs, attrs):
        axes = tuple(int(a) for a in xs[1].reshape(-1)) if len(xs) > 1 and xs[1] is not None else attrs["axes"]
        return [xs[0].reshape(rule(xs[0].shape, axes))]
    define(name, inputs=(1, 2), constant_inputs=[1], attrs=[Attr("axes", "ints", None)], infer=infer,
           reference=reference, pattern=Pattern.INJECTIVE)


_axes_op("Squeeze", squeeze_shape)
_axes_op("Unsqueeze", unsqueeze_shape)


# --- Expand, Tile ------------------------------------------------------------------------------
def _infer_expand(args: InferArgs) -> list[TensorType]:
    shape = constant_ints(args, 1, "Expand's shape")
    if any(d < 0 for d in shape):
        raise OpError(f"Expand's shape {list(shape)} has a negative dimension", input=1)
    x = args.types[0]
    return [TensorType(x.dtype, broadcast_shapes([x.shape, shape]))]


def _expand_reference(xs, attrs):
    shape = broadcast_shapes([xs[0].shape, tuple(int(d) for d in xs[1])])
    return [np.broadcast_to(xs[0], shape).copy()]


define("Expand", pattern=Pattern.INJECTIVE, inputs=2, constant_inputs=[1], infer=_infer_expand, reference=_expand_reference)


def _infer_tile(args: InferArgs) -> list[TensorType]:
    x = args.types[0]
    repeats = constant_ints(args, 1, "Tile's repeats")
    if len(repeats) != x.rank or any(r < 0 for r in repeats):
        raise OpError(f"Tile's repeats {list(repeats)} must be {x.rank} non-negative numbers, one per axis "
                      f"of {list(x.shape)}", input=1)
    return [TensorType(x.dtype, tuple(d * r for d, r in zip(x.shape, repeats)))]


define("Tile", pattern=Pattern.INJECTIVE, inputs=2, constant_inputs=[1], infer=_infer_tile,
       reference=lambda xs, attrs: [np.tile(xs[0], tuple(int(r) for r in xs[1]))])


# --- DepthToSpace, SpaceToDepth: a transpose of a 6-D view ------------------------------------
def block_view(op: str, shape: tuple[int, ...], blocksize: int, mode: str):
    """(view shape, perm): DepthToSpace/SpaceToDepth as reshape(transpose(reshape(x, view), perm))."""
    n, c, h, w = shape
    b = blocksize
    if op == "DepthToSpace":
        if c % (b * b):
            raise OpError(f"DepthToSpace needs channels ({c}) divisible by blocksize squared ({b * b})",
                          attr="blocksize")
        if mode == "DCR":
            return (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
        return (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    if h % b or w % b:
        raise OpError(f"SpaceToDepth needs height and width ({h}, {w}) divisible by blocksize {b}",
                      attr="blocksize")
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    return (n, c, h // b, b, w // b, b), perm


def block_shape(op: str, shape: tuple[int, ...], blocksize: int) -> tuple[int, ...]:
    """The output shape of DepthToSpace or SpaceToDepth."""
    n, c, h, w = shape
    b = blocksize
    return (n, c // (b * b), h * b, w * b) if op == "DepthToSpace" else (n, c * b * b, h // b, w // b)


def _block_op(name: str) -> None:
    def infer(args: InferArgs) -> list[TensorType]:
        x = args.types[0]
        if x.rank != 4:
            raise OpError(f"{name} takes a 4-D tensor (N, C, H, W), got {list(x.shape)}", input=0)
        if args.attrs["blocksize"] < 1:
            raise OpError(f"blocksize must be positive, not {args.attrs['blocksize']}", attr="blocksize")
        block_view(name, x.shape, args.attrs["blocksize"], args.attrs["mode"])
        return [TensorType(x.dtype, block_shape(name, x.shape, args.attrs["blocksize"]))]

    def reference(xs, attrs):
        view, perm = block_view(name, xs[0].shape, attrs["blocksize"], attrs["mode"])
        moved = np.transpose(xs[0].reshape(view), perm)
        return [moved.reshape(block_shape(name, xs[0].shape, attrs["blocksize"]))]
    define(name, inputs=1, infer=infer, reference=reference, pattern=Pattern.INJECTIVE,
           attrs=[Attr("blocksize", "int"), Attr("mode", "string", "DCR", ("DCR", "CRD"))])


_block_op("DepthToSpace")
_block_op("SpaceToDepth")


# --- Dropout (inference): a copy, and a mask of all true ----------------------------------------
def _infer_dropout(args: InferArgs) -> list[TensorType]:
    require_dtypes(args, FLOAT, [0])
    x = args.types[0]
    if len(args.types) > 2 and args.types[2] is not None:
        ratio = args.values[1] if len(args.values) > 1 and args.values[1] is not None else 0.5
        if args.values[2] is None or (bool(np.asarray(args.values[2]).reshape(-1)[0])
                                      and float(np.asarray(ratio).reshape(-1)[0]) != 0):
            raise OpError("Dropout is supported for inference only: training_mode must be a constant "
                          "false (or the ratio a constant 0)", input=2)
    return [x, TensorType("bool", x.shape)]


# ratio is an attribute before opset 12; inference ignores it either way.
define("Dropout", inputs=(1, 3), outputs=2, infer=_infer_dropout,
       attrs=[Attr("seed", "int", 0), Attr("ratio", "float", 0.5)],
       reference=lambda xs, attrs: [xs[0], np.ones(xs[0].shape, np.bool_)])
