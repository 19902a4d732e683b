"""Seeded single-operator TFLite models of the recurrent operators (UNIDIRECTIONAL_SEQUENCE_LSTM,
SVDF), float32 and int8, written with tflite_writer (no TensorFlow): their state tensors are
variable tensors, as TFLite's converter writes them."""
from __future__ import annotations

import numpy as np

from tflite_writer import Op, Tensor, model


def lstm_float(seed: int = 0, batch: int = 2, steps: int = 3, n_input: int = 4, n_cell: int = 5,
               time_major: bool = False, activation: int = 4, cell_clip: float = 0.0, cifg: bool = False,
               peephole: bool = False, projection: int = 0, layer_norm: bool = False, proj_clip: float = 0.0
               ) -> tuple[bytes, list[int]]:
    """A float32 UNIDIRECTIONAL_SEQUENCE_LSTM; returns the model and its input's shape."""
    rng = np.random.default_rng(seed)
    n_output = projection or n_cell
    tensors: list[Tensor] = []

    def add(name, shape, data=None, dtype="float32", variable=False) -> int:
        tensors.append(Tensor(name, dtype, list(shape), data, variable=variable))
        return len(tensors) - 1

    def w(name, shape, scale=0.4) -> int:
        return add(name, shape, rng.normal(0, scale, shape).astype(np.float32))

    x_shape = [steps, batch, n_input] if time_major else [batch, steps, n_input]
    x = add("x", x_shape)
    gates = "ifco"
    ins = [x]
    ins += [-1 if (g == "i" and cifg) else w(f"input_to_{g}", (n_cell, n_input)) for g in gates]
    ins += [-1 if (g == "i" and cifg) else w(f"recurrent_to_{g}", (n_cell, n_output)) for g in gates]
    ins += [w(f"cell_to_{g}", (n_cell,)) if peephole and not (g == "i" and cifg) else -1 for g in "ifo"]
    ins += [-1 if (g == "i" and cifg) else w(f"{g}_bias", (n_cell,), 0.2) for g in gates]
    ins += [w("projection", (n_output, n_cell)) if projection else -1]
    ins += [w("projection_bias", (n_output,), 0.2) if projection else -1]
    ins += [add("output_state", (batch, n_output), variable=True), add("cell_state", (batch, n_cell), variable=True)]
    ins += [(-1 if (g == "i" and cifg) else add(f"{g}_norm", (n_cell,), rng.uniform(0.5, 1.5, n_cell)
                                                .astype(np.float32))) if layer_norm else -1 for g in gates]
    y_shape = [steps, batch, n_output] if time_major else [batch, steps, n_output]
    y = add("y", y_shape)
    opts = {"FusedActivationFunction": activation, "CellClip": cell_clip, "ProjClip": proj_clip,
            "TimeMajor": time_major}
    op = Op("UNIDIRECTIONAL_SEQUENCE_LSTM", ins, [y], ("UnidirectionalSequenceLSTMOptions", opts))
    return model(tensors, [op], [x], [y]), x_shape


def svdf_float(seed: int = 0, batch: int = 2, n_input: int = 5, filters: int = 6, memory: int = 4, rank: int = 2,
               bias: bool = True, activation: int = 1) -> tuple[bytes, list[int]]:
    """A float32 SVDF; returns the model and its input's shape."""
    rng = np.random.default_rng(seed)
    units = filters // rank
    tensors = [Tensor("x", "float32", [batch, n_input]),
               Tensor("feature_weights", "float32", [filters, n_input],
                      rng.normal(0, 0.5, (filters, n_input)).astype(np.float32)),
               Tensor("time_weights", "float32", [filters, memory],
                      rng.normal(0, 0.5, (filters, memory)).astype(np.float32)),
               Tensor("bias", "float32", [units], rng.normal(0, 0.3, units).astype(np.float32)),
               Tensor("activation_state", "float32", [batch, filters * memory], variable=True),
               Tensor("y", "float32", [batch, units])]
    op = Op("SVDF", [0, 1, 2, 3 if bias else -1, 4], [5], ("SVDFOptions", {"Rank": rank,
                                                                             "FusedActivationFunction": activation}))
    return model(tensors, [op], [0], [5]), [batch, n_input]


def svdf_int8(seed: int = 0, batch: int = 2, n_input: int = 5, filters: int = 6, memory: int = 4, rank: int = 2,
              activation: int = 1, data: str = "int8") -> tuple[bytes, list[int]]:
    """An int8 SVDF as TFLite's converter quantizes one (int8 input, feature weights and output,
    int16 time weights and activation state, int32 bias at the state's times the time weights'
    scale); returns the model and its input's shape. `data` int16 makes input and output int16
    (a form neither TFLite Micro nor TFLite runs)."""
    rng = np.random.default_rng(seed)
    units = filters // rank
    x_q, state_q, y_q = (0.02, int(rng.integers(-20, 20))), (0.004, 0), (0.1, int(rng.integers(-20, 20)))
    wf_scale, wt_scale = 0.006, 0.00005
    bias_scale = state_q[0] * wt_scale
    tensors = [Tensor("x", data, [batch, n_input], quant=x_q),
               Tensor("feature_weights", "int8", [filters, n_input],
                      rng.integers(-127, 128, (filters, n_input)).astype(np.int8), quant=(wf_scale, 0)),
               Tensor("time_weights", "int16", [filters, memory],
                      rng.integers(-32767, 32768, (filters, memory)).astype(np.int16), quant=(wt_scale, 0)),
               Tensor("bias", "int32", [units], rng.integers(-20000, 20000, units).astype(np.int32),
                      quant=(bias_scale, 0)),
               Tensor("activation_state", "int16", [batch, filters * memory], quant=state_q, variable=True),
               Tensor("y", data, [batch, units], quant=y_q)]
    op = Op("SVDF", [0, 1, 2, 3, 4], [5], ("SVDFOptions", {"Rank": rank, "FusedActivationFunction": activation}))
    return model(tensors, [op], [0], [5]), [batch, n_input]


def lstm_int8(seed: int = 0, batch: int = 2, steps: int = 3, n_input: int = 4, n_cell: int = 5,
              time_major: bool = False, cell_clip: float = 0.0, cell_scale_power: int = -11,
              activations: str = "int8", int16_zero_point: int = 0) -> tuple[bytes, list[int]]:
    """An integer UNIDIRECTIONAL_SEQUENCE_LSTM as TFLite's converter quantizes one for TFLite Micro:
    int8 weights, int16 cell state at scale 2^cell_scale_power, and `activations` int8 (input and
    output state with zero points, the output sharing the state's quantization; int32 biases at the
    input's times the input weights' scale) or int16 (16x8: zero points 0, int64 biases); returns
    the model and its input's shape (int16_zero_point: the int16 input's, for a refusal)."""
    rng = np.random.default_rng(seed)
    tensors: list[Tensor] = []
    wide = activations == "int16"

    def add(name, dtype, shape, data=None, quant=None, variable=False) -> int:
        tensors.append(Tensor(name, dtype, list(shape), data, quant, variable=variable))
        return len(tensors) - 1

    x_q = (0.0002, int16_zero_point) if wide else (0.03, int(rng.integers(-10, 10)))
    h_q = (float(rng.uniform(0.00003, 0.00005)), 0) if wide else (float(rng.uniform(0.006, 0.009)),
                                                                 int(rng.integers(-10, 10)))
    x_shape = [steps, batch, n_input] if time_major else [batch, steps, n_input]
    x = add("x", activations, x_shape, quant=x_q)

    def weights(name, shape) -> tuple[int, float]:
        scale = float(rng.uniform(0.003, 0.006))
        return add(name, "int8", shape, rng.integers(-127, 128, shape).astype(np.int8), (scale, 0)), scale

    gates = "ifco"
    w_in = [weights(f"input_to_{g}", (n_cell, n_input)) for g in gates]
    w_rec = [weights(f"recurrent_to_{g}", (n_cell, n_cell)) for g in gates]
    bias_type, bias_bound = ("int64", 3_000_000) if wide else ("int32", 3000)
    biases = [add(f"{g}_bias", bias_type, (n_cell,), rng.integers(-bias_bound, bias_bound, n_cell).astype(bias_type),
                  (x_q[0] * w_in[k][1], 0)) for k, g in enumerate(gates)]
    h = add("output_state", activations, (batch, n_cell), quant=h_q, variable=True)
    c = add("cell_state", "int16", (batch, n_cell), quant=(2.0 ** cell_scale_power, 0), variable=True)
    y_shape = [steps, batch, n_cell] if time_major else [batch, steps, n_cell]
    y = add("y", activations, y_shape, quant=h_q)
    ins = [x, *(w for w, _ in w_in), *(w for w, _ in w_rec), -1, -1, -1, *biases, -1, -1, h, c, -1, -1, -1, -1]
    opts = {"FusedActivationFunction": 4, "CellClip": cell_clip, "ProjClip": 0.0, "TimeMajor": time_major}
    op = Op("UNIDIRECTIONAL_SEQUENCE_LSTM", ins, [y], ("UnidirectionalSequenceLSTMOptions", opts))
    return model(tensors, [op], [x], [y]), x_shape


def lstm_16x8(seed: int = 0, **kwargs) -> tuple[bytes, list[int]]:
    """A 16x8 UNIDIRECTIONAL_SEQUENCE_LSTM (int16 input, output and output state, int8 weights, int64
    biases, int16 cell state), as lstm_int8 with int16 activations."""
    return lstm_int8(seed, activations="int16", **kwargs)


def accumulator(initial: float = 0.0, shape=(2, 3), decay: float = 0.5, dtype: str = "float32") -> bytes:
    """A stateful model with resource variables, as TensorFlow's converter writes one for TFLite
    Micro: subgraph 1 (run once through CALL_ONCE) assigns `initial` to variable 'acc'; each
    invocation of subgraph 0 reads it, computes y = x + decay * acc, and assigns y back."""
    init_tensors = [Tensor("acc_handle", "resource", []),
                    Tensor("acc_initial", dtype, list(shape), np.full(shape, initial, dtype))]
    init_ops = [Op("VAR_HANDLE", [], [0], ("VarHandleOptions", {"SharedName": "acc"})),
                Op("ASSIGN_VARIABLE", [0, 1], [])]
    tensors = [Tensor("x", dtype, list(shape)), Tensor("acc_handle", "resource", []),
               Tensor("acc", dtype, list(shape)), Tensor("decay", dtype, [], np.asarray(decay, dtype)),
               Tensor("decayed", dtype, list(shape)), Tensor("y", dtype, list(shape))]
    ops = [Op("CALL_ONCE", [], [], ("CallOnceOptions", {"InitSubgraphIndex": 1})),
           Op("VAR_HANDLE", [], [1], ("VarHandleOptions", {"SharedName": "acc"})),
           Op("READ_VARIABLE", [1], [2]),
           Op("MUL", [2, 3], [4]),
           Op("ADD", [0, 4], [5]),
           Op("ASSIGN_VARIABLE", [1, 5], [])]
    return model(tensors, ops, [0], [5], subgraphs=[(init_tensors, init_ops, [], [])])


def branch(shape=(2, 3)) -> bytes:
    """IF on a run-time condition (input 'take'): subgraph 1 computes relu(x) * 2, subgraph 2 x - 1."""
    then = ([Tensor("x", "float32", list(shape)), Tensor("r", "float32", list(shape)),
             Tensor("two", "float32", [], np.float32(2.0)), Tensor("y", "float32", list(shape))],
            [Op("RELU", [0], [1]), Op("MUL", [1, 2], [3])], [0], [3])
    other = ([Tensor("x", "float32", list(shape)), Tensor("one", "float32", [], np.float32(1.0)),
              Tensor("y", "float32", list(shape))], [Op("SUB", [0, 1], [2])], [0], [2])
    tensors = [Tensor("take", "bool", []), Tensor("x", "float32", list(shape)), Tensor("y", "float32", list(shape))]
    ops = [Op("IF", [0, 1], [2], ("IfOptions", {"ThenSubgraphIndex": 1, "ElseSubgraphIndex": 2}))]
    return model(tensors, ops, [0, 1], [2], subgraphs=[then, other])


def counted_loop(trips: int = 3, shape=(2, 3)) -> bytes:
    """WHILE i < trips: x = x * 0.5 + 1, i = i + 1; the counter starts at a constant 0, so the trip
    count is known when the model is built."""
    cond = ([Tensor("i", "int32", []), Tensor("x", "float32", list(shape)),
             Tensor("limit", "int32", [], np.int32(trips)), Tensor("go", "bool", [])],
            [Op("LESS", [0, 2], [3])], [0, 1], [3])
    body = ([Tensor("i", "int32", []), Tensor("x", "float32", list(shape)), Tensor("one", "int32", [], np.int32(1)),
             Tensor("half", "float32", [], np.float32(0.5)), Tensor("unit", "float32", [], np.float32(1.0)),
             Tensor("next_i", "int32", []), Tensor("halved", "float32", list(shape)),
             Tensor("next_x", "float32", list(shape))],
            [Op("ADD", [0, 2], [5]), Op("MUL", [1, 3], [6]), Op("ADD", [6, 4], [7])], [0, 1], [5, 7])
    tensors = [Tensor("x", "float32", list(shape)), Tensor("start", "int32", [], np.int32(0)),
               Tensor("count", "int32", []), Tensor("y", "float32", list(shape))]
    ops = [Op("WHILE", [1, 0], [2, 3], ("WhileOptions", {"CondSubgraphIndex": 1, "BodySubgraphIndex": 2}))]
    return model(tensors, ops, [0], [3], subgraphs=[cond, body])
