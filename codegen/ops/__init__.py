"""Primitive declarations. Importing this package registers every primitive."""
from tinsmith.ops import elementwise, layout, linalg, reduce  # noqa: F401  (registration)
from tinsmith.ops import shape_ops  # noqa: F401  (registration)
from tinsmith.ops import logic  # noqa: F401  (registration)
from tinsmith.ops import indexing  # noqa: F401  (registration)
from tinsmith.ops import conv, pooling, normalization  # noqa: F401  (registration)
from tinsmith.ops import quantized  # noqa: F401  (registration)
from tinsmith.ops import quantized_onnx  # noqa: F401  (registration)
from tinsmith.ops import quantized_recurrent  # noqa: F401  (registration)
from tinsmith.ops import quantized_int16  # noqa: F401  (registration)
from tinsmith.ops import quantized_fixed_point  # noqa: F401  (registration)
from tinsmith.ops import sampling, signal, tflm_signal  # noqa: F401  (registration)
from tinsmith.ops import pool_indices  # noqa: F401  (registration; after pooling)
from tinsmith.ops import channels_last  # noqa: F401  (registration; after conv and pooling)
from tinsmith.ops.registry import PRIMITIVES, REQUIRED, Attr, InferArgs, OpError, Primitive, check_attrs

__all__ = ["PRIMITIVES", "REQUIRED", "Attr", "InferArgs", "OpError", "Primitive", "check_attrs"]
