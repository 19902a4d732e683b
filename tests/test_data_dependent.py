"""Unique and NonMaxSuppression, whose output shapes depend on input values: computed when the graph
is built from constant inputs (compared with ONNX Runtime), declined with the reason otherwise."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tinsmith.errors import GraphError
from tinsmith.pipeline import compile_graph
from onnx_oracle import expected, run_on_host


def _model(node, inits, outputs, inputs=()) -> onnx.ModelProto:
    graph = helper.make_graph([node, helper.make_node("Identity", ["x"], ["x_out"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])] + list(inputs),
                              [helper.make_tensor_value_info("x_out", TensorProto.FLOAT, [2])] + outputs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _out(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


DATA = np.array([[2.0, 1.0, 1.0], [3.0, 4.0, 3.0], [2.0, 1.0, 1.0], [0.5, 1.0, 1.0]], np.float32)
BOXES = np.array([[[0.0, 0.0, 1.0, 1.0], [0.0, 0.1, 1.0, 1.1], [0.0, -0.1, 1.0, 0.9], [0.0, 10.0, 1.0, 11.0],
                   [1.0, 10.1, 0.0, 11.1], [0.0, 100.0, 1.0, 101.0]]], np.float32)
SCORES = np.array([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3], [0.1, 0.2, 0.8, 0.3, 0.7, 0.05]]], np.float32)


def _run_alone(node, inits, names):
    """ONNX Runtime's outputs of `node` alone on constant inputs (to learn their shapes)."""
    import onnxruntime as ort
    probe = helper.make_model(helper.make_graph([node], "p", [], [_out(n, TensorProto.FLOAT if n == "y" else TensorProto.INT64,
                                                                       None) for n in names],
                                                [numpy_helper.from_array(v, k) for k, v in inits.items()]),
                              opset_imports=[helper.make_opsetid("", 18)])
    return ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})


def _unique(axis, ordered):
    attrs = {"sorted": ordered} | ({"axis": axis} if axis is not None else {})
    names = ("y", "indices", "inverse", "counts")
    node = helper.make_node("Unique", ["data"], list(names), **attrs)
    ref = _run_alone(node, {"data": DATA}, names)
    outs = [_out(n, TensorProto.FLOAT if n == "y" else TensorProto.INT64, list(r.shape)) for n, r in zip(names, ref)]
    return _model(node, {"data": DATA}, outs)


def _nms(center, limit, iou, score):
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou", "score"], ["selected"],
                            center_point_box=center)
    inits = {"boxes": BOXES, "scores": SCORES, "limit": np.array([limit], np.int64),
             "iou": np.array([iou], np.float32), "score": np.array([score], np.float32)}
    (rows,) = _run_alone(node, inits, ["selected"])
    return _model(node, inits, [_out("selected", TensorProto.INT64, list(rows.shape))])


CASES = {
    "unique_flat_sorted": _unique(None, 1), "unique_flat_first_seen": _unique(None, 0),
    "unique_rows": _unique(0, 1), "unique_columns": _unique(1, 1), "unique_columns_first_seen": _unique(-1, 0),
    "nms_corners": _nms(0, 2, 0.5, 0.0), "nms_centers": _nms(1, 3, 0.3, 0.25), "nms_none_left": _nms(0, 5, 0.5, 0.99),
}
FEEDS = {"x": np.array([1.0, -2.0], np.float32)}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return run_on_host(CASES, {n: FEEDS for n in CASES}, tmp_path_factory.mktemp("data_dependent"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_constant_inputs_match_onnx_runtime(compiled, name):
    want = expected(CASES[name], FEEDS)
    for i, (g, w) in enumerate(zip(compiled[name], want)):
        assert g.shape == w.shape, (name, i)
        np.testing.assert_array_equal(g, w, err_msg=f"{name} output {i}")


def test_run_time_input_is_declined_with_the_reason(tmp_path):
    node = helper.make_node("Unique", ["x"], ["y"])
    model = helper.make_model(helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                                                [_out("y", TensorProto.FLOAT, [4])]),
                              opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path / "unique.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(GraphError, match="one entry per distinct value, a number known only at run time"):
        compile_graph(path, target="host")


def test_run_time_boxes_of_non_max_suppression_are_named(tmp_path):
    """The input computed at run time is named as the ONNX specification names it, not by position."""
    node = helper.make_node("NonMaxSuppression", ["b", "s", "limit"], ["selected"])
    limit = helper.make_tensor("limit", TensorProto.INT64, [1], [2])
    scores = helper.make_tensor("s", TensorProto.FLOAT, [1, 1, 3], [0.9, 0.8, 0.7])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 3, 4])],
                              [_out("selected", TensorProto.INT64, [2, 3])], initializer=[limit, scores])
    path = tmp_path / "nms.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    with pytest.raises(GraphError, match=r"\('boxes', here 'b', is computed at run time\)"):
        compile_graph(path, target="host")
