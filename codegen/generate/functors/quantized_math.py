"""TFLite's fixed-point requantization spelled in the loop IR (codegen/quant/fixed_point.py is
the definition and the NumPy side). Steps go through locals so each intermediate is computed once."""
from __future__ import annotations

import numpy as np

from tinsmith.generate.functors import elementwise_nest as nest_
from tinsmith.generate.functors.elementwise_nest import ElementwiseNest, LaneCall, flat
from tinsmith.generate.loop_ir import Assign, Binary, Call, Cast, Const, Expr, For, Local, Select, Stmt, Store, Var, index
from tinsmith.ops import quantized as q
from tinsmith.quant import fixed_point as fp


def i32(v: int) -> Const:
    return Const(int(v), "int32")


def i64(v: int) -> Const:
    return Const(int(v), "int64")


def widen(e: Expr) -> Expr:
    """An integer operand as int32, so C++ never computes in the int8 the IR would otherwise say."""
    return Cast("int32", e)


def select_max(a: Expr, b: Expr) -> Expr:
    return Select(Binary(">", b, a), b, a)


def select_min(a: Expr, b: Expr) -> Expr:
    return Select(Binary("<", b, a), b, a)


def clamp(e: Expr, lo: int, hi: int) -> Expr:
    return select_min(select_max(e, i32(lo)), i32(hi))


def wrapping_shift_left(x: Expr, count: Expr) -> Expr:
    """int32 x shifted left by 0..31 bits, wrapping as a two's-complement int32 shift: shifted as
    uint32 (C++17 leaves a negative value's left shift undefined) and converted back."""
    return Cast("int32", Binary("<<", Cast("uint32", x), count))


def rounding_mask(right: Expr, right_at_most: int) -> Expr:
    """2^right - 1 for a run-time count 0..right_at_most: (1 << right) - 1 up to 30, else
    INT32_MAX >> (31 - right) (1 << 31 overflows int32)."""
    if right_at_most <= 30:
        return Binary("-", Binary("<<", i32(1), right), i32(1))
    return Binary(">>", i32(fp.INT32_MAX), Binary("-", i32(31), right))


def multiply_by_quantized_multiplier(name: str, acc: Expr, multiplier: Expr | int, shift: Expr | int,
                                     shift_sign: int = 0, right_at_most: int = 31) -> tuple[list[Stmt], Expr]:
    """Statements computing acc * (multiplier, shift) into local `name`, and the int32 result.

    `multiplier` and `shift` are build-time ints (per tensor) or loaded int32 expressions (per
    channel). The multiplier is never INT32_MIN (it is 0 or at least 2^30), so the doubling high
    multiply's one saturating case cannot happen and is not tested for. `shift_sign` -1 (or 1)
    says a loaded shift is never positive (never negative), known at build time: the other
    direction's shift and its test are left out. `right_at_most` bounds a loaded shift's right
    count (31 unless the caller knows better): up to 30 the rounding mask is (1 << right) - 1,
    else INT32_MAX >> (31 - right), as 1 << 31 overflows int32.

    The left shift wraps as TFLite's int32 shift does, spelled on uint32: C++17 leaves the left
    shift of a negative value undefined, and its conversion back is modular on every compiler
    we build with (and in C++20)."""
    static = isinstance(shift, int)
    mult = i64(multiplier) if isinstance(multiplier, int) else Cast("int64", multiplier)
    stmts: list[Stmt] = []
    x: Expr = acc
    if static:
        left, right = max(shift, 0), max(-shift, 0)
        if left:
            x = wrapping_shift_left(acc, i32(left))
        right_e: Expr = i32(right)
    elif shift_sign < 0:  # a right shift only
        stmts.append(Local(f"{name}_shift", shift, "int32"))
        right_e, right = Binary("-", i32(0), Var(f"{name}_shift")), None
    elif shift_sign > 0:  # a left shift only
        x = wrapping_shift_left(acc, shift)
        right_e, right = i32(0), 0
    else:
        stmts.append(Local(f"{name}_shift", shift, "int32"))
        s = Var(f"{name}_shift")
        positive = Binary(">", s, i32(0))
        x = wrapping_shift_left(acc, Select(positive, s, i32(0)))
        right_e = Select(positive, i32(0), Binary("-", i32(0), s))
        right = None
    # high 32 bits of 2 * x * multiplier, rounded to nearest (ties away from zero). TFLite adds
    # 2^30 (1 - 2^30 below zero) and divides by 2^31 truncating; for a negative product that is
    # -floor((2^30 - 1 - ab) / 2^31) = floor((ab + 2^30) / 2^31), so one arithmetic shift of
    # ab + 2^30 gives the same for every sign (no test, no correction of the division)
    stmts.append(Local(f"{name}_ab", Binary("*", Cast("int64", x), mult), "int64"))
    ab = Var(f"{name}_ab")
    stmts.append(Local(name, Cast("int32", Binary(">>", Binary("+", ab, i64(1 << 30)), i64(31))), "int32"))
    high = Var(name)
    if (static or shift_sign > 0) and right == 0:
        return stmts, high
    # rounding arithmetic right shift: ties away from zero
    mask = i32((1 << right) - 1) if static else rounding_mask(right_e, right_at_most)
    stmts.append(Local(f"{name}_mask", mask, "int32"))
    m = Var(f"{name}_mask")
    threshold = Binary("+", Binary(">>", m, i32(1)), Select(Binary("<", high, i32(0)), i32(1), i32(0)))
    rounded = Binary("+", Binary(">>", high, right_e),
                     Select(Binary(">", Binary("&", high, m), threshold), i32(1), i32(0)))
    stmts.append(Assign(name, rounded))
    return stmts, high


def multiply_by_quantized_multiplier_int64(name: str, acc: Expr, multiplier: Expr | int,
                                           shift: Expr | int) -> tuple[list[Stmt], Expr]:
    """Statements computing an int64 `acc` * (multiplier, shift) into int32 local `name` as TFLite's
    16x8 kernels do (fixed_point.multiply_by_quantized_multiplier_int64): acc times the multiplier
    rounded to Q15, plus half of 2^(15 - shift), shifted right by 15 - shift."""
    if isinstance(multiplier, int) and isinstance(shift, int):
        total = 15 - shift
        reduced = int(fp.reduced_multiplier(multiplier))
        value = Binary(">>", Binary("+", Binary("*", acc, i64(reduced)), i64(1 << (total - 1))), i64(total))
        return [Local(name, Cast("int32", value), "int32")], Var(name)
    m, total = Var(f"{name}_q15"), Var(f"{name}_total")
    stmts: list[Stmt] = [
        Local(f"{name}_q31", multiplier, "int32"),
        Local(f"{name}_q15", Select(Binary("<", Var(f"{name}_q31"), i32(0x7FFF0000)),
                                    Binary(">>", Binary("+", Var(f"{name}_q31"), i32(1 << 15)), i32(16)),
                                    i32(0x7FFF)), "int32"),
        Local(f"{name}_total", Binary("-", i32(15), shift), "int32"),
        Local(f"{name}_half", i64(1), "int64"),  # (a literal 1 would be shifted as a 32-bit int)
        Assign(f"{name}_half", Binary("<<", Var(f"{name}_half"), Binary("-", total, i32(1))))]
    half = Var(f"{name}_half")
    value = Binary(">>", Binary("+", Binary("*", acc, Cast("int64", m)), half), Cast("int64", total))
    return [*stmts, Local(name, Cast("int32", value), "int32")], Var(name)


def multiply_by_reduced_multiplier(name: str, acc: Expr, q15: Expr, shift_less_one: Expr) -> tuple[list[Stmt], Expr]:
    """The same product from constants packed at build time (packed_q15_multipliers and
    packed_shifts_less_one): the Q15 multiplier and 14 - shift. (v + 2^(t-1)) >> t equals ((v >> (t - 1)) + 1) >> 1, which leaves
    no 64-bit constant to shift at run time."""
    product = Binary(">>", Binary("*", acc, Cast("int64", q15)), Cast("int64", shift_less_one))
    return [Local(name, Cast("int32", Binary(">>", Binary("+", product, i64(1)), i64(1))), "int32")], Var(name)


def multiply_with_offset(name: str, acc: Expr, q15: Expr, offset: Expr, shift: Expr, high: bool
                         ) -> tuple[list[Stmt], Expr]:
    """The same product with the bias and the rounding folded into a per-channel int64 offset
    (codegen/ops/quantized.py: _int16_requantization): v = acc * q15 + offset (one SMLAL on a
    32-bit core), then v >> t, which fits 32 bits: the high word shifted by `shift` = t - 32
    (`high`), or the low word shifted by t = `shift` < 32 with the high word's bits above it."""
    stmts: list[Stmt] = [Local(f"{name}_v", Binary("+", Binary("*", Cast("int64", acc), Cast("int64", q15)), offset),
                               "int64")]
    v = Var(f"{name}_v")
    hi = Cast("int32", Binary(">>", v, i64(32)))
    if high:
        return [*stmts, Local(name, Binary(">>", hi, shift), "int32")], Var(name)
    lo_bits = Binary(">>", Cast("uint32", v), shift)
    hi_bits = Binary("<<", Cast("uint32", hi), Binary("-", i32(32), shift))
    return [*stmts, Local(name, Cast("int32", Binary("|", lo_bits, hi_bits)), "int32")], Var(name)


def packed_q15_multipliers(multipliers):
    """A 16x8 node's per-channel multipliers packed for multiply_by_reduced_multiplier: in Q15, as an
    [O, 1] array (the second axis says packed)."""
    return fp.reduced_multiplier(multipliers).astype(np.int32).reshape(-1, 1)


def packed_shifts_less_one(shifts):
    """Its per-channel shifts packed the same way: 14 - shift, as an [O, 1] array."""
    return (14 - np.asarray(shifts, np.int64)).astype(np.int32).reshape(-1, 1)


def rounded_divide(acc: Expr, count: Expr | int) -> Expr:
    """acc / count, ties away from zero: (acc +- count/2) / count with C++'s truncating division."""
    c = i32(count) if isinstance(count, int) else count
    half = i32(count // 2) if isinstance(count, int) else Binary("/", count, i32(2))
    return Binary("/", Select(Binary(">", acc, i32(0)), Binary("+", acc, half), Binary("-", acc, half)), c)


def qadd_steps(args, attrs, lanes: int, by_address: bool = False) -> list[Stmt]:
    """QAdd of two inputs of the output's shape, `lanes` values a step (the elementwise nest's flat
    schedule) through the kernel set's `qadd_x<lanes>` intrinsic (TFLite's int8 ADD: its constants
    from add_params), given the operands' lanes or (`by_address`) their first elements."""
    p = q.add_params(attrs)
    consts = [attrs["a_zero_point"], attrs["b_zero_point"], p["left_shift"], p["a_multiplier"], p["a_shift"],
              p["b_multiplier"], p["b_shift"], p["y_multiplier"], p["y_shift"], attrs["y_zero_point"],
              *q.output_clamp(attrs, "int8")]
    return nest_.elementwise(ElementwiseNest.of(args), flat(lanes),
                             LaneCall(f"qadd_x{lanes}", tuple(i32(v) for v in consts), "int8", lanes, by_address))
