"""RNN, GRU and LSTM (codegen/builders/recurrent.py) compiled from ONNX and compared with ONNX
Runtime: every direction, the activations ONNX defines, clip, initial states, constant
sequence lengths (shorter than the sequence, zero, full), odd sizes (hidden 5, input 3, one
time step); layout 1 against ONNX's reference evaluator, which ONNX Runtime does not
implement. The example keyword spotter graphs/gru_kws.yaml (models/make_recurrent.py) runs on
the host and the emulated Cortex-M4 against ONNX Runtime on the model it was imported from.

Tolerance: rtol 1e-4 plus 1e-5 of the output's largest magnitude (tests/onnx_oracle.py).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from models import make_recurrent
from onnx_oracle import HAS_FIRMWARE_TOOLS, ROOT, assert_close, check_example_graph, expected, run_on_host

pytest.importorskip("onnxruntime")

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def recurrent_model(op: str, *, steps=4, batch=2, inputs=3, hidden=5, direction="forward", layout=0,
                    bias=True, initial=False, lengths=None, peepholes=False, seed=0, **attrs):
    """One recurrent node with seeded weights as initializers; X (and nothing else) fed at run time.
    Every output is a graph output."""
    rng = np.random.default_rng(seed)
    dirs, gates = 2 if direction == "bidirectional" else 1, GATES[op]
    def weights(columns):
        return (0.5 * rng.standard_normal((dirs, gates * hidden, columns))).astype(np.float32)
    inits = [numpy_helper.from_array(weights(inputs), "W"), numpy_helper.from_array(weights(hidden), "R")]
    names = ["X", "W", "R"]

    def optional(name, array):
        if array is None:
            names.append("")
            return
        inits.append(numpy_helper.from_array(array, name))
        names.append(name)
    optional("B", (0.3 * rng.standard_normal((dirs, 2 * gates * hidden))).astype(np.float32) if bias else None)
    optional("sequence_lens", np.array(lengths, np.int32) if lengths is not None else None)
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    optional("initial_h", rng.standard_normal(state).astype(np.float32) if initial else None)
    if op == "LSTM":
        optional("initial_c", rng.standard_normal(state).astype(np.float32) if initial else None)
        optional("P", (0.5 * rng.standard_normal((dirs, 3 * hidden))).astype(np.float32) if peepholes else None)
    while names[-1] == "":
        names.pop()
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outs, hidden_size=hidden, direction=direction,
                            **({"layout": layout} if layout else {}), **attrs)
    x_shape = (batch, steps, inputs) if layout else (steps, batch, inputs)
    y_shape = (batch, steps, dirs, hidden) if layout else (steps, dirs, batch, hidden)
    graph = helper.make_graph(
        [node], f"{op.lower()}_model", [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape)] +
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, state) for n in outs[1:]], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    feeds = {"X": rng.standard_normal(x_shape).astype(np.float32)}
    return model, feeds


VARIANTS = {
    "rnn_forward": dict(op="RNN"),
    "rnn_reverse_relu_clip": dict(op="RNN", direction="reverse", activations=["Relu"], clip=1.5),
    "rnn_bidirectional_lengths": dict(op="RNN", direction="bidirectional", initial=True, lengths=[4, 2],
                                      activations=["Tanh", "Softsign"]),
    "rnn_one_step_no_bias": dict(op="RNN", steps=1, batch=1, bias=False),
    "gru_forward": dict(op="GRU", hidden=7),
    "gru_linear_before_reset": dict(op="GRU", linear_before_reset=1, initial=True),
    "gru_reverse_lengths": dict(op="GRU", direction="reverse", lengths=[3, 1], batch=2),
    "gru_bidirectional_activations": dict(op="GRU", direction="bidirectional", batch=3, lengths=[4, 0, 2],
                                          activations=["HardSigmoid", "Elu", "Sigmoid", "Softplus"],
                                          activation_alpha=[0.3, 0.8], activation_beta=[0.4]),
    "gru_scaled_tanh_affine": dict(op="GRU", activations=["Sigmoid", "ScaledTanh"], activation_alpha=[0.9],
                                   activation_beta=[1.1], clip=2.0),
    "lstm_forward": dict(op="LSTM"),
    "lstm_peepholes_initial": dict(op="LSTM", peepholes=True, initial=True, hidden=6),
    "lstm_bidirectional_lengths": dict(op="LSTM", direction="bidirectional", lengths=[2, 4], peepholes=True,
                                       initial=True),
    "lstm_reverse_leaky": dict(op="LSTM", direction="reverse", activations=["Sigmoid", "LeakyRelu", "Tanh"],
                               activation_alpha=[0.2], clip=3.0),
}
# ONNX Runtime implements no batch-first layout: ONNX's reference evaluator is the oracle (it
# ignores sequence_lens, so these use full-length sequences).
REFERENCE_VARIANTS = {
    "rnn_layout1": dict(op="RNN", layout=1, initial=True),
    "gru_layout1_bidirectional": dict(op="GRU", layout=1, direction="bidirectional", linear_before_reset=1),
    "lstm_layout1_peepholes": dict(op="LSTM", layout=1, initial=True, peepholes=True),
}


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    specs = {**VARIANTS, **REFERENCE_VARIANTS}
    made = {name: recurrent_model(seed=i, **spec) for i, (name, spec) in enumerate(specs.items())}
    # each model under its own graph name, so they share one host program
    for name, (model, _) in made.items():
        model.graph.name = name
    got = run_on_host({n: m for n, (m, _) in made.items()}, {n: f for n, (_, f) in made.items()},
                      tmp_path_factory.mktemp("recurrent"))
    return made, got


@pytest.mark.parametrize("name", [*VARIANTS, *REFERENCE_VARIANTS])
def test_recurrent_op_matches_the_oracle(variants, name):
    made, got = variants
    model, feeds = made[name]
    want = expected(model, feeds, reference=name in REFERENCE_VARIANTS)
    assert len(got[name]) == len(want)
    for output, g, w in zip(model.graph.output, got[name], want):
        assert g.shape == w.shape, (output.name, g.shape, w.shape)
        assert_close(g, w, f"{name}: {output.name}")


def test_lengths_past_the_end_give_zeros_and_keep_the_state(variants):
    made, got = variants
    y, y_h = got["gru_reverse_lengths"][:2]
    assert not y[1:, :, 1, :].any()  # batch entry 1 has one step: later steps are zero
    np.testing.assert_array_equal(y_h[0, 1], y[0, 0, 1])  # reverse: its last state is at step 0


def test_sequence_lengths_must_be_known_when_built(tmp_path):
    from tinsmith.errors import TinsmithError
    from tinsmith.pipeline import compile_graph
    model, _ = recurrent_model("GRU", lengths=[2, 2])
    model.graph.initializer.pop(next(i for i, t in enumerate(model.graph.initializer) if t.name == "sequence_lens"))
    model.graph.input.append(helper.make_tensor_value_info("sequence_lens", TensorProto.INT32, [2]))
    path = tmp_path / "gru.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(TinsmithError, match="sequence_lens|int32"):
        compile_graph(path)


# --- the example keyword spotter, host and Cortex-M4 -----------------------------------------------
needs_firmware = pytest.mark.skipif(not HAS_FIRMWARE_TOOLS,
                                    reason="needs arm-none-eabi-g++ and qemu-system-arm (sh setup.sh installs them)")


def test_graph_file_is_the_imported_model(tmp_path):
    from tinsmith.pipeline import lower
    paths = make_recurrent.write_models(tmp_path)
    graph = lower(ROOT / "graphs" / "gru_kws.yaml")
    model = onnx.load(str(paths["gru_kws"]))
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    stored = np.load(ROOT / "graphs" / "gru_kws.npz")
    for name in ("gru_W", "gru_R", "gru_B", "fc_W", "fc_b"):
        np.testing.assert_array_equal(stored[name], weights[name], err_msg=name)
    assert list(graph.inputs) == ["mfcc"] and list(graph.types["mfcc"].shape) == [1, 25, 10]


@needs_firmware
@pytest.mark.parametrize("where", ["host", "cortex-m4"])
def test_gru_keyword_spotter_matches_onnx_runtime(tmp_path_factory, where):
    inputs = [make_recurrent.sample_input("gru_kws", seed) for seed in range(3)]
    check_example_graph("gru_kws", make_recurrent.gru_kws(), inputs, where, tmp_path_factory.getbasetemp())
