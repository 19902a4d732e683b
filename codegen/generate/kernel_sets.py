"""The kernel sets beyond the portable one, one per instruction-set feature a target may have.

Each states what it needs of the target (`requires`, over the target file's capabilities) and the
intrinsics its kernels may call, spelled for the renderer; the functor modules register their
kernels on these (codegen/generate/functors/), and a target's backend draws on several of them
(codegen/generate/backends.py). Adding a core's vector unit is one more set here, its
micro-kernels in a functor module, and its name in the target file's `kernels` list.
"""
from __future__ import annotations

from tinsmith.generate.backend import CPP, Backend

from typing import Callable

from tinsmith.targets import Capabilities

__all__ = ["CPP", "VECTORS", "FPU_REGISTERS", "ARM_DSP", "KERNEL_SETS", "micro_kernel"]

# GCC vector extensions, as wide as the target's simd_bits (host: SSE2's 128 bits; host-native:
# what -march=native enables).
VECTORS = Backend("vectors", requires=lambda caps: caps.simd_bits > 0, needs="vector registers (simd_bits > 0)")

# Scalar float kernels register-blocked for a 32-register FPU (Cortex-M4F/M7: FPv4/FPv5).
FPU_REGISTERS = Backend("fpu-registers", requires=lambda caps: caps.fpu != "none" and caps.float_registers >= 32,
                        needs="an FPU with 32 float registers")

# The int8 kernels' ACLE intrinsics (codegen/generate/functors/quantized_dsp.py calls them).
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
# What the DSP intrinsics need: ACLE's header, and an unaligned 32-bit read of four int8 values
# (one LDR on the cores with the DSP extension).
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

# The Armv7E-M DSP extension (Cortex-M4, M7, M33, M55): dual 16-bit multiply-accumulates on
# packed lanes, saturation in one instruction.
ARM_DSP = Backend("arm-dsp", requires=lambda caps: caps.dsp, needs="the Arm DSP extension (dsp: true)",
                  intrinsics=DSP_INTRINSICS, helpers=DSP_HELPERS)

KERNEL_SETS = {s.name: s for s in (CPP, VECTORS, FPU_REGISTERS, ARM_DSP)}


def micro_kernel(caps: Capabilities, name: str) -> Callable | None:
    """The micro-kernel `name` of the first kernel set the target draws on (caps.kernels, in
    order) that spells it and whose capabilities the target has; None: the loop nest's portable
    form. A portable loop nest calls target instructions only through this."""
    for set_name in caps.kernels:
        kernel_set = KERNEL_SETS.get(set_name)
        if kernel_set is not None and name in kernel_set.micro and kernel_set.requires(caps):
            return kernel_set.micro[name]
    return None
