"""Primitive declarations. Importing this package registers every primitive."""
from codegen.ops import elementwise, layout, linalg, reduce  # noqa: F401  (registration)
from codegen.ops import shape_ops  # noqa: F401  (registration)
from codegen.ops import logic  # noqa: F401  (registration)
from codegen.ops import indexing  # noqa: F401  (registration)
from codegen.ops import conv, pooling, normalization  # noqa: F401  (registration)
from codegen.ops import quantized  # noqa: F401  (registration)
from codegen.ops import quantized_onnx  # noqa: F401  (registration)
from codegen.ops import sampling, signal  # noqa: F401  (registration)
from codegen.ops import pool_indices  # noqa: F401  (registration; after pooling)
from codegen.ops import channels_last  # noqa: F401  (registration; after conv and pooling)
from codegen.ops.registry import PRIMITIVES, REQUIRED, Attr, InferArgs, OpError, Primitive, check_attrs

__all__ = ["PRIMITIVES", "REQUIRED", "Attr", "InferArgs", "OpError", "Primitive", "check_attrs"]
