"""The Cortex-M's float convolution schedule (the `fpu-registers` kernel set): the family's loop
nest (conv_nest.py) in register blocks of scalar accumulators for the FPv4/FPv5 register file, with
fast.py's RegisterBlock micro-kernel.

Cost is counted in instructions per multiply-accumulate (QEMU -icount, docs/BENCHMARKS.md). A
fused multiply-add is one; what a kernel adds on top is loads, loop control and the epilogue, so
every value loaded feeds as many accumulators as the 32 single-precision registers allow, without
pushing so many callee-saved registers that the stack grows:

- a convolution with a window: MB = 2 output channels x NB = 6 positions along the row, the
  innermost tap loop unrolled so neighbouring positions share each input load; weights packed
  [C * kh * kw, M] at build time, so the block's weights for one input channel are within a few
  hundred bytes of each other and one pointer with immediate offsets reaches them all;
- a pointwise convolution (1x1, stride 1, no padding): one axis of H * W positions, 4 channels x
  6 positions (24 accumulators, 6 inputs, one weight: 31 registers);
- a depthwise convolution: 1 channel x 4 positions.

(Gemm with one row, 12 consecutive outputs per pass over a: matrix.py's gemv_fpu_schedule.)

Every tile of the output is exact (taps clipped to the input, never a bounds test per tap), so
the edge rows of a padded convolution run blocked like the interior; positions left over after
the last full block of a row are one smaller block. A row of at most NARROW_ROW outputs is one
block over the whole row: each position's taps in the padding are left out at generation time,
so its edge positions share the row's input loads. Each accumulator adds its terms in the
portable kernel's order (bias, input channels, taps), as one fused multiply-add each.
"""
from __future__ import annotations

from typing import Mapping

from tinsmith.generate.backend import KernelArgs, same
from tinsmith.generate.kernel_sets import FPU_REGISTERS
from tinsmith.generate.functors.conv import ConvOperands
from tinsmith.generate.functors.conv_nest import ConvNest, ConvSchedule, convolution
from tinsmith.generate.functors.fast import RegisterBlock, _is_float_2d_conv


# (output channels, positions) per register block; measured on the emulated Cortex-M4 against
# instructions per MAC and the stack (4 x 4 pointwise: 2.05 on vww; 2 x 8 windows: faster than
# 2 x 6 but 16 bytes more stack on ic; 4 x 3 windows: 0.1 instructions per MAC more on ic)
POINTWISE_BLOCK = (4, 6)
WINDOW_BLOCK = (2, 6)
DEPTHWISE_BLOCK = (1, 4)
NARROW_ROW = 8


def _has_fpu_conv(args: KernelArgs, attrs: Mapping) -> bool:
    # without an FPU every float operation is a library call: blocking saves nothing (the M0+)
    return args.caps.fpu != "none" and args.caps.float_registers >= 32 and _is_float_2d_conv(args, attrs)


def _pack_taps_by_channel(args: KernelArgs, attrs: Mapping) -> dict:
    """Weights [M, C, kh, kw] as [C * kh * kw, M] for a convolution with a window and no groups
    (see the module doc). With a pointer per output channel GCC spills pointers and the stack
    grows; a pointwise convolution keeps the model's layout (packed, it measured slower)."""
    w = args.inputs[1]
    if (not _has_fpu_conv(args, attrs) or args.prepared["group"] != 1 or w.type.rank != 4
            or args.prepared["geometry"].pointwise):
        return {}
    m = w.type.shape[0]
    return {1: lambda a: a.reshape(m, -1).T}


@FPU_REGISTERS.register("Conv", family="convolution", types=same("float32", 3, acc="float32"), layout="nchw",
                         epilogue=True, when=_has_fpu_conv, pack=_pack_taps_by_channel)
def conv_scalar_blocked(graph, node_id, cluster_id, args, attrs):
    """The nest in scalar register blocks, every tile exact, a narrow row one block, the
    channel-block loop inside each tile (see the module doc)."""
    ops = ConvOperands.of(args, flatten_pointwise=True)
    geo = ops.geometry
    mb, nb = (DEPTHWISE_BLOCK if geo.in_per_group == 1 and geo.out_per_group == 1
              else POINTWISE_BLOCK if ops.space.flat else WINDOW_BLOCK)
    schedule = ConvSchedule(channels=mb, positions=nb, exact=True, narrow_row=NARROW_ROW, leftover_loop=False,
                            order="tiles")
    return convolution(ConvNest.of(ops), schedule, RegisterBlock(ops, clip_row=True))
