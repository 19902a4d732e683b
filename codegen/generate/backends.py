"""A target's backend: the kernel sets it draws on, in order, and the renderer that spells them.

cpp       the portable kernel set alone (scalar C++)
host      avx512-int8 (where the target has 512-bit vectors), vectors, then cpp; the GCC-vector
          renderer
cortex-m  arm-dsp, fpu-registers, then cpp; compare-and-select min/max, big kernels kept out of
          line, the DSP intrinsics

A target file may name its kernel sets itself (`capabilities: kernels: [...]`); otherwise its
`backend` gives the list above. Importing this module registers every built-in kernel.
"""
from __future__ import annotations

from dataclasses import replace

from tinsmith.generate import functors  # noqa: F401  (registers the portable kernels)
from tinsmith.generate.backend import CPP, Backend
from tinsmith.generate.functors import cortex_m, fast, host_int8, quantized_dsp  # noqa: F401  (register theirs)
from tinsmith.generate.functors import quantized_helium  # noqa: F401  (registers the Helium kernels)
from tinsmith.generate.functors import quantized_registers  # noqa: F401  (registers the 32-register int8 kernels)
from tinsmith.generate.functors import quantized_avx512  # noqa: F401  (registers the AVX-512 int8 kernels)
from tinsmith.generate.kernel_sets import KERNEL_SETS
from tinsmith.generate.render import Renderer
from tinsmith.targets import Capabilities, Target, TargetError

# backend name -> (the kernel sets it draws on by default, how its renderer spells the loop IR)
BACKEND_KINDS = {
    "cpp": (("cpp",), dict()),
    "host": (("avx512-int8", "vectors", "cpp"), dict(inline_minmax=True)),
    "cortex-m": (("arm-dsp", "fpu-registers", "cpp"), dict(inline_minmax=True, noinline_macs=0)),
}


def make_backend(kind: str, kernel_sets: tuple[str, ...] = ()) -> Backend:
    """The backend of `kind` drawing on `kernel_sets` (default: the kind's own list)."""
    default_sets, style = BACKEND_KINDS[kind]
    if kind == "cpp" and not kernel_sets:
        return CPP
    backend = Backend(kind, parents=tuple(KERNEL_SETS[name] for name in (kernel_sets or default_sets)))
    # the renderer spells the intrinsics of exactly the sets the backend draws on
    backend.renderer = Renderer(kind, intrinsics=backend.all_intrinsics(), helpers=backend.all_helpers(), **style)
    return backend


HOST = make_backend("host")
CORTEX_M = make_backend("cortex-m")
BACKENDS = {"cpp": CPP, "host": HOST, "cortex-m": CORTEX_M}


def backend_for(target: Target) -> tuple[Backend, Capabilities]:
    """The backend a target's capabilities name, drawing on the kernel sets it lists, and the
    capabilities with that list filled in (micro-kernels are looked up along it)."""
    caps = target.capabilities
    if not caps.kernels:
        backend = BACKENDS[caps.backend]
        return backend, replace(caps, kernels=tuple(backend.chain()[1:]))
    unknown = [name for name in caps.kernels if name not in KERNEL_SETS]
    if unknown:
        raise TargetError(caps.kernels_at, f"'kernels' names an unknown kernel set '{unknown[0]}'",
                          f"the kernel sets are {', '.join(KERNEL_SETS)}")
    return make_backend(caps.backend, caps.kernels), caps
