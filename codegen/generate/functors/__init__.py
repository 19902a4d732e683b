"""The C++ backend's functors. Importing this package registers them on `CPP`."""
from tinsmith.generate.functors import constants, elementwise, layout, matrix, reduce  # noqa: F401
from tinsmith.generate.functors import logic  # noqa: F401
from tinsmith.generate.functors import indexing  # noqa: F401
from tinsmith.generate.functors import conv_portable, pooling, normalization  # noqa: F401
from tinsmith.generate.functors import pool_indices, sampling  # noqa: F401
from tinsmith.generate.functors import quantized, quantized_softmax, quantized_windows  # noqa: F401
from tinsmith.generate.functors import quantized_activation  # noqa: F401
from tinsmith.generate.functors import quantized_onnx, quantized_scalar  # noqa: F401
from tinsmith.generate.functors import tflm_signal  # noqa: F401
from tinsmith.generate.functors import quantized_int16_tables, quantized_fixed_point  # noqa: F401
