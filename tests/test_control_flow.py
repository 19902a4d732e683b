"""If, Loop and Scan resolved when the graph is built (If on a condition computed from shapes,
nested If reading its enclosing branch's values, Loop unrolled with carried values and scan
outputs, Scan over two inputs along different axes and directions),
compiled for the host and compared with ONNX Runtime; a run-time condition is an error."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tinsmith.errors import GraphError
from tinsmith.pipeline import compile_graph
from onnx_oracle import assert_close, expected, run_cases

F = TensorProto.FLOAT


def _vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                             opset_imports=[helper.make_opsetid("", 18)])


def _if_model() -> onnx.ModelProto:
    """y = x * 2 + 1 if x has 3 rows (an inner If adds 1 when it has 5 columns), else x - 1."""
    inner = helper.make_node("If", ["wide"], ["plus"], then_branch=helper.make_graph(
        [helper.make_node("Add", ["twice", "one"], ["inner_then"])], "inner_then", [], [_vi("inner_then", [3, 5])]),
        else_branch=helper.make_graph([helper.make_node("Identity", ["twice"], ["inner_else"])], "inner_else", [],
                                      [_vi("inner_else", [3, 5])]))
    then = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["twice"]), inner,
                              helper.make_node("Identity", ["plus"], ["then_out"])], "then", [], [_vi("then_out", [3, 5])])
    other = helper.make_graph([helper.make_node("Sub", ["x", "one"], ["else_out"])], "else", [], [_vi("else_out", [3, 5])])
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["rows"], axis=0),
             helper.make_node("Equal", ["rows", "three"], ["cond"]),
             helper.make_node("Gather", ["shape", "one_i"], ["cols"], axis=0),
             helper.make_node("Equal", ["cols", "five"], ["wide"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             (("zero", 0), ("one_i", 1), ("three", 3), ("five", 5))]
    inits += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("one", 1.0), ("two", 2.0))]
    return _model(nodes, [_vi("x", [3, 5])], [_vi("y", [3, 5])], inits)


def _loop_model(trips: int) -> onnx.ModelProto:
    """acc = acc * 0.5 + x[i] for i < trips (x's rows), scanning acc and i * acc."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
         helper.make_node("Mul", ["acc_in", "half"], ["scaled"]),
         helper.make_node("Add", ["scaled", "row"], ["acc_out"]),
         helper.make_node("Cast", ["i"], ["i_f"], to=F),
         helper.make_node("Mul", ["acc_out", "i_f"], ["scan"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("acc_in", [7])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("acc_out", [7]), _vi("scan", [7])])
    nodes = [helper.make_node("Loop", ["trips", "", "acc0"], ["acc", "scans"], body=body)]
    inits = [numpy_helper.from_array(np.array(trips, np.int64), "trips"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    return _model(nodes, [_vi("x", [4, 7]), _vi("acc0", [7])], [_vi("acc", [7]), _vi("scans", [trips, 7])], inits)


def _scan_model() -> onnx.ModelProto:
    """Running sum and product over x's rows (read backwards), and over y's columns; scan outputs
    stacked along axis 0 (reversed) and axis 1."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "row"], ["s_out"]),
         helper.make_node("Mul", ["p_in", "col"], ["p_out"]),
         helper.make_node("Sub", ["s_out", "p_out"], ["diff"]),
         helper.make_node("Identity", ["s_out"], ["running"])],
        "body", [_vi("s_in", [4]), _vi("p_in", [4]), _vi("row", [4]), _vi("col", [4])],
        [_vi("s_out", [4]), _vi("p_out", [4]), _vi("diff", [4]), _vi("running", [4])])
    node = helper.make_node("Scan", ["s0", "p0", "x", "y"], ["s", "p", "diffs", "sums"], body=body,
                            num_scan_inputs=2, scan_input_axes=[0, 1], scan_input_directions=[1, 0],
                            scan_output_axes=[0, -1], scan_output_directions=[1, 0])
    return _model([node], [_vi("s0", [4]), _vi("p0", [4]), _vi("x", [3, 4]), _vi("y", [4, 3])],
                  [_vi("s", [4]), _vi("p", [4]), _vi("diffs", [3, 4]), _vi("sums", [4, 3])])


RNG = np.random.default_rng(5)
CASES = {
    "if_nested": (_if_model(), {"x": RNG.standard_normal((3, 5)).astype(np.float32)}),
    "loop_3": (_loop_model(3), {"x": RNG.standard_normal((4, 7)).astype(np.float32),
                                "acc0": RNG.standard_normal(7).astype(np.float32)}),
    "loop_1": (_loop_model(1), {"x": RNG.standard_normal((4, 7)).astype(np.float32),
                                "acc0": RNG.standard_normal(7).astype(np.float32)}),
    "scan_two_states": (_scan_model(), {k: RNG.standard_normal(v).astype(np.float32) for k, v in
                                        (("s0", 4), ("p0", 4), ("x", (3, 4)), ("y", (4, 3)))}),
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("control_flow")
    return run_cases(CASES, folder)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_onnx_runtime(compiled, name):
    model, feeds = CASES[name]
    want = expected(model, feeds)
    for i, (g, w) in enumerate(zip(compiled[name], want)):
        assert g.shape == w.shape
        assert_close(g, w, f"{name} output {i}")


def test_a_run_time_condition_is_an_error(tmp_path):
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "b", [], [_vi("b", [2])])
    model = _model([helper.make_node("Greater", ["s", "zero"], ["cond"]),
                    helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)],
                   [_vi("x", [2]), _vi("s", [])], [_vi("y", [2])],
                   [numpy_helper.from_array(np.array(0, np.float32), "zero")])
    path = tmp_path / "runtime_if.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(GraphError, match="If's condition must be known when the graph is built"):
        compile_graph(path, target="host")
