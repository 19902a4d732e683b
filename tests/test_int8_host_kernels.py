"""The host's int8 kernels (codegen/generate/functors/host_int8.py): the int8 convolutions and fully
connected layers of the host targets run the accumulator-row kernels, and the four models stay
bit-exact with TFLite Micro on host-native too (the build machine's widest vectors). The kernels'
edge cases (odd channel counts, every border, zero points at both ends, per-channel scales) are
covered for the host target by tests/test_int8_kernels.py and tests/test_tflite_operators.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tinsmith.pipeline import compile_graph, lower

ROOT = Path(__file__).resolve().parents[1]
tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")


@pytest.mark.parametrize("target", ["host", "host-native"])
def test_int8_layers_run_the_accumulator_row_kernels(target):
    c = compile_graph(ROOT / "models" / "kws_dscnn_int8.tflite", target=target)
    source = next(text for name, text in c.files.items() if name.endswith(".cpp") and "runner" not in name)
    kernels = [k for k in c.model.kernels if k.node.op in ("QConv2D", "QDepthwise", "QFullyConnected")]
    assert kernels and all(any(s.name == "acc_row" for s in k.kernel.scratch) for k in kernels)
    assert "t_acc_row[oc]" in source


@pytest.mark.parametrize("name", ["ic_resnet8", "kws_dscnn"])
def test_models_are_bit_exact_on_host_native(name, tmp_path):
    from tinsmith.cli import run_compiled
    path = ROOT / "models" / f"{name}_int8.tflite"
    graph = lower(path)
    interp = tflm.Interpreter.from_file(str(path))
    x = np.random.default_rng(4).integers(-128, 128, graph.types[graph.inputs[0]].shape).astype(np.int8)
    interp.set_input(x, 0)
    interp.invoke()
    got = run_compiled(path, {graph.inputs[0]: x}, tmp_path, graph, "host-native")[graph.outputs[0]]
    np.testing.assert_array_equal(got, interp.get_output(0))
