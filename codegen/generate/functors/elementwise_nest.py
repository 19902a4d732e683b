"""The elementwise family: one loop nest for every kernel whose output element i reads element i of
each operand under NumPy broadcasting (the float and integer formulas, comparisons, bitwise ops,
Cast, Clip, the quantized arithmetic with TFLite's and ONNX's rescaling, the table functions, and
the signal library's per-channel steps), parameterised by a schedule and a micro-kernel.

The nest (`elementwise`): the output's index space, where each operand is read at an output index
given by the strides the primitive's `prepare` computed once (codegen/ops/registry.py:
`elementwise_facts`, 0 along a broadcast axis). The schedule says how the space is walked: one loop
per output axis (`AXES`: every store says where it writes, so the kernel can take fused consumers
and be fused into its producer), or one loop over the elements (`flat(lanes)`, operands of the
output's shape only), `lanes` consecutive elements a step. The micro-kernel computes one element
(or one vector of `lanes`) from the loaded operands: `micro(operands, idx) -> (statements, value)`,
where an operand that is not one (a table, an omitted bound) is None and `idx` is the output index
(the element's offset in a flat schedule); the nest stores the value. The micro-kernel's statements
may also read and write a buffer of its own at the element's offset (a kept state: spectral
subtraction's noise estimate) or loop (a square root's bit-by-bit steps).

Two facts of the nest change what it walks: `region`, per axis [start, stop), the elements the
micro-kernel computes, every other element being `fill` (SignalEnergy's bins outside its range);
and an operand whose strides are not the output's (SignalEnergy's complex bins, stride 2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from tinsmith.generate.backend import KernelArgs
from tinsmith.generate.loop_ir import Binary, Call, Expr, For, Load, Stmt, Store, Var, add, flat_index, index, mul, nest

# (loaded operands, output index) -> (statements, the output element)
MicroKernel = Callable[[Sequence[Expr | None], Sequence[Expr]], tuple[list[Stmt], Expr]]


@dataclass(frozen=True)
class Operand:
    """An input read by the nest: its buffer, element type and stride along each output axis."""

    name: str
    dtype: str
    strides: tuple[int, ...]

    def at(self, idx: Sequence[Expr]) -> Expr:
        """Its element at output index `idx` (broadcast axes read offset 0)."""
        result: Expr = index(0)
        for i, stride in reversed(list(zip(idx, self.strides))):
            result = add(mul(i if stride else index(0), index(stride)), result)
        return result


@dataclass(frozen=True)
class ElementwiseNest:
    """The output the nest stores, the index space it runs over and its operands, from `prepare`."""

    output: str
    shape: tuple[int, ...]
    operands: tuple[Operand | None, ...]
    region: tuple[tuple[int, int], ...] | None = None  # per axis [start, stop) the micro-kernel computes
    fill: Expr | None = None  # every element outside `region`

    @staticmethod
    def of(args: KernelArgs) -> ElementwiseNest:
        """The nest of a node whose primitive prepared `elementwise_facts`."""
        facts = args.prepared
        operands = tuple(Operand(a.name, a.type.dtype, s) if a is not None and s is not None else None
                         for a, s in zip(args.inputs, facts["strides"]))
        return ElementwiseNest(args.outputs[0].name, tuple(facts["shape"]), operands)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def within(self, region: Sequence[tuple[int, int]], fill: Expr) -> ElementwiseNest:
        """The nest computing only `region` (per axis [start, stop)), the other elements `fill`."""
        return replace(self, region=tuple(region), fill=fill)


@dataclass(frozen=True)
class ElementwiseSchedule:
    """How the index space is walked: "axes" (a loop per output axis) or "flat" (one loop over
    the elements, `lanes` at a time: a vector micro-kernel's width)."""

    order: str = "axes"
    lanes: int = 1


AXES = ElementwiseSchedule()


def flat(lanes: int = 1) -> ElementwiseSchedule:
    return ElementwiseSchedule("flat", lanes)


def elementwise(nest: ElementwiseNest, schedule: ElementwiseSchedule, micro: MicroKernel) -> list[Stmt]:
    """The loop nest of one elementwise kernel: every output element (or block of `lanes`) is the
    micro-kernel of its operands."""
    if schedule.order == "axes":
        def body(idx):
            stmts, value = micro(_loads(nest, idx, 1), idx)
            return [*stmts, Store(nest.output, flat_index(idx, nest.shape), value, tuple(idx))]
        if nest.region is None:
            return list(_loops(nest.shape, body))
        return [*_box(nest.region, body), *_outside(nest)]
    if nest.region is not None:
        raise ValueError("a region is walked by the axes schedule")
    if schedule.lanes == 1:  # one element a step, counted by i0
        def element(idx):
            stmts, value = micro(_loads(nest, idx[:1], 1, offset=True), idx)
            return [*stmts, Store(nest.output, idx[0], value)]
        return list(_loops((nest.size,), element))
    # a vector micro-kernel: blocks of `lanes` elements, counted by i
    at = Binary("*", Var("i"), index(schedule.lanes))
    stmts, value = micro(_loads(nest, [at], schedule.lanes, offset=True), [at])
    return [For("i", nest.size // schedule.lanes, (*stmts, Store(nest.output, at, value)))]


def _loops(shape: Sequence[int], body) -> tuple[Stmt, ...]:
    """Loops i0, i1, ... over `shape` around `body(indices)`."""
    return nest(shape, "i", body)[0]


def _box(ranges: Sequence[tuple[int, int]], body) -> tuple[Stmt, ...]:
    """Loops i0, i1, ... over the box of [start, stop) ranges around `body(indices)`, each index
    offset by its range's start; nothing for an empty box."""
    if any(stop <= start for start, stop in ranges):
        return ()

    def inner(vars_):
        return body([add(v, index(lo)) if lo else v for v, (lo, _) in zip(vars_, ranges)])
    return _loops([hi - lo for lo, hi in ranges], inner)


def _outside(nest: ElementwiseNest) -> list[Stmt]:
    """`fill` stored to every element outside the region: along each axis d, the slabs before and
    after the region's range on d, inside the region on the axes before d and whole after it."""
    def fill(idx):
        return [Store(nest.output, flat_index(idx, nest.shape), nest.fill, tuple(idx))]
    stmts: list[Stmt] = []
    for d, (lo, hi) in enumerate(nest.region or ()):
        for part in ((0, lo), (hi, nest.shape[d])):
            stmts += _box([*nest.region[:d], part, *((0, n) for n in nest.shape[d + 1:])], fill)
    return stmts


def _loads(nest: ElementwiseNest, idx: Sequence[Expr], width: int, offset: bool = False) -> list[Expr | None]:
    """Each operand's element (or `width` consecutive ones) at the output index; with `offset` (a
    flat schedule) idx[0] is the element's offset, the same in every operand (of the output's shape)."""
    if offset:
        return [Load(o.name, idx[0], width, o.dtype) if o else None for o in nest.operands]
    return [Load(o.name, o.at(idx), width, o.dtype) if o else None for o in nest.operands]


@dataclass(frozen=True)
class Rescale:
    """The quantized micro-kernels: one element's integer (or float) arithmetic with its operands'
    zero points, TFLite's or ONNX's rescaling and the output's saturation, `step(operands, idx)`."""

    step: MicroKernel

    def __call__(self, xs: Sequence[Expr | None], idx: Sequence[Expr]) -> tuple[list[Stmt], Expr]:
        return self.step(xs, idx)


@dataclass(frozen=True)
class LaneCall:
    """A vector micro-kernel: one call of a target's intrinsic on `lanes` elements of each operand
    (a kernel set's helper, e.g. Helium's qadd_x16), its constants after the operands. With
    `by_address` the intrinsic is given each operand's first element, whose address it loads the
    lanes from (AVX-512's helpers), instead of the lanes as a vector value."""

    fn: str
    constants: tuple[Expr, ...]
    dtype: str
    lanes: int
    by_address: bool = False

    def __call__(self, xs: Sequence[Expr | None], idx: Sequence[Expr]) -> tuple[list[Stmt], Expr]:
        operands = [Load(x.buffer, x.index) if self.by_address else x for x in xs if x is not None]
        return [], Call(self.fn, (*operands, *self.constants), self.dtype, self.lanes)


__all__ = ["AXES", "ElementwiseNest", "ElementwiseSchedule", "LaneCall", "MicroKernel", "Operand", "Rescale",
           "elementwise", "flat"]
