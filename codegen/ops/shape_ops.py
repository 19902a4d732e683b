"""Build-time primitives: Shape, Size, Constant, ConstantOfShape, Range.

Shapes are static, so these always fold while the graph is expanded (see
tinsmith.expand.GraphBuilder): their outputs become constants and they never reach a
backend. Shape and Size read only their input's type, so they fold even when the input is
computed at run time.

This module also adds the `tensor` attribute kind (Constant's and ConstantOfShape's
`value`), held as a frozen TensorValue so nodes stay comparable and hashable.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ir.graph import DTYPES
from tinsmith.ops.registry import ATTR_KINDS, Attr, InferArgs, OpError, define

# Ops whose outputs are always computed at build time; inputs that are not constants are
# passed to their reference as placeholders of the right shape (only the shape is read).
BUILD_TIME_OPS = frozenset({"Shape", "Size", "Constant", "ConstantOfShape", "Range"})


def storage_dtype(dtype: np.dtype) -> np.dtype | None:
    """The element type Tinsmith keeps data of `dtype` in (float32, int64, ...), None if none fits."""
    dtype = np.dtype(dtype)
    if dtype.name in DTYPES:
        return DTYPES[dtype.name][0]
    if dtype.kind == "f":
        return np.dtype(np.float32)
    if dtype.kind in "iu" or (dtype.kind == "b" and "bool" not in DTYPES):
        return np.dtype(np.int64)
    if dtype.kind == "b":
        return DTYPES["bool"][0]
    return None


@dataclass(frozen=True)
class TensorValue:
    """A tensor attribute: element type, shape and the values in C order."""

    dtype: str
    shape: tuple[int, ...]
    data: tuple[Any, ...]

    @staticmethod
    def of(array: Any) -> "TensorValue":
        """A TensorValue holding `array` in the element type Tinsmith stores it in."""
        a = np.asarray(array)
        target = storage_dtype(a.dtype)
        if target is None:
            raise TypeError("a tensor of numbers")
        a = a.astype(target)
        return TensorValue(target.name, tuple(int(d) for d in a.shape), tuple(a.reshape(-1).tolist()))

    def array(self) -> np.ndarray:
        """The values as a NumPy array."""
        return np.array(self.data, dtype=self.dtype).reshape(self.shape)

    @property
    def type(self) -> TensorType:
        return TensorType(self.dtype, self.shape)

    def __str__(self) -> str:
        return f"{self.type} {list(self.data) if len(self.data) <= 8 else '[...]'}"


def _as_tensor(v: Any) -> TensorValue:
    """An ndarray, a number, a list, or a mapping {value: ..., dtype: ..., shape: ...}."""
    if isinstance(v, TensorValue):
        return v
    if isinstance(v, Mapping):
        if "value" not in v or set(v) - {"value", "dtype", "shape"}:
            raise TypeError("a tensor: {value: [...], dtype: float32 or int64, shape: [...]}")
        try:
            a = np.array(v["value"], dtype=v.get("dtype", "float32"))
            if "shape" in v:
                a = a.reshape([int(d) for d in v["shape"]])
        except (TypeError, ValueError):
            raise TypeError("a tensor: {value: [...], dtype: float32 or int64, shape: [...]}") from None
        return TensorValue.of(a)
    if isinstance(v, bool) or not isinstance(v, (np.ndarray, int, float, list, tuple, np.number)):
        raise TypeError("a tensor")
    try:
        return TensorValue.of(v)
    except ValueError:
        raise TypeError("a tensor") from None


ATTR_KINDS["tensor"] = _as_tensor  # type: ignore[index]  (a registration: one more attribute kind)


# --- Shape and Size: facts about the input's type -------------------------------------------
def _shape_slice(rank: int, attrs: Mapping[str, Any]) -> slice:
    # ONNX clamps start and end into [0, rank] after counting negatives from the back, as
    # Python slicing does.
    return slice(attrs["start"], attrs["end"])


def _infer_shape(args: InferArgs) -> list[TensorType]:
    x = args.types[0]
    return [TensorType("int64", (len(x.shape[_shape_slice(x.rank, args.attrs)]),))]


define("Shape", inputs=1, infer=_infer_shape, attrs=[Attr("start", "int", 0), Attr("end", "int", None)],
       reference=lambda xs, attrs: [np.array(xs[0].shape[_shape_slice(xs[0].ndim, attrs)], np.int64)])
define("Size", inputs=1, infer=lambda args: [TensorType("int64", ())],
       reference=lambda xs, attrs: [np.array(xs[0].size, np.int64)])


# --- Constant ---------------------------------------------------------------------------------
_CONSTANT_FORMS = {  # attribute -> how its value becomes an array
    "value": lambda v: v.array(),
    "value_float": lambda v: np.array(v, np.float32),
    "value_floats": lambda v: np.array(v, np.float32).reshape(len(v)),
    "value_int": lambda v: np.array(v, np.int64),
    "value_ints": lambda v: np.array(v, np.int64).reshape(len(v)),
}


def _constant_value(attrs: Mapping[str, Any]) -> np.ndarray:
    given = [k for k in _CONSTANT_FORMS if attrs.get(k) is not None]
    if len(given) != 1:
        raise OpError(f"Constant needs exactly one of {', '.join(_CONSTANT_FORMS)}, got "
                      f"{', '.join(given) or 'none'}", attr=given[1] if len(given) > 1 else None)
    return _CONSTANT_FORMS[given[0]](attrs[given[0]])


def _infer_constant(args: InferArgs) -> list[TensorType]:
    value = _constant_value(args.attrs)
    return [TensorType(value.dtype.name, tuple(value.shape))]


define("Constant", inputs=0, infer=_infer_constant,
       attrs=[Attr("value", "tensor", None), Attr("value_float", "float", None),
              Attr("value_floats", "floats", None), Attr("value_int", "int", None),
              Attr("value_ints", "ints", None)],
       reference=lambda xs, attrs: [_constant_value(attrs)])


# --- ConstantOfShape ------------------------------------------------------------------------
def _fill_value(attrs: Mapping[str, Any]) -> np.ndarray:
    value = attrs["value"]
    return np.zeros((), np.float32) if value is None else value.array().reshape(-1)[0]


def _target_shape(t: TensorType, data: np.ndarray | None) -> tuple[int, ...]:
    if t.dtype != "int64" or t.rank != 1 or data is None:
        raise OpError(f"ConstantOfShape's input must be a 1-D int64 constant, got {t}", input=0)
    shape = tuple(int(d) for d in data)
    if any(d < 0 for d in shape):
        raise OpError(f"ConstantOfShape's shape {list(shape)} has a negative dimension", input=0)
    return shape


def _infer_constant_of_shape(args: InferArgs) -> list[TensorType]:
    value = args.attrs["value"]
    if value is not None and math.prod(value.shape) != 1:
        raise OpError(f"ConstantOfShape's value must hold one element, not {math.prod(value.shape)}",
                      attr="value")
    fill = _fill_value(args.attrs)
    return [TensorType(fill.dtype.name, _target_shape(args.types[0], args.values[0]))]


define("ConstantOfShape", inputs=1, infer=_infer_constant_of_shape, constant_inputs=[0],
       attrs=[Attr("value", "tensor", None)],
       reference=lambda xs, attrs: [np.full(tuple(int(d) for d in xs[0]), _fill_value(attrs))])


# --- Range --------------------------------------------------------------------------------------
def _range_count(start: Any, limit: Any, delta: Any) -> int:
    if delta == 0:
        raise OpError("Range's delta is 0", input=2)
    return max(int(math.ceil((limit - start) / delta)), 0)


def _infer_range(args: InferArgs) -> list[TensorType]:
    for i, (t, what) in enumerate(zip(args.types, ("start", "limit", "delta"))):
        if t.size != 1 or args.values[i] is None:  # (a one-element 1-D tensor is taken too, as ONNX Runtime does)
            raise OpError(f"Range's {what} must be a scalar constant, got {t}", input=i)
        if t.dtype != args.types[0].dtype:
            raise OpError(f"Range's {what} has element type {t.dtype} but start has "
                          f"{args.types[0].dtype}", input=i)
    start, limit, delta = (v.item() for v in args.values)
    return [TensorType(args.types[0].dtype, (_range_count(start, limit, delta),))]


def _range_reference(xs, attrs):
    start, limit, delta = (x.item() for x in xs)
    # ONNX defines element i as start + i * delta (not a running sum).
    n = _range_count(start, limit, delta)
    return [(start + np.arange(n, dtype=np.float64 if xs[0].dtype.kind == "f" else np.int64) * delta)
            .astype(xs[0].dtype)]


define("Range", inputs=3, infer=_infer_range, constant_inputs=[0, 1, 2], reference=_range_reference)
