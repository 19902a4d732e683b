"""`check --per-layer`: builds the graph with every node's output exposed, checks each node against
its NumPy reference on the inputs the compiled code gave it, and names the first node that
differs. One test breaks a kernel on purpose: a `sitecustomize` module on PYTHONPATH makes the
generator (in every process the command starts: the command itself, SCons, the generate step)
emit a Tanh that is 0.1 % off, and the check must name the node computing Tanh and no other.
"""
from __future__ import annotations

import os
import re

import pytest

from conftest import GRAPHS, ROOT, tinsmith

BROKEN_TANH = '''
from tinsmith.generate.backend import CPP
from tinsmith.generate.functors.elementwise import UNARY_FORMULAS, elementwise
from tinsmith.generate.loop_ir import Binary, const

_tanh = UNARY_FORMULAS["Tanh"]
CPP.register("Tanh", epilogue=True)(elementwise("Tanh", lambda xs, a: Binary("*", _tanh(xs, a), const(1.001))))
'''


def _lines(out: str) -> dict[str, str]:
    """node name -> 'ok' or 'FAIL' from the per-node lines."""
    return {m[2]: m[1].strip() for m in re.finditer(r"^(ok  |FAIL) (\S+)", out, re.M)}


@pytest.mark.parametrize("name,target", [("encoder", "host"), ("kws_dscnn", "host"), ("mlp", "cortex-m4")])
def test_every_node_of_a_correct_build_passes(tmp_path, name, target):
    proc = tinsmith("check", "--per-layer", "--target", target, "--build-dir", str(tmp_path / "build"),
                    str(GRAPHS / f"{name}.yaml"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = _lines(proc.stdout)
    assert status and set(status.values()) == {"ok"}
    assert (tmp_path / "build" / "per-layer" / "probe" / f"{name}.yaml").is_file()


@pytest.mark.parametrize("target", ["host", "cortex-m4"])
def test_a_broken_kernel_is_named(tmp_path, target):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BROKEN_TANH)
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    graph = GRAPHS / "branches.yaml"
    proc = tinsmith("check", "--per-layer", "--target", target, "--build-dir", str(tmp_path / "build"), str(graph),
                    cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    status = _lines(proc.stdout)
    # squash is the only Tanh; the nodes reading its wrong output are judged on what they read
    assert [n for n, s in status.items() if s == "FAIL"] == ["squash"], proc.stdout
    assert {"gate", "square", "smooth", "join", "mean_rows"} <= {n for n, s in status.items() if s == "ok"}
    line = next(i for i, text in enumerate(graph.read_text().splitlines(), 1) if "name: squash" in text)
    assert re.search(rf"branches\.yaml:{line}:\d+: error: node 'squash' \(Tanh\) is the first", proc.stderr), proc.stderr
    # the ordinary check sees the damage too, but only at the outputs
    plain = tinsmith("check", "--target", target, "--build-dir", str(tmp_path / "build"), str(graph),
                     cwd=tmp_path, env=env)
    assert plain.returncode == 1 and "squash" not in plain.stdout + plain.stderr
    assert "hint: `check --per-layer` names the first node whose compiled output differs" in plain.stderr
    # --per-layer also gives the end-to-end result, the outputs checked as `check` does
    end = proc.stdout.split("end to end (branches as compiled, fusion and memory plan included):\n", 1)
    assert len(end) == 2 and re.search(r"^\w+: max abs diff ", end[1], re.M), proc.stdout


ILL_CONDITIONED = """\
graph: cancel
inputs:
  x: {dtype: float32, shape: [1, 512]}
outputs: [y]
constants:
  w: {random: normal, shape: [512, 64], seed: 3}
  c: {file: c.npy}
nodes:
  - {op: MatMul, name: dot, inputs: [x, w], outputs: [h]}
  - {op: Sub, name: cancel, inputs: [h, c], outputs: [y]}
"""


def test_per_layer_fails_where_only_the_end_to_end_result_is_wrong(tmp_path):
    """h - c with c the reference's h: every node is right on the inputs it read, yet the output,
    nearly zero, is all rounding error of h. --per-layer must fail with the ordinary check."""
    import numpy as np

    from tinsmith.cli import seeded_inputs
    from tinsmith.pipeline import lower
    graph_file = tmp_path / "cancel.yaml"
    np.save(tmp_path / "c.npy", np.zeros((1, 64), np.float32))
    graph_file.write_text(ILL_CONDITIONED)
    graph = lower(graph_file)
    np.save(tmp_path / "c.npy", _hidden(graph, seeded_inputs(graph, 0)))
    plain = tinsmith("check", "--build-dir", str(tmp_path / "build"), str(graph_file), cwd=tmp_path)
    if plain.returncode == 0:
        pytest.skip("the compiled dot products round exactly as NumPy's here")
    proc = tinsmith("check", "--per-layer", "--build-dir", str(tmp_path / "build"), str(graph_file), cwd=tmp_path)
    assert set(_lines(proc.stdout).values()) == {"ok"}, proc.stdout
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "every node is within its tolerance" in proc.stderr and "y differs from the NumPy reference" in proc.stderr


def _hidden(graph, inputs):
    """h = x @ w in float32, as the reference computes it."""
    w = graph.constants["w"].data
    return (inputs["x"] @ w).astype("float32")
