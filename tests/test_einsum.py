"""The Einsum builder (tinsmith.builders.einsum): expanded graphs evaluated with the primitives'
NumPy references against numpy.einsum in float64 (rtol 1e-5, atol 1e-5: sums of at most 60
float32 products), the primitives it expands into, and its errors. Compiled Einsum models are
compared with ONNX Runtime in test_onnx_import.py."""
from __future__ import annotations

import numpy as np
import pytest

from tinsmith.errors import GraphError
from tinsmith.expand import expand_graph
from tinsmith.load import load_graph_spec
from tinsmith.optimize import optimize
from tinsmith.reference import evaluate


def lowered(tmp_path, equation: str, shapes):
    names = [f"x{i}" for i in range(len(shapes))]
    inputs = "\n".join(f"  {n}: {{dtype: float32, shape: {list(s)}}}" for n, s in zip(names, shapes))
    path = tmp_path / "g.yaml"
    path.write_text(f"graph: g\ninputs:\n{inputs}\noutputs: [y]\nnodes:\n"
                    f"  - {{op: Einsum, name: e, inputs: [{', '.join(names)}], outputs: [y], "
                    f"attrs: {{equation: '{equation}'}}}}\n")
    return optimize(expand_graph(load_graph_spec(path))), names


@pytest.mark.parametrize("equation, shapes, ops", [
    ("ij,jk->ik", [(2, 3), (3, 4)], ["MatMul"]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)], ["MatMul"]),
    ("i,i", [(5,), (5,)], ["Reshape", "Reshape", "MatMul", "Reshape"]),
    ("ij->i", [(3, 4)], ["ReduceSum"]),
    ("ij->ji", [(3, 4)], ["Transpose"]),
    ("ji", [(2, 3)], ["Transpose"]),  # implicit output: letters in alphabetical order
    ("ii->i", [(3, 3)], ["Reshape", "Slice"]),
    ("ii", [(3, 3)], ["Reshape", "Slice", "ReduceSum"]),
    ("...ii->...i", [(2, 3, 3)], ["Reshape", "Slice"]),
    ("iij->j", [(2, 2, 3)], ["Transpose", "Reshape", "Slice", "ReduceSum"]),
    ("i,j->ij", [(3,), (4,)], ["Reshape", "Reshape", "MatMul"]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], ["MatMul", "MatMul"]),
    ("...ij,...jk->...ik", [(1, 2, 3), (4, 3, 5)], ["MatMul"]),  # broadcast '...'
    ("abc,cd->abd", [(2, 3, 4), (4, 5)], ["Reshape", "MatMul", "Reshape"]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)],
     ["Transpose", "Reshape", "MatMul", "Reshape", "Reshape", "MatMul", "Reshape"]),
    ("ijk,ik->j", [(2, 3, 4), (2, 4)], ["Transpose", "Reshape", "Reshape", "MatMul", "Reshape"]),
    ("b i d, b j d -> b i j", [(2, 3, 4), (2, 5, 4)], ["Transpose", "MatMul"]),
])
def test_einsum_matches_numpy(tmp_path, equation, shapes, ops):
    g, names = lowered(tmp_path, equation, shapes)
    rng = np.random.default_rng(len(equation))
    xs = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}
    want = np.einsum(equation.replace(" ", ""), *[xs[n].astype(np.float64) for n in names])
    got = evaluate(g, xs)["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert [n.op for n in g.nodes] == ops


@pytest.mark.parametrize("equation, shapes, message", [
    ("ij,jk", [(2, 3)], "equation 'ij,jk' has 2 input terms for 1 inputs"),
    ("ijk->i", [(2, 3)], "term 'ijk' has 3 labels but input 0 has rank 2"),
    ("ij->ik", [(2, 3)], "output 'ik' must name each input label at most once (unknown label 'k')"),
    ("i2->i", [(2, 3)], "term 'i2' (input 0) must be letters with at most one '...'"),
    ("ij,jk->ik", [(2, 3), (4, 5)], "label 'j' has size 3 in one input and 4 in input 1"),
])
def test_einsum_errors(tmp_path, equation, shapes, message):
    with pytest.raises(GraphError) as info:
        lowered(tmp_path, equation, shapes)
    assert info.value.message == f"Einsum node 'e': {message}"
