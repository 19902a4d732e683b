"""Operators Tinsmith has no primitive or builder for, but which ONNX defines as a function of
other operators (here LinearAttention, opset 27, whose body runs a Scan over the sequence): the
importer inlines the function body ONNX gives for the node. Compiled for the host and compared
with ONNX's reference evaluator, on shapes other than the conformance suite's."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_oracle import assert_close, expected, run_cases


def _model(batch, seq, heads, size, rule) -> onnx.ModelProto:
    node = helper.make_node("LinearAttention", ["query", "key", "value"], ["output", "present_state"],
                            q_num_heads=heads, kv_num_heads=heads, update_rule=rule)
    width = heads * size
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [batch, seq, width])
                      for n in ("query", "key", "value")],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, seq, width]),
         helper.make_tensor_value_info("present_state", TensorProto.FLOAT, [batch, heads, size, size])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)])


def _case(batch, seq, heads, size, rule, seed):
    rng = np.random.default_rng(seed)
    feeds = {n: (rng.standard_normal((batch, seq, heads * size)) * 0.5).astype(np.float32)
             for n in ("query", "key", "value")}
    return _model(batch, seq, heads, size, rule), feeds


CASES = {"linear_attention_1x5x2x3": _case(1, 5, 2, 3, "linear", 1),
         "linear_attention_2x3x1x4": _case(2, 3, 1, 4, "linear", 2)}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("function_bodies"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_onnx_reference(compiled, name):
    model, feeds = CASES[name]
    for i, (g, w) in enumerate(zip(compiled[name], expected(model, feeds, reference=True))):
        assert g.shape == w.shape
        assert_close(g, w, f"{name} output {i}")
