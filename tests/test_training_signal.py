"""Training-domain optimizer steps (Adagrad, Adam, Momentum), ai.onnx.ml.Binarizer, the window
functions and MelWeightMatrix, compiled for the host and compared with NumPy written here (and
ONNX's reference evaluator for the tables), on sizes that are not multiples of any vector width."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_oracle import expected, run_cases, run_on_host

TRAINING = "ai.onnx.preview.training"


def _model(node, inputs, outputs, initializers=(), domains=()) -> onnx.ModelProto:
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                              list(initializers))
    opsets = [helper.make_opsetid("", 18)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=opsets)


def _f32(rng, *shape, low=-1.0, high=1.0):
    return rng.uniform(low, high, shape).astype(np.float32)


# --- optimizers: NumPy of the ONNX definitions, in float64 --------------------------------------
def adagrad(r, t, x, g, h, decay_factor, epsilon, norm_coefficient):
    rate = r / (1 + t * decay_factor)
    gr = norm_coefficient * x + g
    h2 = h + gr * gr
    return x - rate * gr / (np.sqrt(h2) + epsilon), h2


def adam(r, t, x, g, v, h, alpha, beta, epsilon, norm_coefficient, norm_coefficient_post):
    gr = norm_coefficient * x + g
    v2 = alpha * v + (1 - alpha) * gr
    h2 = beta * h + (1 - beta) * gr * gr
    rate = r * math.sqrt(1 - beta ** t) / (1 - alpha ** t) if t > 0 else r
    return (1 - norm_coefficient_post) * (x - rate * v2 / (np.sqrt(h2) + epsilon)), v2, h2


def momentum(r, t, x, g, v, alpha, beta, norm_coefficient, mode):
    gr = norm_coefficient * x + g
    v2 = alpha * v + (beta if t > 0 else 1.0) * gr
    return (x - r * v2 if mode == "standard" else x - r * (gr + alpha * v2)), v2


SIZES = [(1,), (7,), (3, 5)]  # one tensor of each shape per node


def _optimizer_case(op, step, attrs, groups, rng):
    names = [f"{k}{i}" for k in groups for i in range(len(SIZES))]
    feeds = {"R": np.float32(0.1)}
    for k in groups:
        for i, s in enumerate(SIZES):
            feeds[f"{k}{i}"] = _f32(rng, *s, low=0.0 if k == "H" else -1.0)
    outs = [f"{k}{i}_new" for k in (groups[:1] + groups[2:]) for i in range(len(SIZES))]
    shapes = {o: SIZES[int(o[-5])] for o in outs}
    node = helper.make_node(op, ["R", "T"] + names, outs, domain=TRAINING, **attrs)
    model = _model(node, [("R", [])] + [(n, list(SIZES[int(n[-1])])) for n in names],
                   [(o, list(shapes[o])) for o in outs], [numpy_helper.from_array(np.array(step, np.int64), "T")],
                   [TRAINING])
    return model, feeds


def _cases():
    rng = np.random.default_rng(11)
    cases = {}
    for step in (0, 3):
        cases[f"adagrad_t{step}"] = _optimizer_case(
            "Adagrad", step, dict(decay_factor=0.1, epsilon=1e-5, norm_coefficient=0.001), "XGH", rng)
        cases[f"adam_t{step}"] = _optimizer_case(
            "Adam", step, dict(alpha=0.9, beta=0.99, epsilon=1e-6, norm_coefficient=0.01,
                               norm_coefficient_post=0.05), "XGVH", rng)
        for mode in ("standard", "nesterov"):
            cases[f"momentum_{mode}_t{step}"] = _optimizer_case(
                "Momentum", step, dict(alpha=0.9, beta=0.3, norm_coefficient=0.01, mode=mode), "XGV", rng)
    x = _f32(rng, 3, 17)
    x[0, :3] = [0.5, 0.25, 0.75]  # on the threshold: not above it
    node = helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.5)
    cases["binarizer"] = (_model(node, [("x", [3, 17])], [("y", [3, 17])], domains=["ai.onnx.ml"]), {"x": x})
    return cases


def _step(name: str) -> int:
    return int(name.rsplit("_t", 1)[1])


def _want(name, feeds):
    """NumPy of the case: outputs in the node's order."""
    f = {k: np.asarray(v, np.float64) for k, v in feeds.items()}
    if name == "binarizer":
        return [(f["x"] > 0.5).astype(np.float64)]
    n, r, t = len(SIZES), float(feeds["R"]), _step(name)
    if name.startswith("adagrad"):
        res = [adagrad(r, t, f[f"X{i}"], f[f"G{i}"], f[f"H{i}"], 0.1, 1e-5, 0.001) for i in range(n)]
    elif name.startswith("adam"):
        res = [adam(r, t, f[f"X{i}"], f[f"G{i}"], f[f"V{i}"], f[f"H{i}"], 0.9, 0.99, 1e-6, 0.01, 0.05)
               for i in range(n)]
    else:
        mode = name.split("_")[1]
        res = [momentum(r, t, f[f"X{i}"], f[f"G{i}"], f[f"V{i}"], 0.9, 0.3, 0.01, mode) for i in range(n)]
    return [res[i][k] for k in range(len(res[0])) for i in range(n)]


CASES = _cases()


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("training")
    return run_cases(CASES, folder)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_numpy(compiled, name):
    model, feeds = CASES[name]
    want = _want(name, feeds)
    got = compiled[name]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=2e-7, err_msg=f"{name} output {i}")
    # and ONNX's own reference evaluator agrees with the NumPy above
    for i, (r, w) in enumerate(zip(expected(model, feeds, reference=True), want)):
        np.testing.assert_allclose(r, w, rtol=2e-6, atol=2e-7, err_msg=f"{name} reference output {i}")


# --- tables computed at build time ---------------------------------------------------------------
def _table_model(op, size_inputs, out_shape, **attrs):
    """A graph with no inputs: the table's operands are initializers (int32 as in ONNX's tests)."""
    node = helper.make_node(op, [n for n, _ in size_inputs], ["y"], **attrs)
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in size_inputs]
    return _model(node, [], [("y", out_shape)], inits)


def _window(kind, size, periodic):
    """NumPy's symmetric windows; a periodic window of size N is the symmetric one of N + 1 without
    its last point. NumPy's Hamming uses 0.54/0.46, ONNX 25/46 and 21/46: written out here."""
    n = size + 1 if periodic else size
    if kind == "HannWindow":
        w = np.hanning(n)
    elif kind == "BlackmanWindow":
        w = np.blackman(n)
    else:
        w = 25 / 46 - 21 / 46 * np.cos(2 * np.pi * np.arange(n) / (n - 1))
    return w[:size]


TABLES = {f"{k.lower()}_{size}_{'periodic' if p else 'symmetric'}":
          (_table_model(k, [("size", np.int32(size))], [size], periodic=p), _window(k, size, p))
          for k in ("HannWindow", "HammingWindow", "BlackmanWindow") for size in (2, 7, 16) for p in (0, 1)}


def _mel_numpy(bins, length, rate, low, high):
    """Triangles between mel-spaced edges (spacing (high - low) / (bins + 2), ONNX's), floored to bins."""
    def mel(hz):
        return 2595 * np.log10(1 + hz / 700)
    points = mel(low) + np.arange(bins + 2) * (mel(high) - mel(low)) / (bins + 2)
    edges = np.floor((length + 1) * 700 * (10 ** (points / 2595) - 1) / rate).astype(int)
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):
        a, b, c = edges[i], edges[i + 1], edges[i + 2]
        for j in range(out.shape[0]):
            if a <= j <= b:
                out[j, i] = 1.0 if b == a else (j - a) / (b - a)
            if b <= j < c:
                out[j, i] = (c - j) / (c - b)
    return out


for bins, length, rate, low, high in ((8, 16, 8192, 0.0, 4096.0), (5, 63, 16000, 100.0, 7000.0)):
    operands = [("num_mel_bins", np.int32(bins)), ("dft_length", np.int32(length)), ("sample_rate", np.int32(rate)),
                ("lower_edge_hertz", np.float32(low)), ("upper_edge_hertz", np.float32(high))]
    TABLES[f"mel_{bins}_{length}"] = (_table_model("MelWeightMatrix", operands, [length // 2 + 1, bins]),
                                      _mel_numpy(bins, length, rate, low, high))


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tables")
    return run_on_host({n: m for n, (m, _) in TABLES.items()}, {n: {} for n in TABLES}, folder)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_table_matches_numpy(tables, name):
    model, want = TABLES[name]
    (got,) = tables[name]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=name)
    (reference,) = expected(model, {}, reference=True)
    np.testing.assert_allclose(got, reference, rtol=1e-6, atol=1e-7, err_msg=f"{name} (ONNX reference)")


# --- BatchNormalization in training mode ---------------------------------------------------------
def _batch_norm_training(x, s, b, mean, var, epsilon, momentum):
    axes = tuple(d for d in range(x.ndim) if d != 1)
    m, v = x.mean(axis=axes), x.var(axis=axes)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - m.reshape(shape)) / np.sqrt(v.reshape(shape) + epsilon) * s.reshape(shape) + b.reshape(shape)
    return y, mean * momentum + m * (1 - momentum), var * momentum + v * (1 - momentum)


BN_SHAPES = {"bn_nchw": ((2, 3, 5, 7), 1e-5, 0.9), "bn_rank2": ((3, 5), 1e-3, 0.9), "bn_rank3": ((1, 4, 9), 1e-2, 0.7)}


def _bn_case(shape, epsilon, momentum):
    rng = np.random.default_rng(shape[-1])
    c = shape[1]
    feeds = {"x": _f32(rng, *shape, low=-2.0, high=3.0), "s": _f32(rng, c), "b": _f32(rng, c),
             "mean": _f32(rng, c), "var": _f32(rng, c, low=0.5, high=2.0)}
    node = helper.make_node("BatchNormalization", list(feeds), ["y", "running_mean", "running_var"],
                            training_mode=1, epsilon=epsilon, momentum=momentum)
    return _model(node, [(n, list(v.shape)) for n, v in feeds.items()],
                  [("y", list(shape)), ("running_mean", [c]), ("running_var", [c])]), feeds


BN_CASES = {n: _bn_case(*spec) for n, spec in BN_SHAPES.items()}


@pytest.fixture(scope="module")
def batch_norms(tmp_path_factory):
    folder = tmp_path_factory.mktemp("batch_norm_training")
    return run_cases(BN_CASES, folder)


@pytest.mark.parametrize("name", sorted(BN_CASES))
def test_batch_norm_training_matches_numpy(batch_norms, name):
    model, feeds = BN_CASES[name]
    _, epsilon, momentum = BN_SHAPES[name]
    want = _batch_norm_training(*(np.asarray(feeds[k], np.float64) for k in ("x", "s", "b", "mean", "var")),
                                epsilon, momentum)
    for i, (g, w) in enumerate(zip(batch_norms[name], want)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{name} output {i}")
    for i, (r, w) in enumerate(zip(expected(model, feeds, reference=True), want)):
        np.testing.assert_allclose(r, w, rtol=1e-5, atol=1e-6, err_msg=f"{name} reference output {i}")
