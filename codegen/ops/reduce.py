"""Reductions along axes: Softmax and ReduceMean."""
from __future__ import annotations

import numpy as np

from codegen.ir import TensorType
from codegen.ops.common import normalize_axis, require_dtype
from codegen.ops.registry import Attr, InferArgs, OpError, define


def _infer_softmax(args: InferArgs) -> list[TensorType]:
    require_dtype(args)
    normalize_axis(args.attrs["axis"], args.types[0].rank)
    return [args.types[0]]


def _softmax_reference(xs, attrs):
    x = xs[0].astype(np.float64)
    axis = attrs["axis"]
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return [(e / e.sum(axis=axis, keepdims=True)).astype(np.float32)]


define("Softmax", inputs=1, infer=_infer_softmax, reference=_softmax_reference,
       attrs=[Attr("axis", "int", -1)])


def reduce_axes(args: InferArgs) -> tuple[int, ...]:
    """The sorted, normalised axes a Reduce* node reduces (attribute or constant input)."""
    rank = args.types[0].rank
    axes = args.attrs.get("axes")
    if len(args.values) > 1 and args.types[1] is not None:
        if axes is not None:
            raise OpError("give the axes either as attribute or as input, not both", attr="axes")
        t = args.types[1]
        if t.dtype != "int64" or t.rank > 1 or args.values[1] is None:
            raise OpError(f"ReduceMean's axes must be a 1-D int64 constant, got {t}", input=1)
        axes = tuple(int(a) for a in np.asarray(args.values[1]).reshape(-1))
    if not axes:
        if args.attrs["noop_with_empty_axes"]:
            return ()
        return tuple(range(rank))
    normalized = [normalize_axis(a, rank, "axes") for a in axes]
    if len(set(normalized)) != len(normalized):
        raise OpError(f"axes {list(axes)} name an axis twice", attr="axes")
    return tuple(sorted(normalized))


def _infer_reduce(args: InferArgs) -> list[TensorType]:
    require_dtype(args, inputs=[0])
    axes = reduce_axes(args)
    shape = args.types[0].shape
    if args.attrs["keepdims"]:
        out = tuple(1 if i in axes else d for i, d in enumerate(shape))
    else:
        out = tuple(d for i, d in enumerate(shape) if i not in axes)
    return [TensorType("float32", out)]


def _reduce_mean_reference(xs, attrs):
    axes = attrs["axes"]
    if len(xs) > 1 and xs[1] is not None:
        axes = tuple(int(a) for a in xs[1].reshape(-1))
    if not axes:
        if attrs["noop_with_empty_axes"]:
            return [xs[0]]
        axes = None
    y = xs[0].astype(np.float64).mean(axis=None if axes is None else tuple(axes),
                                      keepdims=bool(attrs["keepdims"]))
    return [np.asarray(y, dtype=np.float32)]


define("ReduceMean", inputs=(1, 2), infer=_infer_reduce, reference=_reduce_mean_reference,
       constant_inputs=[1],
       attrs=[Attr("axes", "ints", None), Attr("keepdims", "int", 1, (0, 1)),
              Attr("noop_with_empty_axes", "int", 0, (0, 1))])
