"""TFLite's recurrent operators, with their state: UNIDIRECTIONAL_SEQUENCE_LSTM and SVDF.

Their state (the LSTM's output and cell state, the SVDF's activation state) lives in variable
tensors that persist between invocations; each becomes a graph State (see ir.State): the value a
call starts from (Reader.state) and the value it ends with (Reader.next_state), which the generated
code keeps in static storage of its own.

The float32 LSTM is the ONNX LSTM builder (codegen/builders/recurrent.py) with TFLite's weights
reordered at import (gates i, f, c, o become ONNX's i, o, f, c) and its cell clip; it computes as
TFLite Micro does, which runs the LSTM without CIFG, peepholes, projection or layer normalization.
The int8 forms follow TFLite Micro's integer kernels step by step on the quantized primitives
(QFullyConnected's int32 sums, Requantize with TFLite Micro's effective scales, int32 arithmetic,
Int16Activation's int16 sigmoid and tanh): bit-exact.
"""
from __future__ import annotations

import math

import numpy as np

from tinsmith.load.tflite_reader import FLOAT_CLAMPS, Reader, Unsupported, options
from tinsmith.load.tflite_int16_tables import sigmoid_table
from tinsmith.quant import fixed_point as fp

# UNIDIRECTIONAL_SEQUENCE_LSTM's inputs: TFLite's gate order is i, f, c, o
LSTM_INPUT_WEIGHTS, LSTM_RECURRENT_WEIGHTS, LSTM_BIASES = (1, 2, 3, 4), (5, 6, 7, 8), (12, 13, 14, 15)
LSTM_OUTPUT_STATE, LSTM_CELL_STATE = 18, 19
ONNX_GATE_ORDER = (0, 3, 1, 2)  # ONNX's i, o, f, c as indices into TFLite's i, f, c, o
# optional inputs TFLite Micro does not run (its kernel refuses them): what each is
LSTM_UNSUPPORTED = {9: "peephole", 10: "peephole", 11: "peephole", 16: "projection", 17: "projection",
                    20: "layer normalization", 21: "layer normalization", 22: "layer normalization",
                    23: "layer normalization"}
TANH = 4


def _given(inputs, k: int) -> bool:
    return k < len(inputs) and inputs[k] >= 0


def _float_constant(r: Reader, i: int, what: str) -> np.ndarray:
    if r.dtype(i) != "float32":
        raise Unsupported(f"{what} of element type {r.dtype(i)} (hybrid quantization; float32 weights only)")
    return r.constant_data(i, what)


def lstm_float(r: Reader, op, inputs, outputs) -> None:
    """UNIDIRECTIONAL_SEQUENCE_LSTM on float32: one ONNX LSTM node (layout 1 for batch-major data)
    whose initial and final states are the variable tensors'."""
    _check_lstm_form(r, inputs)
    opts = options(op, "UnidirectionalSequenceLSTMOptions")
    x, y = int(inputs[0]), int(outputs[0])
    time_major = bool(opts.TimeMajor())
    w_in = [_float_constant(r, inputs[k], "input weights") for k in LSTM_INPUT_WEIGHTS]
    w_rec = [_float_constant(r, inputs[k], "recurrent weights") for k in LSTM_RECURRENT_WEIGHTS]
    bias = [_float_constant(r, inputs[k], "gate bias") for k in LSTM_BIASES]
    cells, batch = w_in[0].shape[0], r.shape(x)[1 if time_major else 0]
    name = r.names[y]
    w = r.add_constant(f"{name}_W", np.concatenate([w_in[k] for k in ONNX_GATE_ORDER])[None])
    rec = r.add_constant(f"{name}_R", np.concatenate([w_rec[k] for k in ONNX_GATE_ORDER])[None])
    b = r.add_constant(f"{name}_B", np.concatenate([*(bias[k] for k in ONNX_GATE_ORDER),
                                                    np.zeros(4 * cells, np.float32)])[None])
    # ONNX's initial states are [1, batch, hidden] (layout 0) or [batch, 1, hidden] (layout 1)
    state_shape = (1, batch, cells) if time_major else (batch, 1, cells)
    h0, c0 = (_reshaped(r, r.state(inputs[k], what), state_shape, f"{name}_{what.split()[0]}0")
              for k, what in ((LSTM_OUTPUT_STATE, "output state"), (LSTM_CELL_STATE, "cell state")))
    seq, h_n, c_n = r.fresh(f"{name}_sequence"), r.fresh(f"{name}_h"), r.fresh(f"{name}_c")
    r.emit("LSTM", [r.value(x), w, rec, b, "", h0, c0], [seq, h_n, c_n],
           {"hidden_size": cells, "layout": 0 if time_major else 1, **_lstm_activations(opts),
            **({"cell_clip": float(opts.CellClip())} if opts.CellClip() > 0 else {})})
    r.emit("Reshape", [seq, r.int64(f"{name}_shape", r.shape(y))], [name], {})
    for k, final in ((LSTM_OUTPUT_STATE, h_n), (LSTM_CELL_STATE, c_n)):
        r.emit("Reshape", [final, r.int64(f"{name}_state_shape", r.shape(inputs[k]))], [r.next_state(inputs[k])], {})


def _lstm_activations(opts) -> dict:
    """The gates' activations as TFLite Micro computes them: sigmoid gates, tanh of the cell state
    for the output, and the fused activation on the cell's candidate, which its float kernel
    applies when it is TANH and otherwise leaves out (identity)."""
    if opts.FusedActivationFunction() == TANH:
        return {"activations": ["Sigmoid", "Tanh", "Tanh"]}
    return {"activations": ["Sigmoid", "Affine", "Tanh"], "activation_alpha": [1.0], "activation_beta": [0.0]}


def _reshaped(r: Reader, value: str, shape, hint: str) -> str:
    out = r.fresh(hint)
    r.emit("Reshape", [value, r.int64(f"{hint}_shape", shape)], [out], {})
    return out


def svdf_float(r: Reader, op, inputs, outputs) -> None:
    """SVDF on float32: the activation state [batch, filters * memory] shifts one step left per
    call and takes the input's feature projection as its newest column; each filter's memory is
    weighted by its time weights, each unit sums its `rank` filters, then bias and activation."""
    x, y = int(inputs[0]), int(outputs[0])
    dims = _svdf_dims(r, op, inputs)
    batch, filters, units = dims["batch"], dims["filters"], dims["units"]
    name = r.names[y]
    feature = r.fresh(f"{name}_feature")
    r.emit("Gemm", [r.value(x), r.value(inputs[1])], [feature], {"transB": 1})
    newest = _reshaped(r, feature, (batch, filters, 1), f"{name}_newest")
    state = _svdf_shifted(r, inputs[4], newest, dims, name)
    weighted, per_filter = r.fresh(f"{name}_weighted"), r.fresh(f"{name}_per_filter")
    r.emit("Mul", [state, r.value(inputs[2])], [weighted], {})
    r.emit("ReduceSum", [weighted, r.int64(f"{name}_time_axis", [2])], [per_filter], {"keepdims": 0})
    per_unit = _reshaped(r, per_filter, (batch, units, dims["rank"]), f"{name}_per_unit")
    summed = r.fresh(f"{name}_sum")
    r.emit("ReduceSum", [per_unit, r.int64(f"{name}_rank_axis", [2])], [summed], {"keepdims": 0})
    code = options(op, "SVDFOptions").FusedActivationFunction()
    if code not in (0, *FLOAT_CLAMPS):
        raise Unsupported(f"fused activation {code} (TANH or SIGN_BIT)")
    if _given(inputs, 3):
        r.emit_activated("Add", [summed, r.value(inputs[3])], y, {}, code)
    else:
        r.emit_activated("Identity", [summed], y, {}, code)


def _svdf_dims(r: Reader, op, inputs) -> dict[str, int]:
    """SVDF's sizes from its tensors, checked against each other."""
    rank = int(options(op, "SVDFOptions").Rank())
    if len(inputs) < 5 or not _given(inputs, 4):
        raise Unsupported("no activation state tensor (input 4)")
    x_shape, wf_shape, wt_shape = r.shape(inputs[0]), r.shape(inputs[1]), r.shape(inputs[2])
    if len(x_shape) != 2 or len(wf_shape) != 2 or len(wt_shape) != 2:
        raise Unsupported("an input, feature weights or time weights that are not matrices")
    filters, memory = wt_shape
    if rank < 1 or filters % rank or wf_shape != (filters, x_shape[1]):
        raise Unsupported(f"rank {rank} with {filters} filters and feature weights {list(wf_shape)}")
    state_shape = r.shape(inputs[4])
    if state_shape != (x_shape[0], filters * memory):
        raise Unsupported(f"an activation state of shape {list(state_shape)} (expected "
                          f"[{x_shape[0]}, {filters * memory}])")
    return {"batch": x_shape[0], "filters": filters, "memory": memory, "rank": rank, "units": filters // rank}


def _svdf_shifted(r: Reader, state_tensor: int, newest: str, dims, name: str) -> str:
    """The activation state after this call, [batch, filters, memory]: the old one without its
    oldest column, then `newest`; it is also the state the next call starts from."""
    batch, filters, memory = dims["batch"], dims["filters"], dims["memory"]
    after = r.fresh(f"{name}_memory")
    previous = r.state(state_tensor, "activation state")
    if memory == 1:
        r.emit("Identity", [newest], [after], {})
    else:
        old = _reshaped(r, previous, (batch, filters, memory), f"{name}_old")
        kept = r.fresh(f"{name}_kept")
        r.emit("Slice", [old, r.int64(f"{name}_starts", [1]), r.int64(f"{name}_ends", [memory]),
                         r.int64(f"{name}_axes", [2])], [kept], {})
        r.emit("Concat", [kept, newest], [after], {"axis": 2})
    r.emit("Reshape", [after, r.int64(f"{name}_state_shape", (batch, filters * memory))],
           [r.next_state(state_tensor)], {})
    return after


def _float32_ratio(a: float, b: float, c: float) -> float:
    """a * b / c computed in float32, as TFLite Micro's SVDF Prepare computes its effective scales."""
    return float(np.float32(np.float32(np.float32(a) * np.float32(b)) / np.float32(c)))


def svdf_int8(r: Reader, op, inputs, outputs) -> None:
    """SVDF on int8 as TFLite Micro computes it: the feature sums (int32) rescaled to the int16
    state by (input * feature weights / state) scale, clamped to int16; the time products of the
    int16 state and int16 time weights summed in int32 with the bias; rescaled to the int8 output by
    (state * time weights / output) scale and clamped to int8 (TFLite Micro applies no fused
    activation on int8 SVDF). Both ratios are computed in float32 as TFLite Micro does."""
    x, y = int(inputs[0]), int(outputs[0])
    dims = _svdf_dims(r, op, inputs)
    batch, filters, units = dims["batch"], dims["filters"], dims["units"]
    kinds = {"feature weights": (1, "int8"), "time weights": (2, "int16"), "activation state": (4, "int16")}
    for what, (k, dtype) in kinds.items():
        if r.dtype(inputs[k]) != dtype:
            raise Unsupported(f"{what} of element type {r.dtype(inputs[k])} (int8 SVDF takes {dtype})")
    if r.integer_dtype(y) != "int8":
        raise Unsupported(f"an output of element type {r.dtype(y)}")
    (x_s, x_zp), (f_s, _), (t_s, _), (s_s, s_zp), (y_s, y_zp) = (r.scale_zp(i) for i in (*inputs[:3], inputs[4], y))
    if s_zp != 0:
        raise Unsupported(f"an activation state with zero point {s_zp} (TFLite Micro's int8 SVDF takes 0)")
    name = r.names[y]
    sums = r.fresh(f"{name}_feature_sums")
    r.emit("QFullyConnected", [r.value(x), r.value(inputs[1]), "", "", ""], [sums],
           {"x_zero_point": x_zp, "y_scale": 1.0, "requantize": "none"})
    feature = r.fresh(f"{name}_feature")
    r.emit("Requantize", [sums], [feature], {"x_scale": x_s * f_s, "x_zero_point": 0, "y_scale": s_s,
                                              "y_zero_point": 0, "dtype": "int16",
                                              "effective_scale": _float32_ratio(x_s, f_s, s_s)})
    newest = _reshaped(r, feature, (batch, filters, 1), f"{name}_newest")
    state = _svdf_shifted(r, inputs[4], newest, dims, name)
    wide = r.fresh(f"{name}_memory_int32")
    r.emit("Cast", [state], [wide], {"to": "int32"})
    time_weights = r.add_constant(f"{name}_time_weights", r.constant_data(inputs[2], "SVDF time weights")
                                  .astype(np.int32))
    weighted, per_filter = r.fresh(f"{name}_weighted"), r.fresh(f"{name}_per_filter")
    r.emit("Mul", [wide, time_weights], [weighted], {})
    r.emit("ReduceSum", [weighted, r.int64(f"{name}_time_axis", [2])], [per_filter], {"keepdims": 0})
    per_unit = _reshaped(r, per_filter, (batch, units, dims["rank"]), f"{name}_per_unit")
    summed = r.fresh(f"{name}_sum")
    r.emit("ReduceSum", [per_unit, r.int64(f"{name}_rank_axis", [2])], [summed], {"keepdims": 0})
    if _given(inputs, 3):
        biased = r.fresh(f"{name}_biased")
        r.emit("Add", [summed, r.add_constant(f"{name}_bias", r.constant_data(inputs[3], "SVDF bias")
                                              .astype(np.int32))], [biased], {})
        summed = biased
    r.emit("Requantize", [summed], [name], {"x_scale": s_s * t_s, "x_zero_point": 0, "y_scale": y_s,
                                            "y_zero_point": y_zp, "dtype": "int8",
                                            "effective_scale": _float32_ratio(s_s, t_s, y_s)})


def svdf_int16(r: Reader, op, inputs, outputs) -> None:
    raise Unsupported("int16 input: TFLite Micro's SVDF (and TFLite's) takes float32 or int8 input; its 16-bit "
                      "form is the int8 SVDF's int16 time weights and activation state, which Tinsmith runs")


# TFLite Micro's integer LSTM: gates' inputs in Q3.12, gates' outputs in Q0.15
GATE_INPUT_SCALE, GATE_OUTPUT_SCALE = 2.0 ** -12, 2.0 ** -15
SIGMOID_GATES = (0, 1, 3)  # i, f, o; the cell gate (2) is tanh


# the integer LSTMs TFLite Micro runs, by activation type: the bias type (the weights are int8, the
# cell state int16 in both)
LSTM_BIAS_TYPES = {"int8": "int32", "int16": "int64"}


def lstm_int8(r: Reader, op, inputs, outputs) -> None:
    """UNIDIRECTIONAL_SEQUENCE_LSTM on int8 as TFLite Micro's integer kernel computes it: per gate,
    the input's and the hidden state's fully connected sums each rescaled to int16 Q3.12 (the bias
    in the input's), added with saturation, then its int16 sigmoid or tanh (Int16Activation); the
    int16 cell state updated by two rescaled products added with saturation (and clipped); the int8
    hidden state the output gate times the tanh of the cell, rescaled. The input projection of every
    time step is one matrix product; the recurrence is unrolled over the steps."""
    _lstm_integer(r, op, inputs, outputs, "int8")


def lstm_16x8(r: Reader, op, inputs, outputs) -> None:
    """UNIDIRECTIONAL_SEQUENCE_LSTM on int16 activations (16x8: int8 weights, int64 biases, zero points
    0): lstm_int8's steps, with the fully connected sums in int64 requantized to Q3.12 by TFLite's
    16x8 fully connected arithmetic (QFullyConnected, accumulator int64) and an int16 hidden state."""
    _lstm_integer(r, op, inputs, outputs, "int16")


def _check_lstm_types(r: Reader, inputs, activations: str) -> None:
    bias = LSTM_BIAS_TYPES[activations]
    kinds = [(k, activations) for k in (0, LSTM_OUTPUT_STATE)] + \
        [(k, "int8") for k in (*LSTM_INPUT_WEIGHTS, *LSTM_RECURRENT_WEIGHTS)] + \
        [(k, bias) for k in LSTM_BIASES] + [(LSTM_CELL_STATE, "int16")]
    for k, dtype in kinds:
        if r.dtype(inputs[k]) != dtype:
            raise Unsupported(f"input {k} of element type {r.dtype(inputs[k])} (TFLite Micro's {activations} LSTM "
                              f"takes {dtype} there)")
    if activations == "int16":
        zero_points = {k: r.scale_zp(inputs[k])[1] for k in (0, LSTM_OUTPUT_STATE)}
        if any(zero_points.values()):
            raise Unsupported(f"16x8 data with zero points {zero_points[0]} (input) and "
                              f"{zero_points[LSTM_OUTPUT_STATE]} (output state) (TFLite requires 0 for int16 data)")


def _lstm_integer(r: Reader, op, inputs, outputs, activations: str) -> None:
    """The integer LSTM on int8 or int16 activations (lstm_int8, lstm_16x8)."""
    _check_lstm_form(r, inputs)
    opts = options(op, "UnidirectionalSequenceLSTMOptions")
    if opts.FusedActivationFunction() != TANH:
        raise Unsupported(f"a fused activation other than TANH on {activations} (TFLite Micro's integer kernel "
                          f"takes TANH)")
    _check_lstm_types(r, inputs, activations)
    x, y = int(inputs[0]), int(outputs[0])
    h_in, c_in = inputs[LSTM_OUTPUT_STATE], inputs[LSTM_CELL_STATE]
    time_major = bool(opts.TimeMajor())
    steps, batch, n_in = (r.shape(x) if time_major else (r.shape(x)[1], r.shape(x)[0], r.shape(x)[2]))
    cells = r.shape(inputs[1])[0]
    (x_s, x_zp), (h_s, h_zp), (c_s, c_zp), (y_s, y_zp) = (r.scale_zp(i) for i in (x, h_in, c_in, y))
    power = math.log2(c_s)
    if c_zp != 0 or power != int(power):
        raise Unsupported(f"a cell state quantized at scale {c_s}, zero point {c_zp} (TFLite Micro takes a power "
                          f"of two and zero point 0)")
    if (y_s, y_zp) != (h_s, h_zp) or r.dtype(y) != activations:
        raise Unsupported("an output quantized unlike the output state (TFLite Micro copies one into the other)")
    name = r.names[y]
    w_scales = [[r.scale_zp(inputs[k])[0] for k in ks] for ks in (LSTM_INPUT_WEIGHTS, LSTM_RECURRENT_WEIGHTS)]
    g = _IntegerLstm(r, name, batch, cells)
    # every step's input sums at once: rows step-major [steps * batch, 4 * cells]
    seq = r.value(x)
    if not time_major:
        seq = g.node("Transpose", [seq], "sequence", perm=[1, 0, 2])
    rows = _reshaped(r, seq, (steps * batch, n_in), f"{name}_rows")
    w_x = r.add_constant(f"{name}_input_weights", np.concatenate([r.constant_data(inputs[k], "LSTM weights")
                                                                  for k in LSTM_INPUT_WEIGHTS]))
    bias = r.add_constant(f"{name}_bias", np.concatenate([r.constant_data(inputs[k], "LSTM bias")
                                                          for k in LSTM_BIASES]).astype(LSTM_BIAS_TYPES[activations]))
    w_h = r.add_constant(f"{name}_recurrent_weights", np.concatenate([r.constant_data(inputs[k], "LSTM weights")
                                                                      for k in LSTM_RECURRENT_WEIGHTS]))
    if activations == "int16":  # one 16x8 fully connected layer per part, straight to Q3.12
        x_all = g.gate_sums_16x8(rows, w_x, bias, x_s, w_scales[0], "input_gates")
        x_gates = [g.slice(x_all, 1, k * cells, (k + 1) * cells) for k in range(4)]
    else:
        x_sums = g.node("QFullyConnected", [rows, w_x, bias, "", ""], "input_sums", x_zero_point=x_zp, y_scale=1.0,
                        requantize="none")
        x_gates = [g.rescale(g.slice(x_sums, 1, k * cells, (k + 1) * cells), x_s * w_scales[0][k], GATE_INPUT_SCALE,
                             "int16", f"input_gate{k}") for k in range(4)]
    sigmoid = g.table()
    clip = float(opts.CellClip())
    h, c = r.state(h_in, "output state"), r.state(c_in, "cell state")
    hidden = []
    for t in range(steps):
        if activations == "int16":
            h_all = g.gate_sums_16x8(h, w_h, "", h_s, w_scales[1], "recurrent_gates")
        else:
            h_sums = g.node("QFullyConnected", [h, w_h, "", "", ""], "recurrent_sums", x_zero_point=h_zp, y_scale=1.0,
                            requantize="none")
        gate = []
        for k in range(4):
            if activations == "int16":
                from_h = g.slice(h_all, 1, k * cells, (k + 1) * cells)
            else:
                from_h = g.rescale(g.slice(h_sums, 1, k * cells, (k + 1) * cells), h_s * w_scales[1][k],
                                   GATE_INPUT_SCALE, "int16", f"recurrent_gate{k}")
            from_x = g.slice(x_gates[k], 0, t * batch, (t + 1) * batch)
            pre = g.saturating_add(from_x, from_h, GATE_INPUT_SCALE)
            tanh = k not in SIGMOID_GATES
            gate.append(g.node("Int16Activation", [pre, sigmoid], "gate", function="tanh" if tanh else "sigmoid",
                               input_multiplier=0, input_left_shift=0))
        i, f, cand, o = gate
        kept = g.product(f, c, GATE_OUTPUT_SCALE * c_s, c_s, "int16", "kept")
        added = g.product(i, cand, GATE_OUTPUT_SCALE * GATE_OUTPUT_SCALE, c_s, "int16", "added")
        bound = int(min(max(clip / c_s, -32768.0), 32767.0)) if clip > 0 else None
        c = g.saturating_add(kept, added, c_s, bound)
        multiplier, shift = _tanh_scaling(int(power))
        squashed = g.node("Int16Activation", [c, sigmoid], "cell_tanh", function="tanh", input_multiplier=multiplier,
                          input_left_shift=shift)
        h = g.product(o, squashed, GATE_OUTPUT_SCALE * GATE_OUTPUT_SCALE, h_s, activations, "hidden", h_zp)
        hidden.append(h)
    g.finish(hidden, y, time_major, steps)
    r.emit("Identity", [h], [r.next_state(h_in)], {})
    r.emit("Identity", [c], [r.next_state(c_in)], {})


def _tanh_scaling(power: int) -> tuple[int, int]:
    """(input_multiplier, input_left_shift) of the cell state's tanh for a cell scale of 2^power, as
    TFLite Micro derives them: shift 15 + power - 3, a multiplier of 3 and a right shift below 0."""
    shift = 15 + power - 3
    return (3, -shift) if shift < 0 else (0, shift)


def _check_lstm_form(r: Reader, inputs) -> None:
    """The LSTM forms TFLite Micro runs: every gate, no peephole, projection or layer normalization."""
    missing = [k for k in (*LSTM_INPUT_WEIGHTS, *LSTM_RECURRENT_WEIGHTS, *LSTM_BIASES) if not _given(inputs, k)]
    if missing:
        raise Unsupported("CIFG (coupled input and forget gates) or a missing weight or bias; TFLite Micro "
                          "runs neither")
    extras = sorted({what for k, what in LSTM_UNSUPPORTED.items() if _given(inputs, k)})
    if extras:
        raise Unsupported(f"{' and '.join(extras)} tensors, which TFLite Micro does not run either")
    if not (_given(inputs, LSTM_OUTPUT_STATE) and _given(inputs, LSTM_CELL_STATE)):
        raise Unsupported("no output state or cell state tensor (inputs 18 and 19)")
    if len(r.shape(inputs[0])) != 3:
        raise Unsupported(f"an input of rank {len(r.shape(inputs[0]))} (it takes [batch, time, features])")


class _IntegerLstm:
    """The nodes of one integer LSTM, named after its output."""

    def __init__(self, r: Reader, name: str, batch: int, cells: int):
        self.r, self.name, self.batch, self.cells = r, name, batch, cells

    def node(self, op: str, inputs, hint: str, **attrs) -> str:
        out = self.r.fresh(f"{self.name}_{hint}")
        self.r.emit(op, inputs, [out], attrs)
        return out

    def slice(self, value: str, axis: int, start: int, end: int) -> str:
        r = self.r
        return self.node("Slice", [value, r.int64(f"{self.name}_starts", [start]), r.int64(f"{self.name}_ends", [end]),
                                   r.int64(f"{self.name}_axes", [axis])], "part")

    def table(self) -> str:
        return sigmoid_table(self.r)

    def rescale(self, value: str, x_scale: float, y_scale: float, dtype: str, hint: str, y_zp: int = 0,
                bound: int | None = None) -> str:
        """int32 `value` (x_scale) requantized to `dtype` (y_scale, y_zp): TFLite Micro's
        multiplier of x_scale / y_scale in double, saturated (to +-bound, where given)."""
        limits = {"act_min": -bound, "act_max": bound} if bound is not None else {}
        return self.node("Requantize", [value], hint, x_scale=x_scale, x_zero_point=0, y_scale=y_scale,
                         y_zero_point=y_zp, dtype=dtype, effective_scale=x_scale / y_scale, **limits)

    def gate_sums_16x8(self, x: str, weights: str, bias: str, x_scale: float, w_scales, hint: str) -> str:
        """The four gates' 16x8 fully connected layer (int16 `x`, int8 `weights` of the gates in a
        row, an int64 `bias` or none): int64 sums, each gate's requantized to int16 Q3.12 by TFLite
        Micro's multiplier of x_scale * w_scale / 2^-12 in double."""
        multipliers = [fp.quantize_multiplier(x_scale * w / GATE_INPUT_SCALE) for w in w_scales]
        mult = np.repeat(np.int32([m for m, _ in multipliers]), self.cells)
        shift = np.repeat(np.int32([s for _, s in multipliers]), self.cells)
        r = self.r
        return self.node("QFullyConnected", [x, weights, bias, r.add_constant(f"{self.name}_{hint}_multiplier", mult),
                                             r.add_constant(f"{self.name}_{hint}_shift", shift)],
                         hint, x_zero_point=0, y_scale=GATE_INPUT_SCALE, accumulator="int64")

    def widened(self, value: str) -> str:
        return self.node("Cast", [value], "int32", to="int32")

    def saturating_add(self, a: str, b: str, scale: float, bound: int | None = None) -> str:
        """int16 a + b saturated to int16 (and to +-bound): the sum rescaled by exactly 1."""
        total = self.node("Add", [self.widened(a), self.widened(b)], "sum")
        return self.rescale(total, scale, scale, "int16", "saturated", bound=bound)

    def product(self, a: str, b: str, ab_scale: float, y_scale: float, dtype: str, hint: str, y_zp: int = 0) -> str:
        """a * b (int16 each) rescaled to `dtype`: TFLite Micro's elementwise Mul."""
        return self.rescale(self.node("Mul", [self.widened(a), self.widened(b)], f"{hint}_product"), ab_scale, y_scale,
                            dtype, hint, y_zp)

    def finish(self, hidden: list[str], y: int, time_major: bool, steps: int) -> None:
        """The output: every step's hidden state, in the input's layout."""
        r = self.r
        stacked = hidden[0] if steps == 1 else self.node("Concat", hidden, "steps", axis=0)
        shaped = _reshaped(r, stacked, (steps, self.batch, self.cells), f"{self.name}_time_major")
        if time_major:
            r.emit("Identity", [shaped], [r.names[y]], {})
        else:
            r.emit("Transpose", [shaped], [r.names[y]], {"perm": [1, 0, 2]})
