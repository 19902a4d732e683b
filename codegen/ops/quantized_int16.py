"""Int16Softmax: TFLite's int16 softmax (its reference kernel, which TFLite Micro runs for 16x8
models) through two interpolated 513-entry int16 tables: exp on [-10, 0] and 1 / (1 + x) on
[0, 1], both built once at import (`int16_table`, TFLite's table generator in float32) and stored
as constants. Per row: each input's difference from the row's max rescaled so that [-65535, 0]
spans [-10, 0], recentred to int16 and looked up in the exp table; the exps summed in Q16.15;
the sum normalised by its leading zeros, recentred and looked up in the reciprocal table; each exp
times the reciprocal, rounded back to Q0.15 and clamped to [0, 32767].

The tables' interpolation (`table_lookup`): the top 9 bits of the (int16) input pick an entry, the
low 7 interpolate linearly to the next one, rounded."""
from __future__ import annotations

from typing import Callable

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ir.graph import Quant
from tinsmith.ops.quantized import rows_facts
from tinsmith.ops.registry import Attr, InferArgs, OpError, Pattern, define, elementwise_facts
from tinsmith.quant import fixed_point as fp

TABLE_ENTRIES = 513  # 512 intervals and the end point, which only sets the last interval's slope
EXP_RANGE = (-10.0, 0.0)  # exp: inputs below -10 add nothing the sum can hold
RECIPROCAL_RANGE = (0.0, 1.0)  # 1 / (1 + x): the normalised sum is 1 + x
# the recentring offsets: the scaled difference [-65535, 0] becomes [-32768, 32767], the sum's
# mantissa [65536, 131071] (Q1.16 of 1 + x) becomes the same
EXP_OFFSET = 32767
RECIPROCAL_OFFSET = -((1 << 15) + (1 << 16))
OUTPUT_QUANT = (1.0 / 32768, 0)


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """std::round of float32 values (exact: computed in float64, where |x| + 0.5 does not round)."""
    x = np.asarray(x, np.float64)
    return (np.sign(x) * np.floor(np.abs(x) + 0.5)).astype(np.float32)


def _exp(x: np.ndarray) -> np.ndarray:
    return np.exp(np.asarray(x, np.float64)).astype(np.float32)  # (expf, rounded once)


def _reciprocal(x: np.ndarray) -> np.ndarray:
    return (np.float32(1.0) / (np.float32(1.0) + np.asarray(x, np.float32))).astype(np.float32)


TABLE_FUNCTIONS: dict[str, tuple[Callable, tuple[float, float]]] = {
    "exp": (_exp, EXP_RANGE), "reciprocal": (_reciprocal, RECIPROCAL_RANGE)}


def int16_table(function: str) -> np.ndarray:
    """TFLite's int16 table of `function` over its range, output range [-1, 1) in Q0.15."""
    func, (lo, hi) = TABLE_FUNCTIONS[function]
    return interpolated_table(func, np.float32(lo), np.float32(hi), np.float32(32768.0))  # (2^16 levels over 2)


def interpolated_table(func: Callable, lo: np.float32, hi: np.float32, inverse_scale: np.float32) -> np.ndarray:
    """TFLite's int16 table generator: `func` on 512 equal steps of [lo, hi] and at hi, times
    `inverse_scale`, each entry the function's value less half the error linear interpolation would
    make at the interval's midpoint; all in float32 arithmetic, as its Prepare computes it."""
    f32 = np.float32
    steps = TABLE_ENTRIES - 1
    step = f32((hi - lo) / f32(steps))
    half = f32(step / f32(2))
    scale = inverse_scale
    at = np.arange(steps, dtype=np.float32)
    start = (lo + at * step).astype(np.float32)
    value = func(start)
    midpoint = func((start + half).astype(np.float32))
    following = func((lo + (at + f32(1)) * step).astype(np.float32))
    with np.errstate(over="ignore", invalid="ignore"):
        sample = _round_half_away((value * scale).astype(np.float32))
        interpolated = _round_half_away(((following * scale).astype(np.float32) + sample).astype(np.float32) / f32(2))
        error = interpolated - _round_half_away((midpoint * scale).astype(np.float32))
        bias = _round_half_away(error / f32(2))
        table = np.empty(TABLE_ENTRIES, np.float32)
        table[:steps] = sample - bias
        table[steps] = _round_half_away((func(np.array([hi], np.float32)) * scale).astype(np.float32))[0]
    return np.clip(np.nan_to_num(table), -32768, 32767).astype(np.int16)


def table_lookup(value, table) -> np.ndarray:
    """Interpolated lookup of int16 `value` in a 513-entry table."""
    v = np.asarray(value, np.int64)
    t = np.asarray(table, np.int64)
    index = 256 + (v >> 7)
    base = t[index]
    slope = t[index + 1] - base
    return (base + ((slope * (v & 0x7F) + 64) >> 7)).astype(np.int16)


def softmax_scaling(beta: float, x_scale: float) -> tuple[int, int]:
    """(input_multiplier, input_left_shift): the input's scale times beta, relative to 10 / 65535."""
    return fp.quantize_multiplier(float(np.float32(x_scale)) * float(np.float32(beta)) / (10.0 / 65535.0))


def reference(xs, attrs):
    x, exp_table, reciprocal_table = (np.asarray(v) for v in xs)
    rows = x.reshape(-1, x.shape[-1]).astype(np.int64)
    diff = rows - rows.max(axis=1, keepdims=True)
    scaled = fp.multiply_by_quantized_multiplier(diff, attrs["input_multiplier"], attrs["input_left_shift"])
    exps = table_lookup(np.clip(scaled + EXP_OFFSET, -32768, 32767), exp_table).astype(np.int64)
    sums = exps.sum(axis=1, keepdims=True)
    headroom_plus_one = np.array([[32 - int(s).bit_length()] for s in sums[:, 0]], np.int64)
    shifted = ((sums << (headroom_plus_one - 1)) + (1 << 13)) >> 14
    reciprocal = table_lookup(np.clip(shifted + RECIPROCAL_OFFSET, -32768, 32767), reciprocal_table).astype(np.int64)
    right_shift = 31 - headroom_plus_one
    out = (exps * reciprocal + (np.int64(1) << (right_shift - 1))) >> right_shift
    return [np.clip(out, 0, 32767).astype(np.int16).reshape(x.shape)]


def _infer(args: InferArgs) -> list[TensorType]:
    x = args.types[0]
    if x.dtype != "int16" or x.rank < 1:
        raise OpError(f"input 0 must be int16 data of rank 1 or more, got {x}", input=0)
    for i in (1, 2):
        t = args.types[i]
        if t.dtype != "int16" or t.shape != (TABLE_ENTRIES,) or args.values[i] is None:
            raise OpError(f"input {i} must be a constant int16[{TABLE_ENTRIES}] table, got {t}", input=i)
    multiplier, shift = args.attrs["input_multiplier"], args.attrs["input_left_shift"]
    if not 0 <= multiplier <= fp.INT32_MAX or not -31 <= shift <= 30:
        raise OpError("input_multiplier must be within 0..2^31-1 and input_left_shift within -31..30",
                      attr="input_multiplier")
    return [TensorType("int16", x.shape, Quant((OUTPUT_QUANT[0],), (OUTPUT_QUANT[1],)))]


define("Int16Softmax", inputs=3, infer=_infer, reference=reference, constant_inputs=(1, 2),
       pattern=Pattern.REDUCTION, prepare=rows_facts,
       attrs=[Attr("input_multiplier", "int", 1 << 30), Attr("input_left_shift", "int", 0)])


# --- Int16Lookup: y = the interpolated lookup of int16 x in a 513-entry table (TFLite's int16 GELU) ---
def _infer_lookup(args: InferArgs) -> list[TensorType]:
    x, table = args.types[0], args.types[1]
    if x.dtype != "int16":
        raise OpError(f"input 0 must be int16 data, got {x}", input=0)
    if table.dtype != "int16" or table.shape != (TABLE_ENTRIES,) or args.values[1] is None:
        raise OpError(f"input 1 must be a constant int16[{TABLE_ENTRIES}] table, got {table}", input=1)
    if not args.attrs["y_scale"] > 0:
        raise OpError(f"y_scale must be positive, got {args.attrs['y_scale']}", attr="y_scale")
    return [TensorType("int16", x.shape, Quant((args.attrs["y_scale"],), (0,)))]


define("Int16Lookup", inputs=2, infer=_infer_lookup, constant_inputs=(1,), prepare=elementwise_facts(inputs=(0,)),
       reference=lambda xs, a: [table_lookup(xs[0], xs[1])], attrs=[Attr("y_scale", "float")])
