"""Quantized primitives compiled and run on the host, against integer arithmetic written here from
TensorFlow Lite's quantization specification (independently of tinsmith.quant), and codegen's own
references against the same. The TFLite Micro interpreter is the oracle for whole models
(tests/test_tflite_models.py).

Exact equality throughout: integer kernels have no rounding freedom. Shapes hit the edges of every
loop (1x1 inputs, odd channel counts, windows that hang over each border, stride and dilation);
zero points sit at both ends of the int8 range; per-channel scales differ by orders of magnitude.
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import pytest
import yaml

from tinsmith.quant import fixed_point as fp

I32_MIN, I32_MAX = -2 ** 31, 2 ** 31 - 1


# --- the specification, in Python integers --------------------------------------------------
def spec_multiplier(real: float) -> tuple[int, int]:
    """(q, shift), real = q * 2^(shift - 31), q in [2^30, 2^31): found by search, not frexp."""
    if real == 0:
        return 0, 0
    shift = 0
    while real >= 1.0:
        real, shift = real / 2, shift + 1
    while real < 0.5:
        real, shift = real * 2, shift - 1
    exact = Fraction(real) * 2 ** 31
    q = math.floor(exact + Fraction(1, 2))  # half away from zero (positive here)
    if q == 2 ** 31:
        q, shift = q // 2, shift + 1
    return (0, 0) if shift < -31 else (q, shift)


def spec_scale(acc: int, q: int, shift: int) -> int:
    """TFLite's two roundings: high half of 2*x*q (nearest, ties away from 0), then a rounding
    right shift (nearest, ties away from 0); a left shift first when shift > 0 (wrapping int32)."""
    x = acc << max(shift, 0)
    x = (x + 2 ** 31) % 2 ** 32 - 2 ** 31

    def round_away(f: Fraction) -> int:
        return int(math.copysign(math.floor(abs(f) + Fraction(1, 2)), f))
    prod = Fraction(2 * x * q, 2 ** 32)
    # the nudge adds 2^30 (or 1 - 2^30) before truncating: ties toward the nudge's side
    total = x * q + (2 ** 30 if x * q >= 0 else 1 - 2 ** 30)
    high = int(Fraction(total, 2 ** 31))  # C++'s division truncates toward zero, as int() does
    assert abs(high - prod) <= 1
    right = max(-shift, 0)
    return round_away(Fraction(high, 2 ** right)) if right else high


def test_multipliers_match_the_specification():
    rng = np.random.default_rng(1)
    reals = [1.0, 0.5, 0.75, 1 - 2 ** -40, 2 ** -31, 3e-10, 1e-5, 123.456] + list(10 ** rng.uniform(-8, 2, 200))
    for r in reals:
        assert fp.quantize_multiplier(r) == spec_multiplier(r), r


def test_requantization_matches_the_specification():
    rng = np.random.default_rng(2)
    accs = [0, 1, -1, I32_MAX, I32_MIN + 1, 2 ** 20, -(2 ** 20) - 1] + list(rng.integers(-2 ** 24, 2 ** 24, 300))
    for real in (1e-4, 0.0123, 0.5, 0.999, 1.5, 7.25):
        q, shift = fp.quantize_multiplier(real)
        got = fp.multiply_by_quantized_multiplier(np.array(accs), q, shift)
        assert list(got) == [spec_scale(int(a), q, shift) for a in accs]


def test_rounding_shift_ties_go_away_from_zero():
    assert list(fp.rounding_divide_by_pot(np.array([3, -3, 5, -5, 6, -6, 7, -7]), 1)) == [2, -2, 3, -3, 3, -3, 4, -4]


# --- compiled kernels -------------------------------------------------------------------------
def q_input(shape, scale, zp):
    return {"dtype": "int8", "shape": list(shape), "quant": {"scale": scale, "zero_point": zp}}


def conv_spec(x, w, b, x_zp, mult, shift, attrs, depthwise=False):
    """The convolution of TFLite's reference kernel, one output at a time, in Python ints."""
    n, h, wd, c = x.shape
    sh, sw = attrs.get("strides", (1, 1))
    dh, dw = attrs.get("dilations", (1, 1))
    pt, pl, pb, pr = attrs.get("pads", (0, 0, 0, 0))
    kh, kw = w.shape[1:3]
    oc = w.shape[3] if depthwise else w.shape[0]
    m = oc // c
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, oh, ow, oc), np.int64)
    for b_, y, x_, o in np.ndindex(n, oh, ow, oc):
        acc = int(b[o])
        for ky in range(kh):
            for kx in range(kw):
                iy, ix = y * sh - pt + ky * dh, x_ * sw - pl + kx * dw
                if 0 <= iy < h and 0 <= ix < wd:
                    if depthwise:
                        acc += (int(x[b_, iy, ix, o // m]) - x_zp) * int(w[0, ky, kx, o])
                    else:
                        acc += sum((int(x[b_, iy, ix, i]) - x_zp) * int(w[o, ky, kx, i]) for i in range(c))
        k = o if len(mult) > 1 else 0
        out[b_, y, x_, o] = spec_scale(acc, int(mult[k]), int(shift[k]))
    return out


class Case:
    """Graph pieces of one kernel case, collected into one graph per test."""

    def __init__(self):
        self.inputs, self.constants, self.nodes, self.expected, self.feeds = {}, {}, [], {}, {}
        self.arrays = {}

    def constant(self, name, data, dtype):
        self.arrays[name] = np.asarray(data)
        self.constants[name] = {"file": "weights.npz", "key": name, "dtype": dtype}
        return name

    def build(self, tmp_path, tinsmith_cmd, name="q", target="host"):
        doc = {"graph": name, "inputs": self.inputs, "outputs": list(self.expected),
               "constants": self.constants, "nodes": self.nodes}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        np.savez(tmp_path / "weights.npz", **self.arrays)
        np.savez(tmp_path / "in.npz", **self.feeds)
        proc = tinsmith_cmd("run", f"{name}.yaml", "--inputs", "in.npz", "--output", "out.npz", "--target", target,
                            cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        got = dict(np.load(tmp_path / "out.npz"))
        from tinsmith.pipeline import lower
        from tinsmith.reference import evaluate
        ref = evaluate(lower(tmp_path / f"{name}.yaml"), self.feeds)
        for out, want in self.expected.items():
            np.testing.assert_array_equal(got[out], want, err_msg=out)
            np.testing.assert_array_equal(ref[out], want, err_msg=f"{out} (reference)")


def draw(rng, shape, lo=-128, hi=127):
    return rng.integers(lo, hi + 1, shape).astype(np.int8)


# (input NHWC, kernel KHxKW, out channels, strides, dilations, pads, x zero point)
CONV_CASES = [
    ((1, 1, 1, 1), (1, 1), 1, (1, 1), (1, 1), (0, 0, 0, 0), -128),
    ((1, 5, 7, 3), (3, 3), 5, (1, 1), (1, 1), (1, 1, 1, 1), 127),
    ((2, 6, 5, 4), (3, 2), 3, (2, 1), (1, 1), (1, 0, 2, 1), 0),
    ((1, 9, 8, 7), (3, 3), 9, (2, 2), (2, 1), (2, 2, 2, 2), -17),
    ((1, 4, 4, 16), (1, 1), 17, (1, 1), (1, 1), (0, 0, 0, 0), 5),
    # a 1x1 window in wide padding: some outputs see only padding (the bias alone)
    ((1, 2, 3, 13), (1, 1), 6, (1, 1), (1, 1), (2, 1, 1, 2), 9),
    # the Cortex-M blocks' edges: dilation across the row (taps not one run), 11 channels (two
    # words and a tail of three), 6 outputs (a block of four and two alone), positive shifts
    ((1, 6, 9, 11), (3, 3), 6, (1, 2), (1, 2), (1, 1, 1, 1), 127),
    # pointwise over 20 pixels (blocks of 3 and 2 left), 9 channels, 7 outputs, only left shifts
    ((1, 4, 5, 9), (1, 1), 7, (1, 1), (1, 1), (0, 0, 0, 0), -128),
    # 5x5 windows: runs of 40 values, depthwise rows unrolled inside a loop over the window's rows
    ((1, 8, 9, 8), (5, 5), 8, (1, 1), (1, 1), (2, 2, 2, 2), 0),
    # three input channels (a first convolution): runs of 9, and of 6 at the borders
    ((1, 7, 12, 3), (3, 3), 10, (2, 2), (1, 1), (1, 1, 1, 1), -128),
    # a 1x1 window whose stride and padding keep the size: not a pointwise product
    ((1, 3, 3, 4), (1, 1), 3, (2, 2), (1, 1), (1, 1, 1, 1), 5),
    # AVX-512 blocks: pointwise over two batches of 15 pixels (a block of four, ...), 12 channels
    # read in place, 20 outputs (a vector of sixteen and one of four real channels)
    ((2, 3, 5, 12), (1, 1), 20, (1, 1), (1, 1), (0, 0, 0, 0), 77),
    # 32 channels gathered with borders and stride 2, 40 outputs (blocks of two vectors and one
    # partly real); depthwise over two vectors of sixteen channels
    ((1, 7, 6, 32), (3, 3), 40, (2, 2), (1, 1), (1, 1, 1, 1), -3),
]
# per-channel weight scales: 10^lo .. 10^hi (default five orders of magnitude, all right shifts)
SCALE_RANGES = {6: (-3, 2), 7: (1, 3)}


# the Cortex-M4 runs its DSP-extension kernels (SMLAD blocks of pixels x channels, scalar tails),
# the Cortex-M0+ the plain loops compiled for a core without the DSP extension, the Cortex-M55 its
# Helium kernels (VMLADAV with predicated tails, windows gathered at the borders, depthwise over
# eight channels as int16 lanes or four as int32 lanes, QAdd over sixteen), rv32imac its blocks of
# pixels x channels in 32 general registers, host-native (AVX-512 with VNNI here) and host-x86-64-v4
# (AVX-512 without VNNI) the avx512-int8 blocks of pixels x vectors of sixteen channels
TARGETS = ("host", "host-native", "host-x86-64-v4", "cortex-m4", "cortex-m0plus", "cortex-m55", "rv32imac")


def _skip_unless_runs_here(target: str) -> None:
    """host-x86-64-v4's programs need AVX-512 on this machine."""
    if target == "host-x86-64-v4" and "avx512f" not in open("/proc/cpuinfo").read().split():
        pytest.skip("this machine has no AVX-512")


@pytest.mark.parametrize("target", TARGETS)
def test_conv_and_depthwise_match_the_specification(tmp_path, tinsmith_cmd, target):
    _skip_unless_runs_here(target)
    rng = np.random.default_rng(3)
    case = Case()
    for i, (shape, (kh, kw), oc, strides, dil, pads, x_zp) in enumerate(CONV_CASES):
        x_scale, y_scale = 0.05, 0.1
        y_zp = (-128, 127, 0, 3, -5, 60, -128, 127, 1, -60, 42, 5, -20)[i]
        # per-channel weight scales spread over orders of magnitude
        w_scales = 10.0 ** rng.uniform(*SCALE_RANGES.get(i, (-5, 0)), oc)
        case.inputs[f"x{i}"] = q_input(shape, x_scale, x_zp)
        x = draw(rng, shape)
        case.feeds[f"x{i}"] = x
        attrs = {"strides": list(strides), "dilations": list(dil), "pads": list(pads), "x_zero_point": x_zp,
                 "y_scale": y_scale, "y_zero_point": y_zp}
        for kind in ("conv", "dw"):
            depthwise = kind == "dw"
            m = 2 if depthwise and i % 2 else 1
            chans = shape[3] * m if depthwise else oc
            scales = w_scales[:chans] if chans <= oc else np.resize(w_scales, chans)
            w = draw(rng, (1, kh, kw, chans) if depthwise else (oc, kh, kw, shape[3]), -127, 127)
            b = rng.integers(-50000, 50000, chans).astype(np.int32)
            mult, shift = fp.conv_multipliers(x_scale, scales, y_scale)
            names = [case.constant(f"{kind}{i}_{p}", d, t) for p, d, t in
                     (("w", w, "int8"), ("b", b, "int32"), ("m", mult, "int32"), ("s", shift, "int32"))]
            node_attrs = dict(attrs, act_min=-100, act_max=100) if i in (1, 6) else dict(attrs)
            if depthwise:
                node_attrs["depth_multiplier"] = m
            out = f"{kind}{i}"
            case.nodes.append({"op": "QDepthwise" if depthwise else "QConv2D", "inputs": [f"x{i}", *names],
                               "outputs": [out], "attrs": node_attrs})
            acc = conv_spec(x, w, b, x_zp, mult, shift, attrs, depthwise)
            lo, hi = node_attrs.get("act_min", -128), node_attrs.get("act_max", 127)
            case.expected[out] = np.clip(acc + y_zp, lo, hi).astype(np.int8)
    case.build(tmp_path, tinsmith_cmd, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_fully_connected_add_mul_match_the_specification(tmp_path, tinsmith_cmd, target):
    _skip_unless_runs_here(target)
    rng = np.random.default_rng(4)
    case = Case()
    # outputs 7, 10, 13, 19: the Cortex-M's blocks of eight rows and the rows left alone
    for i, (rows, k, o, x_zp, y_zp) in enumerate([(1, 1, 1, -128, 127), (3, 13, 7, 127, -128), (2, 64, 10, 4, 0),
                                                  (1, 9, 13, -128, -128), (4, 36, 19, 127, 127),
                                                  (2, 32, 40, 0, 5)]):
        case.inputs[f"x{i}"] = q_input((rows, k), 0.02, x_zp)
        x = draw(rng, (rows, k))
        case.feeds[f"x{i}"] = x
        w = draw(rng, (o, k), -127, 127)
        b = rng.integers(-20000, 20000, o).astype(np.int32)
        per_channel = i in (1, 3, 4)
        lo, hi = (-2, 3) if i == 4 else (-6, 0)  # the last: left and right shifts mixed
        mult, shift = fp.conv_multipliers(0.02, 10.0 ** rng.uniform(lo, hi, o) if per_channel else [0.003], 0.05)
        names = [case.constant(f"fc{i}_{p}", d, t) for p, d, t in
                 (("w", w, "int8"), ("b", b, "int32"), ("m", mult, "int32"), ("s", shift, "int32"))]
        case.nodes.append({"op": "QFullyConnected", "inputs": [f"x{i}", *names], "outputs": [f"fc{i}"],
                           "attrs": {"x_zero_point": x_zp, "y_scale": 0.05, "y_zero_point": y_zp}})
        want = np.zeros((rows, o), np.int64)
        for r, j in np.ndindex(rows, o):
            acc = int(b[j]) + sum((int(x[r, t]) - x_zp) * int(w[j, t]) for t in range(k))
            kk = j if per_channel else 0
            want[r, j] = spec_scale(acc, int(mult[kk]), int(shift[kk])) + y_zp
        case.expected[f"fc{i}"] = np.clip(want, -128, 127).astype(np.int8)
    # broadcasting adds and muls, zero points at both ends, scales 100x apart
    case.inputs["a"] = q_input((1, 3, 5, 7), 0.5, -128)
    case.inputs["b"] = q_input((1, 1, 5, 1), 0.004, 127)
    a, b = draw(rng, (1, 3, 5, 7)), draw(rng, (1, 1, 5, 1))
    case.feeds.update(a=a, b=b)
    common = {"a_scale": 0.5, "a_zero_point": -128, "b_scale": 0.004, "b_zero_point": 127}
    case.nodes.append({"op": "QAdd", "inputs": ["a", "b"], "outputs": ["sum"],
                       "attrs": dict(common, y_scale=0.3, y_zero_point=-7, act_min=-120)})
    case.nodes.append({"op": "QMul", "inputs": ["a", "b"], "outputs": ["prod"],
                       "attrs": dict(common, y_scale=0.07, y_zero_point=9)})
    aa, bb = np.broadcast_arrays(a.astype(np.int64), b.astype(np.int64))
    twice = 2 * max(fp.as_float32(0.5), fp.as_float32(0.004))
    qa, qb = spec_multiplier(fp.as_float32(0.5) / twice), spec_multiplier(fp.as_float32(0.004) / twice)
    qy = spec_multiplier(twice / (2 ** 20 * fp.as_float32(0.3)))
    qm = spec_multiplier(fp.as_float32(0.5) * fp.as_float32(0.004) / fp.as_float32(0.07))
    add = [spec_scale(spec_scale((int(u) + 128) << 20, *qa) + spec_scale((int(v) - 127) << 20, *qb), *qy) - 7
           for u, v in zip(aa.ravel(), bb.ravel())]
    mul = [spec_scale((int(u) + 128) * (int(v) - 127), *qm) + 9 for u, v in zip(aa.ravel(), bb.ravel())]
    case.expected["sum"] = np.clip(np.reshape(add, aa.shape), -120, 127).astype(np.int8)
    # an add of two inputs of one shape, 2 x 48 values (the Helium kernel's sixteen at a time)
    c, d = draw(rng, (2, 4, 3, 4)), draw(rng, (2, 4, 3, 4))
    case.inputs["c"], case.inputs["d"] = q_input((2, 4, 3, 4), 0.5, -128), q_input((2, 4, 3, 4), 0.004, 127)
    case.feeds.update(c=c, d=d)
    case.nodes.append({"op": "QAdd", "inputs": ["c", "d"], "outputs": ["same"],
                       "attrs": dict(common, y_scale=0.3, y_zero_point=-7, act_min=-120)})
    same = [spec_scale(spec_scale((int(u) + 128) << 20, *qa) + spec_scale((int(v) - 127) << 20, *qb), *qy) - 7
            for u, v in zip(c.ravel(), d.ravel())]
    case.expected["same"] = np.clip(np.reshape(same, c.shape), -120, 127).astype(np.int8)
    case.expected["prod"] = np.clip(np.reshape(mul, aa.shape), -128, 127).astype(np.int8)
    case.build(tmp_path, tinsmith_cmd, target=target)


# (a_scale, a_zero_point, b_scale, b_zero_point, y_scale, y_zero_point, act_min): ic_resnet8's first
# residual ADD, and scales 100x apart with zero points at both ends and a clamp above -128 (both with a
# linear form); scales whose ties no linear form rounds as TFLite does (the fixed-point kernel)
EVERY_PAIR_ADDS = [(0.06722422689199448, -27, 0.02639394998550415, -128, 0.040482666343450546, -128, -128),
                   (0.5, -128, 0.004, 127, 0.3, -7, -120), (0.3, 0, 0.0625, 0, 0.1, 0, -128)]


@pytest.mark.parametrize("target", ("host-native", "host-x86-64-v4"))
def test_add_of_every_int8_pair_matches_the_specification(tmp_path, tinsmith_cmd, target):
    """The AVX-512 QAdd computes a linear form of the raw inputs where one reproduces TFLite's ADD
    (codegen/quant/linear_add.py): every one of the 65,536 input pairs against the specification."""
    _skip_unless_runs_here(target)
    every_pair_case().build(tmp_path, tinsmith_cmd, target=target)


@functools.cache
def every_pair_case() -> Case:
    """The adds of EVERY_PAIR_ADDS over all 65,536 pairs and what the specification says they give
    (the same for every target, so worked out once)."""
    from tinsmith.ops.registry import PRIMITIVES
    from tinsmith.quant.linear_add import find_linear_add
    forms = [find_linear_add(dict(zip(("a_scale", "a_zero_point", "b_scale", "b_zero_point", "y_scale", "y_zero_point",
                                       "act_min"), add), act_max=127),
                             lambda a, b, attrs: PRIMITIVES["QAdd"].reference([a, b], attrs)[0])
             for add in EVERY_PAIR_ADDS]
    assert [f is not None for f in forms] == [True, True, False]  # both kernels run
    case = Case()
    a, b = (v.reshape(1, 256, 256, 1).astype(np.int8) for v in np.meshgrid(np.arange(-128, 128), np.arange(-128, 128),
                                                                            indexing="ij"))
    for i, (sa, za, sb, zb, sy, zy, lo) in enumerate(EVERY_PAIR_ADDS):
        case.inputs[f"a{i}"], case.inputs[f"b{i}"] = q_input(a.shape, sa, za), q_input(b.shape, sb, zb)
        case.feeds.update({f"a{i}": a, f"b{i}": b})
        case.nodes.append({"op": "QAdd", "inputs": [f"a{i}", f"b{i}"], "outputs": [f"sum{i}"],
                           "attrs": {"a_scale": sa, "a_zero_point": za, "b_scale": sb, "b_zero_point": zb,
                                     "y_scale": sy, "y_zero_point": zy, "act_min": lo}})
        twice = 2 * max(fp.as_float32(sa), fp.as_float32(sb))
        qa, qb = spec_multiplier(fp.as_float32(sa) / twice), spec_multiplier(fp.as_float32(sb) / twice)
        qy = spec_multiplier(twice / (2 ** 20 * fp.as_float32(sy)))
        rescaled_a = {u: spec_scale((u - za) << 20, *qa) for u in range(-128, 128)}
        rescaled_b = {v: spec_scale((v - zb) << 20, *qb) for v in range(-128, 128)}
        want = [spec_scale(rescaled_a[u] + rescaled_b[v], *qy) + zy for u in range(-128, 128) for v in range(-128, 128)]
        case.expected[f"sum{i}"] = np.clip(np.reshape(want, a.shape), lo, 127).astype(np.int8)
    return case


def pool_spec(x, k, strides, pads, op):
    n, h, w, c = x.shape
    oh = (h + pads[0] + pads[2] - k[0]) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - k[1]) // strides[1] + 1
    out = np.zeros((n, oh, ow, c), np.int64)
    for b, y, x_, ch in np.ndindex(n, oh, ow, c):
        vals = [int(x[b, iy, ix, ch]) for iy in range(y * strides[0] - pads[0], y * strides[0] - pads[0] + k[0])
                for ix in range(x_ * strides[1] - pads[1], x_ * strides[1] - pads[1] + k[1])
                if 0 <= iy < h and 0 <= ix < w]
        if op == "max":
            out[b, y, x_, ch] = max(vals)
        else:
            out[b, y, x_, ch] = int(Fraction(sum(vals), len(vals)) + Fraction(1, 2) * (1 if sum(vals) > 0 else -1)) \
                if sum(vals) else 0
    return out


@pytest.mark.parametrize("target", ("host-native", "host-x86-64-v4"))
def test_average_pools_over_channel_vectors_match_the_specification(tmp_path, tinsmith_cmd, target):
    """The AVX-512 QAvgPool (32 channels, no padding: sixteen channels a vector): a whole-input
    window, overlapping windows, a clamped one; negative sums round away from zero too."""
    _skip_unless_runs_here(target)
    rng = np.random.default_rng(6)
    case = Case()
    x = draw(rng, (2, 7, 6, 32))
    case.inputs["x"] = q_input(x.shape, 0.037, -128)
    case.feeds["x"] = x
    for i, (k, strides, clamp) in enumerate([((7, 6), (1, 1), (-128, 127)), ((3, 3), (2, 1), (-128, 127)),
                                             ((2, 4), (2, 2), (-10, 12))]):
        attrs = {"kernel_shape": list(k), "strides": list(strides), "pads": [0, 0, 0, 0], "act_min": clamp[0],
                 "act_max": clamp[1]}
        case.nodes.append({"op": "QAvgPool", "inputs": ["x"], "outputs": [f"avg{i}"], "attrs": attrs})
        case.expected[f"avg{i}"] = np.clip(pool_spec(x, k, strides, (0, 0, 0, 0), "avg"), *clamp).astype(np.int8)
    case.build(tmp_path, tinsmith_cmd, target=target)


def test_pools_pad_concat_mean_and_conversions_match_the_specification(tmp_path, tinsmith_cmd):
    rng = np.random.default_rng(5)
    case = Case()
    x = draw(rng, (2, 7, 6, 5))
    case.inputs["x"] = q_input(x.shape, 0.037, -128)
    case.feeds["x"] = x
    for i, (k, strides, pads) in enumerate([((1, 1), (1, 1), (0, 0, 0, 0)), ((3, 3), (1, 1), (1, 1, 1, 1)),
                                            ((3, 2), (2, 2), (1, 0, 1, 1)), ((7, 6), (1, 1), (0, 0, 0, 0))]):
        for op in ("max", "avg"):
            attrs = {"kernel_shape": list(k), "strides": list(strides), "pads": list(pads)}
            case.nodes.append({"op": "QMaxPool" if op == "max" else "QAvgPool", "inputs": ["x"],
                               "outputs": [f"{op}{i}"], "attrs": attrs})
            case.expected[f"{op}{i}"] = pool_spec(x, k, strides, pads, op).astype(np.int8)
    case.nodes.append({"op": "QPad", "inputs": ["x"], "outputs": ["padded"],
                       "attrs": {"pads": [0, 1, 0, 2, 1, 0, 3, 0], "x_zero_point": -128}})
    case.expected["padded"] = np.pad(x, [(0, 1), (1, 0), (0, 3), (2, 0)], constant_values=-128)
    case.nodes.append({"op": "QConcat", "inputs": ["x", "x"], "outputs": ["joined"], "attrs": {"axis": -1}})
    case.expected["joined"] = np.concatenate([x, x], axis=-1)
    case.nodes.append({"op": "QMean", "inputs": ["x"], "outputs": ["mean"],
                       "attrs": {"x_scale": 0.037, "x_zero_point": -128, "y_scale": 0.02, "y_zero_point": 127}})
    qm = spec_multiplier(fp.as_float32(0.037) / fp.as_float32(0.02))
    sums = (x.astype(np.int64) + 128).sum(axis=(1, 2), keepdims=True)
    scaled = np.vectorize(lambda s: spec_scale(int(s), *qm))(sums)
    count = 42
    mean = np.vectorize(lambda s: int(Fraction(s, count) + (Fraction(1, 2) if s > 0 else -Fraction(1, 2)))
                        if s else 0)(scaled)
    case.expected["mean"] = np.clip(mean + 127, -128, 127).astype(np.int8)
    case.nodes.append({"op": "Dequantize", "inputs": ["x"], "outputs": ["real"],
                       "attrs": {"x_scale": 0.037, "x_zero_point": -128}})
    real = (np.float64(np.float32(0.037)) * (x.astype(np.int64) + 128)).astype(np.float32)
    case.expected["real"] = real
    case.nodes.append({"op": "Quantize", "inputs": ["real"], "outputs": ["requant"],
                       "attrs": {"y_scale": 0.011, "y_zero_point": 100}})
    ratio = real / np.float32(0.011)
    case.expected["requant"] = np.clip(np.vectorize(lambda v: int(math.copysign(math.floor(abs(v) + 0.5), v)))(
        ratio.astype(np.float64)) + 100, -128, 127).astype(np.int8)
    case.nodes.append({"op": "Requantize", "inputs": ["x"], "outputs": ["rescaled"],
                       "attrs": {"x_scale": 0.037, "x_zero_point": -128, "y_scale": 0.0009, "y_zero_point": -100}})
    qr = spec_multiplier(fp.as_float32(0.037) / fp.as_float32(0.0009))
    case.expected["rescaled"] = np.clip(np.vectorize(lambda v: spec_scale(int(v) + 128, *qr))(x) - 100,
                                        -128, 127).astype(np.int8)
    case.build(tmp_path, tinsmith_cmd)


def test_quantized_types_reach_the_api_and_errors_name_the_line(tmp_path, tinsmith_cmd):
    (tmp_path / "bad.yaml").write_text(
        "graph: bad\ninputs:\n  x: {dtype: float32, shape: [1, 4], quant: {scale: 0.5}}\noutputs: [x]\nnodes: []\n")
    proc = tinsmith_cmd("show", "bad.yaml", cwd=tmp_path)
    assert proc.returncode == 1 and "bad.yaml:3:" in proc.stderr and "cannot be quantized" in proc.stderr


@pytest.mark.parametrize("target", TARGETS)
def test_softmax_matches_the_reference_and_the_real_softmax(tmp_path, tinsmith_cmd, target):
    """QSoftmax compiled equals codegen's reference (TFLite's fixed-point algorithm, which the
    model tests hold bit-exact against TFLite Micro) and is within 1 LSB (1/256) of the exact
    softmax of the dequantized inputs; rows of 1, 3, 12 and 37, scales from fine to coarse (a
    coarse scale sends small differences below the algorithm's cut-off: they give 0)."""
    rng = np.random.default_rng(6)
    case = Case()
    for i, (depth, scale) in enumerate([(1, 0.1), (3, 0.02), (12, 0.0139), (37, 0.5)]):
        x = draw(rng, (2, depth))
        x[0, 0] = 127  # a row whose maximum is the top of the range
        case.inputs[f"x{i}"] = q_input(x.shape, scale, 0)
        case.feeds[f"x{i}"] = x
        case.nodes.append({"op": "QSoftmax", "inputs": [f"x{i}"], "outputs": [f"p{i}"], "attrs": {"x_scale": scale}})
        case.expected[f"p{i}"] = fp.softmax_int8(x, 1.0, scale)
        real = np.float64(np.float32(scale)) * x.astype(np.float64)
        exact = np.exp(real - real.max(axis=1, keepdims=True))
        exact /= exact.sum(axis=1, keepdims=True)
        assert np.abs(case.expected[f"p{i}"].astype(np.float64) + 128 - exact * 256).max() <= 1.0
    case.build(tmp_path, tinsmith_cmd, target=target)
