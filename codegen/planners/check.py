"""The plan checker: replays the access order of every generated kernel over the workspace bytes
the plan gives its buffers, and fails if any byte is overwritten while it still holds a value that
will be read.

Time runs through the kernels in the order the generated `call` runs them, each kernel's ticks from
its loop IR (tinsmith.planners.access). For every byte of every workspace buffer (value or kernel
scratch) the checker knows when it is first written and last read; any other buffer written to the
same byte strictly between those two times destroys it. A kernel whose access order cannot be
traced counts as writing and reading all its bytes throughout, so the check is at worst as strict
as operator granularity and never passes a plan it cannot prove.

Work grows with the accesses to prove, not with bytes: a buffer is a list of runs of bytes that
share their times (one run per element at most, one run for a whole untraced buffer), and only
pairs of buffers whose lives meet in time (found by sorting their time intervals) and share bytes
are compared, run against run.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinsmith.errors import TinsmithError
from tinsmith.planners.access import NEVER, UNREAD, Access, itemsize, span, trace_or_worst


class PlanCheckError(TinsmithError):
    """A workspace byte would be overwritten before its last read."""


@dataclass
class _Runs:
    """One workspace buffer's bytes as runs with equal times over the whole call: run i covers bytes
    [start[i], start[i + 1]) of the buffer (the last run ends at `size`), first and last written at
    first_write[i] and last_write[i], last read at last_read[i]."""

    name: str
    offset: int
    size: int
    start: np.ndarray
    first_write: np.ndarray
    last_write: np.ndarray
    last_read: np.ndarray

    def times_at(self, byte: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """First write, last write and last read of the runs holding buffer bytes `byte`."""
        i = np.searchsorted(self.start, byte, side="right") - 1
        return self.first_write[i], self.last_write[i], self.last_read[i]

    def merged(self, other: "_Runs") -> "_Runs":
        """Both kernels' accesses to the same buffer: earliest first write, latest last write and read."""
        start = _union(self.start, other.start)
        (fa, la, ra), (fb, lb, rb) = self.times_at(start), other.times_at(start)
        return _Runs(self.name, self.offset, self.size, start, np.minimum(fa, fb), np.maximum(la, lb),
                     np.maximum(ra, rb))


def _union(*sorted_arrays: np.ndarray) -> np.ndarray:
    """The sorted distinct values of sorted integer arrays (np.union1d hashes, which is slower here)."""
    both = np.sort(np.concatenate(sorted_arrays))
    return both[np.concatenate(([True], both[1:] != both[:-1]))] if both.size else both


def _runs(name: str, offset: int, access: Access, size: int, start_tick: int) -> _Runs:
    """A kernel's access to one buffer (elements of `size` bytes), its ticks moved to start at `start_tick`."""
    times = (access.first_write, access.last_write, access.last_read)
    n = times[0].size
    if n <= 1 or all(t.strides == (0,) for t in times):  # one element, or the same times throughout
        starts = np.zeros(min(n, 1), np.int64)
    else:
        change = np.zeros(n, bool)
        change[0] = True
        for t in times:
            change[1:] |= t[1:] != t[:-1]
        starts = np.flatnonzero(change)
    fw, lw, lr = (t[starts] for t in times)
    return _Runs(name, offset, n * size, starts * size, np.where(fw == NEVER, NEVER, fw + start_tick),
                 np.where(lw == UNREAD, UNREAD, lw + start_tick), np.where(lr == UNREAD, UNREAD, lr + start_tick))


def replay(model) -> tuple[dict[str, _Runs], list[str]]:
    """Per workspace buffer, its runs of bytes' times over the whole call; and the kernels assumed worst."""
    from tinsmith.plan import scratch_name
    offsets = model.plan.offset_of()
    found: dict[str, _Runs] = {}
    untraced = []
    start = 0
    for k in model.kernels:
        if not any(p.buffer in offsets for p in k.kernel.params) and not k.kernel.scratch:
            start += span(k.kernel.body) + 1  # touches no workspace byte: only its time counts
            continue
        t, why = trace_or_worst(k.kernel)
        if why is not None:
            untraced.append(f"{k.node.name}: {why}")
        dtypes = {p.buffer: p.dtype for p in k.kernel.params} | \
            {scratch_name(k.node.name, s.name): s.dtype for s in k.kernel.scratch}
        names = {p.buffer: p.buffer for p in k.kernel.params} | \
            {s.name: scratch_name(k.node.name, s.name) for s in k.kernel.scratch}
        for local, access in t.buffers.items():
            name = names[local]
            if name not in offsets:
                continue  # the caller's inputs and outputs, constants
            runs = _runs(name, offsets[name], access, itemsize(dtypes[name]), start)
            found[name] = found[name].merged(runs) if name in found else runs
        start += t.ticks + 1
    return found, untraced


def _meeting_pairs(buffers: list[_Runs]) -> list[tuple[_Runs, _Runs]]:
    """Every (v, u): u writes at some time strictly inside the life of a value of v (first written,
    then read later), as far as the buffers' whole time spans tell; in address order of v, then u."""
    live = []  # (born, dies) of each buffer holding a value that is read after it is written
    for v in buffers:
        alive = v.last_read > v.first_write
        live.append((int(v.first_write[alive].min()), int(v.last_read[alive].max())) if alive.any() else None)
    writes = [(int(u.first_write.min()), int(u.last_write.max())) if (u.first_write != NEVER).any() else None
              for u in buffers]
    writers = [i for i, w in enumerate(writes) if w is not None]
    holders = [i for i, span in enumerate(live) if span is not None]
    by_first_write = sorted(writers, key=lambda i: writes[i][0])
    first_writes = np.array([writes[i][0] for i in by_first_write], np.int64)
    by_birth = sorted(holders, key=lambda i: live[i][0])
    births = np.array([live[i][0] for i in by_birth], np.int64)
    candidates = set()
    for v in holders:  # writers that start during v's life
        born, dies = live[v]
        lo, hi = np.searchsorted(first_writes, born, "left"), np.searchsorted(first_writes, dies, "left")
        candidates.update((v, u) for u in by_first_write[lo:hi])
    for u in writers:  # values born while u writes
        first, last = writes[u]
        lo, hi = np.searchsorted(births, first, "right"), np.searchsorted(births, last, "left")
        candidates.update((v, u) for v in by_birth[lo:hi])
    pairs = []
    for v, u in candidates:
        a, b = buffers[v], buffers[u]
        if v == u or writes[u][0] >= live[v][1] or writes[u][1] <= live[v][0]:
            continue
        if max(a.offset, b.offset) < min(a.offset + a.size, b.offset + b.size):
            pairs.append((a, b))
    return sorted(pairs, key=lambda p: (p[0].offset, p[0].name, p[1].offset, p[1].name))


def _first_clobbered_byte(v: _Runs, u: _Runs) -> int | None:
    """The lowest workspace byte at which u writes strictly inside the life of v's value there."""
    lo, hi = max(v.offset, u.offset), min(v.offset + v.size, u.offset + u.size)
    v_cuts, u_cuts = v.offset + v.start, u.offset + u.start
    cuts = _union(np.array([lo], np.int64), v_cuts[(v_cuts > lo) & (v_cuts < hi)],
                  u_cuts[(u_cuts > lo) & (u_cuts < hi)])  # pieces of bytes with the same times in both
    vfw, _, vlr = v.times_at(cuts - v.offset)
    fw, lw, _ = u.times_at(cuts - u.offset)
    # some write of u lands strictly inside v's life at that byte (or u writes on both sides of it)
    clobbered = (fw != NEVER) & (vlr > vfw) & (((fw > vfw) & (fw < vlr)) | ((lw > vfw) & (lw < vlr)) |
                                               ((fw < vfw) & (lw > vlr)))
    return int(cuts[np.argmax(clobbered)]) if clobbered.any() else None


def check_plan(model) -> list[str]:
    """Raise PlanCheckError naming the first clobbered byte of the generated model's plan; return the
    kernels whose access order was assumed (not traced)."""
    buffers, untraced = replay(model)
    for v, u in _meeting_pairs(sorted(buffers.values(), key=lambda b: (b.offset, b.name))):
        at = _first_clobbered_byte(v, u)
        if at is not None:
            raise PlanCheckError(None, f"memory plan: '{u.name}' overwrites workspace byte {at}, which "
                                 f"holds '{v.name}' (offset {v.offset}) before its last read",
                                 "the plan's overlaps disagree with the kernels' access order")
    return untraced
