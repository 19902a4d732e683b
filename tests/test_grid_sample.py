"""GridSample compiled for the host and compared with ONNX Runtime (2-D) and ONNX's reference
evaluator (3-D, which ONNX Runtime's CPU kernel does not take; and cubic with border padding,
where ONNX Runtime follows PyTorch and clamps each tap instead of the coordinate as the operator
defines, differing by up to 0.4 on these grids): every mode, padding mode and
align_corners, grids reaching well past [-1, 1] (so padding and repeated reflection apply),
batches of two with different grids, odd sizes and a 1x1 input."""
from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_oracle import assert_close, expected, run_cases


def _model(x_shape, grid_shape, **attrs) -> onnx.ModelProto:
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)
    out = list(x_shape[:2]) + list(grid_shape[1:-1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
                                            helper.make_tensor_value_info("grid", TensorProto.FLOAT, grid_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _feeds(x_shape, grid_shape, seed):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal(x_shape).astype(np.float32),
            "grid": rng.uniform(-2.7, 2.7, grid_shape).astype(np.float32)}


CASES = {}
for k, (mode, padding, align) in enumerate(itertools.product(("nearest", "linear", "cubic"),
                                                             ("zeros", "border", "reflection"), (0, 1))):
    x_shape, grid_shape = (2, 3, 5, 7), (2, 4, 9, 2)
    CASES[f"gs2d_{mode}_{padding}_{align}"] = (
        _model(x_shape, grid_shape, mode=mode, padding_mode=padding, align_corners=align),
        _feeds(x_shape, grid_shape, k))
CASES["gs2d_linear_1x1"] = (_model((1, 2, 1, 1), (1, 3, 2, 2), mode="linear"), _feeds((1, 2, 1, 1), (1, 3, 2, 2), 50))
for k, (mode, padding, align) in enumerate(itertools.product(("nearest", "linear"), ("zeros", "border", "reflection"),
                                                             (0, 1))):
    x_shape, grid_shape = (1, 2, 3, 4, 5), (1, 2, 3, 4, 3)
    CASES[f"gs3d_{mode}_{padding}_{align}"] = (
        _model(x_shape, grid_shape, mode=mode, padding_mode=padding, align_corners=align),
        _feeds(x_shape, grid_shape, 100 + k))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("grid_sample")
    return run_cases(CASES, folder)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_onnx(compiled, name):
    model, feeds = CASES[name]
    (want,) = expected(model, feeds, reference=name.startswith("gs3d") or "cubic_border" in name)
    (got,) = compiled[name]
    assert got.shape == want.shape
    assert_close(got, want, name)
