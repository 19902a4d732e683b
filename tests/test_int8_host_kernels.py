"""The host's int8 kernels: the int8 convolutions and fully connected layers of the portable host
target run the accumulator-row kernels (codegen/generate/functors/host_int8.py), those of hosts
with 512-bit vectors the AVX-512 micro-kernels (quantized_avx512.py), and the four models stay
bit-exact with TFLite Micro on host-native (the build machine's widest vectors, VNNI here) and on
host-x86-64-v4 (AVX-512 without VNNI). The kernels' edge cases (odd channel counts, every border,
zero points at both ends, per-channel scales) are covered for these targets by
tests/test_int8_kernels.py and tests/test_tflite_operators.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tinsmith.pipeline import compile_graph, lower

ROOT = Path(__file__).resolve().parents[1]
tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")


def _avx512() -> bool:
    return "avx512f" in open("/proc/cpuinfo").read().split()


def test_int8_layers_run_the_accumulator_row_kernels_on_sse2():
    c = compile_graph(ROOT / "models" / "kws_dscnn_int8.tflite", target="host")
    source = next(text for name, text in c.files.items() if name.endswith(".cpp") and "runner" not in name)
    kernels = [k for k in c.model.kernels if k.node.op in ("QConv2D", "QDepthwise", "QFullyConnected")]
    assert kernels and all(any(s.name == "acc_row" for s in k.kernel.scratch) for k in kernels)
    assert "t_acc_row[oc]" in source and "avx512_" not in source


def test_int8_layers_run_the_avx512_micro_kernels_with_512_bit_vectors():
    """host-x86-64-v4: every convolution, depthwise (64 channels) and fully connected layer of kws on
    the avx512-int8 blocks: four-byte dot products, requantized sixteen channels at a time."""
    c = compile_graph(ROOT / "models" / "kws_dscnn_int8.tflite", target="host-x86-64-v4")
    source = next(text for name, text in c.files.items() if name.endswith(".cpp") and "runner" not in name)
    kernels = [k for k in c.model.kernels if k.node.op in ("QConv2D", "QDepthwise", "QFullyConnected")]
    assert len(kernels) == 10 and not any(s.name == "acc_row" for k in kernels for s in k.kernel.scratch)
    assert "acc0_3 = avx512_dot4(acc0_3, x0, " in source  # a block of four vectors of sums
    assert "avx512_tap<tinsmith_i8x16>(acc, " in source and "store_i8x16(" in source


@pytest.mark.parametrize("name, target", [("ic_resnet8", "host-native"), ("kws_dscnn", "host-native"),
                                          ("vww_mobilenet", "host-native"), ("ad_autoencoder", "host-native"),
                                          ("kws_dscnn", "host-x86-64-v4")])
def test_models_are_bit_exact_on_wide_hosts(name, target, tmp_path):
    if target == "host-x86-64-v4" and not _avx512():
        pytest.skip("this machine has no AVX-512")
    from tinsmith.cli import run_compiled
    path = ROOT / "models" / f"{name}_int8.tflite"
    graph = lower(path)
    interp = tflm.Interpreter.from_file(str(path))
    x = np.random.default_rng(4).integers(-128, 128, graph.types[graph.inputs[0]].shape).astype(np.int8)
    interp.set_input(x, 0)
    interp.invoke()
    got = run_compiled(path, {graph.inputs[0]: x}, tmp_path, graph, target)[graph.outputs[0]]
    np.testing.assert_array_equal(got, interp.get_output(0))
