"""Planning below the operator boundary: kernels' access orders (against a scalar interpreter written
here), the safest smallest overlap of an output with its input (against a brute-force search over
bytes), the plan checker (it rejects wrong placements), and models whose outputs overwrite their
inputs compiled and run against the NumPy reference on the host and the emulated Cortex-M4."""
from __future__ import annotations

import dataclasses
import json
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tinsmith.generate import generate, render_model, scratch_bytes  # before tinsmith.fuse, which it imports
from tinsmith.fuse import fuse
from tinsmith.generate.backends import backend_for
from tinsmith.generate.loop_ir import (INDEX, Assign, Binary, Broadcast, Call, Cast, Comment, Const, For, If, Lane,
                                      Load, Local, ReduceLanes, Select, Store, Unary, Var, width_of)
from tinsmith.pipeline import compile_graph, generate_model, lower
from tinsmith.plan import MemoryPlan, Placement, plan_memory
from tinsmith.planners.access import NEVER, UNREAD, trace
from tinsmith.planners.check import PlanCheckError, check_plan
from tinsmith.planners.overlap import overlap_options, safe_shift
from tinsmith.reference import evaluate
from tinsmith.schedule import schedule
from tinsmith.targets import load_target
from random_graphs import random_graph
from test_kernels import run as run_on_host  # compiled with g++ and run, beside the NumPy reference

ROOT = Path(__file__).resolve().parents[1]
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
needs_arm = pytest.mark.skipif(not (shutil.which("arm-none-eabi-g++") and shutil.which("qemu-system-arm")),
                               reason="needs arm-none-eabi-g++ and qemu-system-arm")

# The host with its vector kernels in the model's NCHW layout: the host targets run
# convolutions channels last, where these plans do not apply.
HOST_NCHW = "host-nchw"  # a target of test_kernels.run


# --- a scalar interpreter of the loop IR's index arithmetic: the oracle for the traces ----------
class Scalar:
    """Runs a kernel statement by statement, one iteration at a time, noting each element's first and
    last write and last read at a tick counting two per statement (loads, then the store). A block
    whose condition fails takes its ticks all the same (run without noting): the traces' time
    counts every statement of the code, run or not."""

    dry = False  # running a block whose condition failed: ticks only

    def __init__(self, kernel):
        self.times = {p.buffer: {"fw": {}, "lw": {}, "lr": {}} for p in kernel.params}
        self.times |= {s.name: {"fw": {}, "lw": {}, "lr": {}} for s in kernel.scratch}
        self.tick = 0
        self.block(kernel.body, {})

    def note(self, buffer, index, width, stride, write):
        if self.dry:
            return
        t = self.times[buffer]
        for lane in range(width):
            i, now = index + lane * stride, self.tick + (1 if write else 0)
            if write:
                t["fw"].setdefault(i, now)
                t["lw"][i] = now
            else:
                t["lr"][i] = now

    def value(self, e, env):
        if isinstance(e, Const):
            return None if e.dtype == "float32" else int(e.value)
        if isinstance(e, Var):
            return env[e.name]
        if isinstance(e, Load):
            self.note(e.buffer, self.value(e.index, env), e.width, e.stride, False)
            return None
        if isinstance(e, Binary):
            a, b = self.value(e.a, env), self.value(e.b, env)
            if a is None or b is None:
                return None
            ops = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "<": lambda: a < b,
                   "<=": lambda: a <= b, ">": lambda: a > b, ">=": lambda: a >= b, "==": lambda: a == b,
                   "!=": lambda: a != b, "&&": lambda: a and b, "||": lambda: a or b,
                   "max": lambda: max(a, b), "min": lambda: min(a, b),
                   "/": lambda: int(a / b), "%": lambda: a - int(a / b) * b}
            return ops[e.op]() if e.op in ops else None
        if isinstance(e, Select):
            c = self.value(e.cond, env)
            if c is None or width_of(e.cond) > 1:
                a, b = self.value(e.a, env), self.value(e.b, env)
                return None
            return self.value(e.a if c else e.b, env)
        if isinstance(e, Unary):
            a = self.value(e.a, env)
            return None if a is None else {"neg": -a, "abs": abs(a)}.get(e.op)
        if isinstance(e, Cast):
            a = self.value(e.a, env)
            return a if e.dtype not in ("float32", "bool") else None
        if isinstance(e, (Broadcast, ReduceLanes)):
            self.value(e.a, env)
            return None
        if isinstance(e, Lane):
            self.value(e.a, env)
            return None
        if isinstance(e, Call):
            for a in e.args:
                self.value(a, env)
            return None
        raise TypeError(e)

    def block(self, stmts, env):
        env = dict(env)
        for s in stmts:
            if isinstance(s, Comment):
                continue
            if isinstance(s, For):
                for i in range(0, s.extent, s.step):
                    self.block(s.body, {**env, s.var: i})
                continue
            if isinstance(s, If):
                dry, self.dry = self.dry, self.dry or not self.value(s.cond, env)
                self.block(s.body, env)
                self.dry = dry
                continue
            if isinstance(s, (Local, Assign)):
                v = self.value(s.init if isinstance(s, Local) else s.value, env)
                if isinstance(s, Local):
                    env[s.name] = v if s.dtype == INDEX else None
                elif env.get(s.name) is not None:
                    env[s.name] = v
            elif isinstance(s, Store):
                self.value(s.value, env)
                self.note(s.buffer, self.value(s.index, env), width_of(s.value), 1, True)
            self.tick += 2


def conv_chain(c: int, h: int, w: int, m: int, m2: int, residual: bool = False) -> str:
    """x -> 3x3 conv (c -> m) -> relu -> depthwise 3x3 -> relu -> pointwise (m -> m2) -> relu
    -> depthwise 3x3 stride 2 -> pointwise (m2 -> m) -> relu [-> + the first conv's output] -> y"""
    h2, w2 = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    if residual:  # an ic-style block: the last pointwise adds the block's input, so stride 1
        h2, w2 = h, w
    stride = 1 if residual else 2
    tail = (f"""
          - {{op: Conv, inputs: [a4, w5, b5], outputs: [c5]}}
          - {{op: Add, inputs: [c5, a0], outputs: [s5]}}
          - {{op: Relu, inputs: [s5], outputs: [y]}}""" if residual else f"""
          - {{op: Conv, inputs: [a4, w5, b5], outputs: [c5]}}
          - {{op: Relu, inputs: [c5], outputs: [y]}}""")
    return textwrap.dedent(f"""\
        graph: chain
        inputs:
          x: {{dtype: float32, shape: [1, {c}, {h}, {w}]}}
        outputs: [y]
        constants:
          w1: {{random: normal, shape: [{m}, {c}, 3, 3], seed: 1, scale: 0.3}}
          b1: {{random: normal, shape: [{m}], seed: 2, scale: 0.1}}
          w2: {{random: normal, shape: [{m}, 1, 3, 3], seed: 3, scale: 0.3}}
          b2: {{random: normal, shape: [{m}], seed: 4, scale: 0.1}}
          w3: {{random: normal, shape: [{m2}, {m}, 1, 1], seed: 5, scale: 0.3}}
          b3: {{random: normal, shape: [{m2}], seed: 6, scale: 0.1}}
          w4: {{random: normal, shape: [{m2}, 1, 3, 3], seed: 7, scale: 0.3}}
          b4: {{random: normal, shape: [{m2}], seed: 8, scale: 0.1}}
          w5: {{random: normal, shape: [{m}, {m2}, 1, 1], seed: 9, scale: 0.3}}
          b5: {{random: normal, shape: [{m}], seed: 10, scale: 0.1}}
        nodes:
          - {{op: Conv, inputs: [x, w1, b1], outputs: [c0], attrs: {{pads: [1, 1, 1, 1]}}}}
          - {{op: Relu, inputs: [c0], outputs: [a0]}}
          - {{op: Conv, inputs: [a0, w2, b2], outputs: [c1], attrs: {{pads: [1, 1, 1, 1], group: {m}}}}}
          - {{op: Relu, inputs: [c1], outputs: [a1]}}
          - {{op: Conv, inputs: [a1, w3, b3], outputs: [c2]}}
          - {{op: Relu, inputs: [c2], outputs: [a2]}}
          - {{op: Conv, inputs: [a2, w4, b4], outputs: [a4], attrs: {{pads: [1, 1, 1, 1], group: {m2},
              strides: [{stride}, {stride}]}}}}""") + textwrap.indent(textwrap.dedent(tail), "  ") + "\n"


# odd shapes: channel counts off the register blocks, rows off the vector width, 1x1 maps
CHAINS = [(3, 5, 7, 5, 9, False), (2, 4, 9, 7, 3, False), (1, 1, 1, 3, 5, False), (3, 6, 5, 6, 4, True)]
TARGETS = [None, "host", "cortex-m4"]


def write_graph(tmp_path: Path, case) -> Path:
    path = tmp_path / "chain.yaml"
    path.write_text(conv_chain(*case))
    return path


@pytest.mark.parametrize("target", TARGETS, ids=str)
@pytest.mark.parametrize("case", CHAINS[:2] + CHAINS[3:], ids=lambda c: "x".join(map(str, c[:5])) + "r" * c[5])
def test_traces_agree_with_a_scalar_interpreter(case, target, tmp_path):
    compiled = compile_graph(write_graph(tmp_path, case), target=target)
    for k in compiled.model.kernels:
        assert_trace_is_scalars(k.kernel)


def assert_trace_is_scalars(kernel) -> None:
    """The trace of `kernel` is the scalar interpreter's, element for element, and as long."""
    got, want = trace(kernel), Scalar(kernel)
    assert got.ticks == want.tick, kernel.name
    assert set(got.buffers) == {name for name, t in want.times.items() if any(t.values())}, kernel.name
    for name, a in got.buffers.items():
        t = want.times[name]
        for field, array, empty in (("fw", a.first_write, NEVER), ("lw", a.last_write, UNREAD),
                                    ("lr", a.last_read, UNREAD)):
            expected = np.full(array.size, empty, np.int64)
            for i, tick in t[field].items():
                expected[i] = tick
            np.testing.assert_array_equal(array, expected, err_msg=f"{kernel.name} {name} {field}")


def brute_force_shifts(last_read: np.ndarray, first_write: np.ndarray, itemsize: int) -> dict[int, int]:
    """Footprint of every safe byte offset (multiple of 16) of the output from the input, byte by byte."""
    lr, fw = np.repeat(last_read, itemsize), np.repeat(first_write, itemsize)
    n_in, n_out = -(-lr.size // 16) * 16, -(-fw.size // 16) * 16
    safe = {}
    for s in range(-n_out + 16, n_in, 16):
        if all(not (0 <= k + s < lr.size) or fw[k] > lr[k + s] for k in range(fw.size)):
            safe[s] = max(n_in, s + n_out) - min(0, s)
    return safe


@pytest.mark.parametrize("target", ["host", "cortex-m4"])
def test_the_chosen_shift_is_safe_and_has_the_smallest_footprint(target, tmp_path):
    compiled = compile_graph(write_graph(tmp_path, CHAINS[1]), target=target)
    checked = 0
    for k in compiled.model.kernels:
        t = trace(k.kernel)
        ins = [p.buffer for p in k.kernel.params if not p.writes and p.buffer in compiled.plan.offset_of()]
        outs = [p.buffer for p in k.kernel.params if p.writes]
        for x in ins:
            for y in outs:
                got = safe_shift(t.buffers[x], 4, t.buffers[y], 4)
                safe = brute_force_shifts(t.buffers[x].last_read, t.buffers[y].first_write, 4)
                smallest = min(safe.values(), default=None)
                worth = {s: f for s, f in safe.items()
                         if f < -(-t.buffers[x].last_read.size * 4 // 16) * 16 + -(-t.buffers[y].first_write.size * 4 // 16) * 16}
                if got is None:
                    assert not worth, (k.node.name, x, y)
                else:
                    assert got in safe and safe[got] == smallest, (k.node.name, got, smallest)
                    checked += 1
    assert checked >= 3


def kws():
    return compile_graph(ROOT / "graphs" / "kws_dscnn.yaml", target="cortex-m4")


def replaced(compiled, moves: dict[str, int], drop_overlaps=(), drop_variants=()) -> MemoryPlan:
    """The compiled plan with the values in `moves` put at new offsets."""
    plan = compiled.plan
    placements = tuple(Placement(p.lifetime, moves.get(p.lifetime.value, p.offset)) for p in plan.placements)
    overlaps = tuple(o for o in plan.overlaps if o[0] not in drop_overlaps)
    variants = tuple(v for v in plan.variants if v[0] not in drop_variants)
    top = max(p.offset + p.lifetime.nbytes for p in placements)
    return dataclasses.replace(plan, placements=placements, workspace_bytes=top, overlaps=overlaps,
                               variants=variants)


def test_the_checker_passes_the_plan_and_catches_wrong_placements():
    compiled = kws()
    plan = compiled.plan
    assert plan.overlaps and plan.variants
    assert check_plan(compiled.model) == []  # every kernel traced, every byte safe
    offsets = plan.offset_of()
    backend, caps = backend_for(load_target("cortex-m4"))

    def regenerate(p: MemoryPlan):
        return generate_model(compiled.graph, compiled.schedule, p, backend, False, caps, with_constants=False)
    # a depthwise output exactly over its input: the first channel block overwrites rows still needed
    wrong = replaced(compiled, {"dw1_relu_out": offsets["relu1_out"]})
    with pytest.raises(PlanCheckError, match="dw1_relu_out.*holds 'relu1_out'|overwrites"):
        check_plan(regenerate(wrong))
    # the pointwise output over its input, but with the backend's kernel instead of the in-place variant
    wrong = replaced(compiled, {}, drop_variants=("pw1",))
    with pytest.raises(PlanCheckError, match="pw1_relu_out"):
        check_plan(regenerate(wrong))
    # operator granularity: two values alive together put at one offset
    wrong = replaced(compiled, {"pw1_relu_out": offsets["pw1_relu_out"] + 16})
    with pytest.raises(PlanCheckError):
        check_plan(regenerate(wrong))


def test_the_report_gives_both_lower_bounds():
    compiled = kws()
    report = json.loads(compiled.files["kws_dscnn.plan.json"])
    ram = report["ram"]
    assert ram["workspace_bytes"] == compiled.plan.workspace_bytes
    assert ram["workspace_lower_bound_bytes"] <= ram["workspace_bytes"]
    assert ram["workspace_operator_lower_bound_bytes"] == 64000


# TensorFlow Lite Micro's float arenas for the same models (docs/MEMORY.md)
TFLM_FLOAT_ARENA = {"kws_dscnn": 70_632, "vww_mobilenet": 321_704, "ic_resnet8": 201_656}


@pytest.mark.parametrize("graph", sorted(TFLM_FLOAT_ARENA))
def test_the_float_workspace_is_at_most_half_of_tflite_micros_arena(graph):
    plan = compile_graph(ROOT / "graphs" / f"{graph}.yaml", target="cortex-m4").plan
    assert plan.workspace_bytes <= 0.5 * TFLM_FLOAT_ARENA[graph], plan.workspace_bytes
    assert plan.lower_bound_bytes <= plan.workspace_bytes < plan.operator_lower_bound_bytes


def seeded(graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {n: rng.standard_normal(graph.types[n].shape).astype(np.float32) for n in graph.inputs}


# A small core's channels-last kernels, built and run by the host's compilers: the in-place
# channels-last variant (host_conv.conv_nhwc_positions) where the plan takes it
SMALL_CORE_NHWC = ("small-core-nhwc", (str(ROOT / "tests" / "data" / "small-core-nhwc.yaml"), []))


@needs_gxx
@pytest.mark.parametrize("target", ["cpp", HOST_NCHW, "cortex-m4", SMALL_CORE_NHWC[0]],
                         ids=["cpp", "host", "cortex-m4", "small-core-nhwc"])
@pytest.mark.parametrize("case", CHAINS, ids=lambda c: "x".join(map(str, c[:5])) + "r" * c[5])
def test_overlapping_plans_compute_the_reference_on_the_host(case, target, tmp_path, monkeypatch):
    from test_kernels import TARGETS as KERNEL_TARGETS
    monkeypatch.setitem(KERNEL_TARGETS, *SMALL_CORE_NHWC)
    got, want, compiled = run_on_host(conv_chain(*case), target, tmp_path, seed=5)
    plan = compiled.plan
    assert plan.overlaps, "the chain's outputs overlap their inputs"
    assert plan.workspace_bytes < plan.operator_lower_bound_bytes
    if target == SMALL_CORE_NHWC[0] and case[1] > 1:  # rows for an output to follow a row behind
        assert ("nhwc_positions_outer" in dict(plan.variants).values()), plan.variants
    for n in want:
        np.testing.assert_allclose(got[n], want[n], rtol=1e-5, atol=1e-5, err_msg=n)


def run_on_m4(path: Path, tmp_path: Path, built: Path | None = None):
    """Build the graph's firmware for the Cortex-M4, run it on QEMU on seeded inputs; (its first
    output, the NumPy reference's, the compiled model). `built`: a folder where the same SCons
    build already made it (the session's build of graphs/ for the Cortex-M4, graph_builds)."""
    from tinsmith.targets.qemu import run_on_emulator
    compiled = compile_graph(path, target="cortex-m4")
    name = compiled.graph.name
    elf = (built or tmp_path / "m4") / name / "firmware" / f"{name}.elf"
    if built is None:
        proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", "-C", str(ROOT), "target=cortex-m4",
                               f"graphs={path}", f"build_dir={tmp_path / 'm4'}", str(elf)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    inputs = seeded(compiled.graph)
    data = b"".join(inputs[n].astype("<f4").tobytes() for n in compiled.graph.inputs)
    run = run_on_emulator("cortex-m4", elf, data, timeout=300)
    want = evaluate(lower(path), inputs)[compiled.graph.outputs[0]]
    return np.frombuffer(run.output, "<f4").reshape(want.shape), want, compiled


@needs_arm
@pytest.mark.parametrize("case", [CHAINS[0], CHAINS[3]], ids=lambda c: "x".join(map(str, c[:5])) + "r" * c[5])
def test_overlapping_plans_compute_the_reference_on_the_emulated_cortex_m4(case, tmp_path):
    got, want, compiled = run_on_m4(write_graph(tmp_path, case), tmp_path)
    assert compiled.plan.overlaps and (compiled.plan.variants or case[5])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


GATHER = """\
graph: gathered
inputs:
  x: {dtype: float32, shape: [6, 5]}
outputs: [y]
nodes:
  - {op: Relu, inputs: [x], outputs: [a]}
  - {op: ArgMax, inputs: [a], outputs: [idx], attrs: {axis: 1, keepdims: 0}}
  - {op: Gather, inputs: [a, idx], outputs: [g], attrs: {axis: 0}}
  - {op: Exp, inputs: [g], outputs: [e]}
  - {op: ReduceSum, inputs: [e], outputs: [y], attrs: {axes: [1], keepdims: 0}}
"""


@needs_gxx
def test_a_kernel_indexed_by_data_is_not_overlapped_and_the_checker_assumes_the_worst(tmp_path):
    path = tmp_path / "gathered.yaml"
    path.write_text(GATHER)
    compiled = compile_graph(path, target="host")
    untraced = check_plan(compiled.model)
    gather = next(k for k in compiled.model.kernels if k.node.op == "Gather")
    assert any(u.startswith(f"{gather.node.name}:") and "depends on data" in u for u in untraced), untraced
    assert all(out != gather.node.outputs[0] for out, _, _ in compiled.plan.overlaps)
    offsets = compiled.plan.offset_of()
    a, g = offsets["a"], offsets[gather.node.outputs[0]]
    assert a + 6 * 5 * 4 <= g or g + 6 * 5 * 4 <= a, "operator granularity: the gather's input and output apart"
    got, want, _ = run_on_host(GATHER, "host", tmp_path / "run")
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5)


@pytest.mark.parametrize("target", ["host", "cortex-m4"])
def test_random_graphs_plan_overlaps_the_checker_proves(target):
    backend, caps = backend_for(load_target(target))
    overlapped = 0
    for seed in range(40):
        rng = random.Random(seed)
        g = random_graph(rng, rng.randint(1, 30))
        sched = fuse(g, schedule(g), backend, caps)
        scratch = scratch_bytes(g, sched, backend, caps)
        kernels = generate(g, [(sched, {})], backend, caps)
        plan = plan_memory(g, sched, scratch=scratch, overlaps=overlap_options(g, sched, kernels))
        assert plan.workspace_bytes <= plan_memory(g, sched, scratch=scratch).workspace_bytes
        assert plan.lower_bound_bytes <= plan.workspace_bytes
        assert check_plan(render_model(kernels, sched, plan, with_constants=False)) == []
        overlapped += bool(plan.overlaps)
    assert overlapped >= 10
