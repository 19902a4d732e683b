"""How far compiled float32 outputs may lie from the NumPy reference, derived from the computation.

Both compute in float32, but they sum in different orders (a kernel walks taps and channels in
its own order, NumPy uses pairwise sums and BLAS). For a sum of n products the two results can
differ by up to about n * eps times the sum of the magnitudes (Higham, "Accuracy and Stability
of Numerical Algorithms", 3.1), eps = 2**-23, and errors of successive layers add up. So an
output's tolerance grows with its summation length: the reduction lengths (dot product,
window, reduced elements) of every node it depends on, summed.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from tinsmith.ir import Graph, Node

EPS32 = float(np.finfo(np.float32).eps)  # 2**-23


def _shape(graph: Graph, value: str) -> tuple[int, ...]:
    return graph.types[value].shape if value else ()


def _matmul(graph: Graph, node: Node) -> int:
    a = _shape(graph, node.inputs[0])
    if node.op == "Gemm" and node.attrs.get("transA"):
        return a[0] if a else 1
    return a[-1] if a else 1


def _conv(graph: Graph, node: Node) -> int:
    w = _shape(graph, node.inputs[1])
    if node.op == "ConvTranspose":  # each output sums channels/group x the taps that reach it
        return w[0] * math.prod(w[2:]) // max(1, int(node.attrs.get("group") or 1))
    return math.prod(w[1:])


def _conv_nhwc(graph: Graph, node: Node) -> int:
    """Channels-last weights [kh, kw, channels per group, out]: each output sums all but the last."""
    return math.prod(_shape(graph, node.inputs[1])[:-1])


def _window(graph: Graph, node: Node) -> int:
    return math.prod(node.attrs.get("kernel_shape") or [1])


def _axis(graph: Graph, node: Node) -> int:
    x = _shape(graph, node.inputs[0])
    axis = node.attrs.get("axis", -1)
    return x[axis] if x and isinstance(axis, int) and -len(x) <= axis < len(x) else 1


def _per_output(graph: Graph, node: Node) -> int:
    """Reductions and normalisations: the input elements that meet in one output element (or one
    group of them), at least 1."""
    x = _shape(graph, node.inputs[0]) if node.inputs else ()
    out = _shape(graph, node.outputs[0])
    if node.op in ("InstanceNormalization", "LRN", "BatchNormalization"):
        return math.prod(x[2:]) if node.op == "InstanceNormalization" else int(node.attrs.get("size") or 1)
    return max(1, math.prod(x) // max(1, math.prod(out)))


_LENGTH: dict[str, Callable[[Graph, Node], int]] = {
    "MatMul": _matmul, "Gemm": _matmul, "Conv": _conv, "ConvTranspose": _conv,
    "MaxPool": _window, "AveragePool": _window, "LpPool": _window,
    "ConvNHWC": _conv_nhwc, "MaxPoolNHWC": _window, "AveragePoolNHWC": _window,
    "Softmax": _axis, "LogSoftmax": _axis, "Hardmax": _axis, "CumSum": _axis,
}


def reduction_length(graph: Graph, node: Node) -> int:
    """How many terms one output element of `node` sums (1 for elementwise ops)."""
    rule = _LENGTH.get(node.op, _per_output)
    try:
        return max(1, int(rule(graph, node)))
    except (IndexError, TypeError, ValueError):
        return 1


def summation_lengths(graph: Graph) -> dict[str, int]:
    """For each graph output, the summed reduction lengths of every node it depends on."""
    producer = {out: node for node in graph.nodes for out in node.outputs}
    result = {}
    for name in graph.outputs:
        seen, stack, total = set(), [name], 0
        while stack:
            node = producer.get(stack.pop())
            if node is None or node.name in seen:
                continue
            seen.add(node.name)
            total += reduction_length(graph, node)
            stack += [v for v in node.inputs if v]
        result[name] = max(1, total)
    return result


def within_tolerance(got: np.ndarray, want: np.ndarray, length: int, rtol: float, atol: float
                     ) -> tuple[bool, float]:
    """Whether |got - want| <= (rtol + length * eps) * max(|want|, mean |want|) + atol everywhere,
    and the largest ratio of difference to allowed difference (1.0 is the limit). The mean
    magnitude stands in for the summed magnitudes where an element nearly cancels to zero."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    if want.size == 0:
        return True, 0.0
    magnitude = np.abs(want)
    floor = float(np.mean(magnitude[np.isfinite(magnitude)])) if np.isfinite(magnitude).any() else 0.0
    allowed = (rtol + length * EPS32) * np.maximum(magnitude, floor) + atol
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    diff = np.where(same, 0.0, np.abs(got - want))
    ratio = float(np.max(np.where(np.isnan(diff), np.inf, diff / allowed)))
    return ratio <= 1.0, ratio
