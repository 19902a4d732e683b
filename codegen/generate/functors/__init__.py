"""The C++ backend's functors. Importing this package registers them on `CPP`."""
from codegen.generate.functors import constants, elementwise, layout, linalg, reduce  # noqa: F401
