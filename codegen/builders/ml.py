"""Operators of the ai.onnx.ml domain that are plain arithmetic."""
from __future__ import annotations

import numpy as np

from tinsmith.builders.registry import builder
from tinsmith.ops.registry import Attr, OpError


@builder("ai.onnx.ml.Binarizer", inputs=1, attrs=[Attr("threshold", "float", 0.0)])
def binarizer(g, inputs, attrs):
    """1 where x > threshold, else 0, in x's element type."""
    (x,) = inputs
    above = g.add("Greater", [x, g.scalar(attrs["threshold"])])[0]
    return g.add("Where", [above, g.scalar(1.0), g.scalar(0.0)])


# ai.onnx.ml.TreeEnsemble node modes -> the comparison of the feature with the split
_MODES = {0: "LessOrEqual", 1: "Less", 2: "GreaterOrEqual", 3: "Greater", 4: "Equal"}
_NOT_EQUAL, _MEMBER = 5, 6
_AGGREGATES = {0: "average", 1: "sum"}
_POST = {0: None, 1: "Softmax", 2: "Sigmoid"}


def _values(v) -> np.ndarray:
    """An ints or tensor attribute's values, flat."""
    return np.asarray(getattr(v, "data", v)).reshape(-1)


def _ints(attrs, name: str) -> list[int]:
    return [] if attrs[name] is None else [int(i) for i in _values(attrs[name])]


def _floats(attrs, name: str) -> list[float]:
    return [] if attrs[name] is None else [float(f) for f in _values(attrs[name]).astype(np.float64)]


@builder("ai.onnx.ml.TreeEnsemble", inputs=1,
         attrs=[Attr("aggregate_function", "int", 1), Attr("leaf_targetids", "ints"), Attr("leaf_weights", "tensor"),
                Attr("membership_values", "tensor", None), Attr("n_targets", "int"),
                Attr("nodes_falseleafs", "ints"), Attr("nodes_falsenodeids", "ints"), Attr("nodes_featureids", "ints"),
                Attr("nodes_hitrates", "tensor", None), Attr("nodes_missing_value_tracks_true", "ints", None),
                Attr("nodes_modes", "tensor"), Attr("nodes_splits", "tensor"), Attr("nodes_trueleafs", "ints"),
                Attr("nodes_truenodeids", "ints"), Attr("post_transform", "int", 0), Attr("tree_roots", "ints")])
def tree_ensemble(g, inputs, attrs):
    """Each tree as nested selections: at a node, Where(feature compared with its split, the true
    subtree, the false subtree), down to leaves holding their weight at their target; trees are
    summed (or averaged), then the post transform. Output [N, n_targets]."""
    (x,) = inputs
    shape = tuple(g.type_of(x).shape)
    if len(shape) != 2:
        raise OpError(f"TreeEnsemble input has shape {list(shape)}; expected [N, features]", input=0)
    if attrs["aggregate_function"] not in _AGGREGATES:
        raise OpError("TreeEnsemble aggregates by sum or average here; min and max are not supported",
                      attr="aggregate_function")
    if attrs["post_transform"] not in _POST:
        raise OpError("TreeEnsemble's post_transform must be NONE, SOFTMAX or LOGISTIC", attr="post_transform")
    modes = _ints(attrs, "nodes_modes")
    features, splits = _ints(attrs, "nodes_featureids"), _floats(attrs, "nodes_splits")
    true_ids, false_ids = _ints(attrs, "nodes_truenodeids"), _ints(attrs, "nodes_falsenodeids")
    true_leaf, false_leaf = _ints(attrs, "nodes_trueleafs"), _ints(attrs, "nodes_falseleafs")
    missing = _ints(attrs, "nodes_missing_value_tracks_true") or [0] * len(modes)
    targets, weights = _ints(attrs, "leaf_targetids"), _floats(attrs, "leaf_weights")
    n_targets = attrs["n_targets"]
    # membership sets: one per MEMBER node in node order, separated by NaN
    sets, current = [], []
    for v in _floats(attrs, "membership_values"):
        if np.isnan(v):
            sets.append(current)
            current = []
        else:
            current.append(v)
    if current:
        sets.append(current)
    member_sets = iter(sets)
    member_of = {i: next(member_sets, []) for i, m in enumerate(modes) if m == _MEMBER}
    if any(m not in _MODES and m not in (_NOT_EQUAL, _MEMBER) for m in modes):
        raise OpError(f"TreeEnsemble node modes {sorted(set(modes))} include an unknown one", attr="nodes_modes")
    one = g.constant(np.array([1], np.int64), "axes")
    column = {}

    def feature(f: int) -> str:  # x[:, f] as [N, 1]
        if f not in column:
            column[f] = g.add("Gather", [x, g.constant(np.array([f], np.int64), "feature")], {"axis": 1})[0]
        return column[f]

    def condition(i: int) -> str:
        v = feature(features[i])
        if modes[i] == _MEMBER:
            values = np.array(member_of[i], np.float32)
            hits = g.add("Cast", [g.add("Equal", [v, g.constant(values, "members")])[0]], {"to": "float32"})[0]
            cond = g.add("Greater", [g.add("ReduceMax", [hits, one], {"keepdims": 1})[0], g.scalar(0.5)])[0]
        elif modes[i] == _NOT_EQUAL:
            cond = g.add("Not", [g.add("Equal", [v, g.scalar(splits[i])])[0]])[0]
        else:
            cond = g.add(_MODES[modes[i]], [v, g.scalar(splits[i])])[0]
        if missing[i]:  # a missing value (NaN) takes the true branch
            cond = g.add("Or", [g.add("IsNaN", [v])[0], cond])[0]
        return cond

    def leaf(k: int) -> str:
        row = np.zeros((1, n_targets), np.float32)
        row[0, targets[k]] = weights[k]
        return g.constant(row, "leaf")

    def subtree(i: int, depth: int) -> str:
        if depth > len(modes):
            raise OpError("TreeEnsemble's nodes form a cycle", attr="nodes_truenodeids")
        on_true = leaf(true_ids[i]) if true_leaf[i] else subtree(true_ids[i], depth + 1)
        on_false = leaf(false_ids[i]) if false_leaf[i] else subtree(false_ids[i], depth + 1)
        return g.add("Where", [condition(i), on_true, on_false])[0]
    trees = [subtree(r, 0) for r in _ints(attrs, "tree_roots")]
    total = trees[0] if len(trees) == 1 else g.add("Sum", trees)[0]
    zeros = g.constant(np.zeros((shape[0], n_targets), np.float32), "zeros")
    total = g.add("Add", [total, zeros])[0]  # [N, n_targets] even if every tree is one leaf
    if _AGGREGATES[attrs["aggregate_function"]] == "average" and len(trees) > 1:
        total = g.add("Div", [total, g.scalar(float(len(trees)))])[0]
    post = _POST[attrs["post_transform"]]
    return [g.add(post, [total], {"axis": -1} if post == "Softmax" else {})[0] if post else total]
