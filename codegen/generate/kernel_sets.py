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

__all__ = ["CPP", "VECTORS", "AVX512_INT8", "FPU_REGISTERS", "ARM_DSP", "HELIUM", "INT_REGISTERS", "KERNEL_SETS",
           "micro_kernel"]

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
    "ssat16": "static_cast<std::int32_t>(__ssat({0}, 16))",
    "ror8": "static_cast<std::int32_t>((static_cast<std::uint32_t>({0}) >> 8) | "
            "(static_cast<std::uint32_t>({0}) << 24))",
    "sxtb16_ror8": "sxtb16_ror8({0})",
    "sxtab16_ror8": "sxtab16_ror8({0}, {1})",
    # 16x8 kernels: two int16 values per word, re-paired by PKHBT / PKHTB; 64-bit dual MACs
    "read_i16x2": "read_i16x2(&{0})",
    "pkhbt": "pkhbt16({0}, {1})",
    "pkhtb": "pkhtb16({0}, {1})",
    "smlald": "static_cast<std::int64_t>(__smlald({0}, {1}, {2}))",
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
               "{ std::int32_t r; __asm__(\"sxtab16 %0, %1, %2, ror #8\" : \"=r\"(r) : \"r\"(a), \"r\"(x)); return r; }",
               # two int16 values in one 32-bit read (one LDR), and the halves of two such words
               # re-paired: PKHBT takes a's bottom and b's bottom (as the top), PKHTB a's top and
               # b's top (as the bottom), so (x0, x1), (x2, x3) become (x0, x2) and (x1, x3), the
               # lanes SXTB16 gives a word of four int8 weights
               "inline std::int32_t read_i16x2(const std::int16_t* p) noexcept "
               "{ std::int32_t w; std::memcpy(&w, p, 4); return w; }",
               "inline std::int32_t pkhbt16(std::int32_t a, std::int32_t b) noexcept "
               "{ std::int32_t r; __asm__(\"pkhbt %0, %1, %2, lsl #16\" : \"=r\"(r) : \"r\"(a), \"r\"(b)); return r; }",
               "inline std::int32_t pkhtb16(std::int32_t a, std::int32_t b) noexcept "
               "{ std::int32_t r; __asm__(\"pkhtb %0, %1, %2, asr #16\" : \"=r\"(r) : \"r\"(a), \"r\"(b)); return r; }")

# The Armv7E-M DSP extension (Cortex-M4, M7, M33, M55): dual 16-bit multiply-accumulates on
# packed lanes, saturation in one instruction.
ARM_DSP = Backend("arm-dsp", requires=lambda caps: caps.dsp, needs="the Arm DSP extension (dsp: true)",
                  intrinsics=DSP_INTRINSICS, helpers=DSP_HELPERS)

# The Helium (M-profile vector extension, MVE) int8 kernels' intrinsics: arm_mve.h's, with -mcpu=
# cortex-m55 (codegen/generate/functors/quantized_helium.py calls them). Sixteen int8 lanes per
# Q register; VMLADAVA adds the sixteen products of two of them to a general register.
HELIUM_INTRINSICS = {
    "vmladava": "vmladavaq_s8({0}, {1}, {2})",
    # the last, partial step of a dot product: lanes past `n` read as zero (a tail predicate)
    "vldrb_tail": "vldrbq_z_s8(&{0}, vctp8q({1}))",
    # four channels' sums (plus their biases) requantized to int8 lanes, TFLite's arithmetic:
    # per-channel multipliers and shifts (any sign, or right shifts only), or one of each
    "requantize_x4_channels": "mve_requantize_x4({0}, {1}, {2}, {3}, &{4}, mve_channels(&{5}), "
                              "mve_left_shift(&{6}), mve_right_shift(&{6}), true, {7}, {8}, {9})",
    "requantize_x4_channels_right": "mve_requantize_x4({0}, {1}, {2}, {3}, &{4}, mve_channels(&{5}), "
                                    "vdupq_n_s32(0), mve_channels(&{6}), false, {7}, {8}, {9})",
    "requantize_x4_tensor": "mve_requantize_x4({0}, {1}, {2}, {3}, &{4}, vdupq_n_s32({5}), vdupq_n_s32({6}), "
                            "vdupq_n_s32({7}), {6} != 0, {8}, {9}, {10})",
    # a depthwise convolution's four channels as int32 lanes: the biases, one tap's products
    # (x - zero point) * w added lane by lane (VMUL, VADD), the sums requantized
    "lanes_x4": "mve_lanes_x4(&{0})",
    "tap_x4": "mve_tap_x4({0}, &{1}, &{2}, {3})",
    "requantize_lanes_x4": "mve_requantize_lanes_x4({0}, mve_channels(&{1}), mve_left_shift(&{2}), "
                           "mve_right_shift(&{2}), true, {3}, {4}, {5})",
    "requantize_lanes_x4_right": "mve_requantize_lanes_x4({0}, mve_channels(&{1}), vdupq_n_s32(0), "
                                 "mve_channels(&{2}), false, {3}, {4}, {5})",
    "requantize_lanes_x4_tensor": "mve_requantize_lanes_x4({0}, vdupq_n_s32({1}), vdupq_n_s32({2}), "
                                  "vdupq_n_s32({3}), {2} != 0, {4}, {5}, {6})",
    # eight channels as int16 lanes: (x - zero point) and w widened by the load, their products
    # widened again into even- and odd-channel int32 sums (VMULLB, VMULLT)
    "x_x8": "vsubq_n_s16(vldrbq_s16(&{0}), {1})",
    "w_x8": "vldrbq_s16(&{0})",
    "even_x8": "mve_add_products_bottom({0}, {1}, {2})",
    "odd_x8": "mve_add_products_top({0}, {1}, {2})",
    # the even and odd sums requantized (constants packed even channels first) and interleaved back
    "requantize_x8_channels": "mve_requantize_x8({0}, {1}, &{2}, &{3}, false, {4}, {5}, {6})",
    "requantize_x8_channels_right": "mve_requantize_x8({0}, {1}, &{2}, &{3}, true, {4}, {5}, {6})",
    "requantize_x8_tensor": "mve_requantize_x8_tensor({0}, {1}, {2}, {3}, {4}, {5}, {6}, {7})",
    # sixteen QAdd outputs from sixteen values of each input: TFLite's int8 ADD, lane by lane
    "qadd_x16": "mve_qadd_x16({0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13})",
    # QMean: four channels' raw sums as int32 lanes, then less count * zero point, rescaled
    "sum_x4": "mve_sum_x4({0}, &{1})",
    "qmean_x4": "mve_qmean_x4({0}, {1}, {2}, {3}, {4}, {5}, {6})",
    # float32 vector arithmetic (render.py: vector types with spellings of their own): the fused
    # multiply-add the float kernels' accumulations are, VMAXNM/VMINNM for max and min (fmax's
    # rule: a NaN loses to a number)
    "fma_f32x4": "vfmaq_f32({0}, {1}, {2})",
    "max_f32x4": "vmaxnmq_f32({0}, {1})",
    "min_f32x4": "vminnmq_f32({0}, {1})",
}
HELIUM_HELPERS = (
    "#include <arm_mve.h>",
    # inlined whatever -Os thinks: a call would move the block's sums through the stack
    "#define MVE_INLINE inline __attribute__((always_inline))",
    "typedef std::int8_t tinsmith_mve_i8x4 __attribute__((vector_size(4)));",
    "MVE_INLINE int32x4_t mve_channels(const std::int32_t* p) noexcept { return vldrwq_s32(p); }",
    "MVE_INLINE int32x4_t mve_left_shift(const std::int32_t* p) noexcept { return vmaxq_s32(vldrwq_s32(p), vdupq_n_s32(0)); }",
    "MVE_INLINE int32x4_t mve_right_shift(const std::int32_t* p) noexcept { return vminq_s32(vldrwq_s32(p), vdupq_n_s32(0)); }",
    # (acc << left) times the multiplier, doubled, high half rounded (VQRDMULH is TFLite's
    # SaturatingRoundingDoublingHighMul: (ab + 2^30) >> 31), then divided by 2^-right rounding half
    # away from zero: VRSHL rounds half up, so negative values first lose one (the sign of
    # x & right is set only where x < 0 and a shift is due)
    "MVE_INLINE tinsmith_mve_i8x4 mve_requantize_x4(std::int32_t a0, std::int32_t a1, std::int32_t a2, std::int32_t a3, "
    "const std::int32_t* bias, int32x4_t mult, int32x4_t left, int32x4_t right, bool shift_left, std::int32_t zero_point, "
    "std::int32_t lo, std::int32_t hi) noexcept {"
    " int32x4_t acc = vsetq_lane_s32(a3, vsetq_lane_s32(a2, vsetq_lane_s32(a1, vdupq_n_s32(a0), 1), 2), 3);"
    " if (bias != nullptr) acc = vaddq_s32(acc, vldrwq_s32(bias));"
    " int32x4_t x = vqrdmulhq_s32(shift_left ? vshlq_s32(acc, left) : acc, mult);"
    " x = vrshlq_s32(vqaddq_s32(x, vshrq_n_s32(vandq_s32(x, right), 31)), right);"
    " x = vminq_s32(vmaxq_s32(vaddq_n_s32(x, zero_point), vdupq_n_s32(lo)), vdupq_n_s32(hi));"
    " std::int8_t bytes[4]; vstrbq_s32(bytes, x);"
    " tinsmith_mve_i8x4 out; std::memcpy(&out, bytes, 4); return out; }",
    # the loop IR's int32 vectors are GCC vectors of std::int32_t (long on Arm), arm_mve.h's of
    # int: the same register, converted by a cast
    "typedef std::int32_t tinsmith_mve_i32x4 __attribute__((vector_size(16)));",
    "MVE_INLINE tinsmith_mve_i32x4 mve_lanes_x4(const std::int32_t* p) noexcept "
    "{ return (tinsmith_mve_i32x4)vldrwq_s32(p); }",
    "MVE_INLINE tinsmith_mve_i32x4 mve_tap_x4(tinsmith_mve_i32x4 acc, const std::int8_t* x, const std::int8_t* w, "
    "std::int32_t minus_zero_point) noexcept { return (tinsmith_mve_i32x4)vaddq_s32((int32x4_t)acc, "
    "vmulq_s32(vaddq_n_s32(vldrbq_s32(x), minus_zero_point), vldrbq_s32(w))); }",
    "MVE_INLINE tinsmith_mve_i8x4 mve_requantize_lanes_x4(tinsmith_mve_i32x4 acc, int32x4_t mult, int32x4_t left, "
    "int32x4_t right, bool shift_left, std::int32_t zero_point, std::int32_t lo, std::int32_t hi) noexcept {"
    " int32x4_t a = (int32x4_t)acc;"
    " return mve_requantize_x4(vgetq_lane_s32(a, 0), vgetq_lane_s32(a, 1), vgetq_lane_s32(a, 2), "
    "vgetq_lane_s32(a, 3), nullptr, mult, left, right, shift_left, zero_point, lo, hi); }",
    # the product and its addition in one asm statement: as intrinsics, GCC computes every tap's
    # products first and spills them to the stack before adding them up
    "MVE_INLINE tinsmith_mve_i32x4 mve_add_products_bottom(tinsmith_mve_i32x4 acc, int16x8_t x, int16x8_t w) noexcept "
    "{ int32x4_t a = (int32x4_t)acc, t;"
    " __asm__(\"vmullb.s16 %q1, %q2, %q3\\n\\tvadd.i32 %q0, %q0, %q1\" : \"+w\"(a), \"=&w\"(t) : \"w\"(x), \"w\"(w));"
    " return (tinsmith_mve_i32x4)a; }",
    "MVE_INLINE tinsmith_mve_i32x4 mve_add_products_top(tinsmith_mve_i32x4 acc, int16x8_t x, int16x8_t w) noexcept "
    "{ int32x4_t a = (int32x4_t)acc, t;"
    " __asm__(\"vmullt.s16 %q1, %q2, %q3\\n\\tvadd.i32 %q0, %q0, %q1\" : \"+w\"(a), \"=&w\"(t) : \"w\"(x), \"w\"(w));"
    " return (tinsmith_mve_i32x4)a; }",
    "typedef std::int8_t tinsmith_mve_i8x8 __attribute__((vector_size(8)));",
    "MVE_INLINE int32x4_t mve_rescale(int32x4_t acc, int32x4_t mult, int32x4_t left, int32x4_t right, "
    "bool shift_left, std::int32_t zero_point, std::int32_t lo, std::int32_t hi) noexcept {"
    " int32x4_t x = vqrdmulhq_s32(shift_left ? vshlq_s32(acc, left) : acc, mult);"
    " x = vrshlq_s32(vqaddq_s32(x, vshrq_n_s32(vandq_s32(x, right), 31)), right);"
    " return vminq_s32(vmaxq_s32(vaddq_n_s32(x, zero_point), vdupq_n_s32(lo)), vdupq_n_s32(hi)); }",
    "MVE_INLINE tinsmith_mve_i8x8 mve_interleave_x8(int32x4_t even, int32x4_t odd) noexcept {"
    " int16x8_t both = vmovntq_s32(vmovnbq_s32(vdupq_n_s16(0), even), odd);"
    " std::int8_t bytes[8]; vstrbq_s16(bytes, both);"
    " tinsmith_mve_i8x8 out; std::memcpy(&out, bytes, 8); return out; }",
    "MVE_INLINE tinsmith_mve_i8x8 mve_requantize_x8(tinsmith_mve_i32x4 even, tinsmith_mve_i32x4 odd, "
    "const std::int32_t* mult, const std::int32_t* shift, bool right_only, std::int32_t zero_point, "
    "std::int32_t lo, std::int32_t hi) noexcept {"
    " const int32x4_t zero = vdupq_n_s32(0);"
    " int32x4_t s0 = vldrwq_s32(shift), s1 = vldrwq_s32(shift + 4);"
    " int32x4_t e = mve_rescale((int32x4_t)even, vldrwq_s32(mult), right_only ? zero : vmaxq_s32(s0, zero),"
    " right_only ? s0 : vminq_s32(s0, zero), !right_only, zero_point, lo, hi);"
    " int32x4_t o = mve_rescale((int32x4_t)odd, vldrwq_s32(mult + 4), right_only ? zero : vmaxq_s32(s1, zero),"
    " right_only ? s1 : vminq_s32(s1, zero), !right_only, zero_point, lo, hi);"
    " return mve_interleave_x8(e, o); }",
    "typedef std::int8_t tinsmith_mve_i8x16 __attribute__((vector_size(16)));",
    # x * 2^shift's multiply by a per-tensor multiplier, rounded as MultiplyByQuantizedMultiplier
    "MVE_INLINE int32x4_t mve_scale(int32x4_t x, std::int32_t mult, std::int32_t shift) noexcept {"
    " const int32x4_t right = vdupq_n_s32(shift < 0 ? shift : 0);"
    " x = vqrdmulhq_n_s32(vshlq_s32(x, vdupq_n_s32(shift > 0 ? shift : 0)), mult);"
    " return vrshlq_s32(vqaddq_s32(x, vshrq_n_s32(vandq_s32(x, right), 31)), right); }",
    "MVE_INLINE int32x4_t mve_qadd_lanes(int32x4_t a, int32x4_t b, std::int32_t za, std::int32_t zb, "
    "std::int32_t left, std::int32_t am, std::int32_t as, std::int32_t bm, std::int32_t bs, std::int32_t ym, "
    "std::int32_t ys, std::int32_t zy, std::int32_t lo, std::int32_t hi) noexcept {"
    " const int32x4_t l = vdupq_n_s32(left);"
    " int32x4_t x = vaddq_s32(mve_scale(vshlq_s32(vsubq_n_s32(a, za), l), am, as),"
    " mve_scale(vshlq_s32(vsubq_n_s32(b, zb), l), bm, bs));"
    " x = vaddq_n_s32(mve_scale(x, ym, ys), zy);"
    " return vminq_s32(vmaxq_s32(x, vdupq_n_s32(lo)), vdupq_n_s32(hi)); }",
    # bytes widened to int32 lanes in the order VMOVLB/VMOVLT give (0 4 8 12, 2 6 10 14, 1 5 9 13,
    # 3 7 11 15) and narrowed back by VMOVNB/VMOVNT into the order they came in
    "MVE_INLINE tinsmith_mve_i8x16 mve_qadd_x16(tinsmith_mve_i8x16 a, tinsmith_mve_i8x16 b, std::int32_t za, "
    "std::int32_t zb, std::int32_t left, std::int32_t am, std::int32_t as, std::int32_t bm, std::int32_t bs, "
    "std::int32_t ym, std::int32_t ys, std::int32_t zy, std::int32_t lo, std::int32_t hi) noexcept {"
    " const int16x8_t ae = vmovlbq_s8((int8x16_t)a), ao = vmovltq_s8((int8x16_t)a);"
    " const int16x8_t be = vmovlbq_s8((int8x16_t)b), bo = vmovltq_s8((int8x16_t)b);"
    " const int32x4_t r0 = mve_qadd_lanes(vmovlbq_s16(ae), vmovlbq_s16(be), za, zb, left, am, as, bm, bs, ym, ys, zy, lo, hi);"
    " const int32x4_t r2 = mve_qadd_lanes(vmovltq_s16(ae), vmovltq_s16(be), za, zb, left, am, as, bm, bs, ym, ys, zy, lo, hi);"
    " const int32x4_t r1 = mve_qadd_lanes(vmovlbq_s16(ao), vmovlbq_s16(bo), za, zb, left, am, as, bm, bs, ym, ys, zy, lo, hi);"
    " const int32x4_t r3 = mve_qadd_lanes(vmovltq_s16(ao), vmovltq_s16(bo), za, zb, left, am, as, bm, bs, ym, ys, zy, lo, hi);"
    " const int16x8_t even = vmovntq_s32(vmovnbq_s32(vdupq_n_s16(0), r0), r2);"
    " const int16x8_t odd = vmovntq_s32(vmovnbq_s32(vdupq_n_s16(0), r1), r3);"
    " return (tinsmith_mve_i8x16)vmovntq_s16(vmovnbq_s16(vdupq_n_s8(0), even), odd); }",
    "MVE_INLINE tinsmith_mve_i32x4 mve_sum_x4(tinsmith_mve_i32x4 acc, const std::int8_t* x) noexcept "
    "{ return (tinsmith_mve_i32x4)vaddq_s32((int32x4_t)acc, vldrbq_s32(x)); }",
    "MVE_INLINE tinsmith_mve_i8x4 mve_qmean_x4(tinsmith_mve_i32x4 sums, std::int32_t offset, std::int32_t mult, "
    "std::int32_t shift, std::int32_t zero_point, std::int32_t lo, std::int32_t hi) noexcept {"
    " int32x4_t x = vaddq_n_s32(mve_scale(vaddq_n_s32((int32x4_t)sums, offset), mult, shift), zero_point);"
    " x = vminq_s32(vmaxq_s32(x, vdupq_n_s32(lo)), vdupq_n_s32(hi));"
    " std::int8_t bytes[4]; vstrbq_s32(bytes, x);"
    " tinsmith_mve_i8x4 out; std::memcpy(&out, bytes, 4); return out; }",
    "MVE_INLINE tinsmith_mve_i8x8 mve_requantize_x8_tensor(tinsmith_mve_i32x4 even, tinsmith_mve_i32x4 odd, "
    "std::int32_t mult, std::int32_t left, std::int32_t right, std::int32_t zero_point, std::int32_t lo, "
    "std::int32_t hi) noexcept {"
    " int32x4_t m = vdupq_n_s32(mult), l = vdupq_n_s32(left), r = vdupq_n_s32(right);"
    " return mve_interleave_x8(mve_rescale((int32x4_t)even, m, l, r, left != 0, zero_point, lo, hi),"
    " mve_rescale((int32x4_t)odd, m, l, r, left != 0, zero_point, lo, hi)); }",
)

# Helium (MVE, Armv8.1-M: Cortex-M55, M85): int8 dot products over sixteen lanes, tail predication.
# Only a target that names it in `kernels` draws on it (no capability says "MVE" yet).
HELIUM = Backend("helium", requires=lambda caps: "helium" in caps.kernels,
                 needs="the Helium vector extension (kernels: [helium, ...])",
                 intrinsics=HELIUM_INTRINSICS, helpers=HELIUM_HELPERS)

# Scalar int8 kernels register-blocked for 32 general registers and no packed multiply-add
# (RV32IM, RV32IMAC: codegen/generate/functors/quantized_registers.py). Only a target that names
# it in `kernels` draws on it.
INT_REGISTERS = Backend("int-registers", requires=lambda caps: "int-registers" in caps.kernels,
                        needs="32 general registers (kernels: [int-registers, ...])")

# The host's int8 micro-kernels on AVX-512 (codegen/generate/functors/quantized_avx512.py): four
# int8 products per int32 lane and instruction, VPDPBUSD where the compiler's target has AVX512-VNNI
# (`__AVX512VNNI__`, e.g. host-native on Ice Lake and later), else the same sums from AVX512-BW's
# VPMADDWD on 16-bit halves (host-x86-64-v4); TFLite's requantization sixteen (or eight) channels
# at a time, its int8 ADD and MEAN sixteen values at a time.
AVX512_INTRINSICS = {
    # four input bytes of one pixel, made unsigned when gathered (+128: the bias holds
    # -128 * sum(w)), in every lane (a broadcast load)
    "x4_u8": "avx512_x4_u8(&{0})",
    # acc + the four products u8 x s8 of each lane (x from x4_u8, 64 packed weight bytes at {2})
    "dot4_i32x16": "avx512_dot4({0}, {1}, &{2})",
    # a depthwise tap over sixteen (eight) channels: acc + (x - zero point) * w, w widened to int32
    # at build time
    "tap_i32x16": "avx512_tap<tinsmith_i8x16>({0}, &{1}, &{2}, {3})",
    "tap_i32x8": "avx512_tap<tinsmith_i8x8>({0}, &{1}, &{2}, {3})",
    # sixteen (eight) channels' sums requantized (per-channel multipliers and shifts at {1}, {2}) to int8
    # ({6}: whether any channel shifts left, known at build time)
    "requantize_i32x16": "avx512_requantize<tinsmith_i8x16>({0}, &{1}, &{2}, {3}, {4}, {5}, {6})",
    "requantize_i32x8": "avx512_requantize<tinsmith_i8x8>({0}, &{1}, &{2}, {3}, {4}, {5}, {6})",
    # TFLite's int8 ADD of sixteen values of each input (constants as quantized.add_params gives them)
    "qadd_x16": "avx512_qadd(&{0}, &{1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13})",
    # the same ADD as one linear form of the raw inputs that reproduces it (codegen/quant/linear_add.py):
    # floor((a * {2} + b * {3} + {4}) / 2^{5}) clamped to {6}..{7}
    "qadd_linear_x16": "avx512_qadd_linear(&{0}, &{1}, {2}, {3}, {4}, {5}, {6}, {7})",
    # sixteen channels' window sums divided by the window's {1} taps as TFLite's average pool rounds
    # (ties away from zero), clamped to {2}..{3}
    "average_x16": "avx512_average({0}, {1}, {2}, {3})",
    # a window of {1} rows of {2} values, {3} apart from {0}, in one vector, sign bits flipped (the
    # bytes past the window meet zero weights): a whole window, every tap inside the input, stored at once
    "window_rows_x64": "avx512_window_rows<{1}, {2}>(&{0}, {3})",
    # lanes {1}.. of sixteen int8 lanes as a vector of 8, 4 or 2 (a last vector's real channels)
    "part_i8x8": "avx512_part<tinsmith_i8x8>({0}, {1})",
    "part_i8x4": "avx512_part<tinsmith_i8x4>({0}, {1})",
    "part_i8x2": "avx512_part<tinsmith_i8x2>({0}, {1})",
    # sixteen int8 values widened to int32 lanes
    "widen_i8x16": "avx512_load_widen(&{0}, tinsmith_i8x16{{}})",
    # sixteen channels' sums of a mean, plus {1} (-count * zero point), rescaled as QMean's
    "qmean_x16": "avx512_qmean({0}, {1}, {2}, {3}, {4}, {5}, {6})",
}
AVX512_HELPERS = (
    # GCC vector extensions and three of GCC's x86 builtins rather than immintrin.h: the prelude lies
    # inside the model's namespaces, where immintrin.h's C library includes cannot be
    # inlined whatever the cost model thinks: a call would pass a block's sums through memory
    "#define AVX512_INLINE inline __attribute__((always_inline))",
    "typedef int tinsmith_i32x16 __attribute__((vector_size(64)));",
    "typedef long long tinsmith_i64x8 __attribute__((vector_size(64)));",
    "typedef short tinsmith_i16x32 __attribute__((vector_size(64)));",
    "typedef std::int8_t tinsmith_i8x16 __attribute__((vector_size(16)));",
    "typedef int tinsmith_i32x8 __attribute__((vector_size(32)));",
    "typedef long long tinsmith_i64x4 __attribute__((vector_size(32)));",
    "typedef std::int8_t tinsmith_i8x8 __attribute__((vector_size(8)));",
    "typedef char tinsmith_c8x16 __attribute__((vector_size(16)));",
    "typedef long long tinsmith_i64x2 __attribute__((vector_size(16)));",
    # int32 lanes and the int64 lanes of their products, by the int8 vector of as many lanes
    "template <class B> struct avx512_lanes;",
    "template <> struct avx512_lanes<tinsmith_i8x16> { typedef tinsmith_i32x16 i32; typedef tinsmith_i64x8 i64; };",
    "template <> struct avx512_lanes<tinsmith_i8x8> { typedef tinsmith_i32x8 i32; typedef tinsmith_i64x4 i64; };",
    "AVX512_INLINE tinsmith_i32x16 avx512_x4_u8(const std::int8_t* p) noexcept "
    "{ int v; std::memcpy(&v, p, 4); return tinsmith_i32x16{} + v; }",
    "AVX512_INLINE tinsmith_i32x16 avx512_dot4(tinsmith_i32x16 acc, tinsmith_i32x16 x, const std::int8_t* w) noexcept {",
    "  tinsmith_i32x16 wv; std::memcpy(&wv, w, sizeof wv);",
    "#if defined(__AVX512VNNI__)",
    "  return __builtin_ia32_vpdpbusd_v16si(acc, x, wv);",
    "#else",
    # bytes 0 and 2 (1 and 3) of each lane as 16-bit values, x unsigned, w sign-extended: VPMADDWD
    # adds each lane's two products exactly (2 * 255 * 128 < 2^31)
    "  const tinsmith_i16x32 xs = (tinsmith_i16x32)x, ws = (tinsmith_i16x32)wv;",
    "  const tinsmith_i32x16 even = __builtin_ia32_pmaddwd512_mask(xs & 0xff, (tinsmith_i16x32)(ws << 8) >> 8, "
    "tinsmith_i32x16{}, 0xffff);",
    "  const tinsmith_i32x16 odd = __builtin_ia32_pmaddwd512_mask((xs >> 8) & 0xff, ws >> 8, tinsmith_i32x16{}, 0xffff);",
    "  return acc + even + odd;",
    "#endif",
    "}",
    "typedef std::int8_t tinsmith_i8x4 __attribute__((vector_size(4)));",
    "typedef std::int8_t tinsmith_i8x2 __attribute__((vector_size(2)));",
    "template <class V> AVX512_INLINE V avx512_part(tinsmith_i8x16 v, int at) noexcept "
    "{ V part; std::memcpy(&part, reinterpret_cast<const char*>(&v) + at, sizeof part); return part; }",
    # masked byte loads (VMOVDQU8 with a mask: the bytes left out are not read, so no load leaves the
    # input), row r into bytes r * Run.. of one vector
    "typedef char tinsmith_c8x64 __attribute__((vector_size(64)));",
    "typedef std::int8_t tinsmith_i8x64 __attribute__((vector_size(64)));",
    "template <int Rows, int Run> AVX512_INLINE tinsmith_i8x64 avx512_window_rows(const std::int8_t* x, int stride) "
    "noexcept {",
    "  tinsmith_c8x64 v = tinsmith_c8x64{};",
    "  for (int r = 0; r < Rows; ++r)",
    "    v = __builtin_ia32_loaddquqi512_mask(reinterpret_cast<const char*>(x) + r * (stride - Run), v, "
    "((1ULL << Run) - 1) << (r * Run));",
    "  return (tinsmith_i8x64)(v ^ (char)-128);",
    "}",
    # sixteen (eight) int8 values sign-extended to int32 lanes by VPMOVSXBD (GCC 12 lowers
    # __builtin_convertvector of int8 to int32 lanes to scalar code)
    "AVX512_INLINE tinsmith_i32x16 avx512_load_widen(const std::int8_t* p, tinsmith_i8x16) noexcept "
    "{ tinsmith_c8x16 v; std::memcpy(&v, p, 16); return __builtin_ia32_pmovsxbd512_mask(v, tinsmith_i32x16{}, 0xffff); }",
    "AVX512_INLINE tinsmith_i32x8 avx512_load_widen(const std::int8_t* p, tinsmith_i8x8) noexcept "
    "{ long long q; std::memcpy(&q, p, 8); return __builtin_ia32_pmovsxbd256((tinsmith_c8x16)tinsmith_i64x2{q, 0}); }",
    "template <class B> AVX512_INLINE typename avx512_lanes<B>::i32 avx512_tap(typename avx512_lanes<B>::i32 acc, "
    "const std::int8_t* x, const std::int32_t* w, std::int32_t zero_point) noexcept {",
    "  typedef typename avx512_lanes<B>::i32 I;",
    "  I wv; std::memcpy(&wv, w, sizeof wv);",
    "  return acc + (avx512_load_widen(x, B{}) - zero_point) * wv;",
    "}",
    # VPMULDQ: the 64-bit products of the even int32 lanes
    "AVX512_INLINE tinsmith_i64x8 avx512_mul_even(tinsmith_i32x16 a, tinsmith_i32x16 b) noexcept "
    "{ return __builtin_ia32_pmuldq512_mask(a, b, tinsmith_i64x8{}, 0xff); }",
    "AVX512_INLINE tinsmith_i64x4 avx512_mul_even(tinsmith_i32x8 a, tinsmith_i32x8 b) noexcept "
    "{ return __builtin_ia32_pmuldq256(a, b); }",
    # a - b in the lanes where y < threshold (a compare into a mask register and one masked
    # subtraction; GCC's vector code for it takes a masked move more)
    "AVX512_INLINE tinsmith_i64x8 avx512_sub_below(tinsmith_i64x8 a, tinsmith_i64x8 b, tinsmith_i64x8 y, "
    "tinsmith_i64x8 threshold) noexcept "
    "{ return __builtin_ia32_psubq512_mask(a, b, a, __builtin_ia32_cmpq512_mask(y, threshold, 1, 0xff)); }",
    "AVX512_INLINE tinsmith_i64x4 avx512_sub_below(tinsmith_i64x4 a, tinsmith_i64x4 b, tinsmith_i64x4 y, "
    "tinsmith_i64x4 threshold) noexcept "
    "{ return __builtin_ia32_psubq256_mask(a, b, a, __builtin_ia32_cmpq256_mask(y, threshold, 1, 0xf)); }",
    # TFLite's MultiplyByQuantizedMultiplier lane by lane, its two roundings in one: with y the 64-bit
    # product (x << left) * m, the doubling high multiply floor((y + 2^30) / 2^31) (quantized_math.py
    # says why that is TFLite's nudged division) divided by 2^r rounding half away from zero is
    # floor((y + 2^30 + 2^(30 + r) - [y < -2^30] * 2^31) / 2^(31 + r)) for r > 0, exactly (nested
    # floor divisions; the high half is negative where y < -2^30). Per lane: the offset, the shift
    # 31 + r and the threshold (-2^30, or the lowest int64 where r = 0) come packed
    # (quantized_avx512.py), the products of the even and odd lanes by VPMULDQ.
    "template <class I, class L> AVX512_INLINE I avx512_multiply(I x, I left, L me, L mo, L off_e, L off_o, L sh_e, L sh_o, "
    "L thr_e, L thr_o, bool shift_left = true) noexcept {",
    "  if (shift_left) x = x << left;",
    "  const L carry = L{} + (1LL << 31);",
    "  const L ye = avx512_mul_even(x, (I)me), yo = avx512_mul_even((I)((L)x >> 32), (I)mo);",
    "  const L re = avx512_sub_below(ye + off_e, carry, ye, thr_e) >> sh_e;",
    "  const L ro = avx512_sub_below(yo + off_o, carry, yo, thr_o) >> sh_o;",
    "  return (I)((re & 0xffffffffLL) | (ro << 32));",
    "}",
    # int32 lanes narrowed to bytes with signed saturation (VPMOVSDB)
    "AVX512_INLINE tinsmith_i8x16 avx512_saturate(tinsmith_i32x16 r) noexcept "
    "{ return (tinsmith_i8x16)__builtin_ia32_pmovsdb512_mask(r, tinsmith_c8x16{}, 0xffff); }",
    "AVX512_INLINE tinsmith_i8x8 avx512_saturate(tinsmith_i32x8 r) noexcept { tinsmith_i8x8 out; const tinsmith_c8x16 b = "
    "__builtin_ia32_pmovsdb256_mask(r, tinsmith_c8x16{}, 0xff); std::memcpy(&out, &b, sizeof out); return out; }",
    # plus the output zero point, clamped, the lanes narrowed to bytes
    "template <class B, class I> AVX512_INLINE B avx512_narrow(I r, std::int32_t zero_point, std::int32_t lo, "
    "std::int32_t hi) noexcept {",
    "  r += zero_point;",
    "  if (lo == -128 && hi == 127) return avx512_saturate(r);",  # the narrowing saturates (constants)
    "  r = r < lo ? I{} + lo : r;",
    "  r = r > hi ? I{} + hi : r;",
    "  return __builtin_convertvector(r, B);",
    "}",
    # per-channel constants as packed: multipliers of the even, then the odd lanes (int64 each);
    # left shifts (int32), then offsets, shifts and thresholds of the even and the odd lanes (int64)
    "template <class B> AVX512_INLINE B avx512_requantize(typename avx512_lanes<B>::i32 acc, const std::int32_t* mult, "
    "const std::int32_t* shift, std::int32_t zero_point, std::int32_t lo, std::int32_t hi, bool shift_left) noexcept {",
    "  typedef typename avx512_lanes<B>::i32 I;",
    "  typedef typename avx512_lanes<B>::i64 L;",
    "  constexpr int n = sizeof(I) / 4;",
    "  I left; L m[2], c[6];",
    "  std::memcpy(m, mult, sizeof m); std::memcpy(&left, shift, sizeof left); std::memcpy(c, shift + n, sizeof c);",
    "  return avx512_narrow<B>(avx512_multiply<I, L>(acc, left, m[0], m[1], c[0], c[1], c[2], c[3], c[4], c[5], "
    "shift_left), zero_point, lo, hi);",
    "}",
    # one multiplier and shift for every lane (QAdd, QMean): the same constants, computed
    "AVX512_INLINE tinsmith_i32x16 avx512_scale(tinsmith_i32x16 x, std::int32_t mult, std::int32_t shift) noexcept {",
    "  typedef tinsmith_i64x8 L;",
    "  const int r = shift < 0 ? -shift : 0;",
    "  const L off = L{} + ((1LL << 30) + (r > 0 ? 1LL << (30 + r) : 0)), sh = L{} + (31 + r);",
    "  const L thr = L{} + (r > 0 ? -(1LL << 30) : -0x7fffffffffffffffLL - 1), m = L{} + mult;",
    "  return avx512_multiply<tinsmith_i32x16, L>(x, tinsmith_i32x16{} + (shift > 0 ? shift : 0), m, m, off, off, sh, sh, "
    "thr, thr);",
    "}",
    # one input of an ADD: (x - zero point) << left, rescaled; a multiplier of one half (2^30, the
    # input of the larger scale) divides an even number exactly, and its rounding division by 2^r
    # too while r < left: then a shift (the test is on constants, decided at compile time)
    "AVX512_INLINE tinsmith_i32x16 avx512_add_input(const std::int8_t* p, std::int32_t zero_point, std::int32_t left, "
    "std::int32_t mult, std::int32_t shift) noexcept {",
    "  const tinsmith_i32x16 v = avx512_load_widen(p, tinsmith_i8x16{}) - zero_point;",
    "  if (mult == (1 << 30) && shift <= 0 && left - 1 + shift >= 0) return v << (left - 1 + shift);",
    "  return avx512_scale(v << left, mult, shift);",
    "}",
    "AVX512_INLINE tinsmith_i8x16 avx512_qadd(const std::int8_t* a, const std::int8_t* b, std::int32_t za, std::int32_t zb, "
    "std::int32_t left, std::int32_t am, std::int32_t as, std::int32_t bm, std::int32_t bs, std::int32_t ym, "
    "std::int32_t ys, std::int32_t zy, std::int32_t lo, std::int32_t hi) noexcept {",
    "  const tinsmith_i32x16 sum = avx512_add_input(a, za, left, am, as) + avx512_add_input(b, zb, left, bm, bs);",
    "  return avx512_narrow<tinsmith_i8x16>(avx512_scale(sum, ym, ys), zy, lo, hi);",
    "}",
    "AVX512_INLINE tinsmith_i8x16 avx512_qadd_linear(const std::int8_t* a, const std::int8_t* b, std::int32_t ma, "
    "std::int32_t mb, std::int32_t offset, std::int32_t shift, std::int32_t lo, std::int32_t hi) noexcept {",
    "  const tinsmith_i32x16 sum = avx512_load_widen(a, tinsmith_i8x16{}) * ma + avx512_load_widen(b, tinsmith_i8x16{}) * mb;",
    "  return avx512_narrow<tinsmith_i8x16>((sum + offset) >> shift, 0, lo, hi);",
    "}",
    # (a constant count after inlining: GCC divides the lanes by a multiply and shifts)
    "AVX512_INLINE tinsmith_i8x16 avx512_average(tinsmith_i32x16 sums, std::int32_t count, std::int32_t lo, "
    "std::int32_t hi) noexcept {",
    "  const tinsmith_i32x16 half = tinsmith_i32x16{} + count / 2;",
    "  return avx512_narrow<tinsmith_i8x16>((sums + (sums > 0 ? half : -half)) / count, 0, lo, hi);",
    "}",
    "AVX512_INLINE tinsmith_i8x16 avx512_qmean(tinsmith_i32x16 sums, std::int32_t offset, std::int32_t mult, std::int32_t shift, "
    "std::int32_t zero_point, std::int32_t lo, std::int32_t hi) noexcept "
    "{ return avx512_narrow<tinsmith_i8x16>(avx512_scale(sums + offset, mult, shift), zero_point, lo, hi); }",
)

# AVX-512 (host targets of 512-bit vectors: host-native on an AVX-512 machine, host-x86-64-v4): the
# int8 convolutions and fully connected layers as register blocks of int32 vectors.
AVX512_INT8 = Backend("avx512-int8", requires=lambda caps: caps.backend == "host" and caps.simd_bits >= 512,
                      needs="512-bit vectors on the host backend (AVX-512)",
                      intrinsics=AVX512_INTRINSICS, helpers=AVX512_HELPERS)

KERNEL_SETS = {s.name: s for s in (CPP, VECTORS, FPU_REGISTERS, ARM_DSP, HELIUM, INT_REGISTERS, AVX512_INT8)}


def micro_kernel(caps: Capabilities, name: str) -> Callable | None:
    """The micro-kernel `name` of the first kernel set the target draws on (caps.kernels, in
    order) that spells it and whose capabilities the target has; None: the loop nest's portable
    form. A portable loop nest calls target instructions only through this."""
    for set_name in caps.kernels:
        kernel_set = KERNEL_SETS.get(set_name)
        if kernel_set is not None and name in kernel_set.micro and kernel_set.requires(caps):
            return kernel_set.micro[name]
    return None
