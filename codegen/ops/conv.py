"""Convolutions (Conv, ConvTranspose) and the sliding-window geometry they share with the pools.

Tensors are (N, C, D1, ..., Dn) with any number n >= 1 of spatial axes. Along each spatial axis a
window is described by a `Window`; pools (pooling.py) and the C++ functors use the same functions
here, so output shapes, padding and the generated loops cannot disagree.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ops.common import require_dtype
from tinsmith.ops.registry import Attr, InferArgs, OpError, define

AUTO_PAD = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dataclass(frozen=True)
class Window:
    """One spatial axis of a sliding window: output position o reads input position
    o * stride + k * dilation - pad_begin for taps k < kernel; positions outside 0..in_size-1 are
    padding. `pad_end` only matters to AveragePool's count_include_pad (taps past it never count)."""

    in_size: int
    out_size: int
    kernel: int
    stride: int = 1
    dilation: int = 1
    pad_begin: int = 0
    pad_end: int = 0

    def positions(self) -> np.ndarray:
        """(out_size, kernel) array: the input position each output reads at each tap."""
        o = np.arange(self.out_size)[:, None]
        k = np.arange(self.kernel)[None, :]
        return o * self.stride + k * self.dilation - self.pad_begin


@dataclass(frozen=True)
class TransposedAxis:
    """One spatial axis of ConvTranspose: input position i adds to output position
    i * stride + k * dilation - pad_begin at tap k (outputs outside 0..out_size-1 are cropped)."""

    in_size: int
    out_size: int
    kernel: int
    stride: int = 1
    dilation: int = 1
    pad_begin: int = 0


def _ints(attrs: Mapping[str, Any], name: str, count: int, default: int, minimum: int) -> tuple[int, ...]:
    """Per-axis integer attribute: `count` values, each at least `minimum` (default when absent)."""
    value = attrs.get(name)
    if value is None:
        return (default,) * count
    if len(value) != count:
        raise OpError(f"{name} {list(value)} must have {count} values, one per "
                      f"{'spatial axis' if name != 'pads' else 'start and end of each spatial axis'}",
                      attr=name)
    if any(v < minimum for v in value):
        raise OpError(f"{name} {list(value)} must all be {minimum} or more", attr=name)
    return tuple(value)


def spatial_rank(args: InferArgs, op: str) -> int:
    """Number of spatial axes of input 0, which must be float32 (N, C, D1, ...) with at least one."""
    require_dtype(args, inputs=[0])
    x = args.types[0]
    if x.rank < 3:
        raise OpError(f"{op} input must have rank 3 or more (N, C, D1, ...), got {list(x.shape)}", input=0)
    return x.rank - 2


def kernel_from(attrs: Mapping[str, Any], weights: TensorType | None, n: int) -> tuple[int, ...]:
    """The kernel's spatial shape: attribute kernel_shape, which must agree with the weights if any."""
    given = attrs.get("kernel_shape")
    if weights is not None:
        shape = weights.shape[2:]
        if given is not None and tuple(given) != shape:
            raise OpError(f"kernel_shape {list(given)} does not match the weights' spatial shape "
                          f"{list(shape)}", attr="kernel_shape")
        return shape
    if given is None:
        raise OpError("kernel_shape is required", attr="kernel_shape")
    return _ints(attrs, "kernel_shape", n, 1, 1)


def _same_pads(in_size: int, out_size: int, span: int, stride: int, upper: bool) -> tuple[int, int]:
    """SAME padding: the total that makes `out_size` windows fit, the odd one at the end if `upper`."""
    total = max(0, (out_size - 1) * stride + span - in_size)
    return (total // 2, total - total // 2) if upper else (total - total // 2, total // 2)


def windows(in_shape: Sequence[int], kernel: Sequence[int], attrs: Mapping[str, Any],
            ceil_mode: bool = False) -> tuple[Window, ...]:
    """Per spatial axis, the window of Conv or a pool (ONNX shape rules; auto_pad overrides pads)."""
    n = len(kernel)
    strides = _ints(attrs, "strides", n, 1, 1)
    dilations = _ints(attrs, "dilations", n, 1, 1)
    pads = _ints(attrs, "pads", 2 * n, 0, 0)
    auto_pad = attrs.get("auto_pad", "NOTSET")
    result = []
    for i in range(n):
        size, k, s, d = in_shape[i], kernel[i], strides[i], dilations[i]
        span = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = -(-size // s)
            begin, end = _same_pads(size, out, span, s, auto_pad == "SAME_UPPER")
        else:
            begin, end = (0, 0) if auto_pad == "VALID" else (pads[i], pads[n + i])
            room = size + begin + end - span
            out = (-(-room // s) if ceil_mode else room // s) + 1 if room >= 0 else 0
            # ceil mode: a last window that would start in the end padding is dropped
            if ceil_mode and out > 0 and (out - 1) * s >= size + begin:
                out -= 1
        if out < 1:
            raise OpError(f"spatial axis {i} of size {size} (padded {begin}+{end}) is smaller than the "
                          f"window: kernel {k}, dilation {d}", attr="kernel_shape")
        result.append(Window(size, out, k, s, d, begin, end))
    return tuple(result)


def _group(attrs: Mapping[str, Any], channels: int, what: str) -> int:
    group = attrs["group"]
    if group < 1 or channels % group:
        raise OpError(f"group {group} must divide the {what} ({channels})", attr="group")
    return group


def _check_bias(args: InferArgs, channels: int) -> None:
    b = args.types[2] if len(args.types) > 2 else None
    if b is not None and (b.dtype != "float32" or b.shape != (channels,)):
        raise OpError(f"bias must be float32[{channels}], one per output channel, got {b}", input=2)


def _check_weights(args: InferArgs, op: str) -> TensorType:
    w, x = args.types[1], args.types[0]
    if w.dtype != "float32" or w.rank != x.rank:
        raise OpError(f"{op} weights must be float32 of rank {x.rank} like the input, got {w}", input=1)
    return w


# --- Conv -----------------------------------------------------------------------------------
def conv_geometry(args: InferArgs) -> tuple[int, tuple[Window, ...]]:
    """Conv's group count and windows, after checking the node."""
    n = spatial_rank(args, "Conv")
    x, w = args.types[0], _check_weights(args, "Conv")
    group = _group(args.attrs, w.shape[0], "number of output channels (weights' axis 0)")
    if w.shape[1] * group != x.shape[1]:
        raise OpError(f"input has {x.shape[1]} channels but the weights {list(w.shape)} with group {group} "
                      f"take {w.shape[1] * group} ({w.shape[1]} per group)", input=1)
    _check_bias(args, w.shape[0])
    return group, windows(x.shape[2:], kernel_from(args.attrs, w, n), args.attrs)


def _infer_conv(args: InferArgs) -> list[TensorType]:
    _, wins = conv_geometry(args)
    x, w = args.types[0], args.types[1]
    return [TensorType("float32", (x.shape[0], w.shape[0]) + tuple(win.out_size for win in wins))]


def gather_taps(x: np.ndarray, wins: Sequence[Window], taps: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """x's values at one tap of every window, (N, C, O1, ...), zero where padding, and the mask of
    real (non-padding) positions, (O1, ...)."""
    pos = [win.positions()[:, k] for win, k in zip(wins, taps)]
    valid = [(p >= 0) & (p < win.in_size) for p, win in zip(pos, wins)]
    if any(win.in_size == 0 for win in wins):  # an empty input: every tap is padding
        mask = np.zeros(tuple(len(p) for p in pos), bool)
        return np.zeros(x.shape[:2] + mask.shape, x.dtype), mask
    index = np.ix_(*[np.clip(p, 0, win.in_size - 1) for p, win in zip(pos, wins)])
    mask = np.ones((), bool)
    for v in valid:
        mask = np.multiply.outer(mask, v)
    return np.where(mask, x[(slice(None), slice(None)) + index], 0.0), mask


def _conv_reference(xs, attrs):
    x, w = xs[0].astype(np.float64), xs[1].astype(np.float64)
    b = xs[2] if len(xs) > 2 else None
    group = attrs["group"]
    wins = windows(x.shape[2:], w.shape[2:], attrs)
    n, m = x.shape[0], w.shape[0]
    out = np.zeros((n, group, m // group) + tuple(win.out_size for win in wins))
    wg = w.reshape((group, m // group) + w.shape[1:])
    for taps in itertools.product(*[range(k) for k in w.shape[2:]]):
        patch, _ = gather_taps(x, wins, taps)
        patch = patch.reshape((n, group, x.shape[1] // group) + patch.shape[2:])
        out += np.einsum("ngc...,gmc->ngm...", patch, wg[(Ellipsis,) + tuple(taps)])
    out = out.reshape((n, m) + out.shape[3:])
    if b is not None:
        out += b.reshape((1, m) + (1,) * len(wins))
    return [out.astype(np.float32)]


def _conv_macs(args: InferArgs, outs) -> int:
    w = args.types[1]
    return outs[0].size * math.prod(w.shape[1:])


_WINDOW_ATTRS = [Attr("auto_pad", "string", "NOTSET", AUTO_PAD), Attr("dilations", "ints", None),
                 Attr("kernel_shape", "ints", None), Attr("pads", "ints", None), Attr("strides", "ints", None)]

class SpatialWindows:
    """The spatial sizes of anything holding one `windows` Window per spatial axis (a convolution's
    geometry, a pool's loop nest)."""

    windows: tuple

    @property
    def in_spatial(self) -> tuple[int, ...]:
        return tuple(win.in_size for win in self.windows)

    @property
    def out_spatial(self) -> tuple[int, ...]:
        return tuple(win.out_size for win in self.windows)


@dataclass(frozen=True)
class ConvGeometry(SpatialWindows):
    """A convolution's shape as every kernel reads it, resolved once per node by `prepare`
    (layout-free: a channels-last kernel reads the same numbers). The spatial shapes are the
    windows' own: input D1.. are their in_size, output O1.. their out_size."""

    batch: int
    channels: int  # input channels, all groups together
    out_channels: int
    group: int
    windows: tuple[Window, ...]

    @property
    def in_per_group(self) -> int:
        return self.channels // self.group

    @property
    def out_per_group(self) -> int:
        return self.out_channels // self.group

    @property
    def kernel(self) -> tuple[int, ...]:
        return tuple(win.kernel for win in self.windows)

    @property
    def in_size(self) -> int:
        """Input positions per channel."""
        return math.prod(self.in_spatial)

    @property
    def out_size(self) -> int:
        """Output positions per channel."""
        return math.prod(self.out_spatial)

    @property
    def kernel_size(self) -> int:
        """Taps per window."""
        return math.prod(self.kernel)

    @property
    def pointwise(self) -> bool:
        """A 1x1 window with stride 1 and no padding: a matrix product over the positions."""
        return all(w.kernel == 1 and w.stride == 1 and w.pad_begin == 0 and w.in_size == w.out_size
                   for w in self.windows)


def _prepare_conv(args: InferArgs, outs) -> dict:
    """The group count, one Window per spatial axis and the whole geometry, resolved once for the
    node's kernels."""
    group, windows = conv_geometry(args)
    x, w = args.types[0], args.types[1]
    geometry = ConvGeometry(x.shape[0], x.shape[1], w.shape[0], group, tuple(windows))
    return {"group": group, "windows": tuple(windows), "geometry": geometry}


define("Conv", inputs=(2, 3), infer=_infer_conv, reference=_conv_reference, macs=_conv_macs,
       attrs=_WINDOW_ATTRS + [Attr("group", "int", 1)], prepare=_prepare_conv)


# --- ConvTranspose --------------------------------------------------------------------------
def conv_transpose_geometry(args: InferArgs) -> tuple[int, tuple[TransposedAxis, ...]]:
    """ConvTranspose's group count and per-axis geometry (ONNX rules for output_shape, auto_pad,
    output_padding and pads), after checking the node."""
    n = spatial_rank(args, "ConvTranspose")
    x, w = args.types[0], _check_weights(args, "ConvTranspose")
    attrs = args.attrs
    group = _group(attrs, x.shape[1], "number of input channels")
    if w.shape[0] != x.shape[1]:
        raise OpError(f"input has {x.shape[1]} channels but the weights {list(w.shape)} take {w.shape[0]} "
                      f"(weights are (C, M / group, k1, ...))", input=1)
    _check_bias(args, w.shape[1] * group)
    kernel = kernel_from(attrs, w, n)
    strides = _ints(attrs, "strides", n, 1, 1)
    dilations = _ints(attrs, "dilations", n, 1, 1)
    pads = _ints(attrs, "pads", 2 * n, 0, 0)
    extra = _ints(attrs, "output_padding", n, 0, 0)
    auto_pad = attrs["auto_pad"]
    wanted = attrs.get("output_shape")
    if wanted is not None:
        if len(wanted) == n + 2:  # (N, C, D1, ...) is accepted too; the spatial part counts
            wanted = wanted[2:]
        if len(wanted) != n:
            raise OpError(f"output_shape {list(wanted)} must have {n} values, one per spatial axis",
                          attr="output_shape")
    result = []
    for i in range(n):
        size, k, s, d = x.shape[2 + i], kernel[i], strides[i], dilations[i]
        natural = s * (size - 1) + extra[i] + (k - 1) * d + 1
        if wanted is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = wanted[i] if wanted is not None else size * s
            # An output larger than the natural one pads nothing: the extra positions come at the
            # end and get only the bias (as ONNX Runtime does; a negative total would shift them).
            total = max(0, natural - out)
            begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        else:
            begin, end = (0, 0) if auto_pad == "VALID" else (pads[i], pads[n + i])
            out = natural - begin - end
        if out < 1:
            raise OpError(f"spatial axis {i}: the output would have size {out}", attr="pads")
        result.append(TransposedAxis(size, out, k, s, d, begin))
    return group, tuple(result)


def _infer_conv_transpose(args: InferArgs) -> list[TensorType]:
    group, axes = conv_transpose_geometry(args)
    x, w = args.types[0], args.types[1]
    return [TensorType("float32", (x.shape[0], w.shape[1] * group) + tuple(a.out_size for a in axes))]


def _conv_transpose_reference(xs, attrs):
    x, w = xs[0].astype(np.float64), xs[1].astype(np.float64)
    b = xs[2] if len(xs) > 2 else None
    types = tuple(TensorType("float32", a.shape) if a is not None else None for a in xs)
    group, axes = conv_transpose_geometry(InferArgs(types, attrs, tuple(xs)))
    n, c, mg = x.shape[0], x.shape[1], w.shape[1]
    out = np.zeros((n, group, mg) + tuple(a.out_size for a in axes))
    xg = x.reshape((n, group, c // group) + x.shape[2:])
    wg = w.reshape((group, c // group) + w.shape[1:])
    for taps in itertools.product(*[range(a.kernel) for a in axes]):
        # every input position adds x * w at one output position per tap (scatter)
        pos = [np.arange(a.in_size) * a.stride + k * a.dilation - a.pad_begin for a, k in zip(axes, taps)]
        keep = [(p >= 0) & (p < a.out_size) for p, a in zip(pos, axes)]
        contrib = np.einsum("ngc...,gcm->ngm...", xg, wg[(Ellipsis,) + tuple(taps)])
        src = np.ix_(*[np.nonzero(k)[0] for k in keep])
        dst = np.ix_(*[p[k] for p, k in zip(pos, keep)])
        out[(slice(None),) * 3 + dst] += contrib[(slice(None),) * 3 + src]
    out = out.reshape((n, group * mg) + out.shape[3:])
    if b is not None:
        out += b.reshape((1, -1) + (1,) * len(axes))
    return [out.astype(np.float32)]


def _conv_transpose_macs(args: InferArgs, outs) -> int:
    x, w = args.types[0], args.types[1]
    return x.size * math.prod(w.shape[1:])


def _prepare_conv_transpose(args: InferArgs, outs) -> dict:
    """The group count and one TransposedAxis per spatial axis, resolved once for the kernel."""
    group, axes = conv_transpose_geometry(args)
    return {"group": group, "axes": axes}


define("ConvTranspose", inputs=(2, 3), infer=_infer_conv_transpose, reference=_conv_transpose_reference,
       macs=_conv_transpose_macs, prepare=_prepare_conv_transpose,
       attrs=_WINDOW_ATTRS + [Attr("group", "int", 1), Attr("output_padding", "ints", None),
                              Attr("output_shape", "ints", None)])
