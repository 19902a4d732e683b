"""TFLite's int8 ADD as one linear form of its raw inputs, where one reproduces it exactly.

TFLite's ADD (QAdd) rescales each input to twice the larger input scale and the sum to the output
scale: three fixed-point multiplications per value, each a 64-bit product on a vector unit. Its
result is a function of the two int8 inputs alone, so all 65,536 input pairs can be checked at
build time. Where integers (ma, mb, c, s) exist with

    clamp(floor((a * ma + b * mb + c) / 2^s)) == QAdd(a, b)   for every int8 pair (a, b)

(zero points, rounding and the output zero point folded into c; where the reference saturates at
act_min or act_max the form need only reach that end), a kernel computes that instead: two 32-bit
multiplies, two adds and one arithmetic shift per value, what XNNPACK's ADD computes, but with
constants proved to give TFLite's outputs bit for bit. The form is sought near the real ratios
a_scale / y_scale and b_scale / y_scale scaled by 2^s, for growing s, within int32 range; most
scale triples have one (the two roundings of the fixed-point path move the exact results by
millionths of an output step, so only inputs near a rounding boundary constrain the form), and a
node without one keeps the fixed-point kernel.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tinsmith.quant import fixed_point as fp

SHIFTS = range(12, 25)  # s tried, smallest first
REACH = 8  # multipliers tried within this distance of the rounded real ratio times 2^s


@dataclass(frozen=True)
class LinearAdd:
    """clamp(floor((a * a_mult + b * b_mult + offset) / 2^shift), act_min, act_max) on raw int8 a, b."""

    a_mult: int
    b_mult: int
    offset: int
    shift: int


def _pairs() -> tuple[np.ndarray, np.ndarray]:
    """Every int8 pair (a, b), as two int8 arrays of 65,536 values."""
    a, b = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij")
    return a.reshape(-1).astype(np.int8), b.reshape(-1).astype(np.int8)


def _offsets() -> np.ndarray:
    d = np.arange(-REACH, REACH + 1)
    return d[np.argsort(np.abs(d), kind="stable")]


# reference(a, b, attrs): the ADD's int8 outputs for int8 arrays a and b (the QAdd primitive's reference)
Reference = Callable[[np.ndarray, np.ndarray, dict], np.ndarray]

KEYS = ("a_scale", "a_zero_point", "b_scale", "b_zero_point", "y_scale", "y_zero_point", "act_min", "act_max")


def find_linear_add(attrs, reference: Reference) -> LinearAdd | None:
    """The linear form reproducing this int8 ADD (QAdd's attributes, act_min and act_max given) on
    every input pair, or None (see the module doc)."""
    return _find(tuple((k, attrs[k]) for k in KEYS), reference)


@functools.lru_cache(maxsize=None)
def _find(key: tuple, reference: Reference) -> LinearAdd | None:
    attrs = dict(key)
    a8, b8 = _pairs()
    a, b = a8.astype(np.int64), b8.astype(np.int64)
    out = np.asarray(reference(a8, b8, attrs), np.int64)
    act_min, act_max = attrs["act_min"], attrs["act_max"]
    low, high = out > act_min, out < act_max  # where the form must not fall below, rise above, the output
    alpha = fp.as_float32(attrs["a_scale"]) / fp.as_float32(attrs["y_scale"])
    beta = fp.as_float32(attrs["b_scale"]) / fp.as_float32(attrs["y_scale"])
    # the pairs whose real sum lies nearest a rounding boundary bound the form; the search runs on
    # them and each candidate is then checked on every pair
    real = alpha * (a - attrs["a_zero_point"]) + beta * (b - attrs["b_zero_point"]) + attrs["y_zero_point"]
    near = np.union1d(_nearest(np.where(low, real - out, np.inf)), _nearest(np.where(high, out + 1 - real, np.inf)))
    steps = _offsets()
    for s in SHIFTS:
        if (128 * (abs(alpha) + abs(beta)) + abs(attrs["y_zero_point"]) + 2) * 2 ** s >= 2 ** 30:
            break  # the sums would come near int32's ends
        b_mults = round(beta * 2 ** s) + steps
        for a_mult in round(alpha * 2 ** s) + steps:
            least, most = _bounds(a[near], b[near], out[near], low[near], high[near], a_mult, b_mults, s)
            for row in np.flatnonzero(least <= most):
                form = _checked(a, b, out, low, high, int(a_mult), int(b_mults[row]), s)
                if form is not None:
                    return form
    return None


NEAR = 2048  # pairs nearest a boundary on each side that the search runs on


def _nearest(distance: np.ndarray) -> np.ndarray:
    order = np.argsort(distance, kind="stable")[:NEAR]
    return order[np.isfinite(distance[order])]


def _bounds(a, b, out, low, high, a_mult, b_mults, s) -> tuple[np.ndarray, np.ndarray]:
    """Per b multiplier, the least and the most offset c that keep floor((a * a_mult + b * b_mult + c)
    / 2^s) at these pairs' outputs (at least where `low`, at most where `high`)."""
    t = a * a_mult + b * b_mults[:, None]  # one row per b multiplier
    base = out << s
    least = np.where(low, base - t, np.iinfo(np.int64).min).max(axis=1)
    most = np.where(high, base + (1 << s) - 1 - t, np.iinfo(np.int64).max).min(axis=1)
    return least, most


def _checked(a, b, out, low, high, a_mult: int, b_mult: int, s: int) -> LinearAdd | None:
    """The form with these multipliers on every pair, if an offset makes it exact within int32."""
    (least,), (most,) = _bounds(a, b, out, low, high, a_mult, np.array([b_mult]), s)
    if least > most or np.abs(a * a_mult + b * b_mult + least).max() >= 2 ** 31:
        return None
    return LinearAdd(a_mult, b_mult, int(least), s)
