"""Loss composites: ONNX NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

The class labels (`target`) must be known when the graph is built, as they are wherever a
compiled graph evaluates a loss on fixed labels: they become a constant one-hot selection,
so picking each element's class is a multiply and a sum over the class axis, and ignored
elements get weight 0. The class weights may be computed at run time.
"""
from __future__ import annotations

import numpy as np

from tinsmith.builders.registry import builder
from tinsmith.ops.registry import Attr, OpError

_LOSS_ATTRS = [Attr("ignore_index", "int", None), Attr("reduction", "string", "mean", ("none", "sum", "mean"))]


def _nll(g, op: str, x: str, target: str, weight: str | None, attrs) -> str:
    shape = tuple(g.type_of(x).shape)
    labels = g.value_of(target)
    if labels is None:
        raise OpError(f"{op} target must be a constant, known when the graph is built", input=1)
    labels = np.asarray(labels).astype(np.int64)
    if len(shape) < 2 or labels.shape != shape[:1] + shape[2:]:
        raise OpError(f"{op} target has shape {list(labels.shape)}, expected {list(shape[:1] + shape[2:])}",
                      input=1)
    classes = shape[1]
    ignore = attrs["ignore_index"]
    kept = labels != ignore if ignore is not None else np.ones(labels.shape, bool)
    if ((labels[kept] < 0) | (labels[kept] >= classes)).any():
        raise OpError(f"{op} target holds a class outside [0, {classes})", input=1)
    safe = np.where(kept, labels, 0)
    # one_hot[n, c, d...] = 1 where c is element (n, d...)'s class and the element is kept
    one_hot = (np.arange(classes).reshape((1, classes) + (1,) * (len(shape) - 2))
               == np.expand_dims(safe, 1)) & np.expand_dims(kept, 1)
    picked = g.add("ReduceSum", [g.add("Mul", [x, g.constant(one_hot.astype(np.float32), "one_hot")])[0],
                                 g.constant(np.array([1], np.int64), "axes")], {"keepdims": 0})[0]
    loss = g.add("Neg", [picked])[0]
    if weight is not None:
        weights = g.add("Mul", [g.add("Gather", [weight, g.constant(safe, "classes")], {"axis": 0})[0],
                                g.constant(kept.astype(np.float32), "kept")])[0]
        loss = g.add("Mul", [loss, weights])[0]
    elif attrs["reduction"] == "mean":
        weights = g.constant(kept.astype(np.float32), "kept")
    reduction = attrs["reduction"]
    if reduction == "none":
        return loss
    total = g.add("ReduceSum", [loss], {"keepdims": 0})[0]
    if reduction == "sum":
        return total
    return g.add("Div", [total, g.add("ReduceSum", [weights], {"keepdims": 0})[0]])[0]


@builder("NegativeLogLikelihoodLoss", inputs=(2, 3), attrs=_LOSS_ATTRS)
def negative_log_likelihood_loss(g, inputs, attrs):
    """-input[n, target[n, d...], d...] * weight[target], reduced by sum or weighted mean."""
    weight = inputs[2] if len(inputs) > 2 and inputs[2] else None
    return [_nll(g, "NegativeLogLikelihoodLoss", inputs[0], inputs[1], weight, attrs)]


@builder("SoftmaxCrossEntropyLoss", inputs=(2, 3), outputs=2, attrs=_LOSS_ATTRS)
def softmax_cross_entropy_loss(g, inputs, attrs):
    """NegativeLogLikelihoodLoss of LogSoftmax over the class axis; outputs the loss and the
    log probabilities."""
    log_prob = g.add("LogSoftmax", [inputs[0]], {"axis": 1})[0]
    weight = inputs[2] if len(inputs) > 2 and inputs[2] else None
    return [_nll(g, "SoftmaxCrossEntropyLoss", log_prob, inputs[1], weight, attrs), log_prob]
