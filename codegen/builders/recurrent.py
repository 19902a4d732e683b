"""Recurrent layers (ONNX RNN, GRU, LSTM), unrolled over their static sequence length.

Each layer becomes, per direction, one MatMul of the whole input sequence with the input
weights (every time step at once, the expensive half of the work), then per time step a
MatMul of the hidden state with the recurrence weights, the gates' activations and the state
update. Sequence lengths given as a constant are honoured with a per-step mask: a batch entry
whose sequence has ended keeps its state and outputs zeros, and in the reverse direction a
shorter sequence starts at its own last step (its state stays the initial one until then).

Gate orders, bias layout, peepholes and layouts follow the ONNX operator definitions:
RNN one gate (i), GRU three (z, r, h), LSTM four (i, o, f, c), peepholes (i, o, f).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from tinsmith.builders.registry import builder
from tinsmith.ops.registry import Attr, OpError

# name -> (attributes taken from activation_alpha / activation_beta, their defaults)
ACTIVATIONS = {
    "relu": (0, ()), "tanh": (0, ()), "sigmoid": (0, ()), "softsign": (0, ()), "softplus": (0, ()),
    "affine": (2, (1.0, 0.0)), "leakyrelu": (1, (0.01,)), "thresholdedrelu": (1, (1.0,)),
    "scaledtanh": (2, (1.0, 1.0)), "hardsigmoid": (2, (0.2, 0.5)), "elu": (1, (1.0,)),
}
_PRIMITIVE = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid", "softsign": "Softsign",
              "softplus": "Softplus", "leakyrelu": "LeakyRelu", "thresholdedrelu": "ThresholdedRelu",
              "hardsigmoid": "HardSigmoid", "elu": "Elu"}


def _common_attrs(defaults: Sequence[str]) -> list[Attr]:
    return [Attr("activation_alpha", "floats", ()), Attr("activation_beta", "floats", ()),
            Attr("activations", "strings", tuple(defaults)), Attr("clip", "float", None),
            Attr("direction", "string", "forward", ("forward", "reverse", "bidirectional")),
            Attr("hidden_size", "int", None), Attr("layout", "int", 0, (0, 1))]


class _Activation:
    """One activation function of the layer, with its alpha and beta."""

    def __init__(self, name: str, params: tuple[float, ...]):
        self.name, self.params = name, params

    def __call__(self, g, x: str) -> str:
        p = self.params
        if self.name == "affine":
            return g.add("Add", [g.add("Mul", [x, g.scalar(p[0])])[0], g.scalar(p[1])])[0]
        if self.name == "scaledtanh":
            inner = g.add("Tanh", [g.add("Mul", [x, g.scalar(p[1])])[0]])[0]
            return g.add("Mul", [inner, g.scalar(p[0])])[0]
        attrs = {}
        if self.name in ("leakyrelu", "thresholdedrelu", "elu"):
            attrs = {"alpha": p[0]}
        elif self.name == "hardsigmoid":
            attrs = {"alpha": p[0], "beta": p[1]}
        return g.add(_PRIMITIVE[self.name], [x], attrs)[0]


def _activations(attrs, per_direction: int, directions: int, op: str) -> list[list[_Activation]]:
    """The activation functions of each direction: ONNX lists them forward first, then reverse;
    alphas and betas are consumed in that order by the functions that take them."""
    names = [a.lower() for a in attrs["activations"]]
    if len(names) == per_direction and directions == 2 and len(attrs["activations"]) == per_direction:
        names = names * 2  # the defaults (or one set) serve both directions
    if len(names) != per_direction * directions:
        raise OpError(f"{op} takes {per_direction * directions} activations for this direction, "
                      f"got {len(names)}", attr="activations")
    alphas, betas = list(attrs["activation_alpha"]), list(attrs["activation_beta"])
    result = []
    for name in names:
        if name not in ACTIVATIONS:
            raise OpError(f"{op} activation '{name}' is not one ONNX defines "
                          f"({', '.join(sorted(ACTIVATIONS))})", attr="activations")
        count, defaults = ACTIVATIONS[name]
        params = list(defaults)
        if count >= 1 and alphas:
            params[0] = alphas.pop(0)
        if count >= 2 and betas:
            params[1] = betas.pop(0)
        result.append(_Activation(name, tuple(params)))
    return [result[d * per_direction:(d + 1) * per_direction] for d in range(directions)]


class _Layer:
    """What every recurrent op shares: shapes, slicing helpers and the time loop's bookkeeping."""

    def __init__(self, g, op: str, inputs: Sequence[str], attrs, gates: int):
        self.g, self.op, self.attrs, self.gates = g, op, attrs, gates
        present = [bool(i < len(inputs) and inputs[i]) for i in range(8)]
        self.inputs = [inputs[i] if present[i] else None for i in range(8)]
        x, w = inputs[0], inputs[1]
        for i in range(len(inputs)):
            if inputs[i] and g.type_of(inputs[i]).dtype not in ("float32", "int32", "int64"):
                raise OpError(f"{op} input {i} is {g.type_of(inputs[i]).dtype}; float32 only", input=i)
        xs = g.type_of(x).shape
        if len(xs) != 3:
            raise OpError(f"{op} input X has rank {len(xs)}, expected 3", input=0)
        self.layout = attrs["layout"]
        self.steps, self.batch, self.input_size = (xs[1], xs[0], xs[2]) if self.layout else xs
        self.directions = 2 if attrs["direction"] == "bidirectional" else 1
        ws = g.type_of(w).shape
        if len(ws) != 3 or ws[0] != self.directions or ws[1] % gates or ws[2] != self.input_size:
            raise OpError(f"{op} input W has shape {list(ws)}, expected [{self.directions}, "
                          f"{gates}*hidden_size, {self.input_size}]", input=1)
        self.hidden = ws[1] // gates
        if attrs["hidden_size"] is not None and attrs["hidden_size"] != self.hidden:
            raise OpError(f"{op} hidden_size {attrs['hidden_size']} does not match W's "
                          f"{gates}*{self.hidden} rows", attr="hidden_size")
        self.lengths = self._lengths(inputs)
        self.clip = attrs["clip"]

    def _lengths(self, inputs) -> np.ndarray | None:
        """Per batch entry sequence lengths, or None if every sequence is full length."""
        name = self.inputs[4]
        if name is None:
            return None
        data = self.g.value_of(name)
        if data is None:
            raise OpError(f"{self.op} sequence_lens must be a constant, known when the graph is built", input=4)
        data = np.asarray(data).reshape(-1)
        if data.shape != (self.batch,) or (data < 0).any() or (data > self.steps).any():
            raise OpError(f"{self.op} sequence_lens {data.tolist()} must hold {self.batch} lengths "
                          f"between 0 and {self.steps}", input=4)
        return None if (data == self.steps).all() else data

    # --- small helpers ------------------------------------------------------------------
    def slice(self, x: str, axis: int, start: int, end: int) -> str:
        g = self.g
        return g.add("Slice", [x, g.constant(np.array([start], np.int64), "starts"),
                               g.constant(np.array([end], np.int64), "ends"),
                               g.constant(np.array([axis], np.int64), "axes")])[0]

    def reshape(self, x: str, shape: Sequence[int]) -> str:
        return self.g.add("Reshape", [x, self.g.constant(np.array(shape, np.int64), "shape")])[0]

    def clipped(self, x: str) -> str:
        if self.clip is None:
            return x
        return self.g.add("Clip", [x, self.g.scalar(-self.clip), self.g.scalar(self.clip)])[0]

    def weights(self, index: int, d: int, columns: int) -> str:
        """Direction d's W or R, transposed to [columns, gates*hidden] for x @ W^T."""
        w = self.reshape(self.slice(self.inputs[index], 0, d, d + 1), [self.gates * self.hidden, columns])
        return self.g.add("Transpose", [w], {"perm": [1, 0]})[0]

    def bias(self, d: int) -> tuple[str, str] | None:
        """Direction d's input and recurrence biases (Wb, Rb), each [gates*hidden]."""
        if self.inputs[3] is None:
            return None
        gh = self.gates * self.hidden
        b = self.reshape(self.slice(self.inputs[3], 0, d, d + 1), [2 * gh])
        return self.slice(b, 0, 0, gh), self.slice(b, 0, gh, 2 * gh)

    def initial(self, index: int, d: int) -> str:
        """Direction d's initial state [batch, hidden] (zeros if the input is omitted)."""
        if self.inputs[index] is None:
            return self.g.constant(np.zeros((self.batch, self.hidden), np.float32), "zeros")
        return self.reshape(self.slice(self.inputs[index], 1 if self.layout else 0, d, d + 1),
                            [self.batch, self.hidden])

    def sequence(self) -> str:
        """X as [steps, batch, input]."""
        x = self.inputs[0]
        return self.g.add("Transpose", [x], {"perm": [1, 0, 2]})[0] if self.layout else x

    def projected(self, d: int, bias: str | None) -> str:
        """X @ W^T (+ bias) for every step at once: [steps * batch, gates*hidden], step-major.
        One Gemm over the steps and batch entries as rows, so the bias is added as the products
        are stored, and each step's rows are sliced out with no copy of the whole."""
        gh = self.gates * self.hidden
        rows = self.reshape(self.sequence(), [self.steps * self.batch, self.input_size])
        w = self.reshape(self.slice(self.inputs[1], 0, d, d + 1), [gh, self.input_size])
        return self.g.add("Gemm", [rows, w] + ([bias] if bias is not None else []), {"transB": 1})[0]

    def step_input(self, projected: str, t: int) -> str:
        return self.slice(projected, 0, t * self.batch, (t + 1) * self.batch)

    def order(self, d: int) -> range:
        reverse = self.attrs["direction"] == "reverse" or d == 1
        return range(self.steps - 1, -1, -1) if reverse else range(self.steps)

    def live(self, t: int) -> str | None:
        """[batch, 1] booleans: which batch entries are still inside their sequence at step t."""
        if self.lengths is None:
            return None
        return self.g.constant((t < self.lengths).reshape(self.batch, 1), "live")

    def keep(self, live: str | None, new: str, old: str) -> str:
        return new if live is None else self.g.add("Where", [live, new, old])[0]

    def outputs(self, per_direction: list[tuple[dict[int, str], list[str]]]) -> list[str]:
        """Y, Y_h (, Y_c) in the layer's layout from each direction's per-step outputs and
        final states."""
        g, zeros = self.g, None
        ys, finals = [], [[] for _ in per_direction[0][1]]
        for steps, states in per_direction:
            parts = []
            for t in range(self.steps):
                h = steps[t]
                live = self.live(t)
                if live is not None:
                    zeros = zeros or g.constant(np.zeros((self.batch, self.hidden), np.float32), "zeros")
                    h = g.add("Where", [live, h, zeros])[0]
                parts.append(self.reshape(h, [1, 1, self.batch, self.hidden]))
            ys.append(parts[0] if len(parts) == 1 else g.add("Concat", parts, {"axis": 0})[0])
            for k, s in enumerate(states):
                finals[k].append(self.reshape(s, [1, self.batch, self.hidden]))
        y = ys[0] if len(ys) == 1 else g.add("Concat", ys, {"axis": 1})[0]
        result = [y] + [f[0] if len(f) == 1 else g.add("Concat", f, {"axis": 0})[0] for f in finals]
        if self.layout:
            result = [g.add("Transpose", [result[0]], {"perm": [2, 0, 1, 3]})[0]] + \
                     [g.add("Transpose", [r], {"perm": [1, 0, 2]})[0] for r in result[1:]]
        return result


@builder("RNN", inputs=(3, 6), outputs=2, attrs=_common_attrs(("Tanh",)))
def rnn(g, inputs, attrs):
    """ONNX RNN: H = f(X W^T + H R^T + Wb + Rb)."""
    layer = _Layer(g, "RNN", inputs, attrs, 1)
    acts = _activations(attrs, 1, layer.directions, "RNN")
    results = []
    for d in range(layer.directions):
        b = layer.bias(d)
        projected = layer.projected(d, g.add("Add", list(b))[0] if b else None)
        rt = layer.weights(2, d, layer.hidden)
        h = layer.initial(5, d)
        steps = {}
        for t in layer.order(d):
            pre = g.add("Add", [layer.step_input(projected, t), g.add("MatMul", [h, rt])[0]])[0]
            new = acts[d][0](g, layer.clipped(pre))
            h = layer.keep(layer.live(t), new, h)
            steps[t] = h
        results.append((steps, [h]))
    return layer.outputs(results)


@builder("GRU", inputs=(3, 6), outputs=2,
         attrs=_common_attrs(("Sigmoid", "Tanh")) + [Attr("linear_before_reset", "int", 0)])
def gru(g, inputs, attrs):
    """ONNX GRU: z, r = f(...), h = g(X Wh^T + (r * H) Rh^T + Rbh + Wbh) (or, with
    linear_before_reset, r * (H Rh^T + Rbh)), H = (1 - z) * h + z * H."""
    layer = _Layer(g, "GRU", inputs, attrs, 3)
    acts = _activations(attrs, 2, layer.directions, "GRU")
    hs, before_reset = layer.hidden, attrs["linear_before_reset"] != 0
    one = g.scalar(1.0)
    results = []
    for d in range(layer.directions):
        b = layer.bias(d)
        rb_h = None
        if b is None:
            bias = None
        elif before_reset:  # Rbh is applied inside the reset gate's product
            rb_h = layer.slice(b[1], 0, 2 * hs, 3 * hs)
            rb_zr = g.add("Concat", [layer.slice(b[1], 0, 0, 2 * hs),
                                     g.constant(np.zeros(hs, np.float32), "zeros")], {"axis": 0})[0]
            bias = g.add("Add", [b[0], rb_zr])[0]
        else:
            bias = g.add("Add", list(b))[0]
        projected = layer.projected(d, bias)
        rt = layer.weights(2, d, hs)  # [hidden, 3*hidden]
        rt_zr, rt_h = layer.slice(rt, 1, 0, 2 * hs), layer.slice(rt, 1, 2 * hs, 3 * hs)
        h = layer.initial(5, d)
        steps = {}
        for t in layer.order(d):
            x_t = layer.step_input(projected, t)
            zr = g.add("Add", [layer.slice(x_t, 1, 0, 2 * hs), g.add("MatMul", [h, rt_zr])[0]])[0]
            zr = acts[d][0](g, layer.clipped(zr))
            z, r = layer.slice(zr, 1, 0, hs), layer.slice(zr, 1, hs, 2 * hs)
            if before_reset:
                hr = g.add("MatMul", [h, rt_h])[0]
                if rb_h is not None:
                    hr = g.add("Add", [hr, rb_h])[0]
                hr = g.add("Mul", [r, hr])[0]
            else:
                hr = g.add("MatMul", [g.add("Mul", [r, h])[0], rt_h])[0]
            cand = acts[d][1](g, layer.clipped(g.add("Add", [layer.slice(x_t, 1, 2 * hs, 3 * hs), hr])[0]))
            new = g.add("Add", [g.add("Mul", [g.add("Sub", [one, z])[0], cand])[0],
                                g.add("Mul", [z, h])[0]])[0]
            h = layer.keep(layer.live(t), new, h)
            steps[t] = h
        results.append((steps, [h]))
    return layer.outputs(results)


@builder("LSTM", inputs=(3, 8), outputs=3,
         attrs=_common_attrs(("Sigmoid", "Tanh", "Tanh")) + [Attr("input_forget", "int", 0),
                                                              Attr("cell_clip", "float", None)])
def lstm(g, inputs, attrs):
    """ONNX LSTM: i, f = f(... + P * C), c = g(...), C = f * C + i * c, o = f(... + Po * C),
    H = o * h(C). `cell_clip` (not an ONNX attribute: TFLite's) clips C to [-cell_clip, cell_clip]
    after each update, where ONNX's `clip` clips the gates' inputs."""
    if attrs["input_forget"]:
        raise OpError("LSTM with input_forget (coupled input and forget gates) is not supported",
                      attr="input_forget")
    layer = _Layer(g, "LSTM", inputs, attrs, 4)
    acts = _activations(attrs, 3, layer.directions, "LSTM")
    hs = layer.hidden
    results = []
    for d in range(layer.directions):
        b = layer.bias(d)
        projected = layer.projected(d, g.add("Add", list(b))[0] if b else None)
        rt = layer.weights(2, d, hs)
        peep = None
        if layer.inputs[7] is not None:
            p = layer.reshape(layer.slice(layer.inputs[7], 0, d, d + 1), [3 * hs])
            peep = [layer.slice(p, 0, k * hs, (k + 1) * hs) for k in range(3)]  # i, o, f
        h, c = layer.initial(5, d), layer.initial(6, d)
        steps = {}
        for t in layer.order(d):
            pre = g.add("Add", [layer.step_input(projected, t), g.add("MatMul", [h, rt])[0]])[0]
            gi, go, gf, gc = (layer.slice(pre, 1, k * hs, (k + 1) * hs) for k in range(4))
            if peep is not None:
                gi = g.add("Add", [gi, g.add("Mul", [peep[0], c])[0]])[0]
                gf = g.add("Add", [gf, g.add("Mul", [peep[2], c])[0]])[0]
            i = acts[d][0](g, layer.clipped(gi))
            f = acts[d][0](g, layer.clipped(gf))
            cand = acts[d][1](g, layer.clipped(gc))
            new_c = g.add("Add", [g.add("Mul", [f, c])[0], g.add("Mul", [i, cand])[0]])[0]
            if attrs["cell_clip"]:
                bound = attrs["cell_clip"]
                new_c = g.add("Clip", [new_c, g.scalar(-bound), g.scalar(bound)])[0]
            if peep is not None:
                go = g.add("Add", [go, g.add("Mul", [peep[1], new_c])[0]])[0]
            o = acts[d][0](g, layer.clipped(go))
            new_h = g.add("Mul", [o, acts[d][2](g, new_c)])[0]
            live = layer.live(t)
            h, c = layer.keep(live, new_h, h), layer.keep(live, new_c, c)
            steps[t] = h
        results.append((steps, [h, c]))
    return layer.outputs(results)
