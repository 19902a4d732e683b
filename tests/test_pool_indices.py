"""MaxPool's Indices output (MaxPoolIndices beside MaxPool), compiled for the host and compared
with ONNX Runtime: padding, strides, dilations, ceil mode, column-major storage order, 1-D to
3-D windows, odd sizes and repeated values (the first maximum wins)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_oracle import expected, run_cases


def _model(shape, **attrs) -> onnx.ModelProto:
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)], [])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    inferred = {v.name: v for v in model.graph.value_info}
    model.graph.output.extend([inferred["y"], inferred["i"]])
    del model.graph.value_info[:]
    return model


SHAPES = {
    "k3s1": ((1, 3, 7, 9), dict(kernel_shape=[3, 3])),
    "k3s2_pads": ((2, 3, 7, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "k2_column_major": ((1, 2, 5, 6), dict(kernel_shape=[2, 2], storage_order=1)),
    "k3_dilated_ceil": ((1, 1, 9, 8), dict(kernel_shape=[3, 2], dilations=[2, 1], strides=[2, 3], ceil_mode=1)),
    "same_upper": ((1, 5, 5, 5), dict(kernel_shape=[2, 3], auto_pad="SAME_UPPER", strides=[2, 1])),
    "pool_1d": ((2, 3, 11), dict(kernel_shape=[4], strides=[3], pads=[2, 1])),
    "pool_3d": ((1, 2, 4, 5, 3), dict(kernel_shape=[2, 3, 2], pads=[0, 1, 1, 1, 1, 0])),
    "one_by_one": ((1, 1, 1, 1), dict(kernel_shape=[1, 1])),
}


def _input(name: str, shape) -> np.ndarray:
    rng = np.random.default_rng(len(name))
    if name == "k3s1":  # few distinct values: many ties inside a window
        return rng.integers(-2, 3, shape).astype(np.float32)
    return rng.standard_normal(shape).astype(np.float32)


CASES = {f"maxpool_indices_{n}": (_model(s, **a), {"x": _input(n, s)}) for n, (s, a) in SHAPES.items()}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pool_indices")
    return run_cases(CASES, folder)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_onnx_runtime(compiled, name):
    model, feeds = CASES[name]
    want_y, want_i = expected(model, feeds)
    got_y, got_i = compiled[name]
    np.testing.assert_array_equal(got_y, want_y, err_msg=f"{name} values")
    assert got_i.dtype == np.int64
    np.testing.assert_array_equal(got_i, want_i, err_msg=f"{name} indices")
