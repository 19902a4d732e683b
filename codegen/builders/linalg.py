"""Linear algebra composites: ONNX Det of small matrices."""
from __future__ import annotations

import itertools

import numpy as np

from tinsmith.builders.registry import builder
from tinsmith.ops.registry import OpError

MAX_DET_SIZE = 5  # 120 products of 5 terms: beyond that, the Leibniz formula costs too much


@builder("Det", inputs=1)
def det(g, inputs, attrs):
    """Determinants of the [..., n, n] matrices by the Leibniz formula: the sum over the n!
    permutations of the signed product of one element per row, each product a Gather of
    constant positions and a ReduceProd; for n up to 5."""
    (x,) = inputs
    shape = list(g.type_of(x).shape)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise OpError(f"Det input has shape {shape}; expected [..., n, n]", input=0)
    n = shape[-1]
    if n > MAX_DET_SIZE:
        raise OpError(f"Det of {n}x{n} matrices is not supported (at most {MAX_DET_SIZE}x{MAX_DET_SIZE})", input=0)
    perms = list(itertools.permutations(range(n)))
    positions = np.array([[row * n + col for row, col in enumerate(p)] for p in perms], np.int64)
    signs = np.array([np.linalg.det(np.eye(n)[list(p)]) for p in perms]).round().astype(np.float32)
    flat = g.add("Reshape", [x, g.constant(np.array(shape[:-2] + [n * n], np.int64), "shape")])[0]
    picked = g.add("Gather", [flat, g.constant(positions, "positions")], {"axis": len(shape) - 2})[0]
    products = g.add("ReduceProd", [picked], {"axes": [-1], "keepdims": 0})[0]
    signed = g.add("Mul", [products, g.constant(signs, "signs")])[0]
    return g.add("ReduceSum", [signed, g.constant(np.array([-1], np.int64), "axes")], {"keepdims": 0})
