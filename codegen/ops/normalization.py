"""Normalizations over channels: BatchNormalization (inference), InstanceNormalization and LRN.

Tensors are (N, C, D1, ...); per-channel parameters are float32[C]."""
from __future__ import annotations

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ops.common import require_dtype
from tinsmith.ops.conv import Window
from tinsmith.ops.registry import Attr, InferArgs, OpError, define


def _channel_params(args: InferArgs, op: str, first: int, min_rank: int) -> TensorType:
    """Input 0 is float32 of rank `min_rank` or more; inputs `first`.. are float32[C]."""
    require_dtype(args)
    x = args.types[0]
    if x.rank < min_rank:
        raise OpError(f"{op} input must have rank {min_rank} or more (N, C, ...), got {list(x.shape)}",
                      input=0)
    for i in range(first, len(args.types)):
        if args.types[i].shape != (x.shape[1],):
            raise OpError(f"input {i} must be float32[{x.shape[1]}], one value per channel, got "
                          f"{args.types[i]}", input=i)
    return x


def _per_channel(v: np.ndarray, rank: int) -> np.ndarray:
    """A float32[C] parameter shaped to broadcast along axis 1 of a rank-`rank` tensor, in float64."""
    return v.astype(np.float64).reshape((1, -1) + (1,) * (rank - 2))


# --- BatchNormalization ---------------------------------------------------------------------
def _infer_batch_norm(args: InferArgs) -> list[TensorType]:
    if args.attrs["training_mode"]:
        raise OpError("only inference is supported (training_mode=0): fold statistics into the "
                      "model before export", attr="training_mode")
    return [_channel_params(args, "BatchNormalization", 1, 2)]


def _batch_norm_reference(xs, attrs):
    x = xs[0].astype(np.float64)
    scale, bias, mean, var = (_per_channel(v, x.ndim) for v in xs[1:5])
    return [((x - mean) / np.sqrt(var + np.float32(attrs["epsilon"])) * scale + bias).astype(np.float32)]


def _planes(axes: tuple[int, ...]):
    """The facts of a normalization kernel: the input viewed as (batch, channels, positions),
    positions being every axis after the channel one, and the axes the kernel walks inside each
    kept position (InstanceNormalization: the positions of a plane; BatchNormalization: the batch
    and positions of a channel)."""
    def facts(args: InferArgs, outputs) -> dict:
        x = args.types[0]
        batch, channels = x.shape[:2]
        return {"shape": (batch, channels, x.size // (batch * channels) if batch * channels else 0), "axes": axes}
    return facts


# momentum only updates running statistics in training, so inference ignores it
define("BatchNormalization", inputs=5, infer=_infer_batch_norm, reference=_batch_norm_reference,
       macs=lambda args, outs: outs[0].size, prepare=_planes((0, 2)),
       attrs=[Attr("epsilon", "float", 1e-5), Attr("momentum", "float", 0.9),
              Attr("training_mode", "int", 0, (0, 1))])


# --- InstanceNormalization ------------------------------------------------------------------
def _instance_norm_reference(xs, attrs):
    x = xs[0].astype(np.float64)
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    scale, bias = (_per_channel(v, x.ndim) for v in xs[1:3])
    return [((x - mean) / np.sqrt(var + np.float32(attrs["epsilon"])) * scale + bias).astype(np.float32)]


define("InstanceNormalization", inputs=3, reference=_instance_norm_reference, prepare=_planes((2,)),
       infer=lambda args: [_channel_params(args, "InstanceNormalization", 1, 3)],
       attrs=[Attr("epsilon", "float", 1e-5)])


# --- LRN ------------------------------------------------------------------------------------
def lrn_span(size: int) -> tuple[int, int]:
    """Channels before and after c that LRN sums over (ONNX: floor and ceil of (size - 1) / 2)."""
    return (size - 1) // 2, size // 2


def _infer_lrn(args: InferArgs) -> list[TensorType]:
    if args.attrs["size"] < 1:
        raise OpError(f"size must be 1 or more, got {args.attrs['size']}", attr="size")
    return [_channel_params(args, "LRN", 1, 3)]


def _lrn_reference(xs, attrs):
    x = xs[0].astype(np.float64)
    before, after = lrn_span(attrs["size"])
    squares = np.pad(x * x, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    window = sum(squares[:, i:i + x.shape[1]] for i in range(attrs["size"]))
    y = x / (attrs["bias"] + attrs["alpha"] / attrs["size"] * window) ** attrs["beta"]
    return [y.astype(np.float32)]


def _lrn_facts(args: InferArgs, outputs) -> dict:
    """The window across the channels, and the input viewed as (batch, channels, positions)."""
    shape = args.types[0].shape
    channels, before_after = shape[1], lrn_span(args.attrs["size"])
    return {"view": (shape[0], channels, int(np.prod(shape[2:], dtype=np.int64))),
            "windows": (Window(channels, channels, args.attrs["size"], 1, 1, *before_after),)}


define("LRN", inputs=1, infer=_infer_lrn, reference=_lrn_reference,
       attrs=[Attr("alpha", "float", 1e-4), Attr("beta", "float", 0.75), Attr("bias", "float", 1.0),
              Attr("size", "int")], prepare=_lrn_facts)
