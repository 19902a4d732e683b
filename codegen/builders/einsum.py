"""Einsum as a composite of Transpose, Reshape, ReduceSum, Slice and batched MatMul.

Each operand first loses its repeated labels (a diagonal, through a strided Slice) and the labels no
other operand or the output has (ReduceSum). Operands are then multiplied left to right:
labels both sides keep are batch axes, labels only later operands or the output need are
kept, the rest are contracted by one MatMul on [batch..., left, k] x [batch..., k, right].
A final Transpose puts the result in the output's label order.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from tinsmith.builders.registry import builder
from tinsmith.ops.registry import Attr, OpError

_TERM = re.compile(r"[A-Za-z]*(\.\.\.)?[A-Za-z]*\Z")


@dataclass(frozen=True)
class Operand:
    """A value and the label of each of its axes (ellipsis axes get labels '0', '1', ...)."""

    value: str
    labels: tuple[str, ...]


def _labels(term: str, rank: int | None, ellipsis_rank: int, what: str) -> tuple[str, ...]:
    """A term's labels, its ellipsis expanded to the last axes of the broadcast ellipsis."""
    if not _TERM.match(term):
        raise OpError(f"Einsum term '{term}' ({what}) must be letters with at most one '...'",
                      attr="equation")
    head, dots, tail = term.partition("...")
    if not dots:
        if rank is not None and len(term) != rank:
            raise OpError(f"Einsum term '{term}' has {len(term)} labels but {what} has rank {rank}",
                          attr="equation")
        return tuple(term)
    n = ellipsis_rank if rank is None else rank - len(head) - len(tail)
    if n < 0:
        raise OpError(f"Einsum term '{term}' has more labels than {what} has axes ({rank})",
                      attr="equation")
    return tuple(head) + tuple(str(i) for i in range(ellipsis_rank - n, ellipsis_rank)) + tuple(tail)


def parse_equation(equation: str, ranks: list[int]) -> tuple[list[tuple[str, ...]], tuple[str, ...]]:
    """Labels of each input and of the output (implicit output: ellipsis, then the letters used
    once, in alphabetical order)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise OpError(f"Einsum equation '{equation}' has {len(terms)} input terms for {len(ranks)} inputs",
                      attr="equation")
    ellipsis_rank = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t), default=0)
    inputs = [_labels(t, r, ellipsis_rank, f"input {i}") for i, (t, r) in enumerate(zip(terms, ranks))]
    if arrow:
        output = _labels(rhs, None, ellipsis_rank, "the output")
        letters = {lab for labels in inputs for lab in labels}
        missing = [lab for lab in output if lab not in letters]
        if missing or len(set(output)) != len(output):
            raise OpError(f"Einsum output '{rhs}' must name each input label at most once "
                          f"({'unknown' if missing else 'repeated'} label '{(missing or [rhs])[0]}')",
                          attr="equation")
    else:
        counts: dict[str, int] = {}
        for labels in inputs:
            for lab in labels:
                counts[lab] = counts.get(lab, 0) + 1
        dots = tuple(str(i) for i in range(ellipsis_rank))
        output = dots + tuple(sorted(lab for lab, c in counts.items() if c == 1 and lab.isalpha()))
    return inputs, output


class _Einsum:
    """The insertion of one Einsum node, step by step."""

    def __init__(self, g):
        self.g = g

    def shape(self, op: Operand) -> tuple[int, ...]:
        return self.g.type_of(op.value).shape

    def transpose(self, op: Operand, order: tuple[str, ...]) -> Operand:
        """`op` with its axes in label order `order` (labels distinct)."""
        return self.permute(op, [op.labels.index(lab) for lab in order])

    def permute(self, op: Operand, perm: list[int]) -> Operand:
        if perm == list(range(len(perm))):
            return op
        return Operand(self.g.add("Transpose", [op.value], {"perm": perm})[0],
                       tuple(op.labels[p] for p in perm))

    def reshape(self, value: str, shape: tuple[int, ...]) -> str:
        if self.g.type_of(value).shape == tuple(shape):
            return value
        return self.g.add("Reshape", [value, self.g.constant(np.array(shape, np.int64), "shape")])[0]

    def reduce(self, op: Operand, keep: set[str]) -> Operand:
        """Sum over the axes whose labels are not in `keep`."""
        axes = [i for i, lab in enumerate(op.labels) if lab not in keep]
        if not axes:
            return op
        value = self.g.add("ReduceSum", [op.value, self.g.constant(np.array(axes, np.int64), "axes")],
                           {"keepdims": 0})[0]
        return Operand(value, tuple(lab for lab in op.labels if lab in keep))

    def diagonal(self, op: Operand) -> Operand:
        """Take the diagonal over each label the operand repeats (e.g. 'ii' -> 'i')."""
        while len(set(op.labels)) != len(op.labels):
            lab = next(x for x in op.labels if op.labels.count(x) > 1)
            i, j = [k for k, x in enumerate(op.labels) if x == lab][:2]
            rest = tuple(x for k, x in enumerate(op.labels) if k not in (i, j))
            moved = self.permute(op, [k for k in range(len(op.labels)) if k not in (i, j)] + [i, j])
            n = self.shape(op)[i]
            if self.shape(op)[j] != n:
                raise OpError(f"Einsum label '{lab}' is repeated on axes of sizes {n} and "
                              f"{self.shape(op)[j]}", attr="equation")
            flat = self.reshape(moved.value, self.shape(moved)[:-2] + (n * n,))
            # Elements 0, n+1, 2(n+1), ... of the flattened pair of axes are the diagonal.
            ints = [self.g.constant(np.array([v], np.int64), what) for v, what in
                    ((0, "starts"), (n * n, "ends"), (len(rest), "axes"), (n + 1, "steps"))]
            op = Operand(self.g.add("Slice", [flat, *ints])[0], rest + (lab,))
        return op

    def multiply(self, a: Operand, b: Operand, needed: set[str]) -> Operand:
        """a * b summed over the labels they share that `needed` does not have."""
        a = self.reduce(a, needed | set(b.labels))
        b = self.reduce(b, needed | set(a.labels))
        batch = tuple(lab for lab in a.labels if lab in b.labels and lab in needed)
        contract = tuple(lab for lab in a.labels if lab in b.labels and lab not in needed)
        left = tuple(lab for lab in a.labels if lab not in b.labels)
        right = tuple(lab for lab in b.labels if lab not in a.labels)
        a = self.transpose(a, batch + left + contract)
        b = self.transpose(b, batch + contract + right)
        nb, nl = len(batch), len(left)
        a_shape, b_shape = self.shape(a), self.shape(b)
        if a_shape[nb + nl:] != b_shape[nb:nb + len(contract)]:  # a size-1 '...' axis summed over
            raise OpError("Einsum cannot broadcast an axis it sums over", attr="equation")
        k = math.prod(a_shape[nb + nl:])
        a2 = self.reshape(a.value, a_shape[:nb] + (math.prod(a_shape[nb:nb + nl]), k))
        b2 = self.reshape(b.value, b_shape[:nb] + (k, math.prod(b_shape[nb + len(contract):])))
        product = self.g.add("MatMul", [a2, b2])[0]
        out_batch = tuple(max(x, y) for x, y in zip(a_shape[:nb], b_shape[:nb]))
        shape = out_batch + a_shape[nb:nb + nl] + b_shape[nb + len(contract):]
        return Operand(self.reshape(product, shape), batch + left + right)


def _check_sizes(ops: list[Operand], shapes: list[tuple[int, ...]]) -> None:
    """A label has one size; only a size-1 axis under '...' broadcasts."""
    sizes: dict[str, int] = {}
    for i, (op, shape) in enumerate(zip(ops, shapes)):
        for lab, n in zip(op.labels, shape):
            seen = sizes.get(lab)
            if seen is None or seen == 1 and not lab.isalpha():
                sizes[lab] = n
            elif seen != n and not (n == 1 and not lab.isalpha()):
                shown = f"'{lab}'" if lab.isalpha() else "of '...'"
                raise OpError(f"Einsum label {shown} has size {seen} in one input and {n} in input {i}",
                              input=i)


@builder("Einsum", inputs=(1, -1), attrs=[Attr("equation", "string")])
def einsum(g, inputs, attrs):
    """ONNX Einsum: sums of products over labelled axes (NumPy's einsum)."""
    shapes = [g.type_of(x).shape for x in inputs]
    labels, output = parse_equation(attrs["equation"], [len(s) for s in shapes])
    ops = [Operand(x, labs) for x, labs in zip(inputs, labels)]
    _check_sizes(ops, shapes)
    step = _Einsum(g)
    ops = [step.diagonal(op) for op in ops]
    acc = step.reduce(ops[0], set(output) | {lab for op in ops[1:] for lab in op.labels})
    for k, op in enumerate(ops[1:], start=1):
        needed = set(output) | {lab for later in ops[k + 1:] for lab in later.labels}
        acc = step.multiply(acc, op, needed)
    acc = step.reduce(acc, set(output))
    return [step.transpose(acc, output).value]
