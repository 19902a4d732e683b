"""Row pipelines: a run of convolutions (an ic-style residual block, a strided entry with a 1x1
shortcut, and the next block's residual add) computed row by row in one kernel through ring
buffers. Odd shapes compiled and run against the NumPy reference on the host and the emulated
Cortex-M4, the kernel's access order against the scalar interpreter, and the plan checker
rejecting wrong placements of its rings."""
from __future__ import annotations

import dataclasses
import functools
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tinsmith import pipeline
from tinsmith.generate.backends import backend_for
from tinsmith.generate.functors.row_pipeline import pipeline_kernel
from tinsmith.pipeline import compile_graph, generate_model
from tinsmith.plan import Placement
from tinsmith.planners.check import PlanCheckError, check_plan
from tinsmith.planners.rows import VARIANT, candidates, pipeline_of, plan_with_rows, with_pipeline
from tinsmith.targets import load_target
from test_inplace import assert_trace_is_scalars, needs_arm, needs_gxx, run_on_m4
from test_kernels import run as run_on_host

ROOT = Path(__file__).resolve().parents[1]

# The host with its vector kernels in the model's NCHW layout: the host targets run
# convolutions channels last, where these plans do not apply.
HOST_NCHW = "host-nchw"  # a target of test_kernels.run


def resnet_front(c: int, h: int, w: int, m: int, m2: int) -> str:
    """x -> conv 3x3 (c -> m) -> relu = a; block: conv, relu, conv, + a, relu = b; entry: conv 3x3
    stride 2 (pads 0,0,1,1) -> relu = d, conv 1x1 stride 2 = e; conv 3x3 (d) + e -> relu; global average."""
    def same(n):  # TensorFlow's SAME padding of a 3x3 stride 2: the 1x1 shortcut's output size
        total = max(((n + 1) // 2 - 1) * 2 + 3 - n, 0)
        return total // 2, total - total // 2
    (ht, hb), (wl, wr) = same(h), same(w)
    return textwrap.dedent(f"""\
        graph: front
        inputs:
          x: {{dtype: float32, shape: [1, {c}, {h}, {w}]}}
        outputs: [y]
        constants:
          w1: {{random: normal, shape: [{m}, {c}, 3, 3], seed: 1, scale: 0.3}}
          b1: {{random: normal, shape: [{m}], seed: 2, scale: 0.1}}
          w2: {{random: normal, shape: [{m}, {m}, 3, 3], seed: 3, scale: 0.2}}
          b2: {{random: normal, shape: [{m}], seed: 4, scale: 0.1}}
          w3: {{random: normal, shape: [{m}, {m}, 3, 3], seed: 5, scale: 0.2}}
          b3: {{random: normal, shape: [{m}], seed: 6, scale: 0.1}}
          w4: {{random: normal, shape: [{m2}, {m}, 3, 3], seed: 7, scale: 0.2}}
          b4: {{random: normal, shape: [{m2}], seed: 8, scale: 0.1}}
          w5: {{random: normal, shape: [{m2}, {m}, 1, 1], seed: 9, scale: 0.3}}
          b5: {{random: normal, shape: [{m2}], seed: 10, scale: 0.1}}
          w6: {{random: normal, shape: [{m2}, {m2}, 3, 3], seed: 11, scale: 0.2}}
          b6: {{random: normal, shape: [{m2}], seed: 12, scale: 0.1}}
        nodes:
          - {{op: Conv, name: conv1, inputs: [x, w1, b1], outputs: [c0], attrs: {{pads: [1, 1, 1, 1]}}}}
          - {{op: Relu, inputs: [c0], outputs: [a]}}
          - {{op: Conv, inputs: [a, w2, b2], outputs: [c1], attrs: {{pads: [1, 1, 1, 1]}}}}
          - {{op: Relu, inputs: [c1], outputs: [a1]}}
          - {{op: Conv, inputs: [a1, w3, b3], outputs: [c2], attrs: {{pads: [1, 1, 1, 1]}}}}
          - {{op: Add, inputs: [c2, a], outputs: [s2]}}
          - {{op: Relu, inputs: [s2], outputs: [b]}}
          - {{op: Conv, inputs: [b, w4, b4], outputs: [c3], attrs: {{pads: [{ht}, {wl}, {hb}, {wr}], strides: [2, 2]}}}}
          - {{op: Relu, inputs: [c3], outputs: [d]}}
          - {{op: Conv, inputs: [b, w5, b5], outputs: [e], attrs: {{strides: [2, 2]}}}}
          - {{op: Conv, inputs: [d, w6, b6], outputs: [c4], attrs: {{pads: [1, 1, 1, 1]}}}}
          - {{op: Add, inputs: [c4, e], outputs: [s4]}}
          - {{op: Relu, inputs: [s4], outputs: [r]}}
          - {{op: GlobalAveragePool, inputs: [r], outputs: [y]}}
        """)


# odd shapes: channels off the blocks of 4, odd rows and columns; the planner takes the pipeline
CASES = [(3, 9, 7, 5, 6), (2, 12, 5, 8, 9)]
# too small for the pipeline to pay (a single column, a single row, few rows): run it anyway
FORCED = [(2, 6, 5, 8, 9), (1, 5, 1, 3, 4), (2, 1, 6, 4, 5), (2, 3, 6, 4, 5)]
ids = lambda c: "x".join(map(str, c))


def pipeline_kernel_of(compiled):
    heads = dict(compiled.plan.variants)
    (name,) = [k for k, v in heads.items() if v == VARIANT]
    return name, next(k for k in compiled.model.kernels if k.node.name == name)


@needs_gxx
@pytest.mark.parametrize("target", ["cpp", HOST_NCHW, "cortex-m4"], ids=["cpp", "host", "cortex-m4"])
@pytest.mark.parametrize("case", CASES + FORCED, ids=ids)
def test_the_pipeline_computes_the_reference_on_the_host(case, target, tmp_path, monkeypatch):
    if case in FORCED:
        monkeypatch.setattr(pipeline, "plan_with_rows", functools.partial(plan_with_rows, always=True))
    got, want, compiled = run_on_host(resnet_front(*case), target, tmp_path, seed=5)
    plan = compiled.plan
    assert (VARIANT in dict(plan.variants).values()), plan.variants
    if case in CASES:  # chosen because it makes the workspace smaller
        assert plan.workspace_bytes < plan.operator_lower_bound_bytes
    assert check_plan(compiled.model) == []
    for n in want:
        np.testing.assert_allclose(got[n], want[n], rtol=1e-4, atol=1e-5, err_msg=n)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_the_pipelines_trace_agrees_with_the_scalar_interpreter(case, tmp_path):
    path = tmp_path / "front.yaml"
    path.write_text(resnet_front(*case))
    _, k = pipeline_kernel_of(compile_graph(path, target="cortex-m4"))
    assert_trace_is_scalars(k.kernel)


@needs_arm
def test_the_pipeline_computes_the_reference_on_the_emulated_cortex_m4(tmp_path):
    path = tmp_path / "front.yaml"
    path.write_text(resnet_front(*CASES[0]))
    got, want, compiled = run_on_m4(path, tmp_path)
    assert VARIANT in dict(compiled.plan.variants).values()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@needs_arm
def test_ic_runs_its_first_stages_as_a_pipeline_on_the_emulated_cortex_m4(tmp_path, graph_builds):
    got, want, compiled = run_on_m4(ROOT / "graphs" / "ic_resnet8.yaml", tmp_path, graph_builds("cortex-m4"))
    assert dict(compiled.plan.variants).get("conv1") == VARIANT
    assert compiled.plan.workspace_bytes <= 0.5 * 201_656  # TensorFlow Lite Micro's float arena
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    # each kind of row of each layer is in the code once per sub-step of the step loop: 32.8 KB of code
    # for the model, 27.7 KB of it the pipeline (its first and last steps written out: 67.5 KB)
    report = json.loads((graph_builds("cortex-m4") / "ic_resnet8" / "ic_resnet8.json").read_text())
    assert report["flash"]["code_bytes"] < 40_000


def test_the_checker_rejects_wrong_placements_of_the_pipeline(tmp_path):
    path = tmp_path / "front.yaml"
    path.write_text(resnet_front(*CASES[0]))
    compiled = compile_graph(path, target="cortex-m4")
    name, _ = pipeline_kernel_of(compiled)
    offsets = compiled.plan.offset_of()
    rings = sorted(v for v in offsets if v.startswith(name + ".ring_"))
    assert len(rings) >= 2
    backend, caps = backend_for(load_target("cortex-m4"))

    def check(moves):
        plan = compiled.plan
        placements = tuple(Placement(p.lifetime, moves.get(p.lifetime.value, p.offset)) for p in plan.placements)
        top = max(p.offset + p.lifetime.nbytes for p in placements)
        plan = dataclasses.replace(plan, placements=placements, workspace_bytes=top)
        check_plan(generate_model(compiled.graph, compiled.schedule, plan, backend, False, caps, with_constants=False))
    # two rings of one pipeline at one offset: rows of one overwrite rows of the other still to be read
    with pytest.raises(PlanCheckError, match="ring_"):
        check({rings[1]: offsets[rings[0]]})
    # a ring over a value the pipeline stores whole, which it writes while the ring is in use
    (stored, *_) = sorted(pipeline_of(compiled.graph, compiled.schedule, name).stored & set(offsets))
    with pytest.raises(PlanCheckError):
        check({rings[0]: offsets[stored]})


def test_every_pipeline_the_planner_may_pick_builds(tmp_path):
    """A run whose residual comes from before the run (not its input) is no pipeline: the kernel
    reads only the run's input and the values it makes; every other run's kernel builds."""
    path = tmp_path / "front.yaml"
    path.write_text(resnet_front(*CASES[0]))
    backend, caps = backend_for(load_target("cortex-m4"))
    graph, sched = pipeline.scheduled(path, backend, caps)
    runs = candidates(graph, sched)
    pipes = {heads: pipeline_of(graph, with_pipeline(sched, heads), heads[0]) for heads in runs}
    outside = [h for h, p in pipes.items() if p is None]
    assert outside and len(outside) < len(runs)  # e.g. the second block conv's, reading `a` from before
    for heads, p in pipes.items():
        if p is not None:
            assert pipeline_kernel(p), heads
