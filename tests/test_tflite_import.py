"""The TFLite importer's robustness and float32 path, on models written by tests/tflite_writer.py:
a float32 network against the TFLite Micro interpreter (within 1e-5 relative) on the host and the
emulated Cortex-M4; unnamed tensors; custom operators named by their code; operators refused by
index, name and element type; damaged flatbuffers as errors, never tracebacks; `run` keeping the
model's tensor names and `emulate` reading every element type."""
from __future__ import annotations

import random
import re

import numpy as np
import pytest

from tinsmith.errors import GraphError, TinsmithError
from tinsmith.pipeline import lower
from tflite_writer import Op, Tensor, model, single_operator

tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")


def oracle(data: bytes, inputs) -> list[np.ndarray]:
    interp = tflm.Interpreter.from_bytes(data)
    for i, x in enumerate(inputs):
        interp.set_input(x, i)
    interp.invoke()
    return [interp.get_output(0)]


def small_cnn(names: bool = True) -> bytes:
    """CONV_2D (SAME, stride 2, RELU6) -> DEPTHWISE_CONV_2D (VALID) -> MEAN over H, W ->
    FULLY_CONNECTED -> SOFTMAX, float32, with the converter's kind of tensor names."""
    rng = np.random.default_rng(4)

    def w(*shape):
        return rng.normal(0, 0.4, shape).astype(np.float32)

    def name(text):
        return text if names else None
    tensors = [Tensor(name("serving_default_input:0"), "float32", [1, 9, 8, 3]),
               Tensor(name("conv/w"), "float32", [6, 3, 3, 3], w(6, 3, 3, 3)),
               Tensor(name("conv/b"), "float32", [6], w(6)),
               Tensor(name("model/conv;model/relu6"), "float32", [1, 5, 4, 6]),
               Tensor(name("dw/w"), "float32", [1, 3, 3, 6], w(1, 3, 3, 6)),
               Tensor(name("dw/b"), "float32", [6], w(6)),
               Tensor(name("model/dw"), "float32", [1, 3, 2, 6]),
               Tensor(name("axes"), "int32", [2], np.array([1, 2], np.int32)),
               Tensor(name("model/mean"), "float32", [1, 6]),
               Tensor(name("fc/w"), "float32", [4, 6], w(4, 6)),
               Tensor(name("fc/b"), "float32", [4], w(4)),
               Tensor(name("model/logits"), "float32", [1, 4]),
               Tensor(name("StatefulPartitionedCall:0"), "float32", [1, 4])]
    ops = [Op("CONV_2D", [0, 1, 2], [3], ("Conv2DOptions", {"Padding": 0, "StrideH": 2, "StrideW": 2,
                                                             "FusedActivationFunction": 3})),
           Op("DEPTHWISE_CONV_2D", [3, 4, 5], [6], ("DepthwiseConv2DOptions", {"Padding": 1, "StrideH": 1,
                                                                              "StrideW": 1, "DepthMultiplier": 1})),
           Op("MEAN", [6, 7], [8], ("ReducerOptions", {"KeepDims": False})),
           Op("FULLY_CONNECTED", [8, 9, 10], [11], ("FullyConnectedOptions", {})),
           Op("SOFTMAX", [11], [12], ("SoftmaxOptions", {"Beta": 1.0}))]
    return model(tensors, ops, [0], [12])


@pytest.mark.parametrize("target", ["host", "cortex-m4"])
def test_float_model_matches_tflite_micro(target, tmp_path):
    from tinsmith.cli import run_compiled
    data = small_cnn()
    path = tmp_path / "cnn.tflite"
    path.write_bytes(data)
    graph = lower(path)
    assert graph.types[graph.inputs[0]].dtype == "float32"
    for seed in range(2 if target == "host" else 1):
        x = np.random.default_rng(seed).uniform(-2, 2, (1, 9, 8, 3)).astype(np.float32)
        got = run_compiled(path, {graph.inputs[0]: x}, tmp_path / "build", graph, target)[graph.outputs[0]]
        np.testing.assert_allclose(got, oracle(data, [x])[0], rtol=1e-5, atol=1e-7)


def test_unnamed_tensors_get_generated_names(tmp_path):
    """A model whose tensors have no names (AttributeError: 'NoneType' object has no attribute
    'decode' before): each is called after its index, and the model computes as TFLite Micro does."""
    from tinsmith.cli import run_compiled
    data = small_cnn(names=False)
    path = tmp_path / "unnamed.tflite"
    path.write_bytes(data)
    graph = lower(path)
    assert (graph.inputs, graph.outputs) == (("tensor0",), ("tensor12",))
    x = np.random.default_rng(1).uniform(-2, 2, (1, 9, 8, 3)).astype(np.float32)
    got = run_compiled(path, {"tensor0": x}, tmp_path / "build", graph)["tensor12"]
    np.testing.assert_allclose(got, oracle(data, [x])[0], rtol=1e-5, atol=1e-7)


def _error(tmp_path, data: bytes) -> GraphError:
    """The error importing `data` raises, located at the file."""
    from tinsmith.load.tflite_model import load_tflite_spec
    (tmp_path / "m.tflite").write_bytes(data)
    with pytest.raises(GraphError) as e:
        load_tflite_spec(tmp_path / "m.tflite")
    assert str(e.value.loc).endswith("m.tflite"), str(e.value)
    return e.value


def _custom(code: str) -> bytes:
    tensors = [Tensor("x", "float32", [1, 4]), Tensor("y", "float32", [1, 4])]
    return model(tensors, [Op("RELU", [0], [1]), Op("CUSTOM", [1], [1], custom=code)], [0], [1])


def test_npu_operator_is_named_with_a_note(tmp_path):
    e = _error(tmp_path, _custom("ethos-u"))
    assert e.message == ("operator 1: the custom operator 'ethos-u' runs a subgraph compiled for an Arm Ethos-U NPU; "
                         "Tinsmith compiles for the CPU and does not drive NPUs (compile the model before it went "
                         "through the NPU's compiler, e.g. Vela)")


def test_signal_library_operator_on_another_element_type_is_named(tmp_path):
    """SignalEnergy compiles (tests/test_tflite_signal.py) on int16 data, as TFLite Micro registers it."""
    e = _error(tmp_path, _custom("SignalEnergy"))
    assert e.message == ("unsupported TFLite operator: operator 1 (CUSTOM:SignalEnergy) on float32 data (Tinsmith "
                         "supports CUSTOM:SignalEnergy on int16)")


def test_other_custom_operator_is_named(tmp_path):
    e = _error(tmp_path, _custom("TFLite_Detection_PostProcess"))
    assert e.message == ("operator 1: the custom operator 'TFLite_Detection_PostProcess' is not a TFLite builtin; "
                         "Tinsmith cannot compile it")


def test_unknown_builtins_are_listed_with_their_indices(tmp_path):
    tensors = [Tensor("x", "float32", [1, 4]), Tensor("y", "float32", [1, 4])]
    ops = [Op("HASHTABLE_LOOKUP", [0], [1]), Op("RELU", [1], [1]), Op("HASHTABLE_LOOKUP", [1], [1]),
           Op("LSH_PROJECTION", [1], [1])]
    e = _error(tmp_path, model(tensors, ops, [0], [1]))
    assert e.message == "unsupported TFLite operators: HASHTABLE_LOOKUP (operators 0, 2), LSH_PROJECTION (operator 3)"
    assert "supported builtin operators: ABS, ADD," in e.hint


def test_operator_on_an_element_type_it_lacks_is_refused_by_index(tmp_path):
    e = _error(tmp_path, single_operator(50, "int16", [1, 8], (0.01, 0), (16 / 256, 127)))
    assert e.message == ("unsupported TFLite operator: operator 0 (LOG_SOFTMAX) on int16 data (Tinsmith supports "
                         "LOG_SOFTMAX on float32, int8)")


def test_unsupported_forms_are_all_named(tmp_path):
    tensors = [Tensor("x", "float32", [2, 3]), Tensor("begin", "int32", [2], np.int32([0, 0])),
               Tensor("end", "int32", [2]), Tensor("strides", "int32", [2], np.int32([1, 1])),
               Tensor("y", "float32", [1, 3]), Tensor("z", "float32", [1, 3])]
    ops = [Op("STRIDED_SLICE", [0, 1, 2, 3], [4], ("StridedSliceOptions", {"ShrinkAxisMask": 1})),
           Op("ADD", [4, 4], [5], ("AddOptions", {"FusedActivationFunction": 4}))]
    e = _error(tmp_path, model(tensors, ops, [0], [5]))
    assert e.message == ("unsupported TFLite operators: operator 0 (STRIDED_SLICE): a STRIDED_SLICE end computed "
                         "at run time (tensor 'end'; Tinsmith needs it constant)")
    assert e.more == ("operator 1 (ADD): fused activation 4 (TANH or SIGN_BIT)",)


def test_unknown_tensor_type_is_named(tmp_path):
    data = model([Tensor("x", "float16", [1, 4]), Tensor("y", "float16", [1, 4])], [Op("RELU", [0], [1])], [0], [1])
    e = _error(tmp_path, data)
    assert e.message == "tensor 'x' has TFLite type float16, which Tinsmith does not support"


@pytest.mark.parametrize("seed", range(3))
def test_damaged_flatbuffers_are_errors_never_tracebacks(seed, tmp_path):
    """Valid models with bytes overwritten at random: each one imports or is a located GraphError."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    sources = [small_cnn(), (root / "conformance/tflite/models/strided_slice_int8.tflite").read_bytes(),
               (root / "tests/data/tflite/conv_relu6.tflite").read_bytes()]
    rng = random.Random(seed)
    path = tmp_path / "damaged.tflite"
    outcomes = {"imported": 0, "refused": 0}
    for _ in range(150):
        data = bytearray(rng.choice(sources))
        for _ in range(rng.choice((1, 3, 9))):
            data[rng.randrange(len(data))] = rng.randrange(256)
        path.write_bytes(bytes(data))
        try:
            lower(path)
            outcomes["imported"] += 1
        except TinsmithError as e:
            assert e.loc is not None and e.loc.path.endswith("damaged.tflite"), str(e)
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0, outcomes


def test_run_keeps_the_models_tensor_names(tmp_path, tinsmith_cmd):
    """`run` takes inputs and writes outputs under the model's own names ('serving_default_input:0')."""
    (tmp_path / "cnn.tflite").write_bytes(small_cnn())
    x = np.random.default_rng(2).uniform(-2, 2, (1, 9, 8, 3)).astype(np.float32)
    np.savez(tmp_path / "in.npz", **{"serving_default_input:0": x})
    proc = tinsmith_cmd("run", "cnn.tflite", "--inputs", "in.npz", "--output", "out.npz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = np.load(tmp_path / "out.npz")
    assert out.files == ["StatefulPartitionedCall:0"]
    np.testing.assert_allclose(out["StatefulPartitionedCall:0"], oracle(small_cnn(), [x])[0], rtol=1e-5, atol=1e-7)


def _summary(text: str) -> list[str]:
    return [re.sub(r" \[cortex-m4\]", "", line) for line in text.splitlines() if " sum=" in line]


def test_emulate_reads_int8_and_bool_outputs_as_the_host_runner_does(tmp_path, tinsmith_cmd):
    """An int8 input and output and a bool output (the model compares): `emulate` feeds the host
    runner's pattern in each input's type and prints what the host runner prints."""
    import subprocess
    q = (0.05, 3)
    tensors = [Tensor("x", "int8", [2, 5], quant=q), Tensor("b", "int8", [5], np.int8([-4, 0, 1, 5, 9]), q),
               Tensor("m", "int8", [2, 5], quant=q), Tensor("lt", "bool", [2, 5])]
    ops = [Op("MAXIMUM", [0, 1], [2]), Op("LESS", [0, 1], [3])]
    (tmp_path / "cmp.tflite").write_bytes(model(tensors, ops, [0], [2, 3]))
    proc = tinsmith_cmd("build", "cmp.tflite", "--build-dir", "host", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    host = subprocess.run([str(tmp_path / "host/cmp/cmp_runner")], capture_output=True, text=True, check=True).stdout
    proc = tinsmith_cmd("build", "cmp.tflite", "--target", "cortex-m4", "--build-dir", "m4", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc = tinsmith_cmd("emulate", "m4/cmp/firmware/cmp.elf", "--report", "m4/cmp/cmp.json", "--target", "cortex-m4",
                        cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _summary(proc.stdout) == _summary(host) and len(_summary(host)) == 2, (proc.stdout, host)


def test_constant_outputs_are_written_by_the_generated_code(tmp_path):
    """A SHAPE folded at build time and a tensor stored in the file, both graph outputs: the
    generated code still writes them, as TFLite Micro returns them."""
    from tinsmith.cli import run_compiled
    tensors = [Tensor("x", "float32", [2, 3]), Tensor("s", "int32", [2]),
               Tensor("c", "float32", [2], np.float32([1.5, -2])), Tensor("y", "float32", [2, 3])]
    data = model(tensors, [Op("SHAPE", [0], [1], ("ShapeOptions", {"OutType": 2})), Op("RELU", [0], [3])],
                 [0], [1, 2, 3])
    path = tmp_path / "shape.tflite"
    path.write_bytes(data)
    graph = lower(path)
    x = np.float32([[1, -2, 3], [-4, 5, -6]])
    got = run_compiled(path, {"x": x}, tmp_path / "build", graph)
    interp = tflm.Interpreter.from_bytes(data)
    interp.set_input(x, 0)
    interp.invoke()
    for k, name in enumerate(("s", "c", "y")):
        np.testing.assert_array_equal(got[name], interp.get_output(k), err_msg=name)


def test_run_refuses_floats_for_a_quantized_input(tmp_path, tinsmith_cmd):
    """Float data for an int8 input was cast silently (1.7 became 1); now it is refused with how to
    quantize it."""
    (tmp_path / "relu.tflite").write_bytes(single_operator(0, "int8", [1, 4], (0.05, 3), (0.1, 0), op_inputs=(0, 0)))
    np.savez(tmp_path / "in.npz", x=np.float32([[0.5, 1.7, -2, 0]]))
    proc = tinsmith_cmd("run", "relu.tflite", "--inputs", "in.npz", "--output", "out.npz", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "error: input 'x' in in.npz is float32, the graph expects int8",
        "note: the input is quantized: pass q = round(x / 0.0500000007) + 3, clipped to the range of int8"]


def test_every_registered_operator_is_a_tflite_builtin():
    import tflite

    from tinsmith.load.tflite_operators import OPERATORS
    assert [name for name in OPERATORS if not hasattr(tflite.BuiltinOperator, name)] == []


_WINDOW_OPTIONS = {"CONV_2D": "Conv2DOptions", "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions",
                   "AVERAGE_POOL_2D": "Pool2DOptions", "MAX_POOL_2D": "Pool2DOptions",
                   "TRANSPOSE_CONV": "TransposeConvOptions"}


def _random_model(rng: random.Random, seed: int) -> bytes:
    """Up to three registered operators on random tensors (types, ranks, sizes 0..3, constants,
    quantizations), wired at random, with random strides and paddings where they take them."""
    from tinsmith.load.tflite_operators import OPERATORS
    tensors = []
    for i in range(rng.randint(2, 6)):
        dtype = rng.choice(["float32", "int8", "int32", "bool"])
        shape = [rng.randint(0, 3) for _ in range(rng.randint(0, 4))]
        data = np.random.default_rng(seed + i).integers(-3, 4, shape).astype(dtype) if rng.random() < 0.4 else None
        quant = (rng.choice([0.05, 1.0]), rng.randint(-5, 5)) if dtype == "int8" and rng.random() < 0.8 else None
        tensors.append(Tensor(f"t{i}", dtype, shape, data, quant))
    ops = []
    for _ in range(rng.randint(1, 3)):
        code = rng.choice(sorted(OPERATORS))
        options = None
        if code in _WINDOW_OPTIONS:
            options = (_WINDOW_OPTIONS[code], {"Padding": rng.randint(0, 1), "StrideH": rng.randint(0, 2), "StrideW": 1})
        ops.append(Op(code, [rng.randrange(len(tensors)) for _ in range(rng.randint(1, 4))],
                      [rng.randrange(len(tensors))], options))
    return model(tensors, ops, [0], [len(tensors) - 1])


def test_random_operator_graphs_import_or_are_located_errors(tmp_path):
    """Registered operators on operands that rarely fit: every model imports, or is refused with a
    located error (a converter's IndexError, ValueError, ... would be a traceback)."""
    rng = random.Random(11)
    path = tmp_path / "random.tflite"
    messages = set()
    for seed in range(400):
        path.write_bytes(_random_model(rng, seed))
        try:
            lower(path)
        except TinsmithError as e:
            assert e.loc is not None and e.loc.path.endswith("random.tflite"), str(e)
            messages.add(e.message.split(":")[0])
    assert len(messages) > 10  # (the models reach many different checks)
