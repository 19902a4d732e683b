"""The built-in backends and how a target chooses one.

cpp       portable scalar C++ (the root: every primitive has a functor here)
host      cpp plus vector kernels in GCC vector extensions, as wide as the target's simd_bits
cortex-m  cpp plus kernels register-blocked for the FPv4/FPv5 register file

Importing codegen.generate.functors registers the cpp functors, codegen.generate.functors.fast the
overrides of host, codegen.generate.functors.cortex_m those of cortex-m.
"""
from __future__ import annotations

from codegen.generate.backend import CPP, Backend
from codegen.generate.render import Renderer
from codegen.targets import Capabilities, Target

HOST = Backend("host", parent=CPP, renderer=Renderer("host", inline_minmax=True))
CORTEX_M = Backend("cortex-m", parent=CPP, renderer=Renderer("cortex-m", inline_minmax=True, noinline_macs=0))
BACKENDS = {"cpp": CPP, "host": HOST, "cortex-m": CORTEX_M}

from codegen.generate.functors import fast  # noqa: E402,F401  (registers the overrides)
from codegen.generate.functors import cortex_m  # noqa: E402,F401  (the cortex-m backend's kernels)


def backend_for(target: Target) -> tuple[Backend, Capabilities]:
    """The backend a target's capabilities name, with those capabilities."""
    return BACKENDS[target.capabilities.backend], target.capabilities
