"""ai.onnx.ml.TreeEnsemble (nested Where selections) compiled for the host and compared with ONNX's
reference evaluator (and NumPy for the post transform, which that evaluator skips): three trees over five features, every comparison mode, set membership,
missing values (NaN) routed per node, sum and average, no post transform, softmax and logistic."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_oracle import assert_close, expected, run_cases

ML = "ai.onnx.ml"


def _model(aggregate: int, post: int) -> onnx.ModelProto:
    # tree 0: nodes 0-2; tree 1: nodes 3-4; tree 2: node 5 (a stump)
    modes = [0, 6, 2, 1, 5, 3]
    node = helper.make_node(
        "TreeEnsemble", ["x"], ["y"], domain=ML, aggregate_function=aggregate, post_transform=post, n_targets=3,
        tree_roots=[0, 3, 5],
        nodes_featureids=[0, 1, 2, 3, 4, 0], nodes_modes=numpy_helper.from_array(np.array(modes, np.uint8)),
        nodes_splits=numpy_helper.from_array(np.array([0.1, np.nan, -0.4, 0.7, 1.0, -1.2], np.float32)),
        nodes_truenodeids=[1, 0, 2, 4, 3, 6], nodes_trueleafs=[0, 1, 1, 0, 1, 1],
        nodes_falsenodeids=[2, 1, 3, 5, 4, 7], nodes_falseleafs=[0, 1, 1, 1, 1, 1],
        nodes_missing_value_tracks_true=[1, 0, 0, 0, 1, 1],
        membership_values=numpy_helper.from_array(np.array([1.0, 2.0, -1.0, np.nan], np.float32)),
        leaf_targetids=[0, 1, 2, 0, 1, 2, 2, 1],
        leaf_weights=numpy_helper.from_array(np.array([0.5, -1.5, 2.0, 3.0, -0.25, 1.25, 0.75, -2.0], np.float32)))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [9, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [9, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(ML, 5)])


X = np.random.default_rng(3).standard_normal((9, 5)).astype(np.float32)
X[1, 1], X[2, 1], X[3, 1] = 1.0, 2.0, -1.0  # set members
X[4, 0], X[5, 4], X[6, 0], X[7, 1] = np.nan, np.nan, np.nan, np.nan  # missing values
X[8, 4] = 1.0  # equal to a split
CASES = {f"trees_{a}_{p}": (_model(a, p), {"x": X}) for a in (0, 1) for p in (0, 1, 2)}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tree_ensemble")
    return run_cases(CASES, folder)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_onnx_reference(compiled, name):
    model, feeds = CASES[name]
    # ONNX's reference evaluator leaves post_transform out: it is applied here, in NumPy
    (raw,) = expected(model, feeds, reference=True)
    post = int(name.rsplit("_", 1)[1])
    if post == 1:
        e = np.exp(raw - raw.max(axis=1, keepdims=True))
        want = e / e.sum(axis=1, keepdims=True)
    else:
        want = 1 / (1 + np.exp(-raw)) if post == 2 else raw
    (got,) = compiled[name]
    assert got.shape == want.shape
    assert_close(got, want, name)
