"""The MaxPoolIndices functor: MaxPool's schedule of the window nest (window_nest.py) with a
micro-kernel that keeps, beside the running maximum, the flat input position it came from."""
from __future__ import annotations

from dataclasses import dataclass

from tinsmith.generate.backend import CPP, NUMBERS, takes
from tinsmith.generate.functors import window_nest
from tinsmith.generate.functors.pooling import LOWEST_FLOAT, larger
from tinsmith.generate.functors.window_nest import WindowOutput, WindowSchedule, WindowTap
from tinsmith.generate.loop_ir import Assign, Cast, Local, Select, Stmt, Store, Var, const, index
from tinsmith.ops.pool_indices import spatial_strides


@dataclass(frozen=True)
class MaxWithPosition:
    """The running maximum and where it was: the tap's offset under `strides` (the spatial axes
    row-major, or column-major with storage_order 1)."""

    strides: tuple[int, ...]

    def start(self, scope: str, out: WindowOutput) -> list[Stmt]:
        return [Local(f"acc{scope}", const(LOWEST_FLOAT)), Local(f"at{scope}", Cast("int64", index(0)), "int64")]

    def step(self, scope: str, tap: WindowTap) -> list[Stmt]:
        acc, at = f"acc{scope}", f"at{scope}"
        cond = larger(tap, acc)
        return [Assign(at, Select(cond, Cast("int64", tap.at(self.strides)), Var(at))),
                Assign(acc, Select(cond, tap.value, Var(acc)))]

    def finish(self, scope: str, out: WindowOutput) -> list[Stmt]:
        return [Store(out.y, out.at, Var(f"at{scope}"), out.coords)]

    def empty(self, scope: str, out: WindowOutput) -> list[Stmt]:
        """A window wholly in the padding has no position: 0, as the reference gives."""
        return [Store(out.y, out.at, Cast("int64", index(0)), out.coords)]


@CPP.register("MaxPoolIndices", family="window", types=takes(NUMBERS, out=[NUMBERS, "int64"]))
def max_pool_indices(graph, node_id, cluster_id, args, attrs):
    """Per window, the position of its first largest value (padding and NaN never win)."""
    nest = window_nest.WindowNest.of(args)
    micro = MaxWithPosition(tuple(spatial_strides(nest.in_spatial, attrs["storage_order"])))
    return window_nest.window(nest, WindowSchedule(), micro)
