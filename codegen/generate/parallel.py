"""Kernels split into parts for the host's worker threads: which part of a kernel computes which
output elements, proven from the loop IR, and the kernel rendered to compute one part.

A kernel's top-level statements fall into groups: a run of statements tied together by the locals
they share (an accumulator declared, updated in a loop and stored), or one loop with the locals it
only reads. A group that is a loop whose iterations store disjoint elements is *split*: part p of P
runs iterations [n*p/P, n*(p+1)/P). Any other group runs *whole*, in one part. A kernel is split
only when every element it stores is stored by one group and one iteration, and it reads nothing it
stores: then every element is computed by exactly one part, with the same arithmetic in the same
order as in the unsplit kernel, so results are bit-identical for every thread count. Kernels with
scratch buffers, or whose outputs overlap part of an input (safe only in the kernel's own order),
run whole.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from tinsmith.generate.loop_ir import (Assign, Binary, Comment, Const, Expr, For, If, Kernel, Load, Local, Stmt, Store,
                                       Var, stmt_exprs, walk_exprs, walk_stmts)

PART, PARTS = "tinsmith_part", "tinsmith_parts"  # the extra parameters of a split kernel
# Work (MACs plus elements stored) below which a kernel stays on the calling thread: a pool run
# costs about half a microsecond, and more where the system is busy and a worker must be woken or
# waited for, while this much work takes about a microsecond with AVX-512 (measured: splitting the
# 80,000-MAC layers of the autoencoder and kws's depthwise layers made them slower on two threads).
# Kernels under ALONE_WORK split only between split neighbours (below): ic's 131,072-MAC shortcuts,
# which run in the cluster of a split convolution, do, and evened out its parts (ic 1 to 2% faster).
SPLIT_WORK = 100_000
# Work from which a kernel is split whatever its neighbours do. Below it a kernel is split only when
# every kernel that makes one of its inputs, and every kernel that reads one of its outputs, is split
# too (`split_chains`): a split kernel's parts and its neighbours' cut the tensors between them the
# same way (rows or pixels first) and the pool gives each thread the same share of every run, so each
# reads what it wrote itself; next to a kernel on one thread, half of every tensor crosses between
# cores instead, and on the benchmark machine that cost more than the split saved (measured with
# benchmarks/thread_profile.py: the 300,000 to 600,000-MAC pointwise layers of kws and vww took 0.7 to
# 1.1 times their one-thread time, and the depthwise layers between them twice theirs).
ALONE_WORK = 1_000_000


@dataclass(frozen=True)
class Group:
    """Top-level statements of a kernel that one part runs: whole, or (`split`) the iterations of its
    last statement, a loop, in ranges (the statements before it are locals every part declares)."""

    stmts: tuple[Stmt, ...]
    split: bool


def _affine(e: Expr) -> tuple[dict[str, int], int] | None:
    """`e` as (coefficient per variable, constant), or None when it is not affine in its variables."""
    if isinstance(e, Const):
        return ({}, int(e.value)) if isinstance(e.value, int) or float(e.value).is_integer() else None
    if isinstance(e, Var):
        return {e.name: 1}, 0
    if isinstance(e, Binary) and e.op in ("+", "-", "*"):
        a, b = _affine(e.a), _affine(e.b)
        if a is None or b is None:
            return None
        if e.op == "*":
            if a[0] and b[0]:
                return None
            (terms, c), k = (a, b[1]) if not b[0] else (b, a[1])
            return {v: m * k for v, m in terms.items()}, c * k
        sign = 1 if e.op == "+" else -1
        terms = dict(a[0])
        for v, m in b[0].items():
            terms[v] = terms.get(v, 0) + sign * m
        return terms, a[1] + sign * b[1]
    return None


def _accesses(stmts, loops: tuple[For, ...], read_as: Mapping[str, str]):
    """(buffer, index, lanes, the loops around it, loops outermost first) for every store in `stmts`,
    and for every load of a buffer in `read_as`, counted as an access of the buffer it names."""
    def loads(e, found):
        if isinstance(e, Load) and e.buffer in read_as:
            found.append(e)
        if hasattr(e, "__dataclass_fields__"):
            for v in vars(e).values():
                loads(v, found)
        elif isinstance(e, tuple):
            for v in e:
                loads(v, found)
        return found
    for s in stmts:
        if isinstance(s, For):
            yield from _accesses(s.body, (*loops, s), read_as)
            continue
        if read_as and not isinstance(s, Comment):
            for load in loads(stmt_exprs(s), []):
                if load.stride != 1:
                    yield read_as[load.buffer], None, load.width, loops
                yield read_as[load.buffer], load.index, load.width, loops
        if isinstance(s, Store):
            yield s.buffer, s.index, s.value.width, loops
        elif isinstance(s, If):  # as if it always ran: every element it may touch
            yield from _accesses(s.body, loops, read_as)


MAX_ENUMERATED = 1 << 22  # elements stored, counted with repeats, beyond which a kernel runs whole


def _owners(stmts: tuple[Stmt, ...], split: For | None, first_owner: int, read_as: Mapping[str, str]
            ) -> tuple[np.ndarray, np.ndarray] | None:
    """Every (buffer-tagged element, owner) `stmts` store (or read, through `read_as`): the owner is
    `first_owner`, plus the iteration of `split` when it is given; None when an index is not affine
    in the loops around it."""
    elements, owners = [], []
    for buffer, at, width, loops in _accesses(stmts, (), read_as):
        form = None if at is None else _affine(at)
        if form is None:
            return None
        terms, const = form
        by_var = {loop.var: loop for loop in loops}
        if any(v not in by_var for v in terms) or (split is not None and split.var not in by_var):
            return None
        axes = [loop for loop in loops if loop.var in terms or loop is split]
        count = width * math.prod(loop.extent // loop.step for loop in axes)
        if count > MAX_ENUMERATED:
            return None
        shape = [loop.extent // loop.step for loop in axes] + [width]
        index = np.full(shape, const, dtype=np.int64)
        owner = np.full(shape, first_owner, dtype=np.int64)
        for axis, loop in enumerate(axes):
            steps = np.arange(0, loop.extent, loop.step, dtype=np.int64).reshape(
                [-1 if a == axis else 1 for a in range(len(shape))])
            index += terms.get(loop.var, 0) * steps
            if loop is split:
                owner += steps // loop.step
        index += np.arange(width, dtype=np.int64)
        elements.append((index.ravel(), buffer))
        owners.append(owner.ravel())
    names = sorted({b for _, b in elements})
    tagged = [i * len(names) + names.index(b) for i, b in elements]  # one number per (element, buffer)
    return (np.concatenate(tagged) if tagged else np.zeros(0, np.int64),
            np.concatenate(owners) if owners else np.zeros(0, np.int64))


def _one_owner_each(elements: np.ndarray, owners: np.ndarray) -> bool:
    """True when every element is stored by one owner only (maybe several times)."""
    order = np.lexsort((owners, elements))
    e, o = elements[order], owners[order]
    same = e[1:] == e[:-1]
    return not np.any(same & (o[1:] != o[:-1]))


def _found(stmts, pick) -> set[str]:
    """pick(e) of every expression in `stmts` for which it is not None."""
    return {name for e in walk_exprs(tuple(stmts)) if (name := pick(e)) is not None}


def _names(stmts) -> set[str]:
    """Names of the variables `stmts` read, declare or assign."""
    return _found(stmts, lambda e: e.name if isinstance(e, Var) else None) | \
        {s.name for s in walk_stmts(stmts) if isinstance(s, (Local, Assign))}


def _groups(body: tuple[Stmt, ...]) -> list[tuple[Stmt, ...]]:
    """The top-level statements cut into runs that share no top-level local."""
    top = {s.name for s in body if isinstance(s, Local)}
    last_use: dict[str, int] = {}
    for i, s in enumerate(body):
        for name in _names([s]) & top:
            last_use[name] = i
    groups, start, reach = [], 0, -1
    for i, s in enumerate(body):
        reach = max(reach, *(last_use[n] for n in _names([s]) & top), i)
        if reach == i:
            groups.append(body[start:i + 1])
            start = i + 1
    return groups


def _loads(stmts) -> set[str]:
    """The tensors `stmts` read."""
    return _found(stmts, lambda e: e.buffer if isinstance(e, Load) else None)


def split_groups(kernel: Kernel, overlapping: frozenset[str] = frozenset(),
                 same_elements: Mapping[str, str] | None = None) -> list[Group] | None:
    """The kernel's groups, when some can be split or there are several, and every element it stores
    is stored by one group (and one iteration of a split group); else None. `same_elements` maps an
    input to the output written over it element for element (same offset and element size): each
    element of it read must be read by the part that writes it. `overlapping`: tensors that share
    bytes in any other way (the kernel then runs whole)."""
    same_elements = dict(same_elements or {})
    if kernel.scratch or overlapping:
        return None
    body = tuple(s for s in kernel.body if not isinstance(s, Comment))
    stored = {s.buffer for s in walk_stmts(body) if isinstance(s, Store)}
    if not stored or stored & _loads(body):
        return None
    assigned = {s.name for s in walk_stmts(body) if isinstance(s, Assign)}
    groups: list[Group] = []
    elements, owners = [], []
    owner = 0
    for stmts in _groups(body):
        *head, last = stmts
        split = isinstance(last, For) and last.extent // last.step > 1 and \
            all(isinstance(s, Local) and s.name not in assigned for s in head)
        found = _owners(stmts, last, owner, same_elements) if split else None
        if found is None:
            split, found = False, _owners(stmts, None, owner, same_elements)
        if found is None:
            return None
        elements.append(found[0])
        owners.append(found[1])
        owner += last.extent // last.step if split else 1
        groups.append(Group(stmts, split))
    if not _one_owner_each(np.concatenate(elements), np.concatenate(owners)):
        return None
    return groups if any(g.split for g in groups) or len(groups) > 1 else None


def render_parts(renderer, kernel: Kernel, groups: list[Group], aliased: frozenset[str], macs: int) -> str:
    """C++ of the kernel computing part `tinsmith_part` of `tinsmith_parts`: its share of every split
    group's iterations, and the whole groups dealt out in turn."""
    signature = renderer.signature(kernel, aliased, macs)
    assert signature.endswith(") noexcept")
    lines = [f"{signature[:-len(') noexcept')]}, int {PART}, int {PARTS}) noexcept {{"]
    whole = 0
    for group in groups:
        if group.split:
            *head, loop = group.stmts
            count = loop.extent // loop.step
            lines.append("  {")
            lines += renderer.stmts(tuple(head), 4)
            first = f"{count} * {PART} / {PARTS}"
            end = f"{count} * ({PART} + 1) / {PARTS}"
            scale = "" if loop.step == 1 else f" * {loop.step}"
            step = f"++{loop.var}" if loop.step == 1 else f"{loop.var} += {loop.step}"
            lines.append(f"    for (int {loop.var} = {first}{scale}; {loop.var} < {end}{scale}; {step}) {{")
            lines += renderer.stmts(loop.body, 6)
            lines += ["    }", "  }"]
        else:
            lines.append(f"  if ({PART} == {whole} % {PARTS}) {{")
            lines += renderer.stmts(group.stmts, 4)
            lines.append("  }")
            whole += 1
    lines.append("}")
    return "\n".join(lines)


def split_chains(kernels: list[tuple[str, int, bool, set[str], set[str]]]) -> set[str]:
    """Which kernels run split, of kernels given as (name, work, can be split, tensors read, tensors
    written): those that can with work of at least ALONE_WORK, and the largest set of the others that
    can such that every kernel on either side of a tensor one of them reads or writes is in it too."""
    split = {name for name, _, can, _, _ in kernels if can}
    writers: dict[str, set[str]] = {}
    readers: dict[str, set[str]] = {}
    for name, _, _, reads, writes in kernels:
        for v in reads:
            readers.setdefault(v, set()).add(name)
        for v in writes:
            writers.setdefault(v, set()).add(name)
    changed = True
    while changed:
        changed = False
        for name, work, _, reads, writes in kernels:
            if name in split and work < ALONE_WORK:
                neighbours = set().union(*(writers.get(v, set()) for v in reads),
                                         *(readers.get(v, set()) for v in writes)) - {name}
                if not neighbours <= split:
                    split.discard(name)
                    changed = True
    return split
