"""Zero-size tensors end to end: graph inputs and outputs with a zero dimension (as ONNX allows:
an empty slice, a reduction over an empty set), compiled for the host and compared with ONNX
Runtime. An empty value holds no data, so whatever reads only constants and empty values is
computed when the graph is built; the generated API still declares every input and output."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_oracle import expected, run_cases


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    """A model whose outputs take the types ONNX shape inference gives them."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [], list(initializers))
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    inferred = {v.name: v for v in model.graph.value_info}
    model.graph.output.extend([inferred[n] for n in outputs])
    del model.graph.value_info[:]
    return model


def _axes(name, values):
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


REDUCTIONS = ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ReduceMean"]


def _cases() -> dict[str, tuple[onnx.ModelProto, dict[str, np.ndarray]]]:
    rng = np.random.default_rng(3)
    empty = np.zeros((2, 0, 3), np.float32)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    cases = {}
    for op in REDUCTIONS:
        if op == "ReduceMean":  # 0/0: NaN in ONNX Runtime too; keep the empty axis, reduce another
            node = helper.make_node(op, ["e", "axes"], ["y"], keepdims=1)
            cases[f"zero_{op.lower()}"] = (_model([node], [("e", [2, 0, 3])], ["y"], [_axes("axes", [2])]),
                                           {"e": empty})
            continue
        node = helper.make_node(op, ["e", "axes"], ["y"], keepdims=1)
        cases[f"zero_{op.lower()}"] = (_model([node], [("e", [2, 0, 3])], ["y"], [_axes("axes", [1])]),
                                       {"e": empty})
    # an empty output next to a computed one, an empty input a kernel never reads
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["s"]),
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Reshape", ["e", "shape"], ["t"], allowzero=1)]
    inits = [_axes("starts", [4]), _axes("ends", [4]), _axes("axes", [1]), _axes("shape", [0, 3, 2])]
    cases["zero_slice_reshape"] = (_model(nodes, [("x", [3, 5]), ("e", [2, 0, 3])], ["s", "r", "t"], inits),
                                   {"x": x, "e": empty})
    # an empty operand of a node that also reads run-time data
    nodes = [helper.make_node("Concat", ["x", "e2"], ["c"], axis=1), helper.make_node("Shape", ["e2"], ["n"])]
    cases["zero_concat"] = (_model(nodes, [("x", [3, 5]), ("e2", [3, 0])], ["c", "n"]),
                            {"x": x, "e2": np.zeros((3, 0), np.float32)})
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("zero_size")
    return run_cases(CASES, folder)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_onnx_runtime(compiled, name):
    model, feeds = CASES[name]
    want = expected(model, feeds)
    got = compiled[name]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, (name, i)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=0, equal_nan=True, err_msg=f"{name} output {i}")
        else:
            np.testing.assert_array_equal(g, w.astype(g.dtype), err_msg=f"{name} output {i}")
