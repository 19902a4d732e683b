"""Primitive declarations. Importing this package registers every primitive."""
from codegen.ops import elementwise, layout, linalg, reduce  # noqa: F401  (registration)
from codegen.ops.registry import PRIMITIVES, REQUIRED, Attr, InferArgs, OpError, Primitive, check_attrs

__all__ = ["PRIMITIVES", "REQUIRED", "Attr", "InferArgs", "OpError", "Primitive", "check_attrs"]
