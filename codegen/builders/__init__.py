"""Op builders. Importing this package registers every builder."""
from codegen.builders import activations, linear, normalization  # noqa: F401  (registration)
from codegen.builders import attention, einsum, linalg, losses  # noqa: F401  (registration)
from codegen.builders import recurrent, selection, spectral  # noqa: F401  (registration)
from codegen.builders import control_flow, data_dependent, deformable, ml  # noqa: F401  (registration)
from codegen.builders import resampling, training  # noqa: F401  (registration)
from codegen.builders.registry import BUILDERS, Builder, builder

__all__ = ["BUILDERS", "Builder", "builder"]
