"""The reduction family: one loop nest for every kernel whose output elements combine many input
elements along some axes (Softmax, LogSoftmax, Hardmax, ArgMax/ArgMin, CumSum, TopK, Reduce*,
ReduceLogSumExp, QSoftmax, InstanceNormalization, BatchNormalization's per-channel pass, and the
signal library's FFT auto scale and filter bank), parameterised by a schedule and a micro-kernel.

The nest (`reduction`): loops over the kept axes (those the primitive's `prepare` did not name in
`axes`), outermost first; at each kept position the micro-kernel runs, and it walks the reduced
axes in *sweeps* (`Row.sweep`: one loop per reduced axis around a body), as many as its passes
need. The schedule names the loops (`kept`: a prefix numbered by position, i0, i1, ..., or one name
per kept axis; `reduced`: one name per reduced axis, or a prefix numbered by the axis, r2, r3).

Micro-kernels: `Accumulator` (init, step, finish: an accumulator started at a value or at the
first element, one step per element, the result stored at the kept position: Reduce*) and `Passes`
(statements at the kept position and sweeps, in order: softmax's max, exponentials and normalising
passes; a running sum; an argument of the extreme; TopK's k selection passes; normalization's
mean, variance and output passes).

Two extensions, both data: a *segmented* nest (`segments`) is a ragged reduction over a 1-D input,
each kept position combining its own run of it, (first, count) known at build time, so the kept
positions are walked at generation time, each sweep a loop of its run's constant length (a filter
bank's channels over their bins); and a micro-kernel's `carried` statements are declared once before
the kept loops, state carried from one kept position to the next in order (the filter bank's
accumulator of the next channel).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from tinsmith.generate.backend import KernelArgs
from tinsmith.generate.loop_ir import Assign, Binary, Expr, For, Load, Local, Stmt, Store, Var, flat_index, index


@dataclass(frozen=True)
class ReductionNest:
    """The input's shape as the kernel views it, and the reduced axes: from `prepare`."""

    shape: tuple[int, ...]
    axes: tuple[int, ...]
    segments: tuple[tuple[int, int], ...] = ()  # per kept position (first, count) of its run of a 1-D input

    @staticmethod
    def of(args: KernelArgs) -> ReductionNest:
        """The nest of a node whose primitive prepared `shape` and `axes` (codegen/ops/reduce.py), and
        `segments` for a ragged reduction."""
        facts = args.prepared.facts
        segments = tuple((int(first), int(count)) for first, count in facts.get("segments", ()))
        return ReductionNest(tuple(facts["shape"]), tuple(facts["axes"]), segments)

    @property
    def kept(self) -> tuple[int, ...]:
        return tuple(d for i, d in enumerate(self.shape) if i not in self.axes)

    def merged(self) -> ReductionNest:
        """The same nest with its (adjacent) reduced axes as one axis of their product."""
        first, last = self.axes[0], self.axes[-1]
        if self.axes != tuple(range(first, last + 1)):
            raise ValueError(f"axes {self.axes} are not adjacent")
        return ReductionNest(self.shape[:first] + (self.count,) + self.shape[last + 1:], (first,))

    @property
    def count(self) -> int:
        """Elements per kept position."""
        return math.prod(self.shape[i] for i in self.axes)


@dataclass(frozen=True)
class ReductionSchedule:
    """The loops' names: `kept` a prefix (numbered by position) or one name per kept axis;
    `reduced` one name per reduced axis, or a prefix numbered by the axis."""

    kept: str | tuple[str, ...] = "i"
    reduced: str | tuple[str, ...] = ("j",)
    merged: bool = False  # adjacent reduced axes walked as one loop
    lanes: int = 1  # the last kept axis in blocks of `lanes` (a vector micro-kernel's width)


ALONG_AXIS = ReductionSchedule()
OVER_AXES = ReductionSchedule(reduced="r")


@dataclass(frozen=True)
class Row:
    """One kept position: the micro-kernel's view of the nest."""

    nest: ReductionNest
    kept_vars: tuple[Expr, ...]
    reduced_names: tuple[str, ...]
    position: int | None = None  # a segmented nest's kept position, known at generation time

    @property
    def run(self) -> tuple[int, int] | None:
        """(first, count) of the input this position reduces, in a segmented nest."""
        return None if self.position is None else self.nest.segments[self.position]

    @property
    def reduced(self) -> tuple[Var, ...]:
        """The reduced loops' indices, one per reduced axis."""
        return tuple(Var(n) for n in self.reduced_names)

    def at(self, positions: Sequence[Expr] | None = None, shape: Sequence[int] | None = None) -> Expr:
        """The offset in the input (or a tensor of `shape` with the same kept axes) at `positions`
        along the reduced axes (default: the reduced loops' indices)."""
        positions = self.reduced if positions is None else positions
        if self.run is not None:
            return Binary("+", positions[0], index(self.run[0]))
        kept, along = iter(self.kept_vars), iter(positions)
        shape = self.nest.shape if shape is None else shape
        return flat_index([next(along) if i in self.nest.axes else next(kept) for i in range(len(shape))], shape)

    def first(self) -> Expr:
        """The offset of the first element reduced at this position."""
        return self.at([index(0)] * len(self.nest.axes))

    def out(self) -> Expr:
        """The offset of this position in an output of the kept axes only."""
        if self.position is not None:
            return index(self.position)
        return flat_index(self.kept_vars, self.nest.kept)

    @property
    def count(self) -> int:
        """Elements this position reduces."""
        return self.nest.count if self.run is None else self.run[1]

    def sweep(self, *body: Stmt) -> Stmt:
        """`body` inside one loop per reduced axis, the first outermost."""
        stmts = tuple(body)
        for name, axis in reversed(list(zip(self.reduced_names, self.nest.axes))):
            stmts = (For(name, self.nest.shape[axis] if self.run is None else self.run[1], stmts),)
        return stmts[0]


MicroKernel = Callable[[Row], Sequence[Stmt]]


def reduction(nest: ReductionNest, schedule: ReductionSchedule, micro: MicroKernel) -> list[Stmt]:
    """The loop nest of one reduction kernel: the kept axes, the micro-kernel at each position."""
    carried = list(getattr(micro, "carried", ()))
    if nest.segments:
        return carried + _segmented(nest, schedule, micro)
    nest = nest.merged() if schedule.merged else nest
    kept = [i for i in range(len(nest.shape)) if i not in nest.axes]
    names = schedule.kept if isinstance(schedule.kept, tuple) else tuple(f"{schedule.kept}{k}" for k in range(len(kept)))
    reduced = schedule.reduced if isinstance(schedule.reduced, tuple) else tuple(f"{schedule.reduced}{a}"
                                                                                for a in nest.axes)
    kept_vars: list[Expr] = [Var(n) for n in names]
    extents = [nest.shape[a] for a in kept]
    if schedule.lanes > 1:  # the loop counts blocks; the micro-kernel's index is the block's first
        extents[-1] //= schedule.lanes
        kept_vars[-1] = Binary("*", kept_vars[-1], index(schedule.lanes))
    stmts: tuple[Stmt, ...] = tuple(micro(Row(nest, tuple(kept_vars), reduced)))
    for name, extent in reversed(list(zip(names, extents))):
        stmts = (For(name, extent, stmts),)
    return carried + list(stmts)


def _segmented(nest: ReductionNest, schedule: ReductionSchedule, micro: MicroKernel) -> list[Stmt]:
    """A ragged reduction: the micro-kernel at each kept position in turn, its sweeps over its run."""
    if len(nest.shape) != 1 or nest.axes != (0,) or schedule.merged or schedule.lanes > 1:
        raise ValueError("a segmented reduction runs over a 1-D input, one position at a time")
    reduced = schedule.reduced if isinstance(schedule.reduced, tuple) else (f"{schedule.reduced}0",)
    return [s for k in range(len(nest.segments)) for s in micro(Row(nest, (index(k),), reduced, k))]


@dataclass(frozen=True)
class Passes:
    """A micro-kernel of steps in order, each the statements at the kept position (which may sweep
    the reduced axes): softmax's passes, a running sum, the extreme's index, normalization."""

    steps: tuple[MicroKernel, ...]
    carried: tuple[Stmt, ...] = ()  # declared before the kept loops, carried from position to position

    def __call__(self, row: Row) -> list[Stmt]:
        return [s for step in self.steps for s in step(row)]


def sweep(body: Callable[[Row], Sequence[Stmt]]) -> MicroKernel:
    """A pass: `body` at every reduced position."""
    return lambda row: [row.sweep(*body(row))]


def local(name: str, value: Callable[[Row], Expr], dtype: str = "float32") -> MicroKernel:
    """A step declaring a local at the kept position."""
    return lambda row: [Local(name, value(row), dtype)]


@dataclass(frozen=True)
class Accumulator:
    """acc = init (None: the first element); acc = step(acc, x) for every element x; the output at
    the kept position is finish(acc, count) (`empty` when nothing is reduced)."""

    x: str
    y: str
    dtype: str  # the accumulator's
    init: Expr | None
    step: Callable[[Expr, Expr], Expr]
    finish: Callable[[Expr, int], Expr]
    empty: Expr

    def __call__(self, row: Row) -> list[Stmt]:
        count = row.nest.count
        if count == 0:
            return [Store(self.y, row.out(), self.empty)]
        first = self.init if self.init is not None else Load(self.x, row.first())
        return [Local("acc", first, self.dtype), row.sweep(Assign("acc", self.step(Var("acc"), Load(self.x, row.at())))),
                Store(self.y, row.out(), self.finish(Var("acc"), count))]


__all__ = ["ALONG_AXIS", "OVER_AXES", "Accumulator", "Passes", "ReductionNest", "ReductionSchedule", "Row",
           "local", "reduction", "sweep"]
