"""The host's vector micro-kernel of the int8 family, for pointwise QConv2D and QFullyConnected on
targets with 256-bit vectors or wider (AVX2, AVX-512): the driver's pixel blocks
(quantized_driver.pointwise_nest, fc_nest), each block's output channels `lanes` at a time in int32
vectors held in registers, one per pixel.

For each input channel the block loads one vector of weights (packed at build time input-channel
major, output channels consecutive, widened to int32) and adds (x - x_zero_point) * w to every
pixel's accumulator, the input value broadcast to all lanes. Integer sums are exact in any order,
so each output equals the reference's; the sums are then requantized channel by channel by the
portable requantization (quantized.py), so outputs stay bit-exact with TFLite Micro.
"""
from __future__ import annotations

import numpy as np

from tinsmith.generate.kernel_sets import VECTORS
from tinsmith.generate.functors import quantized as q
from tinsmith.generate.functors.quantized import INT8_CONV
from tinsmith.generate.functors.quantized_driver import Pixel, pointwise_nest
from tinsmith.generate.functors.quantized_math import i32, widen
from tinsmith.generate.loop_ir import Assign, Binary, Broadcast, Const, For, Lane, Load, Local, Stmt, Var, index

PIXELS = 4  # pointwise pixels per block: four accumulator vectors share each weight vector


def _lanes(args) -> int:
    return args.caps.simd_bits // 32


def _applies(args, attrs) -> bool:
    """256-bit vectors or wider (a 32-bit lane multiply: SSE2 has none), whole vectors of output channels."""
    w = args.prepared.inputs[1] if args.prepared is not None else args.inputs[1].type
    return args.caps.simd_bits >= 256 and w.shape[0] % _lanes(args) == 0


def _pointwise(args, attrs) -> bool:
    w = args.prepared.inputs[1] if args.prepared is not None else args.inputs[1].type
    return (_applies(args, attrs) and tuple(w.shape[1:3]) == (1, 1) and tuple(attrs["strides"]) == (1, 1)
            and not any(attrs["pads"]))


def _input_major(w: np.ndarray) -> np.ndarray:
    """[O, ..., K] -> [K, O] int32: one input channel's weights of consecutive outputs adjacent."""
    return np.ascontiguousarray(w.reshape(w.shape[0], -1).T).astype(np.int32)


def _pack(args, attrs) -> dict:
    return {1: _input_major}


class HostVectorMicroKernel:
    """Pixels x (lanes output channels) int32 accumulators (see the module doc)."""

    def block(self, graph, args, attrs, pixels: list[Pixel], k: int) -> list[Stmt]:
        x, w, y = args.inputs[0], args.inputs[1], args.outputs[0]
        o, lanes = y.type.shape[-1], _lanes(args)
        ob, ic = Var("ob"), Var("ic")
        b = args.inputs[2]
        stmts: list[Stmt] = [Local(f"acc{p}", Load(b.name, ob, lanes) if b is not None else Const(0, "int32", lanes),
                                   "int32", lanes) for p in range(len(pixels))]
        step: list[Stmt] = [Local("wv", Load(w.name, Binary("+", Binary("*", ic, index(o)), ob), lanes), "int32", lanes)]
        for p, (x_at, _, _) in enumerate(pixels):
            xv = Binary("-", widen(Load(x.name, Binary("+", x_at, ic))), i32(attrs["x_zero_point"]))
            step.append(Assign(f"acc{p}", Binary("+", Var(f"acc{p}"), Binary("*", Broadcast(xv, lanes), Var("wv")))))
        stmts.append(For("ic", k, tuple(step)))
        for p, (_, out_at, coords) in enumerate(pixels):
            channel = Binary("+", ob, Var("l"))
            at = coords + (channel,) if coords is not None else None
            stmts.append(For("l", lanes, (Local("acc", Lane(Var(f"acc{p}"), Var("l")), "int32"),
                                          *q._finish(graph, args, attrs, channel, Binary("+", out_at, channel), at))))
        return [For("ob", o, tuple(stmts), step=lanes)]



HOST_KERNEL = HostVectorMicroKernel()


@VECTORS.register("QConv2D", family="convolution", types=INT8_CONV, layout="nhwc", priority=1, when=_pointwise,
                  pack=_pack)
def qconv2d_pointwise_host(graph, node_id, cluster_id, args, attrs):
    """A pointwise QConv2D: PIXELS pixels at a time, their output channels in int32 vectors."""
    c = args.inputs[0].type.shape[3]
    return pointwise_nest(args, PIXELS, lambda pixels: HOST_KERNEL.block(graph, args, attrs, pixels, c))


@VECTORS.register("QFullyConnected", family="matrix", types=INT8_CONV, priority=1, when=_applies, pack=_pack)
def qfully_connected_host_vectors(graph, node_id, cluster_id, args, attrs):
    """QFullyConnected: each row's outputs in int32 vectors, one weight vector per input (the weights
    packed [K, O], so the driver's fc_nest, which reads K from [O, K], is not used)."""
    k, o = args.inputs[1].type.shape
    r = Var("r")
    row = [(Binary("*", r, index(k)), Binary("*", r, index(o)), (r,))]
    return [For("r", args.outputs[0].type.shape[0], tuple(HOST_KERNEL.block(graph, args, attrs, row, k)))]
