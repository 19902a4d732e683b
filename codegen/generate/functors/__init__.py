"""The C++ backend's functors. Importing this package registers them on `CPP`."""
from tinsmith.generate.functors import constants, elementwise, layout, linalg, reduce  # noqa: F401
from tinsmith.generate.functors import logic  # noqa: F401
from tinsmith.generate.functors import indexing  # noqa: F401
from tinsmith.generate.functors import conv, pooling, normalization  # noqa: F401
from tinsmith.generate.functors import pool_indices, sampling  # noqa: F401
from tinsmith.generate.functors import quantized, quantized_softmax, quantized_windows  # noqa: F401
from tinsmith.generate.functors import quantized_activation  # noqa: F401
from tinsmith.generate.functors import quantized_onnx  # noqa: F401
