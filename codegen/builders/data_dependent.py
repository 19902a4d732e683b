"""Operators whose output shape depends on the values of their inputs: Unique (one entry per
distinct value) and NonMaxSuppression (one row per selected box).

A compiled graph has static shapes, so these run only when their inputs are known when the graph
is built (constants, or values computed from constants), and then become constants; with inputs
computed at run time they are declined with the reason. (NonMaxSuppression's
max_output_boxes_per_class bounds the rows, but ONNX gives exactly the selected ones, so a
padded output would not be the operator.)
"""
from __future__ import annotations

import numpy as np

from tinsmith.builders.registry import builder
from tinsmith.ops.common import normalize_axis
from tinsmith.ops.registry import Attr, OpError


def _known(g, op: str, inputs, why: str, labels: tuple[str, ...]) -> list[np.ndarray | None]:
    """The inputs' values; an input computed at run time is an error naming it as the ONNX
    specification does (`labels`, one per input)."""
    values = [g.value_of(v) if v else None for v in inputs]
    for i, (name, value) in enumerate(zip(inputs, values)):
        if name and value is None:
            raise OpError(f"{op}'s output has {why}, a number known only at run time, and Tinsmith compiles static "
                          f"shapes: its inputs must be known when the graph is built ('{labels[i]}', here "
                          f"'{name}', is computed at run time)", input=i)
    return values


def unique(x: np.ndarray, axis: int | None, ordered: bool) -> list[np.ndarray]:
    """ONNX Unique: values, first indices, inverse indices, counts; sorted, or by first occurrence."""
    flat = x.reshape(-1) if axis is None else np.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)
    keys = [tuple(np.atleast_1d(row).tolist()) for row in flat]
    first: dict[tuple, int] = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    order = sorted(first, key=(lambda k: k) if ordered else first.get)
    position = {k: j for j, k in enumerate(order)}
    indices = np.array([first[k] for k in order], np.int64)
    inverse = np.array([position[k] for k in keys], np.int64)
    counts = np.bincount(inverse, minlength=len(order)).astype(np.int64)
    values = flat[indices] if axis is None else np.take(x, indices, axis=axis)
    return [values, indices, inverse, counts]


@builder("Unique", inputs=1, outputs=4, attrs=[Attr("axis", "int", None), Attr("sorted", "int", 1, (0, 1))])
def unique_builder(g, inputs, attrs):
    """Unique of a tensor known when the graph is built."""
    (x,) = _known(g, "Unique", inputs, "one entry per distinct value", ("X",))
    axis = None if attrs["axis"] is None else normalize_axis(attrs["axis"], x.ndim)
    return [g.constant(np.ascontiguousarray(v), "unique") for v in unique(x, axis, bool(attrs["sorted"]))]


def _iou(a: np.ndarray, b: np.ndarray, center: bool) -> float:
    if center:  # [x_center, y_center, width, height]
        a = np.array([a[0] - a[2] / 2, a[1] - a[3] / 2, a[0] + a[2] / 2, a[1] + a[3] / 2])
        b = np.array([b[0] - b[2] / 2, b[1] - b[3] / 2, b[0] + b[2] / 2, b[1] + b[3] / 2])
        a = a[[1, 0, 3, 2]]
        b = b[[1, 0, 3, 2]]
    y1a, y2a = sorted((a[0], a[2]))
    x1a, x2a = sorted((a[1], a[3]))
    y1b, y2b = sorted((b[0], b[2]))
    x1b, x2b = sorted((b[1], b[3]))
    inter = max(0.0, min(y2a, y2b) - max(y1a, y1b)) * max(0.0, min(x2a, x2b) - max(x1a, x1b))
    union = (y2a - y1a) * (x2a - x1a) + (y2b - y1b) * (x2b - x1b) - inter
    return inter / union if union > 0 else 0.0


@builder("NonMaxSuppression", inputs=(2, 5), attrs=[Attr("center_point_box", "int", 0, (0, 1))])
def non_max_suppression(g, inputs, attrs):
    """Per batch and class, boxes by descending score above the threshold, each kept unless it
    overlaps a kept one by more than the IoU threshold, at most max_output_boxes_per_class;
    rows [batch, class, box]. Inputs known when the graph is built."""
    values = _known(g, "NonMaxSuppression", inputs, "one row per selected box",
                    ("boxes", "scores", "max_output_boxes_per_class", "iou_threshold", "score_threshold"))
    boxes, scores = values[0].astype(np.float64), values[1].astype(np.float64)
    limit = int(values[2].reshape(-1)[0]) if len(values) > 2 and values[2] is not None else 0
    iou_limit = float(values[3].reshape(-1)[0]) if len(values) > 3 and values[3] is not None else 0.0
    floor = float(values[4].reshape(-1)[0]) if len(values) > 4 and values[4] is not None else None
    rows = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            order = sorted(range(scores.shape[2]), key=lambda i: (-scores[b, c, i], i))
            kept: list[int] = []
            for i in order:
                if len(kept) >= limit or (floor is not None and scores[b, c, i] <= floor):
                    break
                if all(_iou(boxes[b, i], boxes[b, k], bool(attrs["center_point_box"])) <= iou_limit for k in kept):
                    kept.append(i)
            rows += [[b, c, i] for i in kept]
    return [g.constant(np.array(rows, np.int64).reshape(-1, 3), "selected")]
