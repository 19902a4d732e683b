"""Reductions along axes: Softmax and its relatives, Reduce*, ArgMax/ArgMin, CumSum and TopK."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ops.common import (ANY, FLOAT, NUMERIC, constant_ints, normalize_axis, require_dtypes)
from tinsmith.ops.registry import Attr, InferArgs, OpError, Pattern, define


# --- what the reduction kernels read (codegen/generate/functors/reduction_nest.py) -------------
def _along_axis_facts(args: InferArgs, outputs) -> dict:
    """The input's shape and the one axis reduced (the `axis` attribute)."""
    x = args.types[0]
    return {"shape": x.shape, "axes": (normalize_axis(args.attrs["axis"], x.rank),)}


def _reduce_facts(args: InferArgs, outputs) -> dict:
    """The input's shape and the sorted axes reduced (none: noop_with_empty_axes)."""
    return {"shape": args.types[0].shape, "axes": reduce_axes(args)}


def _cumsum_facts(args: InferArgs, outputs) -> dict:
    return {"shape": args.types[0].shape, "axes": (cumsum_axis(args),)}


def _topk_facts(args: InferArgs, outputs) -> dict:
    return {**_along_axis_facts(args, outputs), "k": topk_k(args)}


# --- Softmax, LogSoftmax, Hardmax: along one axis (opset 13 semantics) -------------------------
def _infer_along_axis(args: InferArgs) -> list[TensorType]:
    require_dtypes(args, FLOAT)
    normalize_axis(args.attrs["axis"], args.types[0].rank)
    return [args.types[0]]


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    first = np.expand_dims(np.argmax(x, axis=axis), axis)  # the first maximum wins a tie
    y = np.zeros_like(x)
    np.put_along_axis(y, first, 1, axis=axis)
    return y


ALONG_AXIS: dict[str, Callable[[np.ndarray, int], np.ndarray]] = {
    "Softmax": _softmax,
    "LogSoftmax": _log_softmax,
    "Hardmax": _hardmax,
}

def _along_axis_reference(fn: Callable[[np.ndarray, int], np.ndarray]):
    return lambda xs, attrs: [fn(xs[0].astype(np.float64), attrs["axis"]).astype(xs[0].dtype)]


for _name, _fn in ALONG_AXIS.items():
    define(_name, inputs=1, infer=_infer_along_axis, attrs=[Attr("axis", "int", -1)],
           reference=_along_axis_reference(_fn), pattern=Pattern.REDUCTION, prepare=_along_axis_facts)


# --- Reduce*: axes from the attribute (before opset 18) or a constant input -------------------
def reduce_axes(args: InferArgs, op: str = "Reduce") -> tuple[int, ...]:
    """The sorted, normalised axes a Reduce* node reduces (attribute or constant input); () with
    noop_with_empty_axes and no axes."""
    rank = args.types[0].rank
    axes = args.attrs.get("axes")
    if len(args.types) > 1 and args.types[1] is not None:
        if axes is not None:
            raise OpError("give the axes either as attribute or as input, not both", attr="axes")
        axes = constant_ints(args, 1, f"{op}'s axes")
    if not axes:
        if args.attrs["noop_with_empty_axes"]:
            return ()
        return tuple(range(rank))
    normalized = [normalize_axis(a, rank, "axes") for a in axes]
    if len(set(normalized)) != len(normalized):
        raise OpError(f"axes {list(axes)} name an axis twice", attr="axes")
    return tuple(sorted(normalized))


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: int) -> tuple[int, ...]:
    """The shape after reducing `axes` (kept as 1s with keepdims)."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


@dataclass(frozen=True)
class Reduction:
    """A Reduce* op: its NumPy reduction over a tuple of axes and the element types it takes."""

    fn: Callable[[np.ndarray, tuple[int, ...]], np.ndarray]
    dtypes: tuple[str, ...] = FLOAT


def _log_sum_exp(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    if x.size == 0:
        return np.log(np.sum(np.exp(x), axis=axes))  # -inf, the log of an empty sum
    m = np.max(x, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    return np.log(np.sum(np.exp(x - m), axis=axes)) + np.squeeze(m, axis=axes)


def _extreme(pick, empty: float):
    """np.max or np.min, with ONNX's value for an empty reduction (-inf, +inf) instead of an error."""
    def fn(x, axes):
        if all(x.shape[a] for a in axes):
            return pick(x, axis=axes)
        fill = (empty > 0) if x.dtype == np.bool_ else empty  # bool: max of nothing is false, min true
        return np.full([d for i, d in enumerate(x.shape) if i not in axes], fill)
    return fn


def _mean(x, axes):
    """np.mean, with the mean of nothing as 0 / 0 (NaN; 0 for integers, which have no NaN) without
    NumPy's 'Mean of empty slice' warning (on a build's stderr when a graph's ReduceMean over an
    empty axis is folded)."""
    if all(x.shape[a] for a in axes):
        return np.mean(x, axis=axes)
    return np.full([d for i, d in enumerate(x.shape) if i not in axes], np.nan if x.dtype.kind == "f" else 0)


REDUCTIONS: dict[str, Reduction] = {
    "ReduceMean": Reduction(_mean),
    "ReduceSum": Reduction(lambda x, axes: np.sum(x, axis=axes), NUMERIC),
    "ReduceMax": Reduction(_extreme(np.max, -np.inf), ANY),
    "ReduceMin": Reduction(_extreme(np.min, np.inf), ANY),
    "ReduceProd": Reduction(lambda x, axes: np.prod(x, axis=axes), NUMERIC),
    "ReduceL1": Reduction(lambda x, axes: np.sum(np.abs(x), axis=axes)),
    "ReduceL2": Reduction(lambda x, axes: np.sqrt(np.sum(x * x, axis=axes))),
    "ReduceSumSquare": Reduction(lambda x, axes: np.sum(x * x, axis=axes)),
    "ReduceLogSum": Reduction(lambda x, axes: np.log(np.sum(x, axis=axes))),
    "ReduceLogSumExp": Reduction(_log_sum_exp),
}


def _infer_reduce(op: str, dtypes: tuple[str, ...]):
    def infer(args: InferArgs) -> list[TensorType]:
        dtype = require_dtypes(args, dtypes)
        x = args.types[0]
        axes = reduce_axes(args, op)
        if not axes and args.attrs["noop_with_empty_axes"]:
            return [x]
        return [TensorType(dtype, reduced_shape(x.shape, axes, args.attrs["keepdims"]))]
    return infer


def _reference_axes(xs, attrs) -> tuple[int, ...] | None:
    """The axes as given (attribute or input), None for every axis, () for a no-op."""
    axes = attrs["axes"]
    if len(xs) > 1 and xs[1] is not None:
        axes = tuple(int(a) for a in xs[1].reshape(-1))
    if not axes:
        return () if attrs["noop_with_empty_axes"] else None
    return tuple(a % xs[0].ndim for a in axes)


def _reduce_reference(rule: Reduction):
    def reference(xs, attrs):
        x = xs[0]
        axes = _reference_axes(xs, attrs)
        if axes == ():
            return [x]
        axes = tuple(range(x.ndim)) if axes is None else axes
        wide = x.astype(np.float64) if x.dtype == np.float32 else x
        with np.errstate(all="ignore"):
            y = np.asarray(rule.fn(wide, axes))
        shape = reduced_shape(x.shape, tuple(sorted(axes)), attrs["keepdims"])
        return [y.astype(x.dtype).reshape(shape)]
    return reference


_REDUCE_ATTRS = [Attr("axes", "ints", None), Attr("keepdims", "int", 1, (0, 1)),
                 Attr("noop_with_empty_axes", "int", 0, (0, 1))]

for _name, _rule in REDUCTIONS.items():
    define(_name, inputs=(1, 2), infer=_infer_reduce(_name, _rule.dtypes), reference=_reduce_reference(_rule),
           constant_inputs=[1], attrs=_REDUCE_ATTRS, pattern=Pattern.REDUCTION, prepare=_reduce_facts)


# --- ArgMax, ArgMin --------------------------------------------------------------------------
def _infer_arg(args: InferArgs) -> list[TensorType]:
    require_dtypes(args, NUMERIC)
    x = args.types[0]
    axis = normalize_axis(args.attrs["axis"], x.rank)
    if x.shape[axis] == 0:
        raise OpError(f"cannot take the index of an extreme along axis {axis}, which is empty", attr="axis")
    return [TensorType("int64", reduced_shape(x.shape, (axis,), args.attrs["keepdims"]))]


def _arg_reference(pick):
    def reference(xs, attrs):
        x, axis = xs[0], attrs["axis"] % xs[0].ndim
        if attrs["select_last_index"]:  # the last of equal extremes: search the reversed axis
            y = x.shape[axis] - 1 - pick(np.flip(x, axis), axis=axis)
        else:
            y = pick(x, axis=axis)
        return [np.asarray(y, np.int64).reshape(reduced_shape(x.shape, (axis,), attrs["keepdims"]))]
    return reference


_ARG_ATTRS = [Attr("axis", "int", 0), Attr("keepdims", "int", 1, (0, 1)),
              Attr("select_last_index", "int", 0, (0, 1))]
define("ArgMax", pattern=Pattern.REDUCTION, inputs=1, infer=_infer_arg, prepare=_along_axis_facts,
       reference=_arg_reference(np.argmax), attrs=_ARG_ATTRS)
define("ArgMin", pattern=Pattern.REDUCTION, inputs=1, infer=_infer_arg, prepare=_along_axis_facts,
       reference=_arg_reference(np.argmin), attrs=_ARG_ATTRS)


# --- CumSum ----------------------------------------------------------------------------------
def cumsum_axis(args: InferArgs) -> int:
    """CumSum's axis, from its constant scalar input."""
    axis = constant_ints(args, 1, "CumSum's axis", rank=None)
    if len(axis) != 1:
        raise OpError(f"CumSum's axis must hold one value, got {len(axis)}", input=1)
    return normalize_axis(axis[0], args.types[0].rank)


def _infer_cumsum(args: InferArgs) -> list[TensorType]:
    require_dtypes(args, NUMERIC)
    cumsum_axis(args)
    return [args.types[0]]


def _cumsum_reference(xs, attrs):
    x, axis = xs[0], int(np.asarray(xs[1]).reshape(-1)[0]) % xs[0].ndim
    wide = x.astype(np.float64) if x.dtype == np.float32 else x
    if attrs["reverse"]:
        wide = np.flip(wide, axis)
    y = np.cumsum(wide, axis=axis)
    if attrs["exclusive"]:  # shifted by one: element i sums the elements before i
        y = np.roll(y, 1, axis=axis)
        y[(slice(None),) * axis + (0,)] = 0
    if attrs["reverse"]:
        y = np.flip(y, axis)
    return [y.astype(x.dtype)]


define("CumSum", inputs=2, infer=_infer_cumsum, reference=_cumsum_reference, constant_inputs=[1],
       prepare=_cumsum_facts,
       attrs=[Attr("exclusive", "int", 0, (0, 1)), Attr("reverse", "int", 0, (0, 1))])


# --- TopK --------------------------------------------------------------------------------------
def topk_k(args: InferArgs) -> int:
    """TopK's k: the constant input 1 (opset 10 on) or the attribute (before)."""
    given = constant_ints(args, 1, "TopK's k", rank=None)
    k = given[0] if given is not None and len(given) == 1 else args.attrs["k"]
    if given is not None and len(given) != 1:
        raise OpError(f"TopK's k must hold one value, got {len(given)}", input=1)
    if k is None:
        raise OpError("TopK needs k, as input 1 or attribute 'k'", input=1)
    return k


def _infer_topk(args: InferArgs) -> list[TensorType]:
    dtype = require_dtypes(args, NUMERIC)
    x = args.types[0]
    axis = normalize_axis(args.attrs["axis"], x.rank)
    k = topk_k(args)
    if not 0 <= k <= x.shape[axis]:
        raise OpError(f"TopK's k ({k}) must be between 0 and the size of axis {axis} ({x.shape[axis]})",
                      input=1)
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
    return [TensorType(dtype, shape), TensorType("int64", shape)]


def _topk_reference(xs, attrs):
    x = xs[0]
    axis = attrs["axis"] % x.ndim
    k = int(np.asarray(xs[1]).reshape(-1)[0]) if len(xs) > 1 and xs[1] is not None else attrs["k"]
    # equal values keep their order (the lower index first), as ONNX asks
    key = -x.astype(np.float64) if attrs["largest"] else x
    order = np.take(np.argsort(key, axis=axis, kind="stable"), np.arange(k), axis=axis)
    return [np.take_along_axis(x, order, axis=axis), order.astype(np.int64)]


define("TopK", inputs=(1, 2), outputs=2, infer=_infer_topk, reference=_topk_reference, constant_inputs=[1],
       prepare=_topk_facts,
       attrs=[Attr("axis", "int", -1), Attr("largest", "int", 1, (0, 1)), Attr("sorted", "int", 1, (0, 1)),
              Attr("k", "int", None)])
