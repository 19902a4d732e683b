"""RoiAlign compiled for the host and compared with ONNX Runtime: average and max, both coordinate
modes, sampling ratios 1 to 3, rois partly and wholly outside the map, rois of under one pixel,
two images, odd sizes."""
from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_oracle import assert_close, expected, run_cases

ROIS = np.array([[0.5, 1.0, 6.5, 5.0], [-3.0, -2.0, 2.0, 3.5], [4.2, 3.1, 4.6, 3.3],
                 [7.0, 6.0, 20.0, 15.0], [30.0, 30.0, 40.0, 35.0]], np.float32)
BATCH = np.array([0, 1, 1, 0, 1], np.int64)


def _model(mode, transform, ratio, out_h, out_w, scale) -> onnx.ModelProto:
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode=mode,
                            coordinate_transformation_mode=transform, sampling_ratio=ratio,
                            output_height=out_h, output_width=out_w, spatial_scale=scale)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 9, 11]),
                      helper.make_tensor_value_info("rois", TensorProto.FLOAT, list(ROIS.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [len(ROIS), 3, out_h, out_w])],
        [numpy_helper.from_array(BATCH, "batch")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


CASES = {}
for k, (mode, transform, ratio) in enumerate(itertools.product(("avg", "max"), ("half_pixel", "output_half_pixel"),
                                                               (1, 2, 3))):
    out_h, out_w = (3, 2) if ratio == 3 else (2, 5)
    CASES[f"roi_{mode}_{transform}_{ratio}"] = (
        _model(mode, transform, ratio, out_h, out_w, 0.75 if k % 2 else 1.0),
        {"x": np.random.default_rng(k).standard_normal((2, 3, 9, 11)).astype(np.float32), "rois": ROIS})


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("roi_align")
    return run_cases(CASES, folder)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_onnx_runtime(compiled, name):
    model, feeds = CASES[name]
    (want,) = expected(model, feeds)
    (got,) = compiled[name]
    assert got.shape == want.shape
    assert_close(got, want, name)
