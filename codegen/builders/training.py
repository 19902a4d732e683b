"""The optimizers of ONNX's training domain (ai.onnx.preview.training): one update step of
Adagrad, Adam and Momentum as elementwise arithmetic.

A compiled update step serves on-device fine-tuning: the weights, gradients and accumulators
are run-time tensors, while the step count T is known when the graph is built (a step is
compiled for its schedule), so the learning-rate schedule, which depends on T alone, becomes
a constant factor of the run-time learning rate R. Each op updates any number of tensors:
inputs R, T, then each group (X..., G..., and the accumulators), outputs group by group.
"""
from __future__ import annotations

import math

import numpy as np

from tinsmith.builders.registry import builder
from tinsmith.ops.registry import Attr, OpError

DOMAIN = "ai.onnx.preview.training"
MAX_TENSORS = 64  # tensors updated by one node: a bound for the declared output count


def _step(g, op: str, t: str) -> int:
    value = g.value_of(t)
    if value is None:
        raise OpError(f"{op} step count T must be a constant, known when the graph is built", input=1)
    return int(np.asarray(value).reshape(-1)[0])


def _groups(op: str, inputs, count: int) -> list[list[str]]:
    """The tensors after R and T, split into `count` groups of equal length (X, G, ...)."""
    rest = list(inputs[2:])
    if not rest or len(rest) % count:
        raise OpError(f"{op} takes R, T and {count} groups of tensors of equal length, "
                      f"got {len(rest)} tensors after R and T", input=len(inputs) - 1)
    n = len(rest) // count
    return [rest[i * n:(i + 1) * n] for i in range(count)]


def _scaled(g, value: str, factor: float) -> str:
    return g.add("Mul", [value, g.scalar(factor)])[0]


def _regularized(g, x: str, grad: str, norm: float) -> str:
    """norm_coefficient * x + g, the gradient of loss + norm/2 * ||x||^2."""
    return grad if norm == 0 else g.add("Add", [_scaled(g, x, norm), grad])[0]


@builder(f"{DOMAIN}.Adagrad", inputs=(5, -1), outputs=2 * MAX_TENSORS,
         attrs=[Attr("decay_factor", "float", 0.0), Attr("epsilon", "float", 0.0),
                Attr("norm_coefficient", "float", 0.0)])
def adagrad(g, inputs, attrs):
    """r = R / (1 + T decay); g' = norm x + g; H' = H + g'^2; X' = X - r g' / (sqrt(H') + eps)."""
    op = "Adagrad"
    step = _step(g, op, inputs[1])
    xs, grads, hs = _groups(op, inputs, 3)
    rate = _scaled(g, inputs[0], 1.0 / (1.0 + step * attrs["decay_factor"]))
    new_x, new_h = [], []
    for x, grad, h in zip(xs, grads, hs):
        gr = _regularized(g, x, grad, attrs["norm_coefficient"])
        h2 = g.add("Add", [h, g.add("Mul", [gr, gr])[0]])[0]
        denominator = g.add("Add", [g.add("Sqrt", [h2])[0], g.scalar(attrs["epsilon"])])[0]
        delta = g.add("Div", [g.add("Mul", [rate, gr])[0], denominator])[0]
        new_x.append(g.add("Sub", [x, delta])[0])
        new_h.append(h2)
    return new_x + new_h


@builder(f"{DOMAIN}.Adam", inputs=(6, -1), outputs=3 * MAX_TENSORS,
         attrs=[Attr("alpha", "float", 0.9), Attr("beta", "float", 0.999), Attr("epsilon", "float", 0.0),
                Attr("norm_coefficient", "float", 0.0), Attr("norm_coefficient_post", "float", 0.0)])
def adam(g, inputs, attrs):
    """g' = norm x + g; V' = alpha V + (1 - alpha) g'; H' = beta H + (1 - beta) g'^2;
    X' = (1 - post) (X - r V' / (sqrt(H') + eps)), r = R sqrt(1 - beta^T) / (1 - alpha^T) once T > 0."""
    op = "Adam"
    step = _step(g, op, inputs[1])
    xs, grads, vs, hs = _groups(op, inputs, 4)
    alpha, beta = attrs["alpha"], attrs["beta"]
    factor = math.sqrt(1 - beta ** step) / (1 - alpha ** step) if step > 0 else 1.0
    rate = _scaled(g, inputs[0], factor)
    new_x, new_v, new_h = [], [], []
    for x, grad, v, h in zip(xs, grads, vs, hs):
        gr = _regularized(g, x, grad, attrs["norm_coefficient"])
        v2 = g.add("Add", [_scaled(g, v, alpha), _scaled(g, gr, 1 - alpha)])[0]
        h2 = g.add("Add", [_scaled(g, h, beta), _scaled(g, g.add("Mul", [gr, gr])[0], 1 - beta)])[0]
        denominator = g.add("Add", [g.add("Sqrt", [h2])[0], g.scalar(attrs["epsilon"])])[0]
        x2 = g.add("Sub", [x, g.add("Mul", [rate, g.add("Div", [v2, denominator])[0]])[0]])[0]
        if attrs["norm_coefficient_post"] != 0:
            x2 = _scaled(g, x2, 1 - attrs["norm_coefficient_post"])
        new_x.append(x2)
        new_v.append(v2)
        new_h.append(h2)
    return new_x + new_v + new_h


@builder(f"{DOMAIN}.Momentum", inputs=(5, -1), outputs=2 * MAX_TENSORS,
         attrs=[Attr("alpha", "float"), Attr("beta", "float"), Attr("norm_coefficient", "float"),
                Attr("mode", "string", "standard", ("standard", "nesterov"))])
def momentum(g, inputs, attrs):
    """g' = norm x + g; V' = alpha V + beta g' (beta is 1 at T = 0); X' = X - R V' (standard) or
    X - R (g' + alpha V') (nesterov)."""
    op = "Momentum"
    step = _step(g, op, inputs[1])
    xs, grads, vs = _groups(op, inputs, 3)
    alpha, beta = attrs["alpha"], attrs["beta"] if step > 0 else 1.0
    new_x, new_v = [], []
    for x, grad, v in zip(xs, grads, vs):
        gr = _regularized(g, x, grad, attrs["norm_coefficient"])
        v2 = g.add("Add", [_scaled(g, v, alpha), _scaled(g, gr, beta)])[0]
        direction = v2 if attrs["mode"] == "standard" else g.add("Add", [gr, _scaled(g, v2, alpha)])[0]
        new_x.append(g.add("Sub", [x, g.add("Mul", [inputs[0], direction])[0]])[0])
        new_v.append(v2)
    return new_x + new_v


@builder("BatchNormalizationTraining", inputs=5, outputs=3,
         attrs=[Attr("epsilon", "float", 1e-5), Attr("momentum", "float", 0.9)])
def batch_normalization_training(g, inputs, attrs):
    """ONNX BatchNormalization with training_mode=1 (the ONNX importer's name for it): normalizes
    with the batch's own mean and (population) variance per channel, and outputs the running
    mean and variance updated as input * momentum + batch statistic * (1 - momentum)."""
    x, scale, bias, mean, var = inputs
    shape = tuple(g.type_of(x).shape)
    if len(shape) < 2:
        raise OpError(f"BatchNormalization input has shape {list(shape)}; expected [N, C, ...]", input=0)
    channels = shape[1]
    axes = g.constant(np.array([d for d in range(len(shape)) if d != 1], np.int64), "axes")
    per_channel = g.constant(np.array([channels] + [1] * (len(shape) - 2), np.int64), "shape")
    flat = g.constant(np.array([channels], np.int64), "shape")
    batch_mean = g.add("ReduceMean", [x, axes], {"keepdims": 1})[0]
    centred = g.add("Sub", [x, batch_mean])[0]
    batch_var = g.add("ReduceMean", [g.add("Mul", [centred, centred])[0], axes], {"keepdims": 1})[0]
    inv_std = g.add("Reciprocal", [g.add("Sqrt", [g.add("Add", [batch_var, g.scalar(attrs["epsilon"])])[0]])[0]])[0]
    factor = g.add("Mul", [inv_std, g.add("Reshape", [scale, per_channel])[0]])[0]
    y = g.add("Add", [g.add("Mul", [centred, factor])[0], g.add("Reshape", [bias, per_channel])[0]])[0]
    keep = attrs["momentum"]

    def running(old: str, batch: str) -> str:
        return g.add("Add", [_scaled(g, old, keep), _scaled(g, g.add("Reshape", [batch, flat])[0], 1 - keep)])[0]
    return [y, running(mean, batch_mean), running(var, batch_var)]
