"""ONNX's quantized operators with ONNX's arithmetic, on NCHW data as ONNX lays it out.

Unlike TFLite's fixed-point requantization (codegen/ops/quantized.py), ONNX requantizes in float:
QuantizeLinear is saturate(round(x / scale) + zero_point) with ties to even, and QLinearConv /
QLinearMatMul scale their int32 accumulators by the float32 (a_scale * b_scale) / y_scale and round
the same way, as ONNX Runtime's kernels do (MLAS requantizes with a float multiply and a
round-to-nearest-even conversion). Scales and zero points must be constants (they are almost
always initializers); they also type the outputs (a quantized TensorType), so a graph printout
says what the integers stand for.

Extensions for the QDQ folding pass (codegen/load/onnx_quant.py), absent from ONNX models:
QLinearConv and QLinearMatMul take `act_min` / `act_max` (a ReLU or Clip folded into the output
clamp), QLinearMatMul an int32 bias as a ninth input (a folded Gemm's), and QLinearAdd,
QLinearAveragePool (padding never counted) and QLinearGlobalAveragePool (ONNX Runtime's
com.microsoft operators of the same names) exist as primitives.
"""
from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ir.graph import Quant
from tinsmith.ops.common import broadcast_shapes
from tinsmith.ops.conv import _WINDOW_ATTRS, ConvGeometry, gather_taps, kernel_from, windows
from tinsmith.ops.pooling import global_windows, pool_facts
from tinsmith.ops.registry import Attr, InferArgs, OpError, Pattern, define
from tinsmith.quant.fixed_point import DTYPE_RANGES

# TensorProto element type codes of the integer types these operators take
ONNX_DTYPES = {2: "uint8", 3: "int8", 5: "int16", 6: "int32"}
QUANTIZED = ("int8", "uint8", "int16")  # QuantizeLinear's outputs, QLinear*'s data
DEQUANTIZABLE = ("int8", "uint8", "int16", "int32")
ACT_ATTRS = [Attr("act_min", "int", None), Attr("act_max", "int", None)]


# --- scales and zero points -----------------------------------------------------------------
def constant(args: InferArgs, i: int, what: str) -> np.ndarray | None:
    """The data of constant input i (None if the input is omitted); a computed one is an error."""
    if i >= len(args.types) or args.types[i] is None:
        return None
    if args.values[i] is None:
        raise OpError(f"the {what} must be a constant (an initializer)", input=i)
    return np.asarray(args.values[i])


def scale_of(args: InferArgs, i: int, what: str, count: int | None = None) -> np.ndarray:
    """Float32 scales of input i: one (a scalar or [1]) or, if `count` is given, `count` of them."""
    s = constant(args, i, what)
    if s is None or args.types[i].dtype != "float32":
        raise OpError(f"the {what} must be a float32 constant", input=i)
    s = s.astype(np.float32).reshape(-1)
    if s.size != 1 and (count is None or s.ndim != 1 or s.size != count or args.types[i].rank != 1):
        expect = f"a scalar or 1-D of {count}" if count else "a scalar"
        raise OpError(f"the {what} must be {expect}, got {list(args.types[i].shape)}", input=i)
    if not (np.isfinite(s).all() and (s > 0).all()):
        raise OpError(f"the {what} must be positive and finite", input=i)
    return s


def zero_point_of(args: InferArgs, i: int, what: str, dtypes: Sequence[str], count: int | None = None,
                  default: str | None = None) -> tuple[np.ndarray, str]:
    """Zero points of input i as int64 (0 when omitted), and their element type (`default` then)."""
    z = constant(args, i, what)
    if z is None:
        return np.zeros(1, np.int64), default or dtypes[0]
    dtype = args.types[i].dtype
    if dtype not in dtypes:
        raise OpError(f"the {what} is {dtype}, expected {' or '.join(dtypes)}", input=i)
    z = z.astype(np.int64).reshape(-1)
    if z.size != 1 and (count is None or z.size != count):
        raise OpError(f"the {what} must be a scalar{f' or 1-D of {count}' if count else ''}, "
                      f"got {list(args.types[i].shape)}", input=i)
    return z, dtype


def out_quant(scale: np.ndarray, zp: np.ndarray, axis: int | None) -> Quant:
    if scale.size == 1 and zp.size == 1:
        return Quant((float(scale[0]),), (int(zp[0]),))
    n = max(scale.size, zp.size)
    return Quant(tuple(float(s) for s in np.broadcast_to(scale, n)), tuple(int(v) for v in np.broadcast_to(zp, n)),
                 axis)


def along(v: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """A 1-D per-axis parameter shaped to broadcast along `axis` of a rank-`rank` array."""
    if v.size == 1:
        return v.reshape(())
    shape = [1] * rank
    shape[axis] = v.size
    return v.reshape(shape)


def round_half_even_saturate(v: np.ndarray, zp, dtype: str, lo: int | None = None, hi: int | None = None):
    """saturate(round(v) + zp) with ties to even, in the type's range (or lo..hi, a folded ReLU)."""
    tlo, thi = DTYPE_RANGES[dtype]
    lo = tlo if lo is None else lo
    hi = thi if hi is None else hi
    y = np.rint(np.asarray(v, np.float64)) + zp
    return np.clip(y, lo, hi).astype(dtype)


def act_range(attrs, dtype: str) -> tuple[int, int]:
    lo, hi = DTYPE_RANGES[dtype]
    a_lo = lo if attrs.get("act_min") is None else attrs["act_min"]
    a_hi = hi if attrs.get("act_max") is None else attrs["act_max"]
    if not lo <= a_lo <= a_hi <= hi:
        raise OpError(f"act_min..act_max ({a_lo}..{a_hi}) must lie in {dtype}'s range {lo}..{hi}", attr="act_min")
    return a_lo, a_hi


def _axis(args: InferArgs, rank: int) -> tuple[int, int | None]:
    """The quantization axis and its length (None: only per-tensor parameters fit the input)."""
    axis = args.attrs["axis"]
    if not -rank <= axis < rank:
        return 0, None  # (the default axis 1 of a rank-0 or rank-1 input: per tensor)
    return axis % rank, args.types[0].shape[axis % rank]


# --- QuantizeLinear, DequantizeLinear ---------------------------------------------------------
def quantize_params(args: InferArgs) -> tuple[np.ndarray, np.ndarray, str, int]:
    """(scales, zero points, output type, axis) of a QuantizeLinear node, checked."""
    x = args.types[0]
    if x.dtype != "float32":
        raise OpError(f"input 0 has element type {x.dtype}, expected float32", input=0)
    if args.attrs["block_size"]:
        raise OpError("blocked quantization (block_size) is not supported", attr="block_size")
    if args.attrs["saturate"] != 1:
        raise OpError("saturate=0 applies to float8 outputs only, which Tinsmith does not support",
                      attr="saturate")
    axis, count = _axis(args, x.rank)
    scale = scale_of(args, 1, "y_scale", count)
    requested = args.attrs["output_dtype"]
    if requested and ONNX_DTYPES.get(requested) not in QUANTIZED:
        raise OpError(f"output_dtype {requested} is not one of int8, uint8, int16", attr="output_dtype")
    zp, dtype = zero_point_of(args, 2, "y_zero_point", (ONNX_DTYPES[requested],) if requested else QUANTIZED,
                              count, ONNX_DTYPES.get(requested, "uint8"))
    lo, hi = DTYPE_RANGES[dtype]
    if ((zp < lo) | (zp > hi)).any():
        raise OpError(f"the zero point lies outside {dtype}'s range", input=2)
    return scale, zp, dtype, axis


def _infer_quantize_linear(args: InferArgs) -> list[TensorType]:
    scale, zp, dtype, axis = quantize_params(args)
    return [TensorType(dtype, args.types[0].shape, out_quant(scale, zp, axis))]


def _quantize_linear_reference(xs, attrs):
    x, scale = xs[0], np.asarray(xs[1], np.float32).reshape(-1)
    zp = np.zeros(1, np.int64) if len(xs) < 3 or xs[2] is None else np.asarray(xs[2]).astype(np.int64).reshape(-1)
    dtype = xs[2].dtype.name if len(xs) > 2 and xs[2] is not None else ONNX_DTYPES.get(attrs["output_dtype"], "uint8")
    axis = attrs["axis"] % max(x.ndim, 1)
    # x / scale in float32, as ONNX Runtime divides
    q = (x.astype(np.float32) / along(scale, axis, x.ndim)).astype(np.float32)
    return [round_half_even_saturate(q, along(zp, axis, x.ndim), dtype)]


define("QuantizeLinear", inputs=(2, 3), infer=_infer_quantize_linear, reference=_quantize_linear_reference,
       constant_inputs=(1, 2), pattern=Pattern.ELEMENTWISE,
       attrs=[Attr("axis", "int", 1), Attr("saturate", "int", 1), Attr("block_size", "int", 0),
              Attr("output_dtype", "int", 0)])


def dequantize_params(args: InferArgs) -> tuple[np.ndarray, np.ndarray, int]:
    x = args.types[0]
    if x.dtype not in DEQUANTIZABLE:
        raise OpError(f"input 0 has element type {x.dtype}, expected {', '.join(DEQUANTIZABLE)}", input=0)
    if args.attrs["block_size"]:
        raise OpError("blocked quantization (block_size) is not supported", attr="block_size")
    axis, count = _axis(args, x.rank)
    scale = scale_of(args, 1, "x_scale", count)
    zp, dtype = zero_point_of(args, 2, "x_zero_point", (x.dtype,), count)
    if x.dtype == "int32" and (zp != 0).any():
        raise OpError("an int32 input's zero point must be 0", input=2)
    return scale, zp, axis


def _infer_dequantize_linear(args: InferArgs) -> list[TensorType]:
    dequantize_params(args)
    return [TensorType("float32", args.types[0].shape)]


def _dequantize_linear_reference(xs, attrs):
    x, scale = xs[0], np.asarray(xs[1], np.float32).reshape(-1)
    zp = np.zeros(1, np.int64) if len(xs) < 3 or xs[2] is None else np.asarray(xs[2]).astype(np.int64).reshape(-1)
    axis = attrs["axis"] % max(x.ndim, 1)
    # (x - zero point) as int32 converted to float32, times the scale in float32
    diff = (x.astype(np.int64) - along(zp, axis, x.ndim)).astype(np.int32).astype(np.float32)
    return [(diff * along(scale, axis, x.ndim)).astype(np.float32)]


define("DequantizeLinear", inputs=(2, 3), infer=_infer_dequantize_linear, reference=_dequantize_linear_reference,
       constant_inputs=(1, 2), pattern=Pattern.ELEMENTWISE,
       attrs=[Attr("axis", "int", 1), Attr("block_size", "int", 0)])


# --- DynamicQuantizeLinear ----------------------------------------------------------------------
def _infer_dynamic(args: InferArgs) -> list[TensorType]:
    x = args.types[0]
    if x.dtype != "float32":
        raise OpError(f"input 0 has element type {x.dtype}, expected float32", input=0)
    return [TensorType("uint8", x.shape), TensorType("float32", ()), TensorType("uint8", ())]


def dynamic_params(x: np.ndarray) -> tuple[np.float32, int]:
    """DynamicQuantizeLinear's scale and zero point: the range widened to include 0, over 255."""
    lo = np.float32(min(float(x.min()), 0.0))
    hi = np.float32(max(float(x.max()), 0.0))
    scale = np.float32((hi - lo) / np.float32(255))
    if scale == 0:
        return np.float32(0), 0
    zp = int(np.clip(np.rint(np.float32(np.float32(0) - lo) / scale), 0, 255))
    return scale, zp


def _dynamic_reference(xs, attrs):
    x = xs[0].astype(np.float32)
    scale, zp = dynamic_params(x)
    q = np.full(x.shape, zp, np.uint8) if scale == 0 else \
        round_half_even_saturate((x / scale).astype(np.float32), zp, "uint8")
    return [q, np.array(scale, np.float32), np.array(zp, np.uint8)]


define("DynamicQuantizeLinear", inputs=1, outputs=3, infer=_infer_dynamic, reference=_dynamic_reference,
       pattern=Pattern.OPAQUE,  # its kernel: the reduction nest over every element (the range, then each value)
       prepare=lambda args, outputs: {"shape": (args.types[0].size,), "axes": (0,)})


# --- QLinearConv, ConvInteger ----------------------------------------------------------------
def _conv_geometry(args: InferArgs, w_at: int, op: str):
    x, w = args.types[0], args.types[w_at]
    if x.dtype not in QUANTIZED or x.rank < 3:
        raise OpError(f"{op} input must be int8, uint8 or int16 (N, C, D1, ...), got {x}", input=0)
    if w.dtype not in QUANTIZED or w.rank != x.rank:
        raise OpError(f"{op} weights must be int8, uint8 or int16 of rank {x.rank}, got {w}", input=w_at)
    group = args.attrs["group"]
    if group < 1 or w.shape[0] % group or w.shape[1] * group != x.shape[1]:
        raise OpError(f"input has {x.shape[1]} channels but the weights {list(w.shape)} with group {group} take "
                      f"{w.shape[1] * group}", attr="group")
    return group, windows(x.shape[2:], kernel_from(args.attrs, w, x.rank - 2), args.attrs)


def qlinear_conv_params(args: InferArgs):
    """(x_zp, w_zps [M], y_zp, output scales [M] as float32, output type) of a QLinearConv, checked."""
    _, wins = _conv_geometry(args, 3, "QLinearConv")
    x, w = args.types[0], args.types[3]
    m = w.shape[0]
    x_scale = scale_of(args, 1, "x_scale")
    x_zp, _ = zero_point_of(args, 2, "x_zero_point", (x.dtype,))
    w_scale = scale_of(args, 4, "w_scale", m)
    w_zp, _ = zero_point_of(args, 5, "w_zero_point", (w.dtype,), m)
    y_scale = scale_of(args, 6, "y_scale")
    y_zp, y_dtype = zero_point_of(args, 7, "y_zero_point", QUANTIZED, default=x.dtype)
    b = args.types[8] if len(args.types) > 8 else None
    if b is not None and (b.dtype != "int32" or b.shape != (m,)):
        raise OpError(f"the bias must be int32[{m}], got {b}", input=8)
    scales = output_scales(x_scale, w_scale, y_scale, m)
    shape = (x.shape[0], m) + tuple(win.out_size for win in wins)
    act_range(args.attrs, y_dtype)
    return int(x_zp[0]), np.broadcast_to(w_zp, m).copy(), int(y_zp[0]), scales, \
        TensorType(y_dtype, shape, Quant((float(y_scale[0]),), (int(y_zp[0]),)))


def output_scales(a_scale: np.ndarray, b_scale: np.ndarray, y_scale: np.ndarray, count: int) -> np.ndarray:
    """The requantization multipliers: (a_scale * b_scale) / y_scale, each step in float32."""
    prod = (np.float32(a_scale[0]) * np.broadcast_to(b_scale, count).astype(np.float32)).astype(np.float32)
    return (prod / np.float32(y_scale[0])).astype(np.float32)


def conv_accumulate(x: np.ndarray, x_zp, w: np.ndarray, w_zp: np.ndarray, attrs) -> np.ndarray:
    """int32 sums of (x - x_zp) * (w - w_zp) over each window and group, (N, M, O1, ...)."""
    group = attrs["group"]
    wins = windows(x.shape[2:], w.shape[2:], attrs)
    xi = x.astype(np.int64) - x_zp
    wi = w.astype(np.int64) - w_zp.reshape((-1,) + (1,) * (w.ndim - 1))
    n, m = x.shape[0], w.shape[0]
    acc = np.zeros((n, group, m // group) + tuple(win.out_size for win in wins), np.int64)
    wg = wi.reshape((group, m // group) + w.shape[1:])
    for taps in itertools.product(*[range(k) for k in w.shape[2:]]):
        patch, _ = gather_taps(xi, wins, taps)  # padding contributes (x_zp - x_zp) = 0
        patch = patch.astype(np.int64).reshape((n, group, x.shape[1] // group) + patch.shape[2:])
        acc += np.einsum("ngc...,gmc->ngm...", patch, wg[(Ellipsis,) + tuple(taps)])
    return acc.reshape((n, m) + acc.shape[3:])


def requantize_float(acc: np.ndarray, scales: np.ndarray, y_zp: int, dtype: str, attrs, axis: int) -> np.ndarray:
    """int32 accumulators to the output type: float32(acc) * scale, rounded half to even."""
    v = (acc.astype(np.int32).astype(np.float32) * along(scales, axis, acc.ndim)).astype(np.float32)
    return round_half_even_saturate(v, y_zp, dtype, *act_range(attrs, dtype))


def _qlinear_conv_reference(xs, attrs):
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = xs[:8]
    m = w.shape[0]
    zx = 0 if x_zp is None else int(np.asarray(x_zp).reshape(-1)[0])
    zw = np.zeros(m, np.int64) if w_zp is None else np.broadcast_to(np.asarray(w_zp, np.int64).reshape(-1), m)
    acc = conv_accumulate(x, zx, w, zw, attrs)
    if len(xs) > 8 and xs[8] is not None:
        acc = acc + xs[8].astype(np.int64).reshape((1, m) + (1,) * (x.ndim - 2))
    scales = output_scales(np.asarray(x_scale).reshape(-1), np.asarray(w_scale).reshape(-1),
                           np.asarray(y_scale).reshape(-1), m)
    dtype = x.dtype.name if y_zp is None else y_zp.dtype.name
    zy = 0 if y_zp is None else int(np.asarray(y_zp).reshape(-1)[0])
    return [requantize_float(acc, scales, zy, dtype, attrs, 1)]


def _infer_qlinear_conv(args: InferArgs) -> list[TensorType]:
    return [qlinear_conv_params(args)[4]]


def _prepare_conv(w_at: int, op: str):
    """The geometry the convolution nest reads (the float Conv's, ops/conv.py), from the weights at `w_at`."""
    def prepare(args: InferArgs, outs) -> dict:
        group, wins = _conv_geometry(args, w_at, op)
        x, w = args.types[0], args.types[w_at]
        return {"geometry": ConvGeometry(x.shape[0], x.shape[1], w.shape[0], group, tuple(wins))}
    return prepare


def _conv_macs(w_at: int):
    return lambda args, outs: outs[0].size * int(np.prod(args.types[w_at].shape[1:]))


CONV_ATTRS = _WINDOW_ATTRS + [Attr("group", "int", 1)]
define("QLinearConv", inputs=(8, 9), infer=_infer_qlinear_conv, reference=_qlinear_conv_reference,
       macs=_conv_macs(3), constant_inputs=(1, 2, 4, 5, 6, 7), attrs=CONV_ATTRS + ACT_ATTRS,
       prepare=_prepare_conv(3, "QLinearConv"))


def _infer_conv_integer(args: InferArgs) -> list[TensorType]:
    _, wins = _conv_geometry(args, 1, "ConvInteger")
    x, w = args.types[0], args.types[1]
    zero_point_of(args, 2, "x_zero_point", (x.dtype,))
    zero_point_of(args, 3, "w_zero_point", (w.dtype,), w.shape[0])
    return [TensorType("int32", (x.shape[0], w.shape[0]) + tuple(win.out_size for win in wins))]


def _conv_integer_reference(xs, attrs):
    x, w = xs[0], xs[1]
    zx = 0 if len(xs) < 3 or xs[2] is None else int(np.asarray(xs[2]).reshape(-1)[0])
    zw = np.zeros(w.shape[0], np.int64) if len(xs) < 4 or xs[3] is None else \
        np.broadcast_to(np.asarray(xs[3], np.int64).reshape(-1), w.shape[0])
    return [conv_accumulate(x, zx, w, zw, attrs).astype(np.int32)]


define("ConvInteger", inputs=(2, 4), infer=_infer_conv_integer, reference=_conv_integer_reference,
       macs=_conv_macs(1), constant_inputs=(2, 3), attrs=CONV_ATTRS, prepare=_prepare_conv(1, "ConvInteger"))


# --- QLinearMatMul, MatMulInteger --------------------------------------------------------------
def matmul_shape(a: TensorType, b: TensorType, op: str) -> tuple[int, ...]:
    """The output shape of a batched matrix product [..., M, K] x [..., K, N] (rank 2 or more)."""
    if a.rank < 2 or b.rank < 2:
        raise OpError(f"{op} takes matrices (rank 2 or more), got {list(a.shape)} and {list(b.shape)}")
    if a.shape[-1] != b.shape[-2]:
        raise OpError(f"{op}: inner dimensions differ ({list(a.shape)} x {list(b.shape)})", input=1)
    batch = broadcast_shapes([a.shape[:-2], b.shape[:-2]])
    return tuple(batch) + (a.shape[-2], b.shape[-1])


def qlinear_matmul_params(args: InferArgs):
    """(a_zp, b_zps [N], y_zp, output scales [N], output type) of a QLinearMatMul, checked."""
    a, b = args.types[0], args.types[3]
    for i, t in ((0, a), (3, b)):
        if t.dtype not in ("int8", "uint8"):
            raise OpError(f"input {i} must be int8 or uint8, got {t}", input=i)
    shape = matmul_shape(a, b, "QLinearMatMul")
    n = b.shape[-1]
    a_scale = scale_of(args, 1, "a_scale")
    a_zp, _ = zero_point_of(args, 2, "a_zero_point", (a.dtype,))
    b_scale = scale_of(args, 4, "b_scale", n)
    b_zp, _ = zero_point_of(args, 5, "b_zero_point", (b.dtype,), n)
    y_scale = scale_of(args, 6, "y_scale")
    y_zp, y_dtype = zero_point_of(args, 7, "y_zero_point", ("int8", "uint8"), default=a.dtype)
    bias = args.types[8] if len(args.types) > 8 else None
    if bias is not None and (bias.dtype != "int32" or bias.shape != (n,)):
        raise OpError(f"the bias must be int32[{n}], got {bias}", input=8)
    act_range(args.attrs, y_dtype)
    return int(a_zp[0]), np.broadcast_to(b_zp, n).copy(), int(y_zp[0]), output_scales(a_scale, b_scale, y_scale, n), \
        TensorType(y_dtype, shape, Quant((float(y_scale[0]),), (int(y_zp[0]),)))


def matmul_accumulate(a: np.ndarray, a_zp, b: np.ndarray, b_zp) -> np.ndarray:
    """Exact int64 sums of (a - a_zp) @ (b - b_zp); a_zp may be per row [M], b_zp per column [N]."""
    ai = a.astype(np.int64) - (np.asarray(a_zp, np.int64).reshape(-1, 1) if np.size(a_zp) > 1 else a_zp)
    bi = b.astype(np.int64) - np.asarray(b_zp, np.int64).reshape(-1)
    return np.matmul(ai, bi)


def _qlinear_matmul_reference(xs, attrs):
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = xs[:8]
    n = b.shape[-1]
    za = 0 if a_zp is None else int(np.asarray(a_zp).reshape(-1)[0])
    zb = np.zeros(n, np.int64) if b_zp is None else np.broadcast_to(np.asarray(b_zp, np.int64).reshape(-1), n)
    acc = matmul_accumulate(a, za, b, zb)
    if len(xs) > 8 and xs[8] is not None:
        acc = acc + xs[8].astype(np.int64)
    scales = output_scales(np.asarray(a_scale).reshape(-1), np.asarray(b_scale).reshape(-1),
                           np.asarray(y_scale).reshape(-1), n)
    dtype = a.dtype.name if y_zp is None else y_zp.dtype.name
    zy = 0 if y_zp is None else int(np.asarray(y_zp).reshape(-1)[0])
    return [requantize_float(acc, scales, zy, dtype, attrs, acc.ndim - 1)]


define("QLinearMatMul", inputs=(8, 9), reference=_qlinear_matmul_reference,
       infer=lambda args: [qlinear_matmul_params(args)[4]],
       macs=lambda args, outs: outs[0].size * args.types[0].shape[-1], constant_inputs=(1, 2, 4, 5, 6, 7),
       attrs=ACT_ATTRS)


def _infer_matmul_integer(args: InferArgs) -> list[TensorType]:
    a, b = args.types[0], args.types[1]
    for i, t in ((0, a), (1, b)):
        if t.dtype not in ("int8", "uint8"):
            raise OpError(f"input {i} must be int8 or uint8, got {t}", input=i)
    shape = matmul_shape(a, b, "MatMulInteger")
    zero_point_of(args, 2, "a_zero_point", (a.dtype,), a.shape[-2])
    zero_point_of(args, 3, "b_zero_point", (b.dtype,), b.shape[-1])
    return [TensorType("int32", shape)]


def _matmul_integer_reference(xs, attrs):
    a, b = xs[0], xs[1]
    za = 0 if len(xs) < 3 or xs[2] is None else np.asarray(xs[2]).reshape(-1)
    zb = np.zeros(1, np.int64) if len(xs) < 4 or xs[3] is None else np.asarray(xs[3]).reshape(-1)
    za = int(za[0]) if np.size(za) == 1 else za
    return [matmul_accumulate(a, za, b, zb).astype(np.int32)]


define("MatMulInteger", inputs=(2, 4), infer=_infer_matmul_integer, reference=_matmul_integer_reference,
       macs=lambda args, outs: outs[0].size * args.types[0].shape[-1], constant_inputs=(2, 3))


# --- QLinearAdd, QLinearGlobalAveragePool (folded QDQ patterns) -----------------------------
BINARY_ATTRS = [Attr("a_scale", "float"), Attr("a_zero_point", "int", 0), Attr("b_scale", "float"),
                Attr("b_zero_point", "int", 0), Attr("y_scale", "float"), Attr("y_zero_point", "int", 0),
                Attr("dtype", "string", "int8", ("int8", "uint8"))] + ACT_ATTRS


def _typed_input(args: InferArgs, i: int, dtype: str) -> TensorType:
    t = args.types[i]
    if t.dtype != dtype:
        raise OpError(f"input {i} is {t}, expected {dtype}", input=i)
    return t


def _y_type(args: InferArgs, shape) -> TensorType:
    a = args.attrs
    lo, hi = DTYPE_RANGES[a["dtype"]]
    if not lo <= a["y_zero_point"] <= hi or not a["y_scale"] > 0:
        raise OpError("y_zero_point must lie in the output type's range and y_scale be positive", attr="y_scale")
    act_range(a, a["dtype"])
    return TensorType(a["dtype"], tuple(shape), Quant((a["y_scale"],), (a["y_zero_point"],)))


def add_ratios(attrs) -> tuple[np.float32, np.float32]:
    """a_scale / y_scale and b_scale / y_scale in float32 (ONNX Runtime's QLinearAdd)."""
    y = np.float32(attrs["y_scale"])
    return np.float32(np.float32(attrs["a_scale"]) / y), np.float32(np.float32(attrs["b_scale"]) / y)


def _infer_qlinear_add(args: InferArgs) -> list[TensorType]:
    a = _typed_input(args, 0, args.attrs["dtype"])
    b = _typed_input(args, 1, args.attrs["dtype"])
    return [_y_type(args, broadcast_shapes([a.shape, b.shape]))]


def _qlinear_add_reference(xs, attrs):
    ra, rb = add_ratios(attrs)
    a = (xs[0].astype(np.int32) - attrs["a_zero_point"]).astype(np.float32) * ra
    b = (xs[1].astype(np.int32) - attrs["b_zero_point"]).astype(np.float32) * rb
    return [round_half_even_saturate((a + b).astype(np.float32), attrs["y_zero_point"], attrs["dtype"],
                                     *act_range(attrs, attrs["dtype"]))]


define("QLinearAdd", inputs=2, infer=_infer_qlinear_add, reference=_qlinear_add_reference, attrs=BINARY_ATTRS,
       pattern=Pattern.BROADCAST)

POOL_ATTRS = [Attr("x_scale", "float"), Attr("x_zero_point", "int", 0), Attr("y_scale", "float"),
              Attr("y_zero_point", "int", 0), Attr("dtype", "string", "int8", ("int8", "uint8"))]


def pool_scale(attrs, count: int) -> np.float32:
    """x_scale / (y_scale * count) in float32: the mean and the rescale in one multiplier."""
    return np.float32(np.float32(attrs["x_scale"]) / np.float32(np.float32(attrs["y_scale"]) * np.float32(count)))


def _infer_global_pool(args: InferArgs) -> list[TensorType]:
    x = _typed_input(args, 0, args.attrs["dtype"])
    if x.rank < 3:
        raise OpError(f"the input must be (N, C, D1, ...), got {list(x.shape)}", input=0)
    if args.attrs["channels_last"]:
        return [_y_type(args, (x.shape[0],) + (1,) * (x.rank - 2) + (x.shape[-1],))]
    return [_y_type(args, x.shape[:2] + (1,) * (x.rank - 2))]


def _global_pool_reference(xs, attrs):
    x = xs[0]
    axes = tuple(range(1, x.ndim - 1)) if attrs["channels_last"] else tuple(range(2, x.ndim))
    count = int(np.prod([x.shape[a] for a in axes]))
    acc = (x.astype(np.int64).sum(axis=axes, keepdims=True) - count * attrs["x_zero_point"]).astype(np.int32)
    v = (acc.astype(np.float32) * pool_scale(attrs, count)).astype(np.float32)
    return [round_half_even_saturate(v, attrs["y_zero_point"], attrs["dtype"])]


# channels_last (com.microsoft's attribute of the same name): (N, D1.., C) in, (N, 1.., C) out
def _prepare_global_pool(args: InferArgs, outs) -> dict:
    x, last = args.types[0], bool(args.attrs["channels_last"])
    return pool_facts(global_windows(x.shape[1:-1] if last else x.shape[2:]), channels_last=last)


define("QLinearGlobalAveragePool", inputs=1, infer=_infer_global_pool, reference=_global_pool_reference,
       attrs=POOL_ATTRS + [Attr("channels_last", "int", 0, (0, 1))], pattern=Pattern.REDUCTION,
       prepare=_prepare_global_pool)


AVERAGE_POOL_ATTRS = POOL_ATTRS + [Attr("kernel_shape", "ints"), Attr("pads", "ints", None),
                                   Attr("strides", "ints", None)]


def average_pool_windows(shape: Sequence[int], attrs):
    return windows(shape[2:], attrs["kernel_shape"], attrs)


def _infer_average_pool(args: InferArgs) -> list[TensorType]:
    x = _typed_input(args, 0, args.attrs["dtype"])
    if x.rank < 3 or len(args.attrs["kernel_shape"]) != x.rank - 2:
        raise OpError(f"the input must be (N, C, D1, ...) with a kernel per spatial axis, got {list(x.shape)}",
                      input=0)
    wins = average_pool_windows(x.shape, args.attrs)
    return [_y_type(args, x.shape[:2] + tuple(w.out_size for w in wins))]


def _average_pool_reference(xs, attrs):
    """The mean of (x - x_zp) over each window's taps inside the input (padding does not count),
    times x_scale / y_scale in float32, rounded half to even."""
    x = xs[0].astype(np.int64) - attrs["x_zero_point"]
    wins = average_pool_windows(x.shape, attrs)
    acc = np.zeros(x.shape[:2] + tuple(w.out_size for w in wins), np.int64)
    count = np.zeros(tuple(w.out_size for w in wins), np.int64)
    for taps in itertools.product(*[range(w.kernel) for w in wins]):
        patch, mask = gather_taps(x, wins, taps)
        acc += patch.astype(np.int64)
        count += mask
    ratio = np.float32(np.float32(attrs["x_scale"]) / np.float32(attrs["y_scale"]))
    v = ((acc.astype(np.float32) * ratio).astype(np.float32) / count.astype(np.float32)).astype(np.float32)
    return [round_half_even_saturate(v, attrs["y_zero_point"], attrs["dtype"])]


define("QLinearAveragePool", inputs=1, infer=_infer_average_pool, reference=_average_pool_reference,
       attrs=AVERAGE_POOL_ATTRS,
       prepare=lambda args, outs: pool_facts(average_pool_windows(args.types[0].shape, args.attrs)))
