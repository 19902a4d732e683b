"""Pools: MaxPool, AveragePool and LpPool over sliding windows, and their Global* forms over every
spatial position. Window geometry (pads, auto_pad, ceil_mode, dilations) is conv.windows."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ops.common import require_dtype
from tinsmith.ops.conv import AUTO_PAD, Window, gather_taps, kernel_from, spatial_rank, windows
from tinsmith.ops.registry import Attr, InferArgs, OpError, define


# MaxPool also takes 8-bit integers (ONNX's T); the other pools average or sum, in float32 only.
MAX_POOL_INTEGERS = ("int8", "uint8")


def pool_windows(args: InferArgs, op: str) -> tuple[Window, ...]:
    """The windows of a pool node, after checking it."""
    x = args.types[0]
    if op == "MaxPool" and x is not None and x.dtype in MAX_POOL_INTEGERS:
        args = dataclasses.replace(args, types=(TensorType("float32", x.shape), *args.types[1:]))
    n = spatial_rank(args, op)
    return windows(args.types[0].shape[2:], kernel_from(args.attrs, None, n), args.attrs,
                   bool(args.attrs["ceil_mode"]))


def pool_facts(wins, channels_last: bool = False, count_include_pad: bool = False) -> dict:
    """What a pool's kernels read (`prepare`): one Window per spatial axis, the layout, and whether
    padding taps count (AveragePool's count_include_pad)."""
    return {"windows": tuple(wins), "channels_last": channels_last, "count_include_pad": count_include_pad}


def global_windows(spatial) -> tuple[Window, ...]:
    """A Global pool's windows: each covers its whole axis, one output position."""
    return tuple(Window(d, 1, d) for d in spatial)


def _prepare_pool(op: str):
    def prepare(args: InferArgs, outs) -> dict:
        include_pad = op == "AveragePool" and bool(args.attrs["count_include_pad"])
        return pool_facts(pool_windows(args, op), count_include_pad=include_pad)
    return prepare


def window_counts(wins: tuple[Window, ...], include_pad: bool) -> np.ndarray:
    """(O1, ...) number of taps AveragePool divides by: the real positions, or with `include_pad`
    also the padding ones (but never taps past the end padding, which ceil mode may add)."""
    count = np.ones((), np.int64)
    for win in wins:
        pos = win.positions()
        limit = win.in_size + win.pad_end if include_pad else win.in_size
        inside = (pos < limit) & (pos >= (-win.pad_begin if include_pad else 0))
        count = np.multiply.outer(count, inside.sum(axis=1))
    return count


def _infer_pool(op: str):
    def infer(args: InferArgs) -> list[TensorType]:
        wins = pool_windows(args, op)
        if op == "LpPool" and args.attrs["p"] < 1:
            raise OpError(f"p must be 1 or more, got {args.attrs['p']}", attr="p")
        x = args.types[0]
        return [TensorType(x.dtype, x.shape[:2] + tuple(w.out_size for w in wins))]
    return infer


def _pool_reference(op: str):
    def reference(xs, attrs):
        dtype = xs[0].dtype
        x = xs[0].astype(np.float64)
        wins = windows(x.shape[2:], attrs["kernel_shape"], attrs, bool(attrs["ceil_mode"]))
        out_shape = x.shape[:2] + tuple(w.out_size for w in wins)
        # MaxPool starts from the lowest float32, as ONNX Runtime does: a window wholly in the
        # padding (or holding only NaN and -inf) gives -3.4028235e38, not -inf.
        lowest = float(np.iinfo(dtype).min if dtype.kind in "iu" else np.finfo(np.float32).min)
        acc = np.full(out_shape, lowest if op == "MaxPool" else 0.0)
        for taps in itertools.product(*[range(w.kernel) for w in wins]):
            v, real = gather_taps(x, wins, taps)
            if op == "MaxPool":  # NaN never wins, as in ONNX Runtime
                acc = np.where(real & (v > acc), v, acc)
            elif op == "AveragePool":
                acc += v
            else:
                acc += np.abs(v) ** attrs["p"]
        if op == "AveragePool":
            with np.errstate(invalid="ignore", divide="ignore"):
                acc = acc / window_counts(wins, bool(attrs["count_include_pad"]))
        elif op == "LpPool":
            acc = acc ** (1.0 / attrs["p"])
        return [acc.astype(dtype)]
    return reference


_POOL_ATTRS = [Attr("auto_pad", "string", "NOTSET", AUTO_PAD), Attr("ceil_mode", "int", 0, (0, 1)),
               Attr("dilations", "ints", None), Attr("kernel_shape", "ints"), Attr("pads", "ints", None),
               Attr("strides", "ints", None)]

# Only MaxPool's first output: its optional Indices output is not supported.
define("MaxPool", inputs=1, infer=_infer_pool("MaxPool"), reference=_pool_reference("MaxPool"),
       attrs=_POOL_ATTRS + [Attr("storage_order", "int", 0, (0, 1))], prepare=_prepare_pool("MaxPool"))
define("AveragePool", inputs=1, infer=_infer_pool("AveragePool"), reference=_pool_reference("AveragePool"),
       attrs=_POOL_ATTRS + [Attr("count_include_pad", "int", 0, (0, 1))], prepare=_prepare_pool("AveragePool"))
define("LpPool", inputs=1, infer=_infer_pool("LpPool"), reference=_pool_reference("LpPool"),
       attrs=_POOL_ATTRS + [Attr("p", "int", 2)], prepare=_prepare_pool("LpPool"))


# --- Global pools ---------------------------------------------------------------------------
def _infer_global(op: str):
    def infer(args: InferArgs) -> list[TensorType]:
        require_dtype(args)
        x = args.types[0]
        if x.rank < 3:
            raise OpError(f"{op} input must have rank 3 or more (N, C, D1, ...), got {list(x.shape)}",
                          input=0)
        if op == "GlobalLpPool" and args.attrs["p"] < 1:
            raise OpError(f"p must be 1 or more, got {args.attrs['p']}", attr="p")
        return [TensorType("float32", x.shape[:2] + (1,) * (x.rank - 2))]
    return infer


def _global_reference(op: str):
    def reference(xs, attrs):
        dtype = xs[0].dtype
        x = xs[0].astype(np.float64)
        axes = tuple(range(2, x.ndim))
        if op == "GlobalAveragePool":
            y = x.mean(axis=axes, keepdims=True)
        elif op == "GlobalMaxPool":
            y = x.max(axis=axes, keepdims=True)
        else:
            y = (np.abs(x) ** attrs["p"]).sum(axis=axes, keepdims=True) ** (1.0 / attrs["p"])
        return [y.astype(np.float32)]
    return reference


def _prepare_global(args: InferArgs, outs) -> dict:
    return pool_facts(global_windows(args.types[0].shape[2:]))


define("GlobalAveragePool", inputs=1, infer=_infer_global("GlobalAveragePool"),
       reference=_global_reference("GlobalAveragePool"), prepare=_prepare_global)
define("GlobalMaxPool", inputs=1, infer=_infer_global("GlobalMaxPool"),
       reference=_global_reference("GlobalMaxPool"), prepare=_prepare_global)
define("GlobalLpPool", inputs=1, infer=_infer_global("GlobalLpPool"), reference=_global_reference("GlobalLpPool"),
       attrs=[Attr("p", "int", 2)], prepare=_prepare_global)
