"""A recurrent keyword spotter and a small transformer block as ONNX files with seeded weights.

    python models/make_recurrent.py            # writes models/NAME.onnx, checks each with ONNX Runtime
    python models/make_recurrent.py -o DIR     # writes DIR/NAME.onnx instead

Models (float32, batch 1, static shapes, built with onnx.helper only):
  gru_kws            GRU keyword spotter: 1x25x10 MFCC frames (batch first) -> time-major
                     Transpose -> GRU (hidden 24, linear_before_reset, as PyTorch exports it)
                     -> its last state -> Gemm 12 -> 12 class probabilities (opset 17)
  transformer_block  pre-norm decoder block: 1x8x32 tokens -> RMSNormalization -> Q, K, V
                     projections -> RotaryEmbedding on Q and K -> causal grouped-query
                     Attention (4 query heads, 2 key/value heads of 8) -> output projection
                     -> residual -> RMSNormalization -> MLP 32-64-32 with Gelu -> residual
                     (opset 23, where Attention, RotaryEmbedding and RMSNormalization appeared)

The graphs/gru_kws.yaml and graphs/transformer_block.yaml graphs are these files imported by
`python -m tinsmith import-onnx`. Everything derives from fixed seeds, so the files are the same
on every run.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
IR_VERSION = 10  # opset 23 needs IR 10 or later


def _weights(rng: np.random.Generator, shape, fan_in: int) -> np.ndarray:
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


def gru_kws() -> onnx.ModelProto:
    """GRU keyword spotter (see the module docstring)."""
    rng = np.random.default_rng(2024)
    steps, features, hidden, classes = 25, 10, 24, 12
    inits = [
        numpy_helper.from_array(_weights(rng, (1, 3 * hidden, features), features), "gru_W"),
        numpy_helper.from_array(_weights(rng, (1, 3 * hidden, hidden), hidden), "gru_R"),
        numpy_helper.from_array((0.1 * rng.standard_normal((1, 6 * hidden))).astype(np.float32), "gru_B"),
        numpy_helper.from_array(_weights(rng, (classes, hidden), hidden) * 2, "fc_W"),
        numpy_helper.from_array((0.1 * rng.standard_normal(classes)).astype(np.float32), "fc_b"),
        numpy_helper.from_array(np.array([1, hidden], np.int64), "flat_shape"),
    ]
    nodes = [
        helper.make_node("Transpose", ["mfcc"], ["frames"], name="time_major", perm=[1, 0, 2]),
        helper.make_node("GRU", ["frames", "gru_W", "gru_R", "gru_B"], ["", "gru_h"], name="gru",
                         hidden_size=hidden, linear_before_reset=1),
        helper.make_node("Reshape", ["gru_h", "flat_shape"], ["features"], name="flatten"),
        helper.make_node("Gemm", ["features", "fc_W", "fc_b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "gru_kws",
        [helper.make_tensor_value_info("mfcc", TensorProto.FLOAT, [1, steps, features])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, classes])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
                             producer_name="tinsmith/models/make_recurrent.py")


def transformer_block() -> onnx.ModelProto:
    """Pre-norm decoder block with rotary embeddings and grouped-query attention."""
    rng = np.random.default_rng(2025)
    seq, dim, heads, kv_heads, mlp = 8, 32, 4, 2, 64
    head = dim // heads
    inv_freq = 1.0 / (10000 ** (np.arange(0, head, 2) / head))
    angles = np.outer(np.arange(seq), inv_freq)  # [seq, head/2]
    inits = [
        numpy_helper.from_array((1 + 0.1 * rng.standard_normal(dim)).astype(np.float32), "norm1_scale"),
        numpy_helper.from_array(_weights(rng, (dim, dim), dim), "wq"),
        numpy_helper.from_array(_weights(rng, (dim, kv_heads * head), dim), "wk"),
        numpy_helper.from_array(_weights(rng, (dim, kv_heads * head), dim), "wv"),
        numpy_helper.from_array(np.cos(angles).astype(np.float32), "rope_cos"),
        numpy_helper.from_array(np.sin(angles).astype(np.float32), "rope_sin"),
        numpy_helper.from_array(np.arange(seq, dtype=np.int64).reshape(1, seq), "positions"),
        numpy_helper.from_array(_weights(rng, (dim, dim), dim), "wo"),
        numpy_helper.from_array((1 + 0.1 * rng.standard_normal(dim)).astype(np.float32), "norm2_scale"),
        numpy_helper.from_array(_weights(rng, (dim, mlp), dim), "w1"),
        numpy_helper.from_array((0.1 * rng.standard_normal(mlp)).astype(np.float32), "b1"),
        numpy_helper.from_array(_weights(rng, (mlp, dim), mlp), "w2"),
        numpy_helper.from_array((0.1 * rng.standard_normal(dim)).astype(np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("RMSNormalization", ["x", "norm1_scale"], ["h1"], name="norm1", epsilon=1e-5),
        helper.make_node("MatMul", ["h1", "wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["h1", "wk"], ["k"], name="k_proj"),
        helper.make_node("MatMul", ["h1", "wv"], ["v"], name="v_proj"),
        helper.make_node("RotaryEmbedding", ["q", "rope_cos", "rope_sin", "positions"], ["q_rot"],
                         name="q_rope", num_heads=heads),
        helper.make_node("RotaryEmbedding", ["k", "rope_cos", "rope_sin", "positions"], ["k_rot"],
                         name="k_rope", num_heads=kv_heads),
        helper.make_node("Attention", ["q_rot", "k_rot", "v"], ["attn"], name="attention",
                         q_num_heads=heads, kv_num_heads=kv_heads, is_causal=1),
        helper.make_node("MatMul", ["attn", "wo"], ["attn_out"], name="o_proj"),
        helper.make_node("Add", ["x", "attn_out"], ["r1"], name="residual1"),
        helper.make_node("RMSNormalization", ["r1", "norm2_scale"], ["h2"], name="norm2", epsilon=1e-5),
        helper.make_node("MatMul", ["h2", "w1"], ["m1"], name="fc1"),
        helper.make_node("Add", ["m1", "b1"], ["m1b"], name="fc1_bias"),
        helper.make_node("Gelu", ["m1b"], ["m2"], name="gelu"),
        helper.make_node("MatMul", ["m2", "w2"], ["m3"], name="fc2"),
        helper.make_node("Add", ["m3", "b2"], ["m3b"], name="fc2_bias"),
        helper.make_node("Add", ["r1", "m3b"], ["y"], name="residual2"),
    ]
    graph = helper.make_graph(
        nodes, "transformer_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, dim])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, dim])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=IR_VERSION,
                             producer_name="tinsmith/models/make_recurrent.py")


MODELS = {"gru_kws": gru_kws, "transformer_block": transformer_block}


def sample_input(name: str, seed: int = 0) -> np.ndarray:
    """A standard-normal input of the model's shape."""
    shape = {"gru_kws": (1, 25, 10), "transformer_block": (1, 8, 32)}[name]
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def write_models(folder: Path) -> dict[str, Path]:
    """Write every model as folder/NAME.onnx (checked with onnx.checker); returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, make in MODELS.items():
        model = make()
        onnx.checker.check_model(model, full_check=True)
        paths[name] = folder / f"{name}.onnx"
        paths[name].write_bytes(model.SerializeToString())
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out-dir", type=Path, default=HERE)
    args = parser.parse_args(argv)
    paths = write_models(args.out_dir)
    import onnxruntime as ort
    for name, path in paths.items():
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (y,) = session.run(None, {session.get_inputs()[0].name: sample_input(name)})
        print(f"{path}: output {list(y.shape)}, y[:3] = {np.asarray(y).reshape(-1)[:3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
