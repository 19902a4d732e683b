"""gemmlowp-style fixed-point arithmetic spelled in the loop IR, one int32 local per step, as
TFLite's reference kernels compute it: the saturating rounding doubling high multiply, rounding
shifts, saturating shifts, exp on [-inf, 0], 1 / (1 + x) on [0, 1), 1 / sqrt(x) and log(x). The
NumPy side is codegen/quant/fixed_point.py and fixed_point_functions.py; each method here is
that definition's steps."""
from __future__ import annotations

from tinsmith.generate.functors.quantized_math import (i32, i64, multiply_by_quantized_multiplier, select_max,
                                                      select_min)
from tinsmith.generate.loop_ir import Assign, Binary, Cast, Const, Expr, For, Local, Select, Stmt, Var
from tinsmith.quant import fixed_point as fp
from tinsmith.quant import fixed_point_functions as ff


def _e(v: Expr | int) -> Expr:
    return i32(v) if isinstance(v, int) else v


def _check_exponent(exponent: int, what: str) -> None:
    """A build-time exponent must lie in 0..31: outside, the int32 steps would shift by a negative
    count or by the width or more (undefined in C++), so a caller passing one is a Tinsmith bug."""
    if not 0 <= exponent <= 31:
        raise ValueError(f"{what} by a build-time exponent {exponent}: it must lie in 0 to 31")


class Steps:
    """Statements under construction: each step a fresh int32 local, so nothing is computed twice."""

    def __init__(self, prefix: str):
        self.prefix, self.stmts, self.count = prefix, [], 0

    def let(self, value: Expr, dtype: str = "int32") -> Var:
        self.count += 1
        name = f"{self.prefix}{self.count}"
        self.stmts.append(Local(name, value, dtype))
        return Var(name)

    def fresh(self, tag: str) -> str:
        """A name for a loop variable or a nested block's locals."""
        self.count += 1
        return f"{self.prefix}{tag}{self.count}"

    def srdhm(self, a: Expr, b: Expr | int) -> Var:
        """Saturating rounding doubling high multiply (neither operand is INT32_MIN here)."""
        bb = i64(b) if isinstance(b, int) else Cast("int64", b)
        ab = self.let(Binary("*", Cast("int64", a), bb), "int64")
        nudge = Select(Binary(">=", ab, i64(0)), i64(1 << 30), i64(1 - (1 << 30)))
        return self.let(Cast("int32", Binary("/", Binary("+", ab, nudge), i64(1 << 31))))

    def rdbpot(self, x: Expr, exponent: Expr | int, largest: int = 62) -> Var:
        """Rounding arithmetic right shift, ties away from zero, for an exponent >= 0: a build-time
        one up to 31, or one known at run time that is at most `largest` (any value: past 62 every
        int32 rounds to 0). Up to 30 the mask (1 << e) - 1 is an int32; 31 takes INT32_MAX as the
        mask (1 << 31 overflows int32); an exponent that may reach 31 or more at run time is
        shifted in int64, clamped to 62, where 1 << e and x >> e are defined and exact."""
        if isinstance(exponent, int):
            _check_exponent(exponent, "a rounding right shift")
            if exponent == 31:
                return self._rdbpot_with_mask(x, i32(exponent), i32(fp.INT32_MAX))
        elif largest > 30:
            return self._rdbpot_wide(x, exponent)
        e = _e(exponent)
        return self._rdbpot_with_mask(x, e, self.let(Binary("-", Binary("<<", i32(1), e), i32(1))))

    def _rdbpot_with_mask(self, x: Expr, e: Expr, mask: Expr) -> Var:
        threshold = Binary("+", Binary(">>", mask, i32(1)), Select(Binary("<", x, i32(0)), i32(1), i32(0)))
        return self.let(Binary("+", Binary(">>", x, e),
                               Select(Binary(">", Binary("&", x, mask), threshold), i32(1), i32(0))))

    def _rdbpot_wide(self, x: Expr, exponent: Expr) -> Var:
        """rdbpot in int64 for a run-time exponent 0.. (counts past 62 act as 62: the result is 0)."""
        e = self.let(Cast("int64", select_min(exponent, i32(62))), "int64")
        wide = self.let(Cast("int64", x), "int64")
        one = Cast("int64", i32(1))  # (an int64 operand: an int64 Const is written as a plain int literal)
        mask = self.let(Binary("-", Binary("<<", one, e), one), "int64")
        threshold = Binary("+", Binary(">>", mask, i64(1)), Select(Binary("<", x, i32(0)), i64(1), i64(0)))
        return self.let(Cast("int32", Binary("+", Binary(">>", wide, e),
                                             Select(Binary(">", Binary("&", wide, mask), threshold), i64(1), i64(0)))))

    def rdbpot_as_built(self, x: Expr, exponent: Expr) -> Var:
        """fixed_point_functions.rounding_divide_by_pot_as_built for an exponent >= 0 known at run
        time: below 32 a rounding shift (in int64, so 31 is defined too); from 32 on the host
        interpreter's x >> (exponent - 32), plus one unless x < 0 (a count past 31 shifts out every
        bit), that sum in int64 and held at INT32_MAX. Both are computed with counts in range and
        one is chosen: defined C++ on every target, whatever the exponent."""
        narrow = self._rdbpot_wide(x, exponent)
        wide_exponent = self.let(select_min(select_max(Binary("-", exponent, i32(32)), i32(0)), i32(31)))
        wide = self.let(Binary("+", Cast("int64", Binary(">>", x, wide_exponent)),
                               Select(Binary(">=", x, i32(0)), i64(1), i64(0))), "int64")
        held = Cast("int32", select_min(wide, i64(fp.INT32_MAX)))
        return self.let(Select(Binary("<", exponent, i32(32)), narrow, held))

    def reciprocal(self, x: Expr) -> tuple[Var, Var]:
        """fixed_point_functions.reciprocal of an int32 x > 0: (raw, bits over unit) with
        1 / x = raw / 2^31 / 2^bits; x moved up by its leading zeros into [2^31, 2^32) (in int64),
        less 2^31 a Q0.31 number in [0, 1) for one_over_one_plus_x."""
        headroom = self.leading_zeros(x)
        shifted = Binary("<<", Cast("int64", x), Cast("int64", headroom))
        raw = self.one_over_one_plus_x(self.let(Cast("int32", Binary("-", shifted, i64(1 << 31)))))
        return raw, self.let(Binary("-", i32(31), headroom))

    def shl_saturating(self, x: Expr, exponent: int) -> Var:
        """x * 2^exponent saturated to int32, for a build-time exponent 0..31 (gemmlowp's
        SaturatingRoundingMultiplyByPOT): the limits tested before the product is formed."""
        _check_exponent(exponent, "a saturating left shift")
        threshold = (1 << (31 - exponent)) - 1
        return self.let(Select(Binary(">", x, i32(threshold)), i32(fp.INT32_MAX),
                               Select(Binary("<", x, i32(-threshold)), i32(fp.INT32_MIN),
                                      # (a product, not a shift: x may be negative, whose left shift
                                      # C++17 leaves undefined)
                                      Cast("int32", Binary("*", Cast("int64", x), i64(1 << exponent))))))

    def shl_saturating_by(self, x: Expr, exponent: Expr) -> Var:
        """x * 2^exponent saturated to int32, for an exponent known at run time, at most 31: the
        product in int64 (a product with 2^exponent, not a shift: x may be negative, whose left
        shift C++17 leaves undefined), clamped (it leaves int32 exactly when gemmlowp's threshold
        test saturates). A negative exponent counts as 0: log_x passes -1 for an x <= 0 (a
        wrapped sum), where no result is defined and only defined C++ is asked for."""
        power = Binary("<<", Cast("int64", i32(1)), Cast("int64", select_max(exponent, i32(0))))
        v = self.let(Binary("*", Cast("int64", x), power), "int64")
        return self.let(Cast("int32", Select(Binary(">", v, i64(fp.INT32_MAX)), i64(fp.INT32_MAX),
                                             Select(Binary("<", v, i64(fp.INT32_MIN)), i64(fp.INT32_MIN), v))))

    def saturating(self, op: str, a: Expr, b: Expr | int) -> Var:
        """a + b or a - b saturated to int32 (TFLite's SaturatingAddNonGemmlowp, SaturatingSub)."""
        v = self.let(Binary(op, Cast("int64", a), Cast("int64", _e(b))), "int64")
        return self.let(Cast("int32", Select(Binary(">", v, i64(fp.INT32_MAX)), i64(fp.INT32_MAX),
                                             Select(Binary("<", v, i64(fp.INT32_MIN)), i64(fp.INT32_MIN), v))))

    def wrapping(self, op: str, a: Expr, b: Expr | int) -> Var:
        """a + b or a - b wrapping as int32 (gemmlowp's raw sums; computed in int64, no overflow in C++)."""
        return self.let(Cast("int32", Binary(op, Cast("int64", a), Cast("int64", _e(b)))))

    def leading_zeros(self, x: Expr) -> Var:
        """Leading zero bits of a non-negative int32 value (32 for 0): a binary search, the value
        moved up by 16, 8, 4, 2 and 1 bits wherever those top bits are zero."""
        v = self.let(Cast("uint32", x), "uint32")
        n = self.let(Select(Binary("==", v, Const(0, "uint32")), i32(1), i32(0)))
        for k in (16, 8, 4, 2, 1):
            empty = Binary("==", Binary(">>", v, Const(32 - k, "uint32")), Const(0, "uint32"))
            self.stmts += [Assign(n.name, Binary("+", n, Select(empty, i32(k), i32(0)))),
                           Assign(v.name, Select(empty, Binary("<<", v, Const(k, "uint32")), v))]
        return n

    def multiply(self, x: Expr, multiplier: Expr | int, shift: Expr | int) -> Var:
        """TFLite's MultiplyByQuantizedMultiplier (both roundings), multiplier and shift static or not."""
        stmts, result = multiply_by_quantized_multiplier(self.fresh("m"), x, multiplier, shift)
        self.stmts += stmts
        return result

    def exp_on_negative_values(self, a: Var) -> Var:
        frac = 31 - fp.SOFTMAX_DIFF_INTEGER_BITS
        quarter = 1 << (frac - 2)
        mod = self.let(Binary("-", Binary("&", a, i32(quarter - 1)), i32(quarter)))
        # exp on [-1/4, 0): Taylor around -1/8
        x = self.let(Binary("+", self.shl_saturating(mod, fp.SOFTMAX_DIFF_INTEGER_BITS), i32(1 << 28)))
        x2 = self.srdhm(x, x)
        x3 = self.srdhm(x2, x)
        x4 = self.srdhm(x2, x2)
        x4_over_4 = self.rdbpot(x4, 2)
        poly = self.rdbpot(Binary("+", self.srdhm(Binary("+", x4_over_4, x3), fp.ONE_THIRD), x2), 1)
        result = self.let(Binary("+", i32(fp.EXP_MINUS_ONE_EIGHTH),
                                 self.srdhm(i32(fp.EXP_MINUS_ONE_EIGHTH), Binary("+", x, poly))))
        remainder = self.let(Binary("-", mod, a))
        for k, factor in fp.EXP_BARREL:
            scaled = self.srdhm(result, factor)
            bit = Binary("!=", Binary("&", remainder, i32(1 << (frac + k))), i32(0))
            self.stmts.append(Assign(result.name, Select(bit, scaled, result)))
        return self.let(Select(Binary("==", a, i32(0)), i32(fp.INT32_MAX), result))

    def one_over_one_plus_x(self, a: Expr) -> Var:
        """1 / (1 + a) for a Q0.31 a in [0, 1): three Newton-Raphson steps on Q2.29 numbers."""
        half = self.let(Cast("int32", Binary("/", Binary("+", Binary("+", Cast("int64", a), i64(fp.INT32_MAX)),
                                                         i64(1)), i64(2))))
        x = self.let(Binary("+", i32(fp.Q2_48_OVER_17), self.srdhm(half, fp.Q2_NEG_32_OVER_17)))
        for _ in range(3):
            one_minus = self.let(Binary("-", i32(1 << 29), self.srdhm(half, x)))
            self.stmts.append(Assign(x.name, Binary("+", x, self.shl_saturating(self.srdhm(x, one_minus), 2))))
        return self.shl_saturating(x, 1)

    def inv_sqrt(self, value: Expr) -> tuple[Var, Var]:
        """(multiplier, shift) of 1 / sqrt(value) for an int32 value >= 0, as
        fixed_point_functions.inv_sqrt_multiplier: normalised into [2^27, 2^29) by pairs of bits,
        five Newton steps on Q3.28, the exponent folded into the multiplier where negative."""
        v0 = self.let(value)
        big = Binary(">=", v0, i32(1 << 29))
        # (a value <= 1 gives (INT32_MAX, 0) whatever the steps compute; one below 0, a QL2Normalization
        # sum that wrapped, is taken as 0 so that no negative value is shifted left)
        v = self.let(Select(big, Binary(">>", v0, i32(2)), Select(Binary(">", v0, i32(0)), v0, i32(0))))
        start = self.let(Binary("+", i32(ff.INV_SQRT_START_SHIFT), Select(big, i32(1), i32(0))))
        clz = self.leading_zeros(Select(Binary(">", v, i32(0)), v, i32(1)))
        pairs = self.let(Binary("-", Binary("/", Binary("-", clz, i32(1)), i32(2)), i32(1)))
        shift = self.let(Binary("-", start, pairs))
        normalised = self.let(Binary("<<", v, Binary("*", pairs, i32(2))))
        half_input = self.rdbpot(Binary(">>", normalised, i32(1)), 1)
        y = self.let(i32(ff.INV_SQRT_ONE_Q3))
        step = Steps(self.fresh("nr"))
        y3 = step.shl_saturating(step.srdhm(step.srdhm(y, y), y), 6)
        difference = step.wrapping("-", step.srdhm(i32(ff.INV_SQRT_HALF_THREE_Q3), y), step.srdhm(half_input, y3))
        update = step.shl_saturating(difference, 3)
        self.stmts.append(For(self.fresh("i"), ff.INV_SQRT_ITERATIONS, (*step.stmts, Assign(y.name, update))))
        scaled = self.srdhm(y, ff.HALF_SQRT_2)
        negative = Binary("<", shift, i32(0))
        # (shifted in uint32: the result fits int32, the shift is at most 2)
        raised = Cast("int32", Binary("<<", Cast("uint32", scaled), Binary("-", i32(0), shift)))
        tiny = Binary("<=", v0, i32(1))
        multiplier = self.let(Select(tiny, i32(fp.INT32_MAX), Select(negative, raised, scaled)))
        exponent = self.let(Select(Binary("||", tiny, negative), i32(0), Binary("-", i32(0), shift)))
        return multiplier, exponent

    def log_x(self, x: Expr, input_integer_bits: int, output_integer_bits: int) -> Var:
        """log of a positive fixed-point number, as fixed_point_functions.log_x."""
        accum_bits = output_integer_bits + 1
        shifted_quarter = int(fp.rounding_divide_by_pot(ff.ONE_QUARTER, accum_bits))
        z_a = self.let(x)
        headroom_a_plus_1 = self.leading_zeros(z_a)
        r_a_tmp = self.shl_saturating_by(z_a, Binary("-", headroom_a_plus_1, i32(1)))
        r_a = self.shl_saturating(self.srdhm(r_a_tmp, ff.SQRT_HALF), 1)
        pow_a = self.shl_saturating_by(Binary("-", i32(input_integer_bits), headroom_a_plus_1), i32(31 - accum_bits))
        pow_2_a = self.saturating("+", pow_a, shifted_quarter)
        z_b = self.srdhm(z_a, ff.SQRT_HALF)
        headroom_b = self.let(Binary("-", self.leading_zeros(z_b), i32(1)))
        r_b = self.shl_saturating_by(z_a, headroom_b)
        pow_b = self.shl_saturating_by(Binary("-", i32(input_integer_bits), headroom_b), i32(31 - accum_bits))
        pow_2_b = self.saturating("-", pow_b, shifted_quarter)
        r = self.let(Select(Binary("<", r_b, r_a), r_b, r_a))
        pow_2 = self.let(Select(Binary(">", pow_2_b, pow_2_a), pow_2_b, pow_2_a))
        # RoundingHalfSum(r, 2^-1/4): both are positive, so (sum + 1) / 2
        p = self.let(Cast("int32", Binary("/", Binary("+", Binary("+", Cast("int64", r), i64(ff.SQRT_SQRT_HALF)),
                                                      i64(1)), i64(2))))
        q_half = self.wrapping("-", r, ff.SQRT_SQRT_HALF)
        q = self.wrapping("+", q_half, q_half)
        common_sq = self.srdhm(q, q)
        num = self.wrapping("+", self.srdhm(q, r), self.srdhm(self.srdhm(q, common_sq), ff.LOG_ALPHA_N))
        inner = self.wrapping("+", self.wrapping("+", i32(ff.LOG_ALPHA_I), q), self.srdhm(i32(ff.LOG_ALPHA_D),
                                                                                           common_sq))
        denom_minus_one = self.wrapping("+", self.srdhm(p, inner), self.srdhm(i32(ff.LOG_ALPHA_F), q))
        recip_denom = self.one_over_one_plus_x(denom_minus_one)
        num_scaled = self.rdbpot(num, accum_bits)
        total = self.wrapping("+", self.srdhm(pow_2, ff.LOG_2), self.srdhm(num_scaled, recip_denom))
        return self.shl_saturating(total, accum_bits - output_integer_bits)


__all__ = ["Steps", "Stmt"]
