"""Op builders. Importing this package registers every builder."""
from tinsmith.builders import activations, linear, normalization  # noqa: F401  (registration)
from tinsmith.builders import attention, einsum, linalg, losses  # noqa: F401  (registration)
from tinsmith.builders import recurrent, selection, spectral  # noqa: F401  (registration)
from tinsmith.builders import control_flow, data_dependent, deformable, ml  # noqa: F401  (registration)
from tinsmith.builders import resampling, training  # noqa: F401  (registration)
from tinsmith.builders import tflite_control  # noqa: F401  (registration; after control_flow)
from tinsmith.builders.registry import BUILDERS, Builder, builder

__all__ = ["BUILDERS", "Builder", "builder"]
