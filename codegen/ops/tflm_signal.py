"""TensorFlow Lite Micro's signal library (the audio front end of micro speech), one primitive per
custom operator, with the library's integer arithmetic as the NumPy reference.

The arithmetic is the library's specification, written here from its description: a window is a
product shifted right and saturated to int16; FftAutoScale shifts the frame left until its largest
magnitude fills 15 bits; Rfft is a fixed-point mixed-radix (4, then 2) decimation-in-time FFT of
half the length on the samples taken as complex pairs, every stage dividing by its radix with
rounding, followed by the split into the real transform's bins (KISS FFT's fixed-point scheme,
which TFLite Micro uses); Energy is re^2 + im^2; FilterBank accumulates weighted and unweighted
energies over each channel's bins in uint64; FilterBankSquareRoot is a rounded bit-by-bit square
root; FilterBankLog is a table-corrected integer log2 scaled to ln; PCAN is a piecewise-polynomial
gain from a table, then a shrink of the signal-to-noise ratio.

Tables the kernels look up (FFT twiddles, the log correction) are build-time constants made here
(`rfft_tables`, `log_table`) and passed to the primitives as inputs, so the kernels read them from
flash like any constant.
"""
from __future__ import annotations

import math

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ops.registry import Attr, InferArgs, OpError, define, elementwise_facts



# --- helpers of the integer arithmetic --------------------------------------------------------
def _i16(x) -> np.ndarray:
    """Wrap to int16, as storing an int result in an int16 does."""
    return np.asarray(x, np.int64).astype(np.int16).astype(np.int64)


def wrap_i32(v: int) -> int:
    return (v + (1 << 31)) % (1 << 32) - (1 << 31)


def wrap_i16(v: int) -> int:
    return (v + (1 << 15)) % (1 << 16) - (1 << 15)


def msb(x: int) -> int:
    """The number of bits x needs (0 for 0)."""
    return int(x).bit_length()


def _type(args: InferArgs, i: int, op: str, dtype: str, rank: int | None = None) -> TensorType:
    t = args.types[i]
    if t is None or t.dtype != dtype:
        raise OpError(f"{op} input {i} must be {dtype}, not {t.dtype if t else 'omitted'}", input=i)
    if rank is not None and len(t.shape) != rank:
        raise OpError(f"{op} input {i} must have rank {rank}, not {len(t.shape)}", input=i)
    return t


# --- SignalWindow ------------------------------------------------------------------------------
def _infer_window(args: InferArgs):
    x = _type(args, 0, "SignalWindow", "int16")
    w = _type(args, 1, "SignalWindow", "int16", 1)
    if not x.shape or x.shape[-1] != w.shape[0]:
        raise OpError(f"SignalWindow input's last dimension must be the window's length {w.shape[0]}", input=0)
    return [TensorType("int16", x.shape)]


def _window(xs, attrs):
    x, w = (np.asarray(a, np.int64) for a in xs[:2])
    return [np.clip((x * w) >> attrs["shift"], -32768, 32767).astype(np.int16)]


define("SignalWindow", inputs=2, infer=_infer_window, reference=_window,
       attrs=[Attr("shift", "int", 0)], prepare=elementwise_facts())  # the window broadcast over the rows


# --- SignalFftAutoScale ------------------------------------------------------------------------
def auto_scale_bits(x: np.ndarray) -> int:
    """How far FftAutoScale shifts: 15 minus the bits of the frame's peak, never negative. The peak
    is the library's running int16 maximum of value or -value, so -32768 (whose negation wraps to
    itself) sets it to -32768 until a later sample beats that."""
    peak = 0
    for v in np.asarray(x, np.int64).reshape(-1):
        if v > peak:
            peak = int(v)
        elif -v > peak:
            peak = wrap_i16(-int(v))
    return max(15 - (msb(peak & 0xFFFFFFFF) or 32), 0)  # the library's bit length of 0 is 32 (GCC build)


def _infer_auto_scale(args: InferArgs):
    x = _type(args, 0, "SignalFftAutoScale", "int16", 1)
    return [TensorType("int16", x.shape), TensorType("int32", ())]


def _auto_scale(xs, attrs):
    x = np.asarray(xs[0], np.int64)
    bits = auto_scale_bits(x)
    return [_i16(x * (1 << bits)).astype(np.int16), np.array(bits, np.int32)]


def _whole_frame(args: InferArgs, outputs) -> dict:
    """A reduction over the whole frame (its peak), as the reduction nest reads it."""
    return {"shape": tuple(args.types[0].shape), "axes": (0,)}


define("SignalFftAutoScale", inputs=1, outputs=2, infer=_infer_auto_scale, reference=_auto_scale,
       prepare=_whole_frame)


# --- SignalRfft ------------------------------------------------------------------------------
def fft_stages(n: int) -> list[tuple[int, int]]:
    """(radix, remaining length) of each stage of an n-point complex FFT: fours first, then a two."""
    stages = []
    while n > 1:
        p = 4 if n % 4 == 0 else 2 if n % 2 == 0 else 0
        if p == 0:
            raise ValueError(f"{n} is not a power of two")
        n //= p
        stages.append((p, n))
    return stages


def fft_permutation(n: int) -> np.ndarray:
    """Which input element each position of the FFT's work buffer starts from (mixed-radix digit
    reversal of the stages above)."""
    out = np.zeros(n, np.int64)

    def place(at: int, first: int, stride: int, stages: list[tuple[int, int]]) -> None:
        p, m = stages[0]
        for j in range(p):
            if m == 1:
                out[at + j] = first + j * stride
            else:
                place(at + j * m, first + j * stride, stride * p, stages[1:])
    if n > 1:
        place(0, 0, 1, fft_stages(n))
    return out


class FftArithmetic:
    """How the FFT computes in one element type. Fixed point (int16: Q15, int32: Q31): products
    rounded back by (p + 2^(f-1)) >> f, every stage scaling its inputs down by its radix, sums
    wrapping in the element type, halves of sums formed in int32. float32: plain float arithmetic."""

    def __init__(self, dtype: str):
        self.dtype = dtype
        self.fixed = dtype != "float32"
        self.frac = {"int16": 15, "int32": 31}.get(dtype, 0)
        self.one = (1 << self.frac) - 1 if self.fixed else 1.0  # SAMP_MAX, the scaled 1.0

    def unit(self, phase: float) -> tuple:
        """e^(i phase): in fixed point rounded to nearest of one * cos, one * sin."""
        if not self.fixed:
            return float(np.float32(math.cos(phase))), float(np.float32(math.sin(phase)))
        return int(math.floor(0.5 + self.one * math.cos(phase))), int(math.floor(0.5 + self.one * math.sin(phase)))

    def wrap(self, x):
        if not self.fixed:
            return np.asarray(x, np.float32)
        return np.asarray(x, np.int64).astype(self.dtype).astype(np.int64)

    def rounded(self, x):
        return self.wrap((np.asarray(x, np.int64) + (1 << (self.frac - 1))) >> self.frac) if self.fixed else self.wrap(x)

    def cmul(self, ar, ai, br, bi):
        if not self.fixed:
            ar, ai, br, bi = (np.float32(v) if np.isscalar(v) else np.asarray(v, np.float32) for v in (ar, ai, br, bi))
        return self.rounded(ar * br - ai * bi), self.rounded(ar * bi + ai * br)

    def scale_down(self, v, radix: int):
        return self.rounded(np.asarray(v, np.int64) * (self.one // radix)) if self.fixed else v

    def half(self, total):
        """A sum halved: in int32 (where the sum of two int32 wraps) for fixed point."""
        if not self.fixed:
            return np.asarray(total, np.float32) * np.float32(0.5)
        return self.wrap(((np.asarray(total, np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)) >> 1)

    def zeros(self, shape):
        return np.zeros(shape, np.float32 if not self.fixed else np.int64)


def complex_fft(re: np.ndarray, im: np.ndarray, tw: np.ndarray, a: FftArithmetic,
                inverse: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The (scaled, in fixed point) complex FFT of one frame; `inverse` with the inverse's twiddles
    (e^(+i phase)), its radix-4 butterfly turning the other way."""
    n = len(re)
    perm = fft_permutation(n)
    re, im = re[perm].copy(), im[perm].copy()
    stages = fft_stages(n)
    twr, twi = (tw[:, 0], tw[:, 1]) if not a.fixed else (tw[:, 0].astype(np.int64), tw[:, 1].astype(np.int64))
    w = a.wrap
    for level in reversed(range(len(stages))):
        p, m = stages[level]
        fstride = n // (p * m)
        k = np.arange(m)
        for base in range(0, n, p * m):
            at = [base + k + j * m for j in range(p)]
            xr = [a.scale_down(re[i], p) for i in at]
            xi = [a.scale_down(im[i], p) for i in at]
            if p == 2:
                tr, ti = a.cmul(xr[1], xi[1], twr[k * fstride], twi[k * fstride])
                re[at[1]], im[at[1]] = w(xr[0] - tr), w(xi[0] - ti)
                re[at[0]], im[at[0]] = w(xr[0] + tr), w(xi[0] + ti)
                continue
            s0 = a.cmul(xr[1], xi[1], twr[k * fstride], twi[k * fstride])
            s1 = a.cmul(xr[2], xi[2], twr[2 * k * fstride], twi[2 * k * fstride])
            s2 = a.cmul(xr[3], xi[3], twr[3 * k * fstride], twi[3 * k * fstride])
            s5 = (w(xr[0] - s1[0]), w(xi[0] - s1[1]))
            f0 = (w(xr[0] + s1[0]), w(xi[0] + s1[1]))
            s3 = (w(s0[0] + s2[0]), w(s0[1] + s2[1]))
            s4 = (w(s0[0] - s2[0]), w(s0[1] - s2[1]))
            re[at[2]], im[at[2]] = w(f0[0] - s3[0]), w(f0[1] - s3[1])
            re[at[0]], im[at[0]] = w(f0[0] + s3[0]), w(f0[1] + s3[1])
            turn = -1 if inverse else 1
            re[at[1]], im[at[1]] = w(s5[0] + turn * s4[1]), w(s5[1] - turn * s4[0])
            re[at[3]], im[at[3]] = w(s5[0] - turn * s4[1]), w(s5[1] + turn * s4[0])
    return re, im


def rfft_tables(fft_length: int, dtype: str = "int16", inverse: bool = False
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The twiddles [n, 2] of the n = fft_length / 2 point complex FFT, the [n / 2, 2] twiddles of
    the split into real bins (e^(-i phase), e^(+i phase) for the inverse; in fixed point rounded to
    nearest), in the FFT's element type, and the int32 order [n] in which the FFT takes its complex
    samples."""
    a, n = FftArithmetic(dtype), fft_length // 2
    sign = 1 if inverse else -1
    tw = np.array([a.unit(sign * 2 * math.pi * i / n) for i in range(n)], dtype).reshape(n, 2)
    split = np.array([a.unit(sign * math.pi * ((i + 1) / n + 0.5)) for i in range(n // 2)], dtype).reshape(n // 2, 2)
    return tw, split, fft_permutation(n).astype(np.int32)


def rfft_frame(frame: np.ndarray, fft_length: int, dtype: str) -> np.ndarray:
    """One frame's real FFT, [fft_length / 2 + 1] bins as interleaved (re, im)."""
    a, n = FftArithmetic(dtype), fft_length // 2
    x = a.zeros(fft_length)
    x[:len(frame)] = frame
    tw, split, _ = rfft_tables(fft_length, dtype)
    zr, zi = complex_fft(x[0::2], x[1::2], tw, a)
    out = a.zeros((n + 1, 2))
    w = a.wrap
    dc_r, dc_i = a.scale_down(zr[0], 2), a.scale_down(zi[0], 2)
    out[0, 0], out[n, 0] = w(dc_r + dc_i), w(dc_r - dc_i)
    sr, si = (split[:, 0], split[:, 1]) if not a.fixed else (split[:, 0].astype(np.int64), split[:, 1].astype(np.int64))
    for k in range(1, n // 2 + 1):
        pr, pi = a.scale_down(zr[k], 2), a.scale_down(zi[k], 2)
        qr, qi = a.scale_down(zr[n - k], 2), a.scale_down(w(-zi[n - k]), 2)
        f1 = (w(pr + qr), w(pi + qi))
        f2 = (w(pr - qr), w(pi - qi))
        t = a.cmul(f2[0], f2[1], sr[k - 1], si[k - 1])
        out[k] = (a.half(f1[0] + t[0]), a.half(f1[1] + t[1]))
        out[n - k] = (a.half(f1[0] - t[0]), a.half(t[1] - f1[1]))
    return out.reshape(-1).astype(dtype)


RFFT_TYPES = ("int16", "int32", "float32")


def _check_transform(args: InferArgs, op: str) -> tuple[TensorType, int]:
    """An FFT's data input and fft_length, and its tables (tflm_signal.rfft_tables), checked."""
    x = args.types[0]
    if x is None or x.dtype not in RFFT_TYPES:
        raise OpError(f"{op} takes {', '.join(RFFT_TYPES)}, not {x.dtype if x else 'nothing'}", input=0)
    length = args.attrs["fft_length"]
    if length < 4 or length & (length - 1):
        raise OpError(f"{op} fft_length {length} must be a power of two, at least 4", attr="fft_length")
    _type(args, 1, op, x.dtype)
    _type(args, 2, op, x.dtype)
    _type(args, 3, op, "int32")
    if args.types[1].shape != (length // 2, 2) or args.types[2].shape != (length // 4, 2) \
            or args.types[3].shape != (length // 2,):
        raise OpError(f"{op} tables must be [{length // 2}, 2], [{length // 4}, 2] and [{length // 2}] "
                      "(tflm_signal.rfft_tables)", input=1)
    return x, length


def _infer_rfft(args: InferArgs):
    x, length = _check_transform(args, "SignalRfft")
    if not x.shape or x.shape[-1] > length:
        raise OpError(f"SignalRfft frames of {x.shape[-1] if x.shape else 0} samples do not fit fft_length {length}",
                      input=0)
    return [TensorType(x.dtype, (*x.shape[:-1], 2 * (length // 2 + 1)))]


def _per_row(frame_fn):
    """A reference applying frame_fn(row, fft_length, dtype) to each row of the last dimension."""
    def reference(xs, attrs):
        x = np.asarray(xs[0])
        out = np.stack([frame_fn(r, attrs["fft_length"], x.dtype.name) for r in x.reshape(-1, x.shape[-1])])
        return [out.reshape(*x.shape[:-1], -1)]
    return reference


define("SignalRfft", inputs=4, infer=_infer_rfft, reference=_per_row(rfft_frame), attrs=[Attr("fft_length", "int")])


# --- SignalIrfft -----------------------------------------------------------------------------
def irfft_frame(spectrum: np.ndarray, fft_length: int, dtype: str) -> np.ndarray:
    """One frame's inverse real FFT: the n + 1 bins (interleaved re, im) merged into n complex
    values (each scaled down by 2 in fixed point), then the n-point inverse complex FFT, whose
    values are the fft_length samples (float: then divided by fft_length)."""
    a, n = FftArithmetic(dtype), fft_length // 2
    f = np.asarray(spectrum)[:2 * (n + 1)].reshape(n + 1, 2)
    f = f.astype(np.float32) if not a.fixed else f.astype(np.int64)
    tw, split, _ = rfft_tables(fft_length, dtype, inverse=True)
    w = a.wrap
    zr, zi = a.zeros(n), a.zeros(n)
    zr[0], zi[0] = a.scale_down(w(f[0, 0] + f[n, 0]), 2), a.scale_down(w(f[0, 0] - f[n, 0]), 2)
    sr, si = (split[:, 0], split[:, 1]) if not a.fixed else (split[:, 0].astype(np.int64), split[:, 1].astype(np.int64))
    for k in range(1, n // 2 + 1):
        kr, ki = a.scale_down(f[k, 0], 2), a.scale_down(f[k, 1], 2)
        cr, ci = a.scale_down(f[n - k, 0], 2), a.scale_down(w(-f[n - k, 1]), 2)
        er, ei = w(kr + cr), w(ki + ci)
        o = a.cmul(w(kr - cr), w(ki - ci), sr[k - 1], si[k - 1])
        zr[k], zi[k] = w(er + o[0]), w(ei + o[1])
        zr[n - k], zi[n - k] = w(er - o[0]), w(-w(ei - o[1]))
    out_r, out_i = complex_fft(zr, zi, tw, a, inverse=True)
    out = np.stack([out_r, out_i], axis=1).reshape(-1)
    if not a.fixed:  # the float transform is unscaled: divided by fft_length after it (fixed point scales as it goes)
        out = out / np.float32(fft_length)
    return out.astype(dtype)


def _infer_irfft(args: InferArgs):
    x, length = _check_transform(args, "SignalIrfft")
    if not x.shape or x.shape[-1] < 2 * (length // 2 + 1) or x.shape[-1] % 2:
        raise OpError(f"SignalIrfft rows must hold at least the {length // 2 + 1} bins of fft_length {length}",
                      input=0)
    return [TensorType(x.dtype, (*x.shape[:-1], length))]


define("SignalIrfft", inputs=4, infer=_infer_irfft, reference=_per_row(irfft_frame), attrs=[Attr("fft_length", "int")])


# --- SignalEnergy ----------------------------------------------------------------------------
def _infer_energy(args: InferArgs):
    x = _type(args, 0, "SignalEnergy", "int16", 1)
    bins = x.shape[0] // 2
    start, end = args.attrs["start_index"], args.attrs["end_index"]
    if not 0 <= start <= end <= bins:
        raise OpError(f"SignalEnergy needs 0 <= start_index <= end_index <= {bins}, got {start} and {end}",
                      attr="start_index")
    return [TensorType("uint32", (bins,))]


def _energy(xs, attrs):
    x = np.asarray(xs[0], np.int64).reshape(-1, 2)
    out = np.zeros(len(x), np.uint32)  # bins outside [start, end) are left 0
    s, e = attrs["start_index"], attrs["end_index"]
    out[s:e] = (x[s:e, 0] ** 2 + x[s:e, 1] ** 2).astype(np.uint32)
    return [out]


def _energy_facts(args: InferArgs, outputs) -> dict:
    """One output element per complex bin, whose real part is input element 2i (stride 2)."""
    return {"shape": tuple(outputs[0].shape), "strides": ((2,),)}


define("SignalEnergy", inputs=1, infer=_infer_energy, reference=_energy,
       attrs=[Attr("start_index", "int"), Attr("end_index", "int")], prepare=_energy_facts)


# --- SignalFilterBank ------------------------------------------------------------------------
FILTER_BANK_TABLES = ("weights", "unweights", "channel_frequency_starts", "channel_weight_starts", "channel_widths")


def _infer_filter_bank(args: InferArgs):
    op = "SignalFilterBank"
    x = _type(args, 0, op, "uint32", 1)
    channels = args.attrs["num_channels"]
    for i, what in enumerate(FILTER_BANK_TABLES, 1):
        _type(args, i, op, "int16", 1)
        if args.values[i] is None:
            raise OpError(f"{op} {what} must be a constant", input=i)
    starts, wstarts, widths = (np.asarray(args.values[i], np.int64) for i in (3, 4, 5))
    if not len(starts) == len(wstarts) == len(widths) == channels + 1:
        raise OpError(f"{op} channel tables must hold num_channels + 1 = {channels + 1} entries", input=3)
    weights = len(args.values[1])
    if len(args.values[2]) != weights or np.any(widths < 0) or np.any(starts < 0) or np.any(wstarts < 0) \
            or np.any(starts + widths > x.shape[0]) or np.any(wstarts + widths > weights):
        raise OpError(f"{op} channels reach past the {x.shape[0]} bins or the {weights} weights", input=3)
    return [TensorType("uint64", (channels,))]


def filter_bank(x, weights, unweights, starts, wstarts, widths) -> np.ndarray:
    """Channel i: its bins times their weights plus the previous channel's bins times their unweights."""
    x = np.asarray(x, np.uint64)
    out = []
    carried = np.uint64(0)
    for s, ws, wd in zip(starts, wstarts, widths):
        bins = x[int(s):int(s) + int(wd)]
        w = np.asarray(weights[int(ws):int(ws) + int(wd)], np.int64).astype(np.uint64)
        u = np.asarray(unweights[int(ws):int(ws) + int(wd)], np.int64).astype(np.uint64)
        out.append(carried + np.sum(w * bins, dtype=np.uint64))
        carried = np.sum(u * bins, dtype=np.uint64)
    return np.array(out[1:], np.uint64)


def _filter_bank(xs, attrs):
    return [filter_bank(*xs[:6])]


def _filter_bank_facts(args: InferArgs, outputs) -> dict:
    """A ragged reduction over the bins: each of the num_channels + 1 table channels sums its run of
    bins (`segments`: first bin, width), its weights from `weight_starts`."""
    starts, wstarts, widths = (np.asarray(args.values[i], np.int64) for i in (3, 4, 5))
    return {"shape": tuple(args.types[0].shape), "axes": (0,),
            "segments": tuple(zip(starts.tolist(), widths.tolist())), "weight_starts": tuple(wstarts.tolist())}


define("SignalFilterBank", inputs=6, infer=_infer_filter_bank, reference=_filter_bank,
       constant_inputs=[1, 2, 3, 4, 5], attrs=[Attr("num_channels", "int")], prepare=_filter_bank_facts)


# --- SignalFilterBankSquareRoot --------------------------------------------------------------
def isqrt_rounded(v: int) -> int:
    """The library's square root: floor, plus one where the remainder exceeds the root (not past
    0xFFFF for inputs below 2^32, which take a 32-bit path, nor past 0xFFFFFFFF)."""
    root = math.isqrt(v)
    cap = 0xFFFF if v >> 32 == 0 else 0xFFFFFFFF
    return root + (v - root * root > root and root != cap)


def _infer_sqrt(args: InferArgs):
    x = _type(args, 0, "SignalFilterBankSquareRoot", "uint64", 1)
    _type(args, 1, "SignalFilterBankSquareRoot", "int32", 0)
    return [TensorType("uint32", x.shape)]


def _sqrt(xs, attrs):
    shift = int(np.asarray(xs[1]).reshape(-1)[0])
    return [np.array([isqrt_rounded(int(v)) >> shift for v in np.asarray(xs[0], np.uint64)], np.uint32)]


define("SignalFilterBankSquareRoot", inputs=2, infer=_infer_sqrt, reference=_sqrt,
       prepare=elementwise_facts())  # the scale bits a scalar operand, broadcast


# --- SignalFilterBankLog ---------------------------------------------------------------------
LOG_SEGMENTS_LOG2, LOG_SCALE_LOG2 = 7, 16
LOG_COEFF = 45426  # ln(2) in Q16


def log_table() -> np.ndarray:
    """The correction log2(1 + f) - f at 128 segments of [0, 1], in Q16 (and a zero of padding)."""
    f = np.arange(129) / 128
    return np.append(np.round((np.log2(1 + f) - f) * 65536), 0).astype(np.uint16)


def log32(x: int, out_scale: int, table: np.ndarray) -> int:
    """ln(x) * out_scale / 2^16... as the library's integer log: log2 from the bit length and the
    table-corrected fraction, times ln 2, then scaled, each step rounded in Q16."""
    integer = msb(x) - 1
    frac = x - (1 << integer)
    frac = frac << (16 - integer) if integer < 16 else frac >> (integer - 16)
    seg = frac >> (LOG_SCALE_LOG2 - LOG_SEGMENTS_LOG2)
    c0, c1 = int(table[seg]), int(table[seg + 1])
    rel = ((c1 - c0) * (frac - (seg << (LOG_SCALE_LOG2 - LOG_SEGMENTS_LOG2)))) >> LOG_SCALE_LOG2
    log2 = ((integer << 16) + frac + c0 + rel) & 0xFFFFFFFF
    loge = ((LOG_COEFF * log2 + 32768) >> 16) & 0xFFFFFFFF
    return (((out_scale * loge) & 0xFFFFFFFF) + 32768 & 0xFFFFFFFF) >> 16


def _infer_log(args: InferArgs):
    x = _type(args, 0, "SignalFilterBankLog", "uint32", 1)
    _type(args, 1, "SignalFilterBankLog", "uint16", 1)
    return [TensorType("int16", x.shape)]


def _log(xs, attrs):
    table = np.asarray(xs[1], np.int64)
    out = []
    for v in np.asarray(xs[0], np.uint64):
        scaled = (int(v) << attrs["input_correction_bits"]) & 0xFFFFFFFF
        out.append(min(log32(scaled, attrs["output_scale"] & 0xFFFFFFFF, table), 32767) if scaled > 1 else 0)
    return [np.array(out, np.int16)]


define("SignalFilterBankLog", inputs=2, infer=_infer_log, reference=_log,
       attrs=[Attr("input_correction_bits", "int", 0), Attr("output_scale", "int", 1)],
       prepare=elementwise_facts(inputs=(0,)))  # the correction table is not an operand


# --- SignalPCAN ------------------------------------------------------------------------------
PCAN_SNR_BITS, PCAN_OUTPUT_BITS = 12, 6


def pcan_gain(x: int, lut: np.ndarray) -> int:
    """The wide-dynamic gain: a table entry below 3, else a quadratic in the bits below the top
    one, with coefficients from the segment of its bit length."""
    if x <= 2:
        return int(lut[x])
    interval = msb(x)
    a0, a1, a2 = (int(v) for v in lut[4 * interval - 6:4 * interval - 3])
    frac = ((x << (11 - interval)) if interval < 11 else (x >> (interval - 11))) & 0x3FF
    r = wrap_i32(((a2 * frac) >> 5) + a1 * 32)
    r = wrap_i32(wrap_i32(r * frac) + (1 << 14)) >> 15
    return wrap_i16(r + a0)


def pcan_shrink(x: int) -> int:
    if x < (2 << PCAN_SNR_BITS):
        return ((x * x) & 0xFFFFFFFF) >> (2 + 2 * PCAN_SNR_BITS - PCAN_OUTPUT_BITS)
    return ((x >> (PCAN_SNR_BITS - PCAN_OUTPUT_BITS)) - (1 << PCAN_OUTPUT_BITS)) & 0xFFFFFFFF


def _infer_pcan(args: InferArgs):
    op = "SignalPCAN"
    x = _type(args, 0, op, "uint32", 1)
    noise = _type(args, 1, op, "uint32", 1)
    lut = _type(args, 2, op, "int16", 1)
    if noise.shape != x.shape:
        raise OpError(f"{op} noise estimate must have the input's shape {list(x.shape)}", input=1)
    if lut.shape[0] < 4 * 32 - 3:  # the segment of a 32-bit noise estimate
        raise OpError(f"{op} gain table holds {lut.shape[0]} entries; it needs {4 * 32 - 3}", input=2)
    return [TensorType("uint32", x.shape)]


def _pcan(xs, attrs):
    x, noise, lut = np.asarray(xs[0], np.uint64), np.asarray(xs[1], np.uint64), np.asarray(xs[2], np.int64)
    out = []
    for v, n in zip(x, noise):
        gain = pcan_gain(int(n), lut) & 0xFFFFFFFF
        snr = ((int(v) * gain) >> attrs["snr_shift"]) & 0xFFFFFFFF
        out.append(pcan_shrink(snr))
    return [np.array(out, np.uint32)]


define("SignalPCAN", inputs=3, infer=_infer_pcan, reference=_pcan, attrs=[Attr("snr_shift", "int")],
       prepare=elementwise_facts(inputs=(0, 1)))  # the gain table is not an operand


# --- SignalFilterBankSpectralSubtraction -----------------------------------------------------
SPECTRAL_SUBTRACTION_ATTRS = ("smoothing", "one_minus_smoothing", "alternate_smoothing",
                              "alternate_one_minus_smoothing", "smoothing_bits", "min_signal_remaining",
                              "spectral_subtraction_bits", "clamping")


def spectral_subtraction(x: np.ndarray, noise: np.ndarray, attrs) -> tuple[np.ndarray, np.ndarray]:
    """One frame: the noise estimate (a running average, the odd channels with the alternate
    coefficients) updated from the frame, then the frame less the estimate, floored at
    min_signal_remaining of the frame. Returns (output, updated estimate); the estimate is the
    operator's state, zero before the first frame."""
    bits, sbits = attrs["smoothing_bits"], attrs["spectral_subtraction_bits"]
    out, noise = np.zeros(len(x), np.uint32), np.array(noise, np.uint64)
    for i, v in enumerate(np.asarray(x, np.uint64)):
        odd = i & 1
        smooth = attrs["alternate_smoothing" if odd else "smoothing"]
        rest = attrs["alternate_one_minus_smoothing" if odd else "one_minus_smoothing"]
        up = (int(v) << bits) & 0xFFFFFFFF
        estimate = ((up * smooth + int(noise[i]) * rest) >> sbits) & 0xFFFFFFFF
        noise[i] = estimate
        if estimate > up:
            estimate = up
            if attrs["clamping"]:
                noise[i] = estimate
        floor = ((int(v) * attrs["min_signal_remaining"]) >> sbits) & 0xFFFFFFFF
        out[i] = max((up - estimate) >> bits, floor)
    return out, noise.astype(np.uint32)


def _infer_spectral_subtraction(args: InferArgs):
    x = _type(args, 0, "SignalFilterBankSpectralSubtraction", "uint32", 1)
    return [TensorType("uint32", x.shape), TensorType("uint32", x.shape)]


def _spectral_subtraction(xs, attrs):
    x = np.asarray(xs[0])
    return list(spectral_subtraction(x, np.zeros(len(x), np.uint32), attrs))


define("SignalFilterBankSpectralSubtraction", inputs=1, outputs=2, infer=_infer_spectral_subtraction,
       reference=_spectral_subtraction,
       attrs=[Attr(n, "int", 0, (0, 1) if n == "clamping" else None) for n in SPECTRAL_SUBTRACTION_ATTRS],
       prepare=elementwise_facts())


# --- stateful stream operators: Delay, Framer, Stacker, OverlapAdd ---------------------------
# Each keeps samples from call to call (its state, zero before the first call); the references
# compute one call from that zero state.
def _rows(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).reshape(-1, np.asarray(x).shape[-1])


def _infer_delay(args: InferArgs):
    x = _type(args, 0, "SignalDelay", "int16")
    if not x.shape:
        raise OpError("SignalDelay needs at least one dimension", input=0)
    return [TensorType("int16", x.shape)]


def _delay(xs, attrs):
    """Each row delayed by delay_length samples (zeros before the first call's samples)."""
    x = np.asarray(xs[0])
    rows = _rows(x)
    padded = np.concatenate([np.zeros((len(rows), attrs["delay_length"]), np.int16), rows], axis=1)
    return [padded[:, :rows.shape[1]].reshape(x.shape)]


define("SignalDelay", inputs=1, infer=_infer_delay, reference=_delay, attrs=[Attr("delay_length", "int")],
       prepare=lambda args, outputs: {"delay_length": args.attrs["delay_length"]})  # (the delay line's size)


def framer_capacity(frame_size: int, frame_step: int) -> int:
    """Samples a row's queue holds: frame_size rounded up to a multiple of frame_step."""
    return -(-frame_size // frame_step) * frame_step


def _infer_framer(args: InferArgs):
    op = "SignalFramer"
    x = _type(args, 0, op, "int16")
    size, step = args.attrs["frame_size"], args.attrs["frame_step"]
    if not x.shape or step <= 0 or size <= 0 or x.shape[-1] % step:
        raise OpError(f"{op} input's last dimension must be a multiple of frame_step {step}", input=0)
    return [TensorType("int16", (*x.shape[:-1], x.shape[-1] // step, size)), TensorType("bool", ())]


def _framer(xs, attrs):
    """Frames of frame_size every frame_step samples; a frame is complete once the queue (prefilled
    with frame_size - frame_step zeros, or empty) holds frame_size samples: the oldest are framed."""
    x = np.asarray(xs[0])
    size, step = attrs["frame_size"], attrs["frame_step"]
    rows = _rows(x)
    frames = rows.shape[1] // step
    out = np.zeros((len(rows), frames, size), np.int16)
    valid = True
    for r, row in enumerate(rows):
        queue = [0] * (size - step) if attrs["prefill"] else []
        for f in range(frames):
            queue += list(row[f * step:(f + 1) * step])
            if len(queue) >= size:
                out[r, f] = queue[:size]
                queue = queue[step:]
            else:
                valid = False
    return [out.reshape(*x.shape[:-1], frames, size), np.array(valid)]


define("SignalFramer", inputs=1, outputs=2, infer=_infer_framer, reference=_framer,
       attrs=[Attr("frame_size", "int"), Attr("frame_step", "int"), Attr("prefill", "int", 0, (0, 1))])


def stacker_sizes(attrs) -> tuple[int, int]:
    """(values a stacked output holds, values each output moves on by)."""
    channels = attrs["num_channels"]
    return channels * (attrs["stacker_left_context"] + attrs["stacker_right_context"] + 1), \
        channels * attrs["stacker_step"]


def _infer_stacker(args: InferArgs):
    op = "SignalStacker"
    x = _type(args, 0, op, "int16", 1)
    size, step = stacker_sizes(args.attrs)
    if x.shape[0] != args.attrs["num_channels"] or not 0 < step <= size:
        raise OpError(f"{op} input must hold num_channels = {args.attrs['num_channels']} values and "
                      "stacker_step lie in [1, left + right + 1]", input=0)
    return [TensorType("int16", (stacker_sizes(args.attrs)[0],)), TensorType("bool", ())]


def _stacker(xs, attrs):
    """The first frame (repeated left_context more times, as the left context) stacked once
    left + right + 1 frames are queued; until then the output is not valid."""
    size, _ = stacker_sizes(attrs)
    queue = list(xs[0]) * (attrs["stacker_left_context"] + 1)
    out = np.zeros(size, np.int16)
    if len(queue) >= size:
        out[:] = queue[:size]
    return [out, np.array(len(queue) >= size)]


define("SignalStacker", inputs=1, outputs=2, infer=_infer_stacker, reference=_stacker,
       attrs=[Attr(n, "int") for n in ("num_channels", "stacker_left_context", "stacker_right_context",
                                       "stacker_step")])


OVERLAP_ADD_TYPES = ("int16", "float32")


def _infer_overlap_add(args: InferArgs):
    op = "SignalOverlapAdd"
    x = args.types[0]
    if x is None or x.dtype not in OVERLAP_ADD_TYPES or len(x.shape) < 2:
        raise OpError(f"{op} takes frames [..., n_frames, frame_size] of {' or '.join(OVERLAP_ADD_TYPES)}", input=0)
    step = args.attrs["frame_step"]
    if not 0 < step <= x.shape[-1]:
        raise OpError(f"{op} frame_step {step} must be in [1, frame_size {x.shape[-1]}]", attr="frame_step")
    return [TensorType(x.dtype, (*x.shape[:-2], x.shape[-2] * step))]


def _overlap_add(xs, attrs):
    """Each frame added onto the running sum (int16: saturated), whose first frame_step samples
    are the output and then leave it."""
    x = np.asarray(xs[0])
    size, step = x.shape[-1], attrs["frame_step"]
    frames = x.reshape(-1, x.shape[-2], size)
    out = np.zeros((len(frames), x.shape[-2] * step), x.dtype)
    for r, row in enumerate(frames):
        acc = np.zeros(size, np.float32 if x.dtype == np.float32 else np.int64)
        for f, frame in enumerate(row):
            acc = acc + frame
            if x.dtype != np.float32:
                acc = np.clip(acc, -32768, 32767)
            out[r, f * step:(f + 1) * step] = acc[:step]
            acc = np.concatenate([acc[step:], np.zeros(step, acc.dtype)])
    return [out.reshape(*x.shape[:-2], -1)]


define("SignalOverlapAdd", inputs=1, infer=_infer_overlap_add, reference=_overlap_add,
       attrs=[Attr("frame_step", "int")])
