"""The plan checker: replays the access order of every generated kernel over the workspace bytes
the plan gives its buffers, and fails if any byte is overwritten while it still holds a value that
will be read.

Time runs through the kernels in the order the generated `call` runs them, each kernel's ticks from
its loop IR (codegen.planners.access). For every byte of every workspace buffer (value or kernel
scratch) the checker knows when it is first written and last read; any other buffer written to the
same byte strictly between those two times destroys it. A kernel whose access order cannot be
traced counts as writing and reading all its bytes throughout, so the check is at worst as strict
as operator granularity and never passes a plan it cannot prove.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codegen.errors import TinsmithError
from codegen.planners.access import NEVER, UNREAD, itemsize, trace_or_worst


class PlanCheckError(TinsmithError):
    """A workspace byte would be overwritten before its last read."""


@dataclass
class _Bytes:
    """One workspace buffer's bytes: address range and, per byte, global first/last write and last read."""

    name: str
    offset: int
    first_write: np.ndarray
    last_write: np.ndarray
    last_read: np.ndarray



def replay(model) -> tuple[dict[str, _Bytes], list[str]]:
    """Per workspace buffer, its bytes' times over the whole call; and the kernels assumed worst."""
    from codegen.plan import scratch_name
    offsets = model.plan.offset_of()
    found: dict[str, _Bytes] = {}
    untraced = []
    start = 0
    for k in model.kernels:
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
            size = itemsize(dtypes[name])

            def glob(a, empty):
                a = np.repeat(a, size)
                return np.where(a == empty, empty, a + start)
            fw, lw, lr = glob(access.first_write, NEVER), glob(access.last_write, UNREAD), \
                glob(access.last_read, UNREAD)
            if name not in found:
                found[name] = _Bytes(name, offsets[name], fw, lw, lr)
            else:
                b = found[name]
                b.first_write, b.last_write, b.last_read = np.minimum(b.first_write, fw), \
                    np.maximum(b.last_write, lw), np.maximum(b.last_read, lr)
        start += t.ticks + 1
    return found, untraced


def check_plan(model) -> list[str]:
    """Raise PlanCheckError naming the first clobbered byte of the generated model's plan; return the
    kernels whose access order was assumed (not traced)."""
    buffers, untraced = replay(model)
    items = sorted(buffers.values(), key=lambda b: b.offset)
    for v in items:
        live = v.last_read > v.first_write  # bytes written, then read later
        if not live.any():
            continue
        v_lo, v_hi = v.offset, v.offset + v.first_write.size
        born, dies = v.first_write[live].min(), v.last_read[live].max()
        for u in items:
            if u is v:
                continue
            lo, hi = max(v_lo, u.offset), min(v_hi, u.offset + u.first_write.size)
            if lo >= hi:
                continue
            written = u.first_write[lo - u.offset:hi - u.offset] != NEVER
            if not written.any() or u.first_write.min() >= dies or u.last_write.max() <= born:
                continue
            vs = slice(lo - v_lo, hi - v_lo)
            fw, lw = u.first_write[lo - u.offset:hi - u.offset], u.last_write[lo - u.offset:hi - u.offset]
            vfw, vlr, vlive = v.first_write[vs], v.last_read[vs], live[vs]
            # some write of u lands strictly inside v's life at that byte (or u writes on both sides of it)
            clobbered = written & vlive & (((fw > vfw) & (fw < vlr)) | ((lw > vfw) & (lw < vlr)) |
                                           ((fw < vfw) & (lw > vlr)))
            if clobbered.any():
                at = int(np.argmax(clobbered)) + lo
                raise PlanCheckError(None, f"memory plan: '{u.name}' overwrites workspace byte {at}, which "
                                     f"holds '{v.name}' (offset {v.offset}) before its last read",
                                     "the plan's overlaps disagree with the kernels' access order")
    return untraced
