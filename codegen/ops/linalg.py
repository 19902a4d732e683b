"""Matrix products: MatMul (NumPy semantics, batched) and Gemm."""
from __future__ import annotations

import math

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ops.common import FLOAT, broadcast_shapes, require_dtype, require_dtypes
from tinsmith.ops.registry import Attr, InferArgs, OpError, define


def matmul_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """Output shape of numpy.matmul, or OpError when the inner dimensions differ."""
    if not a or not b:
        raise OpError("MatMul inputs must have rank 1 or more")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise OpError(f"MatMul inner dimensions differ: {list(a)} x {list(b)} "
                      f"({a2[-1]} != {b2[-2]})")
    batch = broadcast_shapes([a2[:-2], b2[:-2]])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _infer_matmul(args: InferArgs) -> list[TensorType]:
    dtype = require_dtypes(args, FLOAT, [0, 1])
    a, b = args.types
    return [TensorType(dtype, matmul_shapes(a.shape, b.shape))]


def _matmul_macs(args: InferArgs, outs) -> int:
    return outs[0].size * args.types[0].shape[-1]


define("MatMul", inputs=2, infer=_infer_matmul, macs=_matmul_macs,
       reference=lambda xs, attrs: [np.matmul(xs[0].astype(np.float64), xs[1]).astype(xs[0].dtype)])


def _gemm_dims(args: InferArgs) -> tuple[int, int, int]:
    a, b = args.types[0], args.types[1]
    for i, t in enumerate((a, b)):
        if t.rank != 2:
            raise OpError(f"Gemm input {i} must have rank 2, got {list(t.shape)}", input=i)
    m, k = a.shape[::-1] if args.attrs["transA"] else a.shape
    kb, n = b.shape[::-1] if args.attrs["transB"] else b.shape
    if k != kb:
        raise OpError(f"Gemm inner dimensions differ: A is {list(a.shape)} (transA="
                      f"{args.attrs['transA']}), B is {list(b.shape)} (transB={args.attrs['transB']})")
    return m, k, n


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """True if `shape` broadcasts unidirectionally to `target` (ONNX Gemm's C)."""
    try:
        return broadcast_shapes([shape, target]) == target
    except OpError:
        return False


def _infer_gemm(args: InferArgs) -> list[TensorType]:
    require_dtype(args)
    m, _, n = _gemm_dims(args)
    c = args.types[2] if len(args.types) > 2 else None
    if c is not None and not _broadcasts_to(c.shape, (m, n)):
        raise OpError(f"Gemm bias C of shape {list(c.shape)} does not broadcast to [{m}, {n}]", input=2)
    return [TensorType("float32", (m, n))]


def _gemm_reference(xs, attrs):
    a, b = xs[0], xs[1]
    a = a.T if attrs["transA"] else a
    b = b.T if attrs["transB"] else b
    y = attrs["alpha"] * (a.astype(np.float64) @ b.astype(np.float64))
    if len(xs) > 2 and xs[2] is not None:
        y = y + attrs["beta"] * xs[2]
    return [y.astype(np.float32)]


define("Gemm", inputs=(2, 3), infer=_infer_gemm, reference=_gemm_reference,
       attrs=[Attr("alpha", "float", 1.0), Attr("beta", "float", 1.0),
              Attr("transA", "int", 0, (0, 1)), Attr("transB", "int", 0, (0, 1))],
       macs=lambda args, outs: math.prod(_gemm_dims(args)),
       prepare=lambda args, outs: dict(zip(("m", "k", "n"), _gemm_dims(args))))
