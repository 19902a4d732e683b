"""Channels-last pools (AveragePoolNHWC, MaxPoolNHWC): the window nest (window_nest.py) with each
output position's channels in vectors (as wide as the target's, then narrower, then single
channels: conv_nest.channel_vectors); each tap adds (or takes the maximum of) one contiguous input
vector. The tiles are exact (conv.tiles), so every tap lies inside the input and AveragePool's
divisor is the tile's constant count. MaxPool starts from the lowest float32 and keeps fmax's
NaN rule (a NaN never wins), as the NCHW kernels and ONNX Runtime do.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinsmith.generate.backend import CPP, same
from tinsmith.generate.functors import window_nest
from tinsmith.generate.functors.window_nest import WindowOutput, WindowSchedule, WindowTap
from tinsmith.generate.loop_ir import Assign, Binary, Const, Expr, Local, Stmt, Store, Var

FLOAT = "float32"


@dataclass(frozen=True)
class LaneReduce:
    """A vector of channels' running maximum (`op` "max") or sum ("+", divided by the count)."""

    op: str

    def start(self, scope: str, out: WindowOutput) -> list[Stmt]:
        start = float(np.finfo(np.float32).min) if self.op == "max" else 0.0
        return [Local(f"acc{scope}", Const(start, FLOAT, out.width), FLOAT, out.width)]

    def step(self, scope: str, tap: WindowTap) -> list[Stmt]:
        acc = f"acc{scope}"
        return [Assign(acc, Binary(self.op, Var(acc), tap.value))]

    def finish(self, scope: str, out: WindowOutput) -> list[Stmt]:
        result: Expr = Var(f"acc{scope}", FLOAT, out.width)
        if self.op == "+":
            result = Binary("/", result, Const(float(out.counted), FLOAT, out.width))
        return [Store(out.y, out.at, result, out.coords)]

    def empty(self, scope: str, out: WindowOutput) -> list[Stmt]:
        return self.start(scope, out) + self.finish(scope, out)


def _pool_nhwc(op: str):
    def functor(graph, node_id, cluster_id, args, attrs):
        schedule = WindowSchedule(exact=True, channels="inner", lanes=args.caps.lanes(4))
        return window_nest.window(window_nest.WindowNest.of(args), schedule, LaneReduce(op))
    return functor


CPP.register("AveragePoolNHWC", family="window", types=same("float32"), layout="nhwc", epilogue=True)(_pool_nhwc("+"))
CPP.register("MaxPoolNHWC", family="window", types=same("float32"), layout="nhwc", epilogue=True)(_pool_nhwc("max"))
