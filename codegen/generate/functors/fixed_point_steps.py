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

    def rdbpot(self, x: Expr, exponent: Expr | int) -> Var:
        """Rounding arithmetic right shift, ties away from zero."""
        e = _e(exponent)
        mask = self.let(Binary("-", Binary("<<", i32(1), e), i32(1)))
        threshold = Binary("+", Binary(">>", mask, i32(1)), Select(Binary("<", x, i32(0)), i32(1), i32(0)))
        return self.let(Binary("+", Binary(">>", x, e),
                               Select(Binary(">", Binary("&", x, mask), threshold), i32(1), i32(0))))

    def rdbpot_as_built(self, x: Expr, exponent: Expr) -> Var:
        """fixed_point_functions.rounding_divide_by_pot_as_built for an exponent >= 0 known at run
        time: below 32 a rounding shift (its mask in int64, so 31 is defined too); from 32 on the
        host interpreter's x >> (exponent - 32), plus one unless x < 0 (a count past 31 shifts out
        every bit). Both are computed with counts in range and one is chosen: defined C++ on every
        target, whatever the exponent."""
        narrow_exponent = self.let(Select(Binary("<", exponent, i32(32)), exponent, i32(31)))
        one = Cast("int64", i32(1))  # (an int64 operand: an int64 Const is written as a plain int literal)
        mask = self.let(Binary("-", Binary("<<", one, Cast("int64", narrow_exponent)), one), "int64")
        threshold = Binary("+", Binary(">>", mask, i64(1)), Select(Binary("<", x, i32(0)), i64(1), i64(0)))
        above = Binary(">", Binary("&", Cast("int64", x), mask), threshold)
        narrow = self.let(Binary("+", Binary(">>", x, narrow_exponent), Select(above, i32(1), i32(0))))
        wide_exponent = self.let(select_min(select_max(Binary("-", exponent, i32(32)), i32(0)), i32(31)))
        wide = Binary("+", Binary(">>", x, wide_exponent), Select(Binary(">=", x, i32(0)), i32(1), i32(0)))
        return self.let(Select(Binary("<", exponent, i32(32)), narrow, wide))

    def reciprocal(self, x: Expr) -> tuple[Var, Var]:
        """fixed_point_functions.reciprocal of an int32 x > 0: (raw, bits over unit) with
        1 / x = raw / 2^31 / 2^bits; x moved up by its leading zeros into [2^31, 2^32) (in int64),
        less 2^31 a Q0.31 number in [0, 1) for one_over_one_plus_x."""
        headroom = self.leading_zeros(x)
        shifted = Binary("<<", Cast("int64", x), Cast("int64", headroom))
        raw = self.one_over_one_plus_x(self.let(Cast("int32", Binary("-", shifted, i64(1 << 31)))))
        return raw, self.let(Binary("-", i32(31), headroom))

    def shl_saturating(self, x: Expr, exponent: int) -> Var:
        threshold = (1 << (31 - exponent)) - 1
        return self.let(Select(Binary(">", x, i32(threshold)), i32(fp.INT32_MAX),
                               Select(Binary("<", x, i32(-threshold)), i32(fp.INT32_MIN),
                                      # (a product, not a shift: x may be negative, whose left shift
                                      # C++17 leaves undefined)
                                      Cast("int32", Binary("*", Cast("int64", x), i64(1 << exponent))))))

    def shl_saturating_by(self, x: Expr, exponent: Expr) -> Var:
        """x * 2^exponent saturated to int32, for an exponent known at run time, 0..31: the product
        in int64, clamped (it leaves int32 exactly when gemmlowp's threshold test saturates)."""
        v = self.let(Binary("<<", Cast("int64", x), Cast("int64", exponent)), "int64")
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
        v = self.let(Select(big, Binary(">>", v0, i32(2)), v0))
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
