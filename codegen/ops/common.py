"""Shape rules shared by many primitives."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ir.graph import DTYPES, FLOAT_DTYPES, INTEGER_DTYPES, NARROW_DTYPES
from tinsmith.ops.registry import ATTR_KINDS, InferArgs, OpError


def broadcast_shapes(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """NumPy (ONNX multidirectional) broadcasting of shapes, or OpError naming both shapes."""
    rank = max(len(s) for s in shapes)
    result = []
    for axis in range(rank):
        dims = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            shown = " and ".join(str(list(s)) for s in shapes)
            raise OpError(f"shapes {shown} cannot be broadcast together")
        result.append(dims.pop() if dims else 1)
    return tuple(result)


def normalize_axis(axis: int, rank: int, attr: str = "axis") -> int:
    """Map a possibly negative axis into 0..rank-1, or OpError naming the valid range."""
    if not -rank <= axis < rank:
        raise OpError(f"{attr} {axis} is out of range for a tensor of rank {rank} "
                      f"(expected {-rank}..{rank - 1})", attr=attr)
    return axis % rank


def require_dtype(args: InferArgs, dtype: str = "float32", inputs: Sequence[int] | None = None) -> None:
    """All given (or all present) inputs must have `dtype`."""
    for i, t in enumerate(args.types):
        if t is None or (inputs is not None and i not in inputs):
            continue
        if t.dtype != dtype:
            raise OpError(f"input {i} has element type {t.dtype}, expected {dtype}", input=i)


def same_dtype(args: InferArgs) -> str:
    """The common element type of all present inputs (a mismatch is an error)."""
    present = [(i, t) for i, t in enumerate(args.types) if t is not None]
    first = present[0][1].dtype
    for i, t in present[1:]:
        if t.dtype != first:
            raise OpError(f"input {i} has element type {t.dtype} but input 0 has {first}", input=i)
    return first


def float_like_first(args: InferArgs) -> list[TensorType]:
    """Output has the type of input 0, which must be float32."""
    require_dtype(args, inputs=[0])
    return [args.types[0]]


# Element-type families an op accepts (ONNX's type constraints, cut down to Tinsmith's DTYPES).
FLOAT = FLOAT_DTYPES
INTEGER = INTEGER_DTYPES
NUMERIC = FLOAT + INTEGER
ANY = NUMERIC + ("bool",)
CASTABLE = ANY + NARROW_DTYPES  # what Cast converts between (and copies move)
INDICES = ("int64", "int32")  # ONNX's Tind: what index operands may be


def require_dtypes(args: InferArgs, allowed: Sequence[str], inputs: Sequence[int] = (0,)) -> str:
    """Input `inputs[0]` has one of `allowed` types and the other listed inputs the same; return it."""
    first = args.types[inputs[0]]
    if first.dtype not in allowed:
        raise OpError(f"input {inputs[0]} has element type {first.dtype}, expected "
                      f"{' or '.join(allowed)}", input=inputs[0])
    for i in inputs[1:]:
        if i < len(args.types) and args.types[i] is not None and args.types[i].dtype != first.dtype:
            raise OpError(f"input {i} has element type {args.types[i].dtype}, expected {first.dtype}",
                          input=i)
    return first.dtype


def constant_ints(args: InferArgs, i: int, what: str, rank: int | None = 1) -> tuple[int, ...] | None:
    """The integer data of constant input `i` (None when omitted), checked to be an integer constant
    of rank `rank` (0 or 1 if None)."""
    if i >= len(args.types) or args.types[i] is None:
        return None
    t, data = args.types[i], args.values[i]
    ranks = (0, 1) if rank is None else (rank,)
    if t.dtype not in INDICES or t.rank not in ranks or data is None:
        shape = {0: "a scalar", 1: "a 1-D"}[ranks[0]] if len(ranks) == 1 else "a scalar or 1-D"
        raise OpError(f"{what} must be {shape} int64 constant, got {t}", input=i)
    return tuple(int(v) for v in np.asarray(data).reshape(-1))


# ONNX TensorProto element type numbers and the Tinsmith type of each.
ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
               9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16",
               17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2", 20: "float8_e5m2fnuz",
               21: "uint4", 22: "int4", 23: "float4_e2m1fn", 24: "float8_e8m0fnu", 25: "uint2", 26: "int2"}
ONNX_DTYPES = {k: v for k, v in ONNX_DTYPES.items() if v in DTYPES}


def _as_dtype(v) -> str:
    """An element type, by Tinsmith name (float32) or ONNX number (1)."""
    if isinstance(v, str) and v in DTYPES:
        return v
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and int(v) in ONNX_DTYPES:
        return ONNX_DTYPES[int(v)]
    if isinstance(v, (int, np.integer)) and int(v) == 8:
        raise TypeError("a numeric or boolean element type (strings, ONNX type 8, are not supported)")
    raise TypeError(f"an element type Tinsmith supports ({', '.join(DTYPES)}), or the number of an ONNX "
                    f"numeric type")


ATTR_KINDS["dtype"] = _as_dtype  # type: ignore[index]  (a registration: one more attribute kind)
