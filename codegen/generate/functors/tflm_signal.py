"""Kernels of TFLite Micro's signal library (codegen/ops/tflm_signal.py holds the arithmetic and its
NumPy reference): the same integer steps in the loop IR, every intermediate in the C++ type the
library gives it, so results are bit-exact and overflow wraps the way it does there (never as
undefined behaviour: products that may leave int32 are formed in int64 and narrowed).

The FFT is written from its structure, not as a call: the samples are gathered in the stages'
digit-reversed order (a constant table), then each radix-4 (and a last radix-2) stage runs over
its blocks in the scratch buffer, reading twiddles from a constant table, then the complex result
is split into the real transform's bins. Branches are Selects whose unused side is kept in range
(a table index or a shift amount of a value the Select discards is clamped)."""
from __future__ import annotations

from dataclasses import replace

from tinsmith.generate.backend import CPP, takes
from tinsmith.generate.functors import elementwise_nest, reduction_nest
from tinsmith.generate.functors.elementwise_nest import AXES, ElementwiseNest, Operand
from tinsmith.generate.functors.reduction_nest import Passes, ReductionNest, ReductionSchedule, Row, local, sweep
from tinsmith.generate.loop_ir import (INDEX, Assign, Binary, Cast, Const, Expr, For, Load, Local, Scratch, Select,
                                       Stmt, Store, Var, index)
from tinsmith.ops import tflm_signal as sig


def c(v: int, dtype: str) -> Expr:
    """A literal of `dtype` (a cast, so C++ computes in that type)."""
    return Cast(dtype, Const(int(v), dtype))


def b(op: str, x: Expr, y: Expr) -> Expr:
    return Binary(op, x, y)


def sel(cond: Expr, x: Expr, y: Expr) -> Expr:
    return Select(cond, x, y)


def add(*xs: Expr) -> Expr:
    out = xs[0]
    for x in xs[1:]:
        out = b("+", out, x)
    return out


def mul(x: Expr, y: Expr) -> Expr:
    return b("*", x, y)


def at(*parts) -> Expr:
    """An index expression: ints and index expressions added."""
    exprs = [index(p) if isinstance(p, int) else p for p in parts]
    return add(*exprs)


def bit_length(value: Expr, name: str) -> list[Stmt]:
    """Local `name` (int32): the number of bits `value` (uint32) needs, 0 for 0: a binary search
    over the halves, quarters, ... of the word (five steps, not a loop over 32 bits)."""
    rest, u32 = f"{name}_rest", "uint32"
    stmts: list[Stmt] = [Local(name, c(0, "int32"), "int32"), Local(rest, Cast(u32, value), u32)]
    for half in (16, 8, 4, 2, 1):
        high = b(">>", Var(rest), c(half, u32))
        above = b("!=", high, c(0, u32))
        stmts += [Assign(name, sel(above, add(Var(name), c(half, "int32")), Var(name))),
                  Assign(rest, sel(above, high, Var(rest)))]
    return stmts + [Assign(name, add(Var(name), Cast("int32", b("!=", Var(rest), c(0, u32)))))]


# --- SignalWindow ------------------------------------------------------------------------------
@CPP.register("SignalWindow", family="elementwise", types=takes("int16", "int16", out="int16", acc="int32"))
def window(graph, node_id, cluster_id, args, attrs):
    """y = clamp((x * w) >> shift) to int16, the window broadcast over the leading dimensions."""
    shift = c(attrs["shift"], "int32")

    def windowed(xs, idx):
        raw = b(">>", mul(Cast("int32", xs[0]), Cast("int32", xs[1])), shift)
        return [Local("raw", raw, "int32")], Cast("int16", saturated(Var("raw"), -32768, 32767))
    return elementwise_nest.elementwise(ElementwiseNest.of(args), AXES, windowed)


def saturated(v: Expr, lo: int, hi: int) -> Expr:
    """An int32 value clamped to [lo, hi]."""
    return sel(b("<", v, c(lo, "int32")), c(lo, "int32"), sel(b(">", v, c(hi, "int32")), c(hi, "int32"), v))


# --- SignalFftAutoScale ------------------------------------------------------------------------
WHOLE_FRAME = ReductionSchedule(kept=(), reduced=("i",))  # no kept axis: one pass over the frame


@CPP.register("SignalFftAutoScale", family="reduction", types=takes("int16", out=("int16", "int32")))
def fft_auto_scale(graph, node_id, cluster_id, args, attrs):
    """The running peak of value or -value (as int16), its bit length, then x << (15 - bits)."""
    x, (y, scale) = args.inputs[0], args.outputs

    def peak(row: Row) -> list[Stmt]:
        v = Cast("int32", Load(x.name, row.at()))
        neg = b("-", c(0, "int32"), v)
        return [Assign("peak", sel(b(">", v, Var("peak")), v,
                                   sel(b(">", neg, Var("peak")), Cast("int32", Cast("int16", neg)), Var("peak"))))]

    def shift(row: Row) -> list[Stmt]:
        bits = b("-", c(15, "int32"), Var("peak_bits"))
        # the library's bit length of 0 is 32 (as built with GCC): a silent frame is not shifted
        return [*bit_length(Cast("uint32", Var("peak")), "peak_bits"),
                Assign("peak_bits", sel(b("==", Var("peak"), c(0, "int32")), c(32, "int32"), Var("peak_bits"))),
                Local("shift", sel(b(">", bits, c(0, "int32")), bits, c(0, "int32")), "int32")]

    def scaled(row: Row) -> list[Stmt]:
        v = Cast("int32", Load(x.name, row.at()))
        return [Store(y.name, row.at(), Cast("int16", mul(v, b("<<", c(1, "int32"), Var("shift")))))]
    return reduction_nest.reduction(ReductionNest.of(args), WHOLE_FRAME, Passes((
        local("peak", lambda row: c(0, "int32"), "int32"), sweep(peak), shift, sweep(scaled),
        lambda row: [Store(scale.name, index(0), Var("shift"))])))


# --- SignalRfft ------------------------------------------------------------------------------
WORK = "fft_work"


class FftSteps:
    """Builds the FFT's statements in one element type (sig.FftArithmetic is the arithmetic):
    every complex value a pair of locals of that type; sums formed in a wider type and narrowed
    (wrapping as the library's stores wrap), Q15/Q31 products rounded back."""

    WIDE = {"int16": "int32", "int32": "int64", "float32": "float32"}

    def __init__(self, dtype: str):
        self.arith = sig.FftArithmetic(dtype)
        self.dtype, self.wide_type = dtype, self.WIDE[dtype]
        self.product_type = "int64" if dtype == "int32" else self.wide_type
        self.stmts: list[Stmt] = []
        self.count = 0

    def let(self, value: Expr) -> Var:
        self.count += 1
        name = f"q{self.count}"
        self.stmts.append(Local(name, Cast(self.dtype, value), self.dtype))
        return Var(name)

    def pair(self, re: Expr, im: Expr) -> tuple[Var, Var]:
        return self.let(re), self.let(im)

    def wide(self, e: Expr) -> Expr:
        return Cast(self.wide_type, e)

    def rounded(self, e: Expr) -> Expr:
        if not self.arith.fixed:
            return e
        frac = self.arith.frac
        return b(">>", b("+", e, c(1 << (frac - 1), self.product_type)), c(frac, self.product_type))

    def cmul(self, x, tw) -> tuple[Var, Var]:
        (ar, ai), (br, bi) = [(Cast(self.product_type, p), Cast(self.product_type, q)) for p, q in (x, tw)]
        return self.pair(self.rounded(b("-", mul(ar, br), mul(ai, bi))), self.rounded(add(mul(ar, bi), mul(ai, br))))

    def scale_down(self, x, radix: int) -> tuple:
        if not self.arith.fixed:
            return x
        k = c(self.arith.one // radix, self.product_type)
        return self.pair(*(self.rounded(mul(Cast(self.product_type, v), k)) for v in x))

    def plus(self, x, y) -> tuple[Var, Var]:
        return self.pair(add(self.wide(x[0]), self.wide(y[0])), add(self.wide(x[1]), self.wide(y[1])))

    def minus(self, x, y) -> tuple[Var, Var]:
        return self.pair(b("-", self.wide(x[0]), self.wide(y[0])), b("-", self.wide(x[1]), self.wide(y[1])))

    def negated(self, v: Expr) -> Var:
        return self.let(b("-", c(0, self.wide_type), self.wide(v)))

    def half(self, total: Expr) -> Expr:
        """A sum halved: in int32 for fixed point (a sum of two int32 wraps there first)."""
        if not self.arith.fixed:
            return mul(total, Const(0.5, "float32"))
        return b(">>", Cast("int32", total), c(1, "int32"))


def _load_pair(buffer: str, i: Expr) -> tuple[Expr, Expr]:
    return Load(buffer, mul(i, index(2))), Load(buffer, add(mul(i, index(2)), index(1)))


def _store_pair(buffer: str, i: Expr, value, dtype: str, offset: Expr | None = None) -> list[Stmt]:
    base = mul(i, index(2)) if offset is None else add(offset, mul(i, index(2)))
    return [Store(buffer, base, Cast(dtype, value[0])), Store(buffer, add(base, index(1)), Cast(dtype, value[1]))]


def _stage(p: int, m: int, fstride: int, twiddles: str, dtype: str, inverse: bool = False) -> Stmt:
    """One radix-p stage: for each block and k < m, the butterfly of the p points k + j m (the
    inverse's radix-4 butterfly turns the other way)."""
    q = FftSteps(dtype)
    base = add(mul(Var("blk"), index(p * m)), Var("k"))
    points = [at(base, j * m) for j in range(p)]
    xs = [q.scale_down(_load_pair(WORK, i), p) for i in points]
    tws = [_load_pair(twiddles, mul(Var("k"), index(j * fstride))) for j in range(1, p)]
    if p == 2:
        t = q.cmul(xs[1], tws[0])
        outs = [q.plus(xs[0], t), q.minus(xs[0], t)]
    else:
        s0, s1, s2 = (q.cmul(xs[j], tws[j - 1]) for j in (1, 2, 3))
        s5 = q.minus(xs[0], s1)
        f0 = q.plus(xs[0], s1)
        s3, s4 = q.plus(s0, s2), q.minus(s0, s2)
        turn_a = q.pair(add(q.wide(s5[0]), q.wide(s4[1])), b("-", q.wide(s5[1]), q.wide(s4[0])))
        turn_b = q.pair(b("-", q.wide(s5[0]), q.wide(s4[1])), add(q.wide(s5[1]), q.wide(s4[0])))
        outs = [q.plus(f0, s3), turn_b if inverse else turn_a, q.minus(f0, s3), turn_a if inverse else turn_b]
    stores = [s for i, v in zip(points, outs) for s in _store_pair(WORK, i, v, dtype)]
    return For("blk", fstride, (For("k", m, (*q.stmts, *stores)),))


def _gather(x: str, length: int, row: Expr, order: str, n: int, dtype: str) -> Stmt:
    """The complex samples into the work buffer in the FFT's order, zeros past the frame's end."""
    stmts: list[Stmt] = [Local("src", Cast(INDEX, mul(Load(order, Var("j")), index(2))), INDEX)]
    for part in (0, 1):
        i = add(Var("src"), index(part))
        inside = b("<", i, index(length))
        value = sel(inside, Load(x, add(row, sel(inside, i, index(0)))), c(0, dtype))
        stmts.append(Store(WORK, add(mul(Var("j"), index(2)), index(part)), value))
    return For("j", n, tuple(stmts))


def _split(y: str, out_row: Expr, split: str, n: int, dtype: str) -> list[Stmt]:
    """The n-point complex result as the 2n-point real transform's n + 1 bins."""
    q = FftSteps(dtype)
    dc = q.scale_down(_load_pair(WORK, index(0)), 2)
    zero = c(0, dtype)
    head = [*q.stmts, *_store_pair(y, index(0), (add(q.wide(dc[0]), q.wide(dc[1])), zero), dtype, out_row),
            *_store_pair(y, index(n), (b("-", q.wide(dc[0]), q.wide(dc[1])), zero), dtype, out_row)]
    q = FftSteps(dtype)
    k = add(Var("k"), index(1))
    nk = b("-", index(n), k)
    fpk = q.scale_down(_load_pair(WORK, k), 2)
    zr, zi = _load_pair(WORK, nk)
    fpnk = q.scale_down((zr, q.negated(zi)), 2)
    f1k, f2k = q.plus(fpk, fpnk), q.minus(fpk, fpnk)
    tw = q.cmul(f2k, _load_pair(split, Var("k")))
    w = q.wide
    low = (q.half(add(w(f1k[0]), w(tw[0]))), q.half(add(w(f1k[1]), w(tw[1]))))
    high = (q.half(b("-", w(f1k[0]), w(tw[0]))), q.half(b("-", w(tw[1]), w(f1k[1]))))
    body = (*q.stmts, *_store_pair(y, k, low, dtype, out_row), *_store_pair(y, nk, high, dtype, out_row))
    return [*head, For("k", n // 2, body)]


def _rfft_scratch(prepared, caps):
    return [Scratch(WORK, prepared.inputs[0].dtype, prepared.inputs[1].shape[0] * 2)]  # n complex values


def _stages(n: int, twiddles: str, dtype: str, inverse: bool = False) -> list[Stmt]:
    """The complex FFT's stages over the work buffer, the last factor's first."""
    stages = sig.fft_stages(n)
    return [_stage(p, m, n // (p * m), twiddles, dtype, inverse) for p, m in reversed(stages)]


def _rfft_types(dtype: str):
    return takes(dtype, dtype, dtype, "int32", out=dtype, acc=FftSteps.WIDE[dtype])


def rfft(graph, node_id, cluster_id, args, attrs):
    """Each frame: gather in order, the radix stages in place, the split into real bins."""
    x, tw, split, order = args.inputs
    y = args.outputs[0]
    dtype = x.type.dtype
    n = attrs["fft_length"] // 2
    frame = x.type.shape[-1]
    rows = x.type.size // frame
    body: list[Stmt] = [_gather(x.name, frame, mul(Var("row"), index(frame)), order.name, n, dtype),
                        *_stages(n, tw.name, dtype)]
    body += _split(y.name, mul(Var("row"), index(2 * (n + 1))), split.name, n, dtype)
    return [For("row", rows, tuple(body))]


for _dtype in sig.RFFT_TYPES:
    CPP.register("SignalRfft", family="sequence", types=_rfft_types(_dtype), scratch=_rfft_scratch)(rfft)


# --- SignalIrfft -----------------------------------------------------------------------------
MERGED = "fft_merged"


def _merge(x: str, in_row: Expr, split: str, n: int, dtype: str) -> list[Stmt]:
    """The n + 1 bins of a real spectrum merged into the n complex values whose inverse complex
    FFT interleaves the real samples."""
    q = FftSteps(dtype)
    first, last = (Load(x, in_row), Load(x, at(in_row, 2 * n)))
    dc = q.scale_down(q.pair(add(q.wide(first), q.wide(last)), b("-", q.wide(first), q.wide(last))), 2)
    head = [*q.stmts, *_store_pair(MERGED, index(0), dc, dtype)]
    q = FftSteps(dtype)
    k = add(Var("k"), index(1))
    nk = b("-", index(n), k)

    def bin_(i: Expr) -> tuple[Expr, Expr]:
        return Load(x, at(in_row, mul(i, index(2)))), Load(x, at(in_row, mul(i, index(2)), 1))
    fk = q.scale_down(bin_(k), 2)
    cr, ci = bin_(nk)
    fnkc = q.scale_down((cr, q.negated(ci)), 2)
    fek, odd = q.plus(fk, fnkc), q.minus(fk, fnkc)
    fok = q.cmul(odd, _load_pair(split, Var("k")))
    low, high = q.plus(fek, fok), q.minus(fek, fok)
    high = (high[0], q.negated(high[1]))
    body = (*q.stmts, *_store_pair(MERGED, k, low, dtype), *_store_pair(MERGED, nk, high, dtype))
    return [*head, For("k", n // 2, body)]


def _irfft_scratch(prepared, caps):
    values = prepared.inputs[1].shape[0] * 2  # n complex values
    return [Scratch(MERGED, prepared.inputs[0].dtype, values), Scratch(WORK, prepared.inputs[0].dtype, values)]


def irfft(graph, node_id, cluster_id, args, attrs):
    """Each row: merge the bins, gather in order, the inverse radix stages in place, the work
    buffer out as samples (float: divided by fft_length, as the library's float transform is)."""
    x, tw, split, order = args.inputs
    y = args.outputs[0]
    dtype = x.type.dtype
    length = attrs["fft_length"]
    n, width = length // 2, x.type.shape[-1]
    sample = Load(WORK, Var("j"))
    if dtype == "float32":
        sample = b("/", sample, Const(float(length), "float32"))
    body = [*_merge(x.name, mul(Var("row"), index(width)), split.name, n, dtype),
            _gather(MERGED, 2 * n, index(0), order.name, n, dtype),
            *_stages(n, tw.name, dtype, inverse=True),
            For("j", length, (Store(y.name, at(mul(Var("row"), index(length)), Var("j")), sample),))]
    return [For("row", x.type.size // width, tuple(body))]


for _dtype in sig.RFFT_TYPES:
    CPP.register("SignalIrfft", family="sequence", types=_rfft_types(_dtype), scratch=_irfft_scratch)(irfft)


# --- SignalEnergy ----------------------------------------------------------------------------
@CPP.register("SignalEnergy", family="elementwise", types=takes("int16", out="uint32"))
def energy(graph, node_id, cluster_id, args, attrs):
    """re^2 + im^2 over [start_index, end_index) (each square fits uint32; the sum wraps as there);
    the other bins 0. The operand is bin i's real part (stride 2); its imaginary part follows it."""
    def squares(xs, idx):
        re = xs[0]
        im = Load(re.buffer, add(re.index, index(1)), dtype=re.dtype)
        return [], add(*(Cast("uint32", mul(Cast("int32", v), Cast("int32", v))) for v in (re, im)))
    nest = ElementwiseNest.of(args).within([(attrs["start_index"], attrs["end_index"])], c(0, "uint32"))
    return elementwise_nest.elementwise(nest, AXES, squares)


# --- SignalFilterBank ------------------------------------------------------------------------
CHANNEL_BINS = ReductionSchedule(kept=(), reduced=("j",))


@CPP.register("SignalFilterBank", family="reduction",
              types=takes("uint32", "int16", "int16", "int16", "int16", "int16", out="uint64", acc="uint64"))
def filter_bank(graph, node_id, cluster_id, args, attrs):
    """Per channel (a segment of the bins, its weights known at build time): weighted bins plus the
    previous channel's unweighted ones, in uint64; the next channel's sum is carried along."""
    x, weights, unweights = (a.name for a in args.inputs[:3])
    weight_starts = args.prepared["weight_starts"]
    y = args.outputs[0].name

    def channel(row: Row) -> list[Stmt]:
        ch = row.position
        stmts: list[Stmt] = []
        if row.count > 0:
            v = Cast("uint64", Load(x, row.at()))
            w_at = at(row.reduced[0], weight_starts[ch])
            stmts.append(row.sweep(Assign("acc", add(Var("acc"), mul(Cast("uint64", Load(weights, w_at)), v))),
                                   Assign("next_acc", add(Var("next_acc"), mul(Cast("uint64", Load(unweights, w_at)), v)))))
        if ch > 0:  # table channel 0 only starts the first output's sum
            stmts.append(Store(y, index(ch - 1), Var("acc")))
        return stmts + [Assign("acc", Var("next_acc")), Assign("next_acc", c(0, "uint64"))]
    carried = (Local("acc", c(0, "uint64"), "uint64"), Local("next_acc", c(0, "uint64"), "uint64"))
    return reduction_nest.reduction(ReductionNest.of(args), CHANNEL_BINS, Passes((channel,), carried))


# --- SignalFilterBankSquareRoot --------------------------------------------------------------
@CPP.register("SignalFilterBankSquareRoot", family="elementwise", types=takes("uint64", "int32", out="uint32"))
def filter_bank_square_root(graph, node_id, cluster_id, args, attrs):
    """Bit-by-bit square root from bit 62 down, rounded up where the remainder exceeds the root
    (capped as the library's 32- and 64-bit paths cap it), shifted right by the scale bits."""
    u64 = "uint64"
    trial = add(Var("res"), Var("bit"))
    fits = Var("fits")  # decided before num changes
    step = (Local("trial", trial, u64), Local("fits", b(">=", Var("num"), Var("trial")), "bool"),
            Assign("num", sel(fits, b("-", Var("num"), Var("trial")), Var("num"))),
            Assign("res", sel(fits, add(b(">>", Var("res"), c(1, u64)), Var("bit")), b(">>", Var("res"), c(1, u64)))),
            Assign("bit", b(">>", Var("bit"), c(2, u64))))

    def root(xs, idx):
        x, shift = xs
        cap = sel(b("==", b(">>", x, c(32, u64)), c(0, u64)), c(0xFFFF, u64), c(0xFFFFFFFF, u64))
        up = b("&&", b(">", Var("num"), Var("res")), b("!=", Var("res"), cap))
        return [Local("num", x, u64), Local("res", c(0, u64), u64), Local("bit", c(1 << 62, u64), u64),
                For("t", 32, step), Assign("res", add(Var("res"), sel(up, c(1, u64), c(0, u64))))], \
            Cast("uint32", b(">>", Var("res"), Cast(u64, shift)))
    return elementwise_nest.elementwise(ElementwiseNest.of(args), AXES, root)


# --- SignalFilterBankLog ---------------------------------------------------------------------
@CPP.register("SignalFilterBankLog", family="elementwise", types=takes("uint32", "uint16", out="int16"))
def filter_bank_log(graph, node_id, cluster_id, args, attrs):
    """ln of each channel scaled by output_scale: log2 from the bit length and a table-corrected
    fraction, times ln 2 in Q16, each step rounded; 0 for inputs of at most 1, capped at 32767."""
    table = args.inputs[1].name
    seg_bits = sig.LOG_SCALE_LOG2 - sig.LOG_SEGMENTS_LOG2
    u32, i32 = "uint32", "int32"
    integer = b("-", Var("bits"), c(1, i32))
    below = b("<", integer, c(16, i32))
    frac0 = Cast(i32, b("-", Var("v"), b("<<", c(1, u32), Cast(u32, integer))))
    frac = b(">>", b("<<", frac0, sel(below, b("-", c(16, i32), integer), c(0, i32))),
             sel(below, c(0, i32), b("-", integer, c(16, i32))))
    seg = b(">>", Var("frac"), c(seg_bits, i32))
    c0 = Cast(i32, Load(table, Cast(INDEX, seg)))
    c1 = Cast(i32, Load(table, Cast(INDEX, add(seg, c(1, i32)))))
    rel = b(">>", mul(b("-", c1, c0), b("-", Var("frac"), b("<<", seg, c(seg_bits, i32)))), c(16, i32))
    log2 = add(b("<<", Cast(u32, integer), c(16, u32)), Cast(u32, add(Var("frac"), c0, rel)))
    loge = Cast(u32, b(">>", add(mul(c(sig.LOG_COEFF, "uint64"), Cast("uint64", Var("log2"))), c(32768, "uint64")),
                          c(16, "uint64")))
    out = b(">>", add(mul(c(attrs["output_scale"] & 0xFFFFFFFF, u32), Var("loge")), c(32768, u32)), c(16, u32))

    def log(xs, idx):
        return [Local("s", b("<<", xs[0], c(attrs["input_correction_bits"], u32)), u32),
                Local("v", sel(b(">", Var("s"), c(1, u32)), Var("s"), c(2, u32)), u32),  # in range for the unused side
                *bit_length(Var("v", u32), "bits"),
                Local("frac", frac, i32), Local("log2", log2, u32), Local("loge", loge, u32), Local("out", out, u32)], \
            Cast("int16", sel(b(">", Var("s"), c(1, u32)), sel(b("<", Var("out"), c(32767, u32)), Var("out"), c(32767, u32)),
                              c(0, u32)))
    return elementwise_nest.elementwise(ElementwiseNest.of(args), AXES, log)


# --- SignalPCAN ------------------------------------------------------------------------------
@CPP.register("SignalPCAN", family="elementwise", types=takes("uint32", "uint32", "int16", out="uint32"))
def pcan(graph, node_id, cluster_id, args, attrs):
    """Per channel: the gain of its noise estimate (a table entry below 3, else a quadratic in the
    10 bits below the top bit from the segment of its bit length), the snr, then the shrink."""
    lut = args.inputs[2].name
    u32, i32, i64 = "uint32", "int32", "int64"
    n_raw = Var("n_raw", u32)
    small = b("<=", n_raw, c(2, u32))
    interval = Var("bits")
    seg = Cast(INDEX, b("-", mul(c(4, i32), interval), c(6, i32)))
    below = b("<", interval, c(11, i32))
    frac = b("&", b(">>", b("<<", Var("n"), Cast(u32, sel(below, b("-", c(11, i32), interval), c(0, i32)))),
                    Cast(u32, sel(below, c(0, i32), b("-", interval, c(11, i32))))), c(0x3FF, u32))

    def lut_at(k: int) -> Expr:
        return Cast(i32, Load(lut, add(seg, index(k))))
    r = add(b(">>", mul(lut_at(2), Var("frac")), c(5, i32)), mul(lut_at(1), c(32, i32)))
    r = Cast(i32, mul(Cast(i64, r), Cast(i64, Var("frac"))))
    r = Cast(i32, b(">>", add(Cast(i64, r), c(1 << 14, i64)), c(15, i64)))
    curve = Cast("int16", add(r, lut_at(0)))
    table = Cast("int16", Load(lut, Cast(INDEX, sel(small, n_raw, c(0, u32)))))
    snr_bits, out_bits = sig.PCAN_SNR_BITS, sig.PCAN_OUTPUT_BITS
    shrink = sel(b("<", Var("snr"), c(2 << snr_bits, u32)),
                 b(">>", mul(Var("snr"), Var("snr")), c(2 + 2 * snr_bits - out_bits, u32)),
                 b("-", b(">>", Var("snr"), c(snr_bits - out_bits, u32)), c(1 << out_bits, u32)))

    def gained(xs, idx):
        snr = Cast(u32, b(">>", mul(Cast("uint64", xs[0]), Cast("uint64", Var("gain"))), c(attrs["snr_shift"], "uint64")))
        return [Local("n_raw", xs[1], u32),
                Local("n", sel(small, c(4, u32), n_raw), u32),  # the curve's side kept in the table's range
                *bit_length(Var("n", u32), "bits"),
                Local("frac", Cast(i32, frac), i32),
                Local("gain", Cast(u32, Cast(i32, sel(small, table, curve))), u32),  # an int16 gain, sign-extended
                Local("snr", snr, u32)], Cast(u32, shrink)
    return elementwise_nest.elementwise(ElementwiseNest.of(args), AXES, gained)


# --- SignalFilterBankSpectralSubtraction -----------------------------------------------------
NOISE_STATE = "state_noise_estimate"  # kept from call to call (Scratch.kept)


def _noise_state(prepared, caps):
    return [Scratch(NOISE_STATE, "uint32", prepared.inputs[0].shape[0], kept=True)]


@CPP.register("SignalFilterBankSpectralSubtraction", family="elementwise", types=takes("uint32", out=("uint32", "uint32")),
              scratch=_noise_state)
def spectral_subtraction(graph, node_id, cluster_id, args, attrs):
    """Per channel: the noise estimate (state) smoothed toward the frame, kept below it, the frame
    less the estimate floored at min_signal_remaining of it; the estimate is the second output.
    Elementwise: channel i reads and writes only element i of the state (a further operand)."""
    noise = args.outputs[1].name
    u32, u64 = "uint32", "uint64"
    bits, sbits = c(attrs["smoothing_bits"], u32), c(attrs["spectral_subtraction_bits"], u64)
    nest = ElementwiseNest.of(args)
    nest = replace(nest, operands=(*nest.operands, Operand(NOISE_STATE, u32, nest.operands[0].strides)))

    def subtracted(xs, idx):
        x, state = xs
        odd = b("==", b("&", idx[0], index(1)), index(1))

        def coefficient(even: str, alternate: str) -> Expr:
            return sel(odd, c(attrs[alternate], u64), c(attrs[even], u64))
        estimate = Cast(u32, b(">>", add(mul(Cast(u64, Var("up")), coefficient("smoothing", "alternate_smoothing")),
                                         mul(Cast(u64, state),
                                             coefficient("one_minus_smoothing", "alternate_one_minus_smoothing"))), sbits))
        floor = Cast(u32, b(">>", mul(Cast(u64, x), c(attrs["min_signal_remaining"], u64)), sbits))
        return [Local("up", b("<<", x, bits), u32), Local("estimate", estimate, u32),
                Local("kept", sel(b(">", Var("estimate"), Var("up")), Var("up"), Var("estimate")), u32),
                Store(state.buffer, state.index, Var("kept") if attrs["clamping"] else Var("estimate")),
                Local("floor", floor, u32),
                Local("subtracted", b(">>", b("-", Var("up"), Var("kept")), bits), u32),
                Store(noise, state.index, state)], \
            sel(b(">", Var("subtracted"), Var("floor")), Var("subtracted"), Var("floor"))
    return elementwise_nest.elementwise(nest, AXES, subtracted)


# --- stateful stream operators ---------------------------------------------------------------
def _copy(dst: str, dst_at, src: Expr | str, src_at, count: int, var: str, cond: Expr | None = None) -> list[Stmt]:
    """dst[dst_at + j] = src[src_at + j] for j < count (only where `cond` holds, when given)."""
    if count <= 0:
        return []
    j = Var(var)
    value = Load(src, at(src_at, j)) if isinstance(src, str) else src
    if cond is not None:
        value = sel(cond, value, Load(dst, at(dst_at, j)))
    return [For(var, count, (Store(dst, at(dst_at, j), value),))]


def _delay_state(prepared, caps):
    x = prepared.inputs[0]
    return [Scratch("state_delay", "int16", max(x.size // x.shape[-1] * prepared.facts["delay_length"], 1), kept=True)]


@CPP.register("SignalDelay", family="movement", types=takes("int16", out="int16"), scratch=_delay_state)
def delay(graph, node_id, cluster_id, args, attrs):
    """Per row: the delay line's samples, then the frame's, out; the frame's last samples (and the
    line's that remain) become the line."""
    x, y = args.inputs[0], args.outputs[0]
    frame, d = x.type.shape[-1], attrs["delay_length"]
    line, r = "state_delay", Var("r")
    row_in, row_line = mul(r, index(frame)), mul(r, index(d))
    kept = min(d, frame)
    body = [*_copy(y.name, row_in, line, row_line, kept, "j"),
            *_copy(y.name, at(row_in, d), x.name, row_in, frame - kept, "j"),
            *_copy(line, row_line, line, at(row_line, frame), d - kept, "j"),
            *_copy(line, at(row_line, d - kept), x.name, at(row_in, frame - kept), kept, "j")]
    return [For("r", x.type.size // frame, tuple(body))] if body else []


def _framer_state(prepared, caps):
    x = prepared.inputs[0]
    capacity = sig.framer_capacity(prepared.outputs[0].shape[-1], x.shape[-1] // prepared.outputs[0].shape[-2])
    return [Scratch("state_frames", "int16", x.size // x.shape[-1] * capacity, kept=True),
            Scratch("state_count", "int32", 1, kept=True)]


@CPP.register("SignalFramer", family="movement", types=takes("int16", out=("int16", "bool")), scratch=_framer_state)
def framer(graph, node_id, cluster_id, args, attrs):
    """Per step of samples: queued after each row's earlier samples; where the queue holds a frame,
    its oldest frame_size samples are the frame and the step's oldest samples leave. The queue's
    length is state_count plus the prefill (so a zeroed workspace is the initial state)."""
    x, (y, valid) = args.inputs[0], args.outputs
    size, step = attrs["frame_size"], attrs["frame_step"]
    n_frames = x.type.shape[-1] // step
    rows = x.type.size // x.type.shape[-1]
    capacity = sig.framer_capacity(size, step)
    queue, count = "state_frames", "state_count"
    prefill = size - step if attrs["prefill"] else 0
    r, f = Var("r"), Var("f")
    q_row = mul(r, index(capacity))
    full = b(">=", Var("queued"), index(size))
    per_row = (*_copy(queue, at(q_row, Var("held")), x.name, at(mul(r, index(x.type.shape[-1])), mul(f, index(step))),
                      step, "j"),
               *_copy(y.name, at(mul(at(mul(r, index(n_frames)), f), index(size))), queue, q_row, size, "j"),
               *_copy(queue, q_row, queue, at(q_row, step), capacity - step, "j", full))
    return [Local("all_valid", Const(1, "bool"), "bool"),
            For("f", n_frames, (
                Local("held", Cast(INDEX, add(Load(count, index(0)), c(prefill, "int32"))), INDEX),
                Local("queued", at(Var("held"), step), INDEX),
                For("r", rows, per_row),
                Assign("all_valid", b("&&", Var("all_valid"), full)),
                Store(count, index(0), Cast("int32", b("-", sel(full, b("-", Var("queued"), index(step)), Var("queued")),
                                                        index(prefill)))))),
            Store(valid.name, index(0), Var("all_valid"))]


def _stacker_state(prepared, caps):
    return [Scratch("state_stack", "int16", prepared.outputs[0].shape[0], kept=True),
            Scratch("state_count", "int32", 2, kept=True)]


@CPP.register("SignalStacker", family="movement", types=takes("int16", out=("int16", "bool")), scratch=_stacker_state)
def stacker(graph, node_id, cluster_id, args, attrs):
    """The frame queued (the first one left_context + 1 times); once the queue holds a stack, the
    stack is out and stacker_step frames leave. state_count holds the queue's length and whether
    the first frame came."""
    x, (y, valid) = args.inputs[0], args.outputs
    size, step = sig.stacker_sizes(attrs)
    channels, left = attrs["num_channels"], attrs["stacker_left_context"]
    queue, count = "state_stack", "state_count"
    first = b("==", Load(count, index(1)), c(0, "int32"))
    repeat_at = at(Var("held"), channels, mul(Var("k"), index(channels)), Var("j"))
    full = b(">=", Var("queued"), index(size))
    return [Local("held", Cast(INDEX, Load(count, index(0))), INDEX),
            Local("first", first, "bool"),
            *_copy(queue, Var("held"), x.name, index(0), channels, "j"),
            For("k", left, (For("j", channels, (
                Store(queue, sel(Var("first"), repeat_at, Var("j")),
                      sel(Var("first"), Load(x.name, Var("j")), Load(queue, Var("j")))),)),)),
            Local("queued", add(Var("held"), index(channels), sel(Var("first"), index(channels * left), index(0))), INDEX),
            *_copy(y.name, index(0), queue, index(0), size, "j"),
            *_copy(queue, index(0), queue, index(step), size - step, "j", full),
            Store(count, index(0), Cast("int32", sel(full, b("-", Var("queued"), index(step)), Var("queued")))),
            Store(count, index(1), c(1, "int32")),
            Store(valid.name, index(0), full)]


def _overlap_state(prepared, caps):
    x = prepared.inputs[0]
    return [Scratch("state_sum", x.dtype, x.size // (x.shape[-1] * x.shape[-2]) * x.shape[-1], kept=True)]


def overlap_add(graph, node_id, cluster_id, args, attrs):
    """Per frame: added onto the running sum (int16 saturated), whose first frame_step samples are
    out and leave it (zeros come in at its end)."""
    x, y = args.inputs[0], args.outputs[0]
    dtype = x.type.dtype
    size, n_frames, step = x.type.shape[-1], x.type.shape[-2], attrs["frame_step"]
    acc, r, f, i = "state_sum", Var("r"), Var("f"), Var("i")
    s_row = mul(r, index(size))
    frame_at = at(mul(at(mul(r, index(n_frames)), f), index(size)), i)
    if dtype == "int16":
        total = add(Cast("int32", Load(acc, at(s_row, i))), Cast("int32", Load(x.name, frame_at)))
        value = Cast("int16", sel(b("<", total, c(-32768, "int32")), c(-32768, "int32"),
                                  sel(b(">", total, c(32767, "int32")), c(32767, "int32"), total)))
    else:
        value = add(Load(acc, at(s_row, i)), Load(x.name, frame_at))
    body = (For("i", size, (Store(acc, at(s_row, i), value),)),
            *_copy(y.name, at(mul(r, index(n_frames * step)), mul(f, index(step))), acc, s_row, step, "j"),
            *_copy(acc, s_row, acc, at(s_row, step), size - step, "j"),
            *_copy(acc, at(s_row, size - step), c(0, dtype), 0, step, "j"))
    return [For("r", x.type.size // (size * n_frames), (For("f", n_frames, body),))]


for _dtype in sig.OVERLAP_ADD_TYPES:
    CPP.register("SignalOverlapAdd", family="movement", types=takes(_dtype, out=_dtype), scratch=_overlap_state)(overlap_add)
