"""Independent NumPy oracle for the example graphs in graphs/.

Written from the graph files and the ONNX operator definitions, not from tinsmith: nothing
here imports the code under test. Weights are read (or re-created from their seeds) exactly
as each graph file declares them, stored as float32 like the generated code stores them,
and every forward pass is computed in float64.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

GRAPHS = Path(__file__).resolve().parents[1] / "graphs"


def random_constant(kind: str, shape, seed: int, scale: float) -> np.ndarray:
    """A seeded random constant as the graph format defines it, cast to float32."""
    rng = np.random.default_rng(seed)
    if kind == "normal":
        data = rng.standard_normal(tuple(shape)) * scale
    elif kind == "uniform":
        data = rng.uniform(-scale, scale, tuple(shape))
    else:
        raise ValueError(kind)
    return data.astype(np.float32)


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).astype(np.float64)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """ONNX LayerNormalization over the last axis (its defaults: axis=-1, epsilon=1e-5)."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(x: np.ndarray) -> np.ndarray:
    return _erf(np.asarray(x, dtype=np.float64))


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact Gelu: 0.5 x (1 + erf(x / sqrt 2))."""
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


# --- mlp.yaml: Gemm -> Relu -> Gemm -> Softmax, weights from weights/mlp.npz ----------------

def mlp_weights(npz: Path = GRAPHS / "weights" / "mlp.npz") -> dict[str, np.ndarray]:
    with np.load(npz) as archive:
        return {k: archive[k] for k in ("w1", "b1", "w2", "b2")}


def mlp(x: np.ndarray, weights: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    w = {k: _f64(v) for k, v in (weights or mlp_weights()).items()}
    h = np.maximum(_f64(x) @ w["w1"] + w["b1"], 0.0)
    return {"probs": softmax(h @ w["w2"] + w["b2"], axis=-1)}


# --- encoder.yaml: pre-norm transformer block, seeded random weights ------------------------

# name -> (distribution, shape, seed, scale), as declared in encoder.yaml
ENCODER_CONSTANTS = {
    "ln1_scale": ("uniform", [16], 1, 1.0),
    "ln1_bias": ("normal", [16], 2, 0.1),
    "wq": ("normal", [16, 16], 3, 0.25),
    "wk": ("normal", [16, 16], 4, 0.25),
    "wv": ("normal", [16, 16], 5, 0.25),
    "wo": ("normal", [16, 16], 6, 0.25),
    "ln2_scale": ("uniform", [16], 7, 1.0),
    "ln2_bias": ("normal", [16], 8, 0.1),
    "w_up": ("normal", [32, 16], 9, 0.25),
    "b_up": ("normal", [32], 10, 0.1),
    "w_down": ("normal", [32, 16], 11, 0.18),
    "b_down": ("normal", [16], 12, 0.1),
}


def encoder(tokens: np.ndarray) -> dict[str, np.ndarray]:
    c = {name: _f64(random_constant(*spec)) for name, spec in ENCODER_CONSTANTS.items()}
    x = _f64(tokens)
    n1 = layer_norm(x, c["ln1_scale"], c["ln1_bias"])
    q, k, v = n1 @ c["wq"], n1 @ c["wk"], n1 @ c["wv"]
    p = softmax((q @ k.T) * np.float64(np.float32(0.25)), axis=-1)
    r1 = x + (p @ v) @ c["wo"]
    n2 = layer_norm(r1, c["ln2_scale"], c["ln2_bias"])
    u = gelu(n2 @ c["w_up"].T + c["b_up"])  # w_up is [out, in]: Linear with transB=1
    # w_down is declared [32, 16] = [in, out] and used without transB
    d = u @ c["w_down"] + c["b_down"]
    return {"encoded": r1 + d}


# --- branches.yaml: independent elementwise branches joined by Concat ------------------------

def branches(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    x, y = _f64(x), _f64(y)
    t = np.tanh(x)
    e = np.exp(y)
    dd = sigmoid(x) * t - x / e
    sm = erf(t ** 2.0)
    cat = np.concatenate([dd, sm], axis=1)  # [2, 6, 4]
    return {"merged": cat.reshape(2, 24), "stats": cat.mean(axis=2)}


ORACLES = {"mlp": mlp, "encoder": encoder, "branches": branches}
# input name -> shape for every example graph, as declared in its file
INPUTS = {
    "mlp": {"x": (1, 64)},
    "encoder": {"tokens": (8, 16)},
    "branches": {"x": (2, 3, 4), "y": (4,)},
}


def seeded_inputs(graph: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal float32 inputs for an example graph."""
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in INPUTS[graph].items()}


def evaluate(graph: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs of an example graph, in float64."""
    return ORACLES[graph](**inputs)
