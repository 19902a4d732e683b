"""AVX-512 micro-kernels of the int8 family: QConv2D, QFullyConnected and QDepthwise on the host.

The loop nests are the int8 driver's (quantized_driver.py: conv_nest over the exact tiles,
pointwise_nest over flattened pixels, fc_nest, depthwise_nest); this module supplies the inner
tile, written from XNNPACK's design (its code is not used):

- **Weights packed at build time** into the order the block reads them: per sixteen output
  channels, per four consecutive window values k, the sixteen channels' four weights (64 bytes,
  one vector), the window padded to a multiple of four values and the channels to a multiple of
  sixteen with zero weights.
- **Four products per int32 lane and instruction**: VPDPBUSD multiplies unsigned bytes by signed
  ones, so the inputs are made unsigned (x + 128: the sign bit flipped) while each block's windows
  are gathered into a scratch row (`cols`; taps in the padding written as the input zero point,
  flipped too), and the bias absorbs the difference at build time,
  sum((x - zp) * w) + b = sum((x + 128) * w) + (b - (128 + zp) * sum(w)), from the weight sums the
  primitive's `prepare` computes. Each group of four inputs is then one broadcast load. Integer
  sums are exact (modulo 2^32, as TFLite's int32 sums), so every output equals the reference's.
- **Register blocks**: a block of MR pixels x NB vectors of sixteen channels keeps its MR * NB
  sums in vector registers over the whole window; each weight vector serves the MR pixels and each
  broadcast input the NB vectors.
- **Requantization sixteen channels at a time** (kernel_sets.AVX512_HELPERS' avx512_requantize):
  TFLite's doubling high multiply and rounding division as one 64-bit add and shift of the
  product, from per-channel constants packed at build time (_packed_shifts), bit-exact with the
  portable kernels.
- **Depthwise** (depth multiplier 1, channels a multiple of eight): sixteen channels per vector
  (eight in a 256-bit one where they are not a multiple of sixteen), each tap (x - zp) * w on int32
  lanes, the weights widened to int32 at build time.
- **QAdd and QMean** sixteen values at a time, TFLite's int8 ADD and MEAN arithmetic in int32 lanes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinsmith.generate.backend import same
from tinsmith.generate.functors.conv import loops
from tinsmith.generate.functors.quantized import INT8_CONV
from tinsmith.generate.functors.quantized_driver import (Pixel, TileGeometry, conv_nest, copy_values, depthwise_nest,
                                                        fc_nest, is_pointwise, model_layout, padding_runs, plus,
                                                        pointwise_nest, window_tiles)
from tinsmith.generate.functors import elementwise_nest, reduction_nest, window_nest
from tinsmith.generate.functors.elementwise_nest import ElementwiseNest, LaneCall, flat
from tinsmith.generate.functors.quantized_math import i32, qadd_steps
from tinsmith.generate.functors.reduction_nest import Passes, ReductionNest, ReductionSchedule
from tinsmith.generate.functors.window_nest import WindowNest, WindowOutput, WindowSchedule, WindowTap
from tinsmith.generate.kernel_sets import AVX512_INT8
from tinsmith.generate.loop_ir import (Assign, Binary, Call, Const, Expr, For, Lane, Load, Local, Scratch, Stmt, Store,
                                      Var, index)
from tinsmith.generate.simplify import substitute
from tinsmith.ops import quantized as q
from tinsmith.ops.registry import PRIMITIVES
from tinsmith.quant.linear_add import find_linear_add

LANES = 16  # int32 lanes of a 512-bit vector: output channels per vector
GROUP = 4  # int8 values per lane that one VPDPBUSD multiplies and adds
COLS = "cols"  # the scratch rows a block's windows are gathered into
# pixels per block by vectors of channels per block: MR * NB = 16 sums (VPDPBUSD's latency of about
# five cycles needs some ten independent sums in flight for two a cycle: 8 x 1 and 6 x 2 blocks ran
# ic's 16- and 32-channel convolutions at 1.1 and 1.25 per cycle, 16 x 1 and 8 x 2 at 1.3 and 1.4),
# NB weight vectors and the broadcast inputs within the 32 vector registers
PIXELS = {1: 16, 2: 8, 4: 4}
FC_VECTORS = 8  # a fully connected row (one pixel): up to 8 vectors of sums
REGISTER = 64  # int8 values of one vector: the largest window assembled in a register
PARTS = (8, 4, 2, 1)  # pieces a vector's first real lanes are stored in


def _up(n: int, m: int) -> int:
    return -(-n // m) * m


def _window(w_shape) -> int:
    """K: one output channel's weights (KH * KW * C, or a fully connected row's length)."""
    return int(np.prod(w_shape[1:]))


def _vectors_per_block(w_shape) -> int:
    """NB: vectors of sixteen channels per block (a fully connected row has one pixel, so more)."""
    vectors = _up(w_shape[0], LANES) // LANES
    if len(w_shape) == 2:
        return min(FC_VECTORS, vectors)
    return 4 if vectors >= 4 else vectors if vectors in PIXELS else 2


def _pixels(w_shape) -> int:
    return 1 if len(w_shape) == 2 else PIXELS[_vectors_per_block(w_shape)]


def _rows_in_register(w_shape) -> bool:
    """A convolution whose window fits one 64-byte vector and whose window rows (KW * C values) end
    inside a group of four: its inside windows are assembled in a register (Avx512MicroKernel)."""
    return len(w_shape) == 4 and _window(w_shape) <= REGISTER and (w_shape[2] * w_shape[3]) % GROUP != 0


def _cols_scratch(prepared, caps) -> list[Scratch]:
    w = prepared.inputs[1].shape
    k = _up(_window(w), GROUP)
    # a window assembled in a register is stored whole: 64 bytes from the last pixel's offset
    return [Scratch(COLS, "int8", _pixels(w) * k + (REGISTER - k if _rows_in_register(w) else 0))]


def _constants_packed(args, attrs) -> bool:
    """Constant weights, bias, multipliers and shifts (all packed at build time), TFLite's
    fixed-point requantization to int8."""
    p = args.prepared
    return (p is not None and args.inputs[2] is not None and len(p.constant) > 4 and all(p.constant[1:5])
            and attrs.get("requantize", "fixed_point") == "fixed_point" and args.outputs[0].type.dtype == "int8")


def _takes(args, attrs) -> bool:
    """As _constants_packed, with the weight sums the bias folds."""
    return _constants_packed(args, attrs) and "weight_sums" in args.prepared.facts


def _packed_weights(w: np.ndarray) -> np.ndarray:
    """[O, ...] -> [O/16, K/4, 16, 4] (O and K padded with zero weights): the block's vector order."""
    o, flat = w.shape[0], w.reshape(w.shape[0], -1)
    k = flat.shape[1]
    full = np.zeros((_up(o, LANES), _up(k, GROUP)), np.int8)
    full[:o, :k] = flat
    return np.ascontiguousarray(full.reshape(-1, LANES, full.shape[1] // GROUP, GROUP).transpose(0, 2, 1, 3))


def _per_channel(count: int):
    """A per-tensor or per-channel int32 constant as `count` channels (padding channels 0)."""
    def pack(a: np.ndarray) -> np.ndarray:
        flat = a.reshape(-1).astype(np.int32)
        out = np.full(count, flat[0] if flat.size == 1 else 0, np.int32)
        if flat.size > 1:
            out[:flat.size] = flat
        return out
    return pack


MULT_WORDS, SHIFT_WORDS = 2, 7  # int32 words per channel of the packed multipliers and shifts


def _pairs(a: np.ndarray, lanes: int) -> np.ndarray:
    """Per block of `lanes` channels, the even channels' then the odd channels' values as int64."""
    blocks = a.astype(np.int64).reshape(-1, lanes)
    return np.concatenate([blocks[:, 0::2], blocks[:, 1::2]], axis=1)


def _packed_multipliers(count: int, lanes: int):
    """Multipliers per block of `lanes` channels as avx512_requantize reads them (kernel_sets.py):
    the even lanes', then the odd lanes' (int64, VPMULDQ's operands), as int32 words."""
    def pack(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(_pairs(_per_channel(count)(a), lanes)).view(np.int32).reshape(-1)
    return pack


def _packed_shifts(count: int, lanes: int):
    """Shifts per block of `lanes` channels as avx512_requantize reads them: the left shifts (int32),
    then per even and odd lanes the rounding offset 2^30 + 2^(30 + r), the shift 31 + r and the
    threshold below which the high half is negative (-2^30; the lowest int64 where r = 0: no
    rounding division), int64 each, as int32 words."""
    def pack(a: np.ndarray) -> np.ndarray:
        shift = _per_channel(count)(a).astype(np.int64)
        right = np.maximum(-shift, 0)
        offset = (1 << 30) + np.where(right > 0, np.left_shift(1, 30 + right, dtype=np.int64), 0)
        threshold = np.where(right > 0, -(1 << 30), np.iinfo(np.int64).min)
        wide = np.concatenate([_pairs(v, lanes) for v in (offset, 31 + right, threshold)], axis=1)
        left = np.maximum(shift, 0).astype(np.int32).reshape(-1, lanes)
        return np.ascontiguousarray(np.concatenate([left, wide.view(np.int32)], axis=1)).reshape(-1)
    return pack


def _pack(args, attrs) -> dict:
    w = args.prepared.inputs[1].shape
    o = _up(w[0], LANES)
    offset = (128 + int(attrs["x_zero_point"])) * args.prepared["weight_sums"]

    def bias(b: np.ndarray) -> np.ndarray:
        return _per_channel(o)((b.astype(np.int64) - offset).astype(np.int32))
    return {1: _packed_weights, 2: bias, 3: _packed_multipliers(o, LANES), 4: _packed_shifts(o, LANES)}


def _dot_block(args, xs: list[tuple[str, Expr]], base: Expr, vectors: int, k: int) -> list[Stmt]:
    """acc<p>_<j> = the folded biases of channels base + 16j.. plus every pixel p's window (k values
    from xs[p], a multiple of four) times their packed weights, four values a step."""
    w, b = args.inputs[1].name, args.inputs[2].name
    stmts: list[Stmt] = [Local(f"acc{p}_{j}", Load(b, plus(base, LANES * j), LANES, "int32"), "int32", LANES)
                         for p in range(len(xs)) for j in range(vectors)]
    kq = Var("kq")
    step: list[Stmt] = [Local(f"x{p}", Call("x4_u8", (Load(buffer, Binary("+", at, Binary("*", kq, index(GROUP)))),),
                                            "int32", LANES), "int32", LANES) for p, (buffer, at) in enumerate(xs)]
    for j in range(vectors):
        w_at = Binary("+", Binary("*", plus(base, LANES * j), index(k)), Binary("*", kq, index(GROUP * LANES)))
        step += [Assign(f"acc{p}_{j}", Call("dot4_i32x16", (Var(f"acc{p}_{j}", "int32", LANES), Var(f"x{p}", "int32", LANES),
                                                             Load(w, w_at)), "int32", LANES)) for p in range(len(xs))]
    return stmts + [For("kq", k // GROUP, tuple(step))]


def _requantized(graph, args, attrs, acc: Expr, channel: Expr, lanes: int = LANES) -> Expr:
    mult, shift = args.inputs[3].name, args.inputs[4].name
    left = graph.constants[shift].data.reshape(-1, SHIFT_WORDS * lanes)[:, :lanes]  # as _packed_shifts lays them out
    return Call(f"requantize_i32x{lanes}", (acc, Load(mult, Binary("*", channel, index(MULT_WORDS))),
                                            Load(shift, Binary("*", channel, index(SHIFT_WORDS))), i32(attrs["y_zero_point"]),
                                            *(i32(v) for v in q.output_clamp(attrs, "int8")), i32(int((left > 0).any()))),
                "int8", lanes)


def _store(graph, args, attrs, name: str, acc: Expr, out_at: Expr, channel: Expr, valid: int, lanes: int = LANES) -> list[Stmt]:
    """A vector of channels requantized and stored; a last vector with fewer real channels lane by lane."""
    y = args.outputs[0].name
    if valid == lanes:
        return [Store(y, Binary("+", out_at, channel), _requantized(graph, args, attrs, acc, channel, lanes))]
    q = Var(name, "int8", lanes)
    stmts: list[Stmt] = [Local(name, _requantized(graph, args, attrs, acc, channel, lanes), "int8", lanes)]
    done = 0
    for width in PARTS:  # the real lanes in pieces of 8, 4, 2 and 1 (a lane by lane store: two micro-ops each)
        if valid - done >= width:
            part = Lane(q, index(done)) if width == 1 else Call(f"part_i8x{width}", (q, index(done)), "int8", width)
            stmts.append(Store(y, plus(Binary("+", out_at, channel), done), part))
            done += width
    return stmts


def channel_vectors(graph, args, attrs, pixels: list[Pixel], xs: list[tuple[str, Expr]], k: int, per: int) -> list[Stmt]:
    """Every output channel of these pixels: blocks of `per` vectors of sixteen channels in a loop,
    the channels left as one block of fewer vectors (its last vector maybe partly real)."""
    o = args.outputs[0].type.shape[-1]

    def block(base: Expr, vectors: int, last_valid: int) -> list[Stmt]:
        stmts = _dot_block(args, xs, base, vectors, k)
        for p, (_, out_at, _) in enumerate(pixels):
            for j in range(vectors):
                valid = last_valid if j == vectors - 1 else LANES
                stmts += _store(graph, args, attrs, f"q{p}_{j}", Var(f"acc{p}_{j}", "int32", LANES), out_at,
                                plus(base, LANES * j), valid)
        return stmts
    size = per * LANES
    stmts: list[Stmt] = []
    if o // size:
        stmts.append(For("ocb", o // size, tuple(block(Binary("*", Var("ocb"), index(size)), per, LANES))))
    left = o % size
    if left:
        vectors = _up(left, LANES) // LANES
        stmts.append(For("ol", 1, tuple(block(plus(Var("ol"), o - left), vectors, left - LANES * (vectors - 1)))))
    return stmts


def _flipped(value: int) -> int:
    """An int8 value with its sign bit inverted, as int8: value + 128 read as unsigned."""
    return ((value + 128) & 0xFF) - (256 if value >= 0 else 0)


# copies into `cols` of up to 64 values at a time, sign bits inverted
WIDTHS = (64, 32, 16, 8, 4, 2, 1)


class Avx512MicroKernel:
    """The AVX-512 inner tile for the int8 driver (see the module doc), for one node's shapes."""

    def __init__(self, w_shape):
        self.window = _window(w_shape)
        self.k = _up(self.window, GROUP)
        self.vectors = _vectors_per_block(w_shape)
        self.pixels = _pixels(w_shape)

    def _fill(self, at: int, n: int, value: int) -> list[Stmt]:
        return copy_values(COLS, index(at), None, None, n, value, WIDTHS)

    def _tail(self, pixel: int) -> list[Stmt]:
        """The values past the window up to a multiple of four: zeros (their weights are zero)."""
        return self._fill(pixel * self.k + self.window, self.k - self.window, 0)

    def _blocks(self, graph, args, attrs, pixels: list[Pixel]) -> list[Stmt]:
        cols = [(COLS, index(p * self.k)) for p in range(len(pixels))]
        return channel_vectors(graph, args, attrs, pixels, cols, self.k, self.vectors)

    def _rows(self, args, attrs, geometry: TileGeometry, pixels: list[Pixel]) -> list[Stmt] | None:
        """Each pixel's window, every tap inside the input, as one store of a vector assembled from
        its KH rows by masked loads, sign bits flipped; None where the window is not such rows.
        Copied row by row, a window of runs that end inside a group of four (3 x 3 x 3: runs of 9)
        has groups that straddle two stores, which the store buffer cannot forward to the group's
        load (measured: ic's first convolution 17k -> 12k cycles)."""
        kh, kw, c = geometry.kernel
        w_shape = (1, kh, kw, c)
        if not (_rows_in_register(w_shape) and tuple(attrs["dilations"]) == (1, 1) and not padding_runs(geometry)
                and geometry.tap_loops == (("k0", kh),) and geometry.count == kw * c):
            return None
        x, row = args.inputs[0], args.inputs[0].type.shape[2] * c
        return [Store(COLS, index(p * self.k), Call("window_rows_x64", (
            Load(x.name, substitute(x_at, {"k0": index(0)})), index(kh), index(kw * c), index(row)), "int8", REGISTER))
                for p, (x_at, _, _) in enumerate(pixels)]

    def conv_pixels(self, graph, args, attrs, geometry: TileGeometry, pixels: list[Pixel]) -> list[Stmt]:
        x = args.inputs[0].name
        rows = self._rows(args, attrs, geometry, pixels)
        if rows is not None:
            return [*rows, *self._blocks(graph, args, attrs, pixels)]
        stmts: list[Stmt] = []
        copies: list[Stmt] = []
        for p, (x_at, _, _) in enumerate(pixels):
            for at, n in padding_runs(geometry):
                stmts += self._fill(p * self.k + at, n, _flipped(attrs["x_zero_point"]))
            stmts += self._tail(p)
            copies += copy_values(COLS, plus(geometry.w_tap, p * self.k), x, x_at, geometry.count, widths=WIDTHS,
                                  flip=True)
        return [*stmts, *loops(geometry.tap_loops, copies), *self._blocks(graph, args, attrs, pixels)]

    def empty(self, graph, args, attrs, out_at: Expr, coords) -> list[Stmt]:
        """A window wholly in the padding: every tap the zero point, so the folded bias comes back
        to the bias."""
        return [*self._fill(0, self.window, _flipped(attrs["x_zero_point"])), *self._tail(0),
                *self._blocks(graph, args, attrs, [(index(0), out_at, coords)])]

    def fc_rows(self, graph, args, attrs, rows: list[Pixel], k: int) -> list[Stmt]:
        """Also a pointwise convolution's block of pixels (rows of its C inputs)."""
        x = args.inputs[0].name
        copies = [s for p, (x_at, _, _) in enumerate(rows)
                  for s in (*copy_values(COLS, index(p * self.k), x, x_at, k, widths=WIDTHS, flip=True), *self._tail(p))]
        return copies + self._blocks(graph, args, attrs, rows)


@AVX512_INT8.register("QConv2D", family="convolution", types=INT8_CONV, layout="nhwc", when=_takes, pack=_pack,
                      scratch=_cols_scratch, priority=1)
def qconv2d_avx512(graph, node_id, cluster_id, args, attrs):
    """QConv2D: blocks of pixels x vectors of sixteen channels on four-byte dot products."""
    model = model_layout(args)
    kernel = Avx512MicroKernel(model.inputs[1].type.shape)
    if is_pointwise(model, attrs):  # the flattened pixels
        c = args.inputs[0].type.shape[3]
        return pointwise_nest(model, kernel.pixels, lambda pixels: kernel.fc_rows(graph, model, attrs, pixels, c))
    return conv_nest(graph, model, attrs, kernel)


@AVX512_INT8.register("QFullyConnected", family="matrix", types=INT8_CONV, when=_takes, pack=_pack,
                      scratch=_cols_scratch, priority=1)
def qfully_connected_avx512(graph, node_id, cluster_id, args, attrs):
    """QFullyConnected: each row's outputs in up to eight vectors of sums."""
    model = model_layout(args)
    return fc_nest(graph, model, attrs, Avx512MicroKernel(model.inputs[1].type.shape))


def _depthwise_lanes(args) -> int:
    """Channels per vector: sixteen, or eight (256-bit vectors) for a multiple of eight channels."""
    return LANES if args.inputs[1].type.shape[3] % LANES == 0 else LANES // 2


def _depthwise_takes(args, attrs) -> bool:
    """Depth multiplier 1, channels a multiple of eight, and no window wholly in the padding (the
    driver's portable code for those would read the packed requantization constants)."""
    return (_constants_packed(args, attrs) and attrs["depth_multiplier"] == 1
            and args.inputs[1].type.shape[3] % (LANES // 2) == 0
            and not any(tl.empty for _, tl in window_tiles(args, attrs)[1]))


def _pack_depthwise(args, attrs) -> dict:
    c = args.prepared.inputs[1].shape[3]
    lanes = LANES if c % LANES == 0 else LANES // 2
    return {1: lambda w: w.astype(np.int32), 3: _packed_multipliers(c, lanes), 4: _packed_shifts(c, lanes)}


def _depthwise_vectors(graph, args, attrs, taps_at: list[tuple[Expr, Expr]], tap_loops, out_at: Expr,
                       coords) -> list[Stmt]:
    """A vector of channels per step: the biases, each tap's (x - zero point) * w added, requantized."""
    x, w, b = args.inputs[0].name, args.inputs[1].name, args.inputs[2].name
    lanes = _depthwise_lanes(args)
    base = Binary("*", Var("cb"), index(lanes))
    acc = Var("acc", "int32", lanes)
    taps = [Assign("acc", Call(f"tap_i32x{lanes}", (acc, Load(x, Binary("+", x_at, base)), Load(w, Binary("+", w_at, base)),
                                                    i32(attrs["x_zero_point"])), "int32", lanes)) for x_at, w_at in taps_at]
    body = [Local("acc", Load(b, base, lanes, "int32"), "int32", lanes), *loops(tap_loops, taps),
            *_store(graph, args, attrs, "q", acc, out_at, base, lanes, lanes)]
    return [For("cb", args.inputs[1].type.shape[3] // lanes, tuple(body))]


@AVX512_INT8.register("QDepthwise", family="convolution", types=INT8_CONV, layout="nhwc", when=_depthwise_takes,
                      pack=_pack_depthwise, priority=1)
def qdepthwise_avx512(graph, node_id, cluster_id, args, attrs):
    """QDepthwise (depth multiplier 1, channels a multiple of eight): a vector of channels per step."""
    return depthwise_nest(graph, args, attrs, _depthwise_vectors)


def _qadd_takes(args, attrs) -> bool:
    a, b, y = args.inputs[0].type, args.inputs[1].type, args.outputs[0].type
    return a.shape == b.shape == y.shape and y.size % LANES == 0


@AVX512_INT8.register("QAdd", types=same("int8", 2, acc="int32"), when=_qadd_takes, priority=1)
def qadd_avx512(graph, node_id, cluster_id, args, attrs):
    """QAdd of two inputs of the output's shape, sixteen values a step: widened to int32 lanes, then
    the linear form that reproduces TFLite's int8 ADD on every input pair (codegen/quant/linear_add.py),
    or, where there is none, rescaled, added and requantized as TFLite does (the portable kernel's
    arithmetic)."""
    lo, hi = q.output_clamp(attrs, "int8")
    form = find_linear_add({**attrs, "act_min": lo, "act_max": hi}, _add_reference)
    if form is None:
        return qadd_steps(args, attrs, LANES, by_address=True)
    consts = (form.a_mult, form.b_mult, form.offset, form.shift, lo, hi)
    return elementwise_nest.elementwise(ElementwiseNest.of(args), flat(LANES), LaneCall(
        "qadd_linear_x16", tuple(i32(v) for v in consts), "int8", LANES, by_address=True))


def _add_reference(a: np.ndarray, b: np.ndarray, attrs) -> np.ndarray:
    return PRIMITIVES["QAdd"].reference([a, b], attrs)[0]


@dataclass(frozen=True)
class LaneAverage:
    """The window nest's micro-kernel for TFLite's int8 average pool on sixteen channels: int32 lane
    sums of the taps, divided by the tile's count (every tap inside the input) as TFLite rounds."""

    act_min: int
    act_max: int

    def start(self, scope: str, out: WindowOutput) -> list[Stmt]:
        return [Local(f"sums{scope}", Const(0, "int32", LANES), "int32", LANES)]

    def step(self, scope: str, tap: WindowTap) -> list[Stmt]:
        value = Call("widen_i8x16", (Load(tap.x, tap.at(tap.strides)),), "int32", LANES)
        return [Assign(f"sums{scope}", Binary("+", Var(f"sums{scope}", "int32", LANES), value))]

    def finish(self, scope: str, out: WindowOutput) -> list[Stmt]:
        average = Call("average_x16", (Var(f"sums{scope}", "int32", LANES), i32(out.counted), i32(self.act_min),
                                       i32(self.act_max)), "int8", LANES)
        return [Store(out.y, out.at, average, out.coords)]

    def empty(self, scope: str, out: WindowOutput) -> list[Stmt]:
        raise AssertionError("no padding, so no window lies wholly in it")  # _average_takes


def _average_takes(args, attrs) -> bool:
    """Channels a multiple of sixteen, no padding (every tile's taps counted at build time)."""
    return args.inputs[0].type.shape[3] % LANES == 0 and not any(attrs["pads"])


@AVX512_INT8.register("QAvgPool", family="window", types=same("int8", acc="int32"), layout="nhwc",
                      when=_average_takes, priority=1)
def qavgpool_avx512(graph, node_id, cluster_id, args, attrs):
    """QAvgPool: sixteen channels a step (the window nest, channels inner in vectors of 16)."""
    schedule = WindowSchedule(exact=True, channels="inner", lanes=LANES)
    return window_nest.window(WindowNest.of(args), schedule, LaneAverage(*q.output_clamp(attrs, "int8")))


# QMean: sixteen channels a step (the last kept axis in blocks of 16), the positions as one loop
MEAN_BLOCKS = ReductionSchedule(kept=("n", "cb"), reduced=("p",), merged=True, lanes=LANES)


@AVX512_INT8.register("QMean", family="reduction", types=same("int8", acc="int32"),
                      when=lambda args, attrs: args.inputs[0].type.shape[3] % LANES == 0, priority=1)
def qmean_avx512(graph, node_id, cluster_id, args, attrs):
    """QMean over H and W, sixteen channels a step (the reduction nest, the last kept axis in blocks
    of 16): raw sums in int32 lanes, the zero point's share (count * zero point) taken off once,
    rescaled as the portable kernel does."""
    x, y = args.inputs[0].name, args.outputs[0].name
    nest = ReductionNest.of(args)
    mult, shift = q.mean_params(attrs, nest.count)
    sums = Var("sums", "int32", LANES)
    consts = (-nest.count * attrs["x_zero_point"], mult, shift, attrs["y_zero_point"], *q.output_clamp(attrs, "int8"))

    def mean(row):
        # the block's first element, then one row of channels per position
        at = Binary("+", row.first(), Binary("*", row.reduced[0], index(args.inputs[0].type.shape[3])))
        value = Call("widen_i8x16", (Load(x, at),), "int32", LANES)
        return [Local("sums", Const(0, "int32", LANES), "int32", LANES),
                row.sweep(Assign("sums", Binary("+", sums, value))),
                Store(y, row.out(), Call("qmean_x16", (sums, *(i32(v) for v in consts)), "int8", LANES))]
    return reduction_nest.reduction(nest, MEAN_BLOCKS, Passes((mean,)))
