"""Attention, RotaryEmbedding, RMSNormalization, GroupNormalization and the loss builders
(codegen/builders/attention.py, losses.py) compiled from ONNX and compared with ONNX Runtime;
the example transformer block graphs/transformer_block.yaml (models/make_recurrent.py) on the
host and the emulated Cortex-M4 against ONNX Runtime on the model it was imported from.

Sizes are odd on purpose (head size 5, 3 heads, sequence 7 against 9 keys) so that no vector
width divides them. Tolerance: rtol 1e-4 plus 1e-5 of the output's largest magnitude
(tests/onnx_oracle.py).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from models import make_recurrent
from onnx_oracle import HAS_FIRMWARE_TOOLS, assert_close, check_example_graph, expected, run_on_host

pytest.importorskip("onnxruntime")


def one_node(op: str, inputs: dict, constants: dict, outputs: dict, opset: int = 23, seed: int = 0, **attrs):
    """A model of one node: `inputs` (name -> shape) fed at run time with seeded normal values,
    `constants` (name -> array) as initializers, `outputs` name -> shape."""
    rng = np.random.default_rng(seed)
    names = list(inputs) + list(constants)
    order = attrs.pop("order", names)
    node = helper.make_node(op, order, list(outputs), **attrs)
    graph = helper.make_graph(
        [node], f"{op.lower()}_model",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    return model, {n: rng.standard_normal(s).astype(np.float32) for n, s in inputs.items()}


def _cases():
    rng = np.random.default_rng(5)
    b, h, kvh, s, kv, d = 2, 3, 3, 7, 9, 5
    cases = {
        "attention_4d_cross": one_node("Attention", {"Q": [b, h, s, d], "K": [b, kvh, kv, d], "V": [b, kvh, kv, 4]},
                                       {}, {"Y": [b, h, s, 4]}),
        "attention_3d_gqa_causal": one_node("Attention", {"Q": [b, s, 6 * d], "K": [b, s, 2 * d], "V": [b, s, 2 * 3]},
                                            {}, {"Y": [b, s, 6 * 3]}, q_num_heads=6, kv_num_heads=2, is_causal=1),
        "attention_float_mask_softcap_scale": one_node(
            "Attention", {"Q": [1, 2, s, d], "K": [1, 2, kv, d], "V": [1, 2, kv, d], "attn_mask": [s, kv]}, {},
            {"Y": [1, 2, s, d]}, softcap=2.5, scale=0.3),
        "attention_bool_mask_past": one_node(
            "Attention", {"Q": [1, 2, 3, d], "K": [1, 2, 3, d], "V": [1, 2, 3, d], "past_key": [1, 2, 4, d],
                          "past_value": [1, 2, 4, d]},
            {"attn_mask": rng.random((3, 7)) > 0.3},
            {"Y": [1, 2, 3, d], "present_key": [1, 2, 7, d], "present_value": [1, 2, 7, d]},
            order=["Q", "K", "V", "attn_mask", "past_key", "past_value"], is_causal=1),
        "attention_qk_after_softmax": one_node(
            "Attention", {"Q": [1, 1, 4, 3], "K": [1, 1, 4, 3], "V": [1, 1, 4, 3]}, {},
            {"Y": [1, 1, 4, 3], "present_key": [1, 1, 4, 3], "present_value": [1, 1, 4, 3],
             "qk": [1, 1, 4, 4]}, qk_matmul_output_mode=3),
        "rotary_3d_positions": one_node(
            "RotaryEmbedding", {"X": [2, 5, 3 * 6]},
            {"cos": rng.random((8, 3)).astype(np.float32), "sin": rng.random((8, 3)).astype(np.float32),
             "pos": np.array([[0, 1, 2, 3, 4], [7, 6, 5, 4, 3]], np.int64)}, {"Y": [2, 5, 18]}, num_heads=3),
        "rotary_4d_interleaved_partial": one_node(
            "RotaryEmbedding", {"X": [1, 2, 3, 10], "cos": [1, 3, 3], "sin": [1, 3, 3]}, {}, {"Y": [1, 2, 3, 10]},
            interleaved=1, rotary_embedding_dim=6),
        "rms_norm_axis1": one_node("RMSNormalization", {"X": [3, 4, 5]},
                                   {"scale": rng.standard_normal((4, 5)).astype(np.float32)}, {"Y": [3, 4, 5]},
                                   axis=1, epsilon=1e-3),
        "group_norm": one_node("GroupNormalization", {"X": [2, 6, 3, 5]},
                               {"scale": rng.standard_normal(6).astype(np.float32),
                                "bias": rng.standard_normal(6).astype(np.float32)}, {"Y": [2, 6, 3, 5]},
                               opset=21, num_groups=3),
        "nll_weighted_mean_ignore": one_node(
            "NegativeLogLikelihoodLoss", {"x": [4, 5, 3]},
            {"t": np.array([[0, 4, 2], [1, 1, 3], [2, 0, 4], [3, 3, 3]], np.int64),
             "w": rng.random(5).astype(np.float32)}, {"loss": []}, ignore_index=3),
        "sce_none_log_prob": one_node(
            "SoftmaxCrossEntropyLoss", {"x": [3, 7]}, {"t": np.array([6, 0, 2], np.int64)},
            {"loss": [3], "log_prob": [3, 7]}, reduction="none"),
    }
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    for name, (model, _) in CASES.items():
        model.graph.name = name
    return run_on_host({n: m for n, (m, _) in CASES.items()}, {n: f for n, (_, f) in CASES.items()},
                       tmp_path_factory.mktemp("attention"))


@pytest.mark.parametrize("name", list(CASES))
def test_builder_matches_onnx_runtime(results, name):
    model, feeds = CASES[name]
    want = expected(model, feeds)
    for output, g, w in zip(model.graph.output, results[name], want):
        assert g.shape == np.shape(w), (output.name, g.shape, np.shape(w))
        assert_close(g, w, f"{name}: {output.name}")


# --- the example transformer block, host and Cortex-M4 -----------------------------------------
needs_firmware = pytest.mark.skipif(not HAS_FIRMWARE_TOOLS,
                                    reason="needs arm-none-eabi-g++ and qemu-system-arm (sh setup.sh installs them)")


@needs_firmware
@pytest.mark.parametrize("where", ["host", "cortex-m4"])
def test_transformer_block_matches_onnx_runtime(tmp_path_factory, where):
    inputs = [make_recurrent.sample_input("transformer_block", seed) for seed in range(3)]
    check_example_graph("transformer_block", make_recurrent.transformer_block(), inputs, where,
                        tmp_path_factory.getbasetemp())
