"""Elementwise primitives: each a row in a table, with its NumPy reference."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from codegen.ir import TensorType
from codegen.ops.common import broadcast_shapes, require_dtype
from codegen.ops.registry import InferArgs, define

_erf = np.vectorize(math.erf, otypes=[np.float64])

UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Relu": lambda x: np.maximum(x, 0),
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "Tanh": np.tanh,
    "Exp": np.exp,
    "Erf": lambda x: _erf(x),
    "Sqrt": np.sqrt,
    "Identity": lambda x: x,
}

BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
    "Pow": np.power,
}


def _unary_reference(fn):
    def reference(xs, attrs):
        x = xs[0]
        return [np.asarray(fn(x.astype(np.float64) if x.dtype == np.float32 else x)).astype(x.dtype)]
    return reference


def _infer_unary(args: InferArgs) -> list[TensorType]:
    require_dtype(args)
    return [args.types[0]]


def _binary_reference(fn):
    def reference(xs, attrs):
        a, b = xs
        return [np.asarray(fn(a, b)).astype(a.dtype)]
    return reference


def _infer_binary(args: InferArgs) -> list[TensorType]:
    require_dtype(args)
    a, b = args.types
    return [TensorType(a.dtype, broadcast_shapes([a.shape, b.shape]))]


def _infer_identity(args: InferArgs) -> list[TensorType]:
    return [args.types[0]]  # a copy: any element type (builders copy int64 constants too)


for _name, _fn in UNARY.items():
    define(_name, inputs=1, infer=_infer_identity if _name == "Identity" else _infer_unary,
           reference=_unary_reference(_fn))
for _name, _fn in BINARY.items():
    define(_name, inputs=2, infer=_infer_binary, reference=_binary_reference(_fn))
