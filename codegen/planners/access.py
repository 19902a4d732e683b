"""The access order of a kernel, found by running its loop IR abstractly: for every element of every
buffer it touches, when it is first and last written and last read.

Only index arithmetic is evaluated; data (floats, integers loaded from tensors) is not. Loops are
evaluated all at once with NumPy, each loop variable on an axis of its own, so a kernel of a
million multiply-adds is traced in a fraction of a second. Time counts statements in the order
the C++ runs them: each statement instance has a tick for its loads, then one for its store, so
an element read and written by one statement is read first.

A kernel whose indices depend on data (a gather), on an index local updated across loop
iterations, or that touches an element outside its buffer cannot be traced: `Untraceable`, and
whoever asked assumes the worst (every element alive for the whole kernel).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from tinsmith.generate.loop_ir import (INDEX, Assign, Binary, Broadcast, Call, Cast, Comment, Const, For, If,
                                      Kernel, Lane, Load, Local, ReduceLanes, Select, Stmt, Store, Unary, Var,
                                      walk_stmts, width_of)

MAX_ITERATIONS = 1 << 22  # loop instances traced at once; a larger nest is not traced (memory)
NEVER = np.iinfo(np.int64).max  # first write of an element never written
UNREAD = -1  # last read (or write) of an element never read (written)


def itemsize(dtype: str) -> int:
    """Bytes of one element of a loop IR dtype (INDEX is C++ int)."""
    return {"int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
            "int64": 8, "uint64": 8, "float64": 8}.get(dtype, 4)


class Untraceable(Exception):
    """The kernel's access order cannot be derived from its loop IR."""


@dataclass
class Access:
    """Per element of one buffer, in the kernel's ticks: first and last write, last read."""

    first_write: np.ndarray
    last_write: np.ndarray
    last_read: np.ndarray

    @staticmethod
    def empty(size: int) -> "Access":
        return Access(np.full(size, NEVER, np.int64), np.full(size, UNREAD, np.int64),
                      np.full(size, UNREAD, np.int64))


@dataclass
class Trace:
    """Every buffer's accesses and the kernel's length in ticks."""

    buffers: dict[str, Access]
    ticks: int


def _depth(stmts: tuple[Stmt, ...]) -> int:
    """How deeply loops nest in a block."""
    return max((int(isinstance(s, For)) + _depth(s.body) for s in stmts if isinstance(s, (For, If))), default=0)


def span(stmts: tuple[Stmt, ...]) -> int:
    """Ticks a block takes: two per executed statement."""
    total = 0
    for s in stmts:
        if isinstance(s, For):
            total += (s.extent // s.step) * span(s.body)
        elif isinstance(s, If):  # counted whether or not it runs: ticks only need to increase
            total += span(s.body)
        elif not isinstance(s, Comment):
            total += 2
    return total


_INT = {"+": np.add, "-": np.subtract, "*": np.multiply, "<": np.less, "<=": np.less_equal,
        ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal,
        "&&": np.logical_and, "||": np.logical_or, "max": np.maximum, "min": np.minimum}


def _c_div(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((np.asarray(a) < 0) != (np.asarray(b) < 0), -q, q)


class _Tracer:
    def __init__(self, sizes: Mapping[str, int], depth: int):
        self.sizes, self.depth = dict(sizes), depth  # loop variable k varies along axis k of `depth`
        self.access: dict[str, Access] = {}  # made at a buffer's first access (a kernel found
        # untraceable early costs nothing for its large buffers)

    def _record(self, buffer: str, index, width: int, stride: int, tick, mask, write: bool) -> None:
        if index is None:
            raise Untraceable(f"an index into '{buffer}' depends on data")
        if buffer not in self.sizes:
            raise Untraceable(f"'{buffer}' is not a parameter")
        index = np.asarray(index, np.int64)
        tick = np.asarray(tick, np.int64)
        if width > 1:
            lanes = np.arange(width, dtype=np.int64) * stride
            index, tick = index[..., None] + lanes, tick[..., None]
            mask = mask if mask is True else np.asarray(mask)[..., None]
        shape = np.broadcast_shapes(index.shape, tick.shape, np.shape(mask))
        index, tick = np.broadcast_to(index, shape).ravel(), np.broadcast_to(tick, shape).ravel()
        if mask is not True:
            keep = np.broadcast_to(mask, shape).ravel()
            index, tick = index[keep], tick[keep]
        if index.size == 0:
            return
        if index.min() < 0 or index.max() >= self.sizes[buffer]:
            raise Untraceable(f"'{buffer}' is accessed outside its {self.sizes[buffer]} elements")
        a = self.access.get(buffer) or self.access.setdefault(buffer, Access.empty(self.sizes[buffer]))
        if write:
            np.minimum.at(a.first_write, index, tick)
            np.maximum.at(a.last_write, index, tick)
        else:
            np.maximum.at(a.last_read, index, tick)

    def expr(self, e, env, tick, mask):
        """The integer value of `e` (None when it is data); loads are recorded at `tick`."""
        if isinstance(e, Const):
            return None if e.dtype == "float32" else int(e.value)
        if isinstance(e, Var):
            if e.name not in env:
                raise Untraceable(f"'{e.name}' is not declared")
            return env[e.name]
        if isinstance(e, Load):
            self._record(e.buffer, self.expr(e.index, env, tick, mask), e.width, e.stride, tick, mask, False)
            return None
        if isinstance(e, Binary):
            a, b = self.expr(e.a, env, tick, mask), self.expr(e.b, env, tick, mask)
            if a is None or b is None:
                return None
            if e.op in _INT:
                return _INT[e.op](a, b)
            if e.op == "/":
                return _c_div(a, b)
            if e.op == "%":
                return a - _c_div(a, b) * b
            return None
        if isinstance(e, Select):
            cond = self.expr(e.cond, env, tick, mask)
            if cond is None or width_of(e.cond) > 1:  # both sides may be evaluated
                a, b = self.expr(e.a, env, tick, mask), self.expr(e.b, env, tick, mask)
                return None
            a = self.expr(e.a, env, tick, np.logical_and(mask, cond))
            b = self.expr(e.b, env, tick, np.logical_and(mask, np.logical_not(cond)))
            return None if a is None or b is None else np.where(cond, a, b)
        if isinstance(e, Unary):
            a = self.expr(e.a, env, tick, mask)
            if a is None:
                return None
            return {"neg": np.negative, "abs": np.abs}.get(e.op, lambda _: None)(a)
        if isinstance(e, Cast):
            a = self.expr(e.a, env, tick, mask)
            return a if e.dtype != "float32" and e.dtype != "bool" else None
        if isinstance(e, (Broadcast, ReduceLanes)):
            self.expr(e.a, env, tick, mask)
            return None
        if isinstance(e, Lane):
            self.expr(e.a, env, tick, mask)
            self.expr(e.lane, env, tick, mask)
            return None
        if isinstance(e, Call):
            for a in e.args:
                self.expr(a, env, tick, mask)
            return None
        raise Untraceable(f"unknown expression {type(e).__name__}")

    def block(self, stmts, env, depth_of, depth, tick, mask, iterations: int = 1) -> None:
        env, depth_of = dict(env), dict(depth_of)
        for s in stmts:
            if isinstance(s, Comment):
                continue
            if isinstance(s, For):
                n = s.extent // s.step
                if iterations * n > MAX_ITERATIONS:
                    raise Untraceable(f"more than {MAX_ITERATIONS} loop iterations at once")
                shape = [1] * depth + [n] + [1] * (self.depth - depth - 1)
                it = np.arange(n, dtype=np.int64).reshape(shape)
                inner = span(s.body)
                self.block(s.body, {**env, s.var: it * s.step}, {**depth_of, s.var: depth + 1}, depth + 1,
                           tick + it * inner, mask, iterations * n)
                tick = tick + n * inner
                continue
            if isinstance(s, If):
                cond = self.expr(s.cond, env, tick, mask)
                if cond is None:
                    raise Untraceable("a condition depends on data")
                inner = {t.name for t in s.body if isinstance(t, Local)}
                if any(isinstance(t, Assign) and t.name not in inner and env.get(t.name) is not None
                       for t in walk_stmts(s.body)):
                    raise Untraceable("an index local changes under a condition")
                self.block(s.body, env, depth_of, depth, tick, np.logical_and(mask, cond), iterations)
                tick = tick + span(s.body)
                continue
            if isinstance(s, Local):
                value = self.expr(s.init, env, tick, mask)
                env[s.name] = value if s.dtype == INDEX else None
                depth_of[s.name] = depth
            elif isinstance(s, Assign):
                value = self.expr(s.value, env, tick, mask)
                if env.get(s.name) is not None or value is not None:
                    if depth_of.get(s.name, -1) != depth:
                        raise Untraceable(f"index local '{s.name}' changes across loop iterations")
                    env[s.name] = value
            elif isinstance(s, Store):
                self.expr(s.value, env, tick, mask)
                index = self.expr(s.index, env, tick, mask)
                self._record(s.buffer, index, width_of(s.value) or 1, 1, tick + 1, mask, True)
            else:
                raise Untraceable(f"unknown statement {type(s).__name__}")
            tick = tick + 2


def trace(kernel: Kernel) -> Trace:
    """The access order of every parameter and scratch buffer of `kernel` (annotated loop IR)."""
    sizes = {p.buffer: p.size for p in kernel.params} | {s.name: s.size for s in kernel.scratch}
    tracer = _Tracer(sizes, _depth(kernel.body))
    try:
        with np.errstate(all="ignore"):
            tracer.block(kernel.body, {}, {}, 0, np.int64(0), True)
    except (ArithmeticError, IndexError, KeyError, TypeError, ValueError) as e:  # IR the tracer does not know
        raise Untraceable(f"{type(e).__name__}: {e}") from None
    return Trace({name: tracer.access.get(name) or Access.empty(n) for name, n in sizes.items()},
                 span(kernel.body))


def worst_case(kernel: Kernel) -> Trace:
    """What may be assumed of a kernel that cannot be traced: every element is written at its start
    and read at its end."""
    ticks = max(span(kernel.body), 2)
    buffers = {}
    for name, size in ({p.buffer: p.size for p in kernel.params} | {s.name: s.size for s in kernel.scratch}).items():
        writes = any(p.writes for p in kernel.params if p.buffer == name) or name in {s.name for s in kernel.scratch}
        # (read-only views of one value each: a huge buffer costs no memory)
        buffers[name] = Access(*(np.broadcast_to(np.int64(v), size) for v in
                                 (1 if writes else NEVER, ticks if writes else UNREAD, ticks)))
    return Trace(buffers, ticks + 1)


def trace_or_worst(kernel: Kernel) -> tuple[Trace, str | None]:
    """The kernel's trace, or the worst case and why."""
    try:
        return trace(kernel), None
    except Untraceable as e:
        return worst_case(kernel), str(e)
