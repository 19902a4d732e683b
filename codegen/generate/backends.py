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

# the int8 kernels' ACLE intrinsics (codegen/generate/functors/quantized_dsp.py spells them)
DSP_INTRINSICS = {
    "read_i8x4": "read_i8x4(&{0})",
    "sxtb16": "static_cast<std::int32_t>(__sxtb16({0}))",
    "sxtab16": "static_cast<std::int32_t>(__sxtab16({0}, {1}))",
    "smlad": "static_cast<std::int32_t>(__smlad({0}, {1}, {2}))",
    "smlabb": "static_cast<std::int32_t>(__smlabb({0}, {1}, {2}))",
    "smlatt": "static_cast<std::int32_t>(__smlatt({0}, {1}, {2}))",
    "ssat8": "static_cast<std::int32_t>(__ssat({0}, 8))",
    "ror8": "static_cast<std::int32_t>((static_cast<std::uint32_t>({0}) >> 8) | "
            "(static_cast<std::uint32_t>({0}) << 24))",
    "sxtb16_ror8": "sxtb16_ror8({0})",
    "sxtab16_ror8": "sxtab16_ror8({0}, {1})",
}
# what the DSP intrinsics need: ACLE's header, and an unaligned 32-bit read of four int8 values
# (one LDR on the cores with the DSP extension)
DSP_HELPERS = ("#include <arm_acle.h>",
               # the int8 kernels' blocked SMLAD loops keep a dozen values live; -Os's register
               # allocation spills them inside the loop, -O2's does not (measured: the kernels that
               # follow are the int8 ones)
               '#pragma GCC optimize ("O2", "no-schedule-insns")',
               "inline std::int32_t read_i8x4(const std::int8_t* p) noexcept "
               "{ std::int32_t w; std::memcpy(&w, p, 4); return w; }",
               # SXTB16 / SXTAB16 of bytes 1 and 3: the rotate is the instruction's operand, which
               # GCC's intrinsics (opaque builtins) cannot take, so it would cost a MOV of its own
               "inline std::int32_t sxtb16_ror8(std::int32_t x) noexcept "
               "{ std::int32_t r; __asm__(\"sxtb16 %0, %1, ror #8\" : \"=r\"(r) : \"r\"(x)); return r; }",
               "inline std::int32_t sxtab16_ror8(std::int32_t a, std::int32_t x) noexcept "
               "{ std::int32_t r; __asm__(\"sxtab16 %0, %1, %2, ror #8\" : \"=r\"(r) : \"r\"(a), \"r\"(x)); return r; }")

HOST = Backend("host", parent=CPP, renderer=Renderer("host", inline_minmax=True))
CORTEX_M = Backend("cortex-m", parent=CPP, renderer=Renderer("cortex-m", inline_minmax=True, noinline_macs=0,
                                                              intrinsics=DSP_INTRINSICS, helpers=DSP_HELPERS))
BACKENDS = {"cpp": CPP, "host": HOST, "cortex-m": CORTEX_M}

from codegen.generate.functors import fast  # noqa: E402,F401  (registers the overrides)
from codegen.generate.functors import cortex_m  # noqa: E402,F401  (the cortex-m backend's float kernels)
from codegen.generate.functors import quantized_dsp  # noqa: E402,F401  (the int8 DSP kernels)
from codegen.generate.functors import host_int8  # noqa: E402,F401  (the host's int8 kernels)


def backend_for(target: Target) -> tuple[Backend, Capabilities]:
    """The backend a target's capabilities name, with those capabilities."""
    return BACKENDS[target.capabilities.backend], target.capabilities
