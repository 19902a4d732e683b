"""Shape rules shared by many primitives."""
from __future__ import annotations

from typing import Sequence

from codegen.ir import TensorType
from codegen.ops.registry import InferArgs, OpError


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
