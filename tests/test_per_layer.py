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
from codegen.generate.backend import CPP
from codegen.generate.functors.elementwise import UNARY_FORMULAS, elementwise
from codegen.generate.loop_ir import Binary, const

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
