"""The generator (tinsmith.generate): functors by primitive, missing functors, user functors for
builtins and custom ops (compiled with g++ and run against NumPy), kernel names and the arguments
functors are called with."""
from __future__ import annotations

import math
import shutil
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tinsmith.errors import GenerateError, GraphError
from tinsmith.expand import expand_graph
from tinsmith.generate import CPP, Backend
from tinsmith.generate.loop_ir import (Binary, For, Load, Select, Store, Unary, Var, broadcast_index, const,
                                      flat_index, nest)
from tinsmith.load import load_graph_spec
from tinsmith.ops import PRIMITIVES, Attr
from tinsmith.ops.common import require_dtype
from tinsmith.ops.registry import define
from tinsmith.pipeline import compile_graph, generate_model, lower, write_files
from tinsmith.plan import plan_memory
from tinsmith.reference import evaluate
from tinsmith.schedule import schedule
from tinsmith.verify import RUNTIME_INCLUDE

ROOT = Path(__file__).resolve().parents[1]
GRAPHS = sorted((ROOT / "graphs").glob("*.yaml"))
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def copy_of_cpp(**replace) -> Backend:
    """A backend with the C++ functors, some replaced (None removes one); CPP itself is untouched."""
    functors = dict(CPP.functors)
    for op, fn in replace.items():
        if fn is None:
            functors.pop(op)
        else:
            functors[op] = fn
    return Backend("cpp", functors, CPP.load_functor)


def write_graph(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "g.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def generated(path: Path, backend: Backend):
    graph = lower(path)
    sched = schedule(graph)
    return generate_model(graph, sched, plan_memory(graph, sched), backend)


def compile_and_run(path: Path, backend: Backend, inputs: dict[str, np.ndarray], tmp_path: Path):
    """Generate, compile the model's .cpp with a main of our own (through the C API; inputs as
    exact hex float literals, outputs printed as hex floats) under -Wall -Wextra -Werror, run it."""
    compiled = compile_graph(path, backend)
    g = compiled.graph
    out_dir = tmp_path / "out"
    write_files(compiled.files, out_dir)
    name, NAME = g.name, g.name.upper()
    lines = [f'#include "{name}.h"', "#include <cstdio>",
             f"alignas(16) static unsigned char ws[{NAME}_WORKSPACE_BYTES > 0 ? {NAME}_WORKSPACE_BYTES : 1];"]
    for n in g.inputs:
        values = ", ".join(f"{float(v).hex()}f" for v in np.asarray(inputs[n], np.float32).reshape(-1))
        lines.append(f"static const float in_{n}[{g.types[n].size}] = {{{values}}};")
    for n in g.outputs:
        lines.append(f"static {g.types[n].c_type} out_{n}[{g.types[n].size}];")
    args = [f"in_{n}" for n in g.inputs] + [f"out_{n}" for n in g.outputs] + ["ws"]
    lines += ["int main() {", f"  {name}_init_ws(ws);", f"  {name}_call({', '.join(args)});"]
    for n in g.outputs:
        fmt, cast = ("%lld", "long long") if g.types[n].dtype == "int64" else ("%a", "double")
        lines.append(f"  for (unsigned i = 0; i < {g.types[n].size}u; ++i) "
                     f"std::printf(\"{fmt}\\n\", static_cast<{cast}>(out_{n}[i]));")
    lines += ["  return 0;", "}"]
    (out_dir / "main.cpp").write_text("\n".join(lines) + "\n")
    exe = out_dir / "prog"
    cmd = ["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-O1", f"-I{out_dir}", f"-I{RUNTIME_INCLUDE}",
           str(out_dir / f"{name}.cpp"), str(out_dir / "main.cpp"), "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    flat = run.stdout.split()
    result, offset = {}, 0
    for n in g.outputs:
        t = g.types[n]
        parse = int if t.dtype == "int64" else float.fromhex
        result[n] = np.array([parse(v) for v in flat[offset:offset + t.size]],
                             dtype=t.numpy_dtype).reshape(t.shape)
        offset += t.size
    assert offset == len(flat)
    return compiled, result


# --- functors and the registry --------------------------------------------------------------
def test_every_primitive_has_a_cpp_functor():
    from tinsmith.ops.shape_ops import BUILD_TIME_OPS  # always folded: they never reach a backend
    # so are those whose every input is needed at build time (a window's size, Range's bounds)
    all_constant = {n for n, p in PRIMITIVES.items()
                    if p.max_inputs > 0 and set(range(p.max_inputs)) <= set(p.constant_inputs)}
    assert set(PRIMITIVES) - set(BUILD_TIME_OPS) - all_constant <= set(CPP.functors)
    assert CPP.load_functor is not None


def test_a_primitive_without_a_functor_is_a_named_error():
    path = ROOT / "graphs" / "branches.yaml"
    with pytest.raises(GenerateError) as info:
        generated(path, copy_of_cpp(Tanh=None))
    e = info.value
    assert e.message == "the cpp backend has no kernel for primitive 'Tanh' (node 'squash')"
    assert e.hint == "register one with tinsmith.generate.CPP.register('Tanh', family=..., types=...)"
    assert (Path(e.loc.path).name, e.loc.line, e.loc.col) == ("branches.yaml", 13, 5)
    assert "Tanh" in CPP.functors  # the copy lost it, the backend did not


def test_kernels_are_named_after_their_nodes():
    for path in GRAPHS:
        model = generated(path, CPP)
        assert [k.node.name for k in model.kernels] == [n.name for n in model.schedule.nodes]
        for k in model.kernels:
            assert k.kernel.name == k.node.name
            assert k.source.startswith(f"void {k.node.name}(")
            assert k.kernel.doc.startswith(f"{k.node.name}: {k.node.op}, cluster {k.cluster}, from ")
            assert k.kernel.doc.endswith(f"{path.name}:{k.node.loc.line}:{k.node.loc.col}")


def test_functors_get_graph_node_id_cluster_args_and_attrs():
    calls = []

    def recording(op):
        inner = CPP.functors[op]

        def functor(graph, node_id, cluster_id, args, attrs):
            node = graph.nodes[node_id]
            calls.append((node.name, cluster_id, tuple(a.name if a else "" for a in args.inputs),
                          tuple(a.name for a in args.outputs), dict(attrs), node.attrs))
            assert all(a.type == graph.types[a.name] for a in args.inputs + args.outputs if a)
            return inner(graph, node_id, cluster_id, args, attrs)
        return functor

    path = ROOT / "graphs" / "branches.yaml"
    backend = copy_of_cpp(**{op: recording(op) for op in CPP.functors})
    model = generated(path, backend)
    sched = model.schedule
    assert [(c[0], c[1]) for c in calls] == [(n.name, c) for n, c in zip(sched.nodes, sched.clusters)]
    assert {c[1] for c in calls} == set(range(6))
    by_name = {n.name: n for n in model.graph.nodes}
    for name, _, ins, outs, attrs, node_attrs in calls:
        assert ins == by_name[name].inputs and outs == by_name[name].outputs
        assert attrs == node_attrs
    assert dict(calls[[c[0] for c in calls].index("join")][4]) == {"axis": 1}


def test_constants_read_by_kernels_are_emitted_once():
    model = generated(ROOT / "graphs" / "branches.yaml", CPP)
    # 'two' is read by a kernel; 'shape' (Reshape's target) only at build time
    assert [c.name for c in model.constants] == ["two"]
    assert model.constants[0].source == ("// two: float32[] from inline value\n"
                                         "alignas(16) const float two[1] = {\n  2.0f\n};")


# --- a user's functor for a builtin ---------------------------------------------------------
def select_relu(graph, node_id, cluster_id, args, attrs):
    """Relu as a select, to tell it from the builtin functor (tinsmith::math::fmax)."""
    x, y = args.inputs[0], args.outputs[0]

    def body(idx):
        v = Load(x.name, flat_index(idx, x.type.shape))
        return [Store(y.name, flat_index(idx, y.type.shape), Select(Binary(">", v, const(0)), v, const(0)))]
    return nest(y.type.shape, "i", body)[0]


RELU_YAML = """\
    graph: act
    inputs:
      x: {dtype: float32, shape: [2, 3]}
    outputs: [y]
    nodes:
      - {op: Relu, name: rectify, inputs: [x], outputs: [y]}
"""


def test_a_user_functor_replaces_a_builtin(tmp_path):
    path = write_graph(tmp_path, RELU_YAML)
    (k,) = generated(path, copy_of_cpp(Relu=select_relu)).kernels
    assert k.source == textwrap.dedent("""\
        void rectify(const float* __restrict t_x, float* __restrict t_y) noexcept {
          for (int i0 = 0; i0 < 2; ++i0) {
            for (int i1 = 0; i1 < 3; ++i1) {
              t_y[i0 * 3 + i1] = t_x[i0 * 3 + i1] > 0.0f ? t_x[i0 * 3 + i1] : 0.0f;
            }
          }
        }""")
    (builtin,) = generated(path, CPP).kernels
    assert "tinsmith::math::fmax" in builtin.source


@pytest.mark.parametrize("body, message", [
    (lambda x, y: [Store("elsewhere", const(0), Load(x, const(0)))],
     "the cpp functor for 'Relu' (node 'rectify') writes 'elsewhere', which is not an output of the node"),
    (lambda x, y: [Store(x, const(0), const(1))],
     "the cpp functor for 'Relu' (node 'rectify') writes 'x', which is not an output of the node"),
    (lambda x, y: [Store(y, const(0), Load("w", const(0)))],
     "the cpp functor for 'Relu' (node 'rectify') reads 'w', which is neither an input of the node nor "
     "an output the kernel writes"),
])
def test_a_functor_touching_other_tensors_is_a_named_error(tmp_path, body, message):
    path = write_graph(tmp_path, RELU_YAML)
    with pytest.raises(GenerateError) as info:
        generated(path, copy_of_cpp(Relu=lambda g, n, c, args, attrs: body(args.inputs[0].name,
                                                                           args.outputs[0].name)))
    assert info.value.message == message
    assert (info.value.loc.line, info.value.loc.col) == (6, 5)


def test_parameters_are_the_tensors_the_simplified_kernel_touches(tmp_path):
    """A read that simplification removes (here, in a loop of no iteration) is no parameter: it
    would be an unused one, which -Wextra warns about."""
    def functor(graph, node_id, cluster_id, args, attrs):
        x, y = args.inputs[0].name, args.outputs[0].name
        return [For("i", 0, (Store(y, Var("i"), Load(x, Var("i"))),)),
                For("i", 6, (Store(y, Var("i"), const(0)),))]
    (k,) = generated(write_graph(tmp_path, RELU_YAML), copy_of_cpp(Relu=functor)).kernels
    assert [(p.buffer, p.writes) for p in k.kernel.params] == [("y", True)]
    assert k.call_args == ("y",)
    assert k.source.startswith("void rectify(float* __restrict t_y) noexcept {")


def test_registering_on_a_backend_replaces_the_functor():
    backend = copy_of_cpp()
    assert backend.register("Relu", "Tanh")(select_relu) is select_relu
    assert backend.functors["Relu"] is backend.functors["Tanh"] is select_relu
    assert CPP.functors["Relu"] is not select_relu


@needs_gxx
def test_a_user_functor_for_a_builtin_compiles_and_runs(tmp_path):
    path = write_graph(tmp_path, RELU_YAML)
    x = np.array([[-1.5, 0.0, 2.25], [3.0, -0.125, 1e-3]], np.float32)
    _, out = compile_and_run(path, copy_of_cpp(Relu=select_relu), {"x": x}, tmp_path)
    np.testing.assert_array_equal(out["y"], np.array([[0.0, 0.0, 2.25], [3.0, 0.0, 1e-3]], np.float32))


# --- a custom op ----------------------------------------------------------------------------
def _softplus_infer(args):
    require_dtype(args)
    return [args.types[0]]


def _softplus_reference(xs, attrs):
    x = xs[0].astype(np.float64)
    return [(np.log1p(np.exp(attrs["beta"] * x)) / attrs["beta"]).astype(np.float32)]


def softplus_functor(graph, node_id, cluster_id, args, attrs):
    """log(1 + exp(beta * x)) / beta, elementwise."""
    x, y = args.inputs[0], args.outputs[0]
    beta = const(attrs["beta"])

    def body(idx):
        v = Load(x.name, broadcast_index(idx, y.type.shape, x.type.shape))
        soft = Unary("log", Binary("+", const(1), Unary("exp", Binary("*", beta, v))))
        return [Store(y.name, flat_index(idx, y.type.shape), Binary("/", soft, beta))]
    return nest(y.type.shape, "i", body)[0]


@pytest.fixture
def softplus():
    """A custom primitive 'TestSoftplus', registered for the test only."""
    assert "TestSoftplus" not in PRIMITIVES
    prim = define("TestSoftplus", inputs=1, attrs=[Attr("beta", "float", 1.0)],
                  infer=_softplus_infer, reference=_softplus_reference)
    try:
        yield prim
    finally:
        del PRIMITIVES["TestSoftplus"]


CUSTOM_YAML = """\
    graph: custom
    inputs:
      x: {dtype: float32, shape: [3, 4]}
    outputs: [y]
    constants:
      w: {value: [[0.5, -1.0, 2.0, 0.25]]}
    nodes:
      - {op: Mul, name: weigh, inputs: [x, w], outputs: [h]}
      - {op: TestSoftplus, name: smooth, inputs: [h], outputs: [s], attrs: {beta: 2.0}}
      - {op: Sub, name: shift, inputs: [s, x], outputs: [y]}
"""


def test_a_custom_op_without_a_functor_is_a_named_error(tmp_path, softplus):
    path = write_graph(tmp_path, CUSTOM_YAML)
    with pytest.raises(GenerateError) as info:
        generated(path, CPP)
    assert info.value.message == "the cpp backend has no kernel for primitive 'TestSoftplus' (node 'smooth')"
    assert (info.value.loc.line, info.value.loc.col) == (9, 5)


def test_a_custom_op_is_checked_like_a_builtin(tmp_path, softplus):
    path = write_graph(tmp_path, CUSTOM_YAML.replace("beta: 2.0", "beta: two"))
    with pytest.raises(GraphError) as info:
        expand_graph(load_graph_spec(path))
    assert info.value.message == "attribute 'beta' of TestSoftplus node 'smooth' must be a number, not 'two'"


@needs_gxx
def test_a_custom_op_compiles_and_runs(tmp_path, softplus):
    path = write_graph(tmp_path, CUSTOM_YAML)
    x = np.random.default_rng(3).normal(0, 2, (3, 4)).astype(np.float32)
    compiled, out = compile_and_run(path, copy_of_cpp(TestSoftplus=softplus_functor), {"x": x}, tmp_path)
    smooth = next(k for k in compiled.model.kernels if k.node.name == "smooth")
    assert "tinsmith::math::log(1.0f + tinsmith::math::exp(2.0f * t_h[" in smooth.source
    # NumPy written here: softplus with beta = 2 of x * w, minus x
    w = np.array([0.5, -1.0, 2.0, 0.25])
    h = x.astype(np.float64) * w
    expected = np.array([[math.log(1 + math.exp(2 * v)) / 2 for v in row] for row in h]) - x
    np.testing.assert_allclose(out["y"], expected, rtol=1e-5, atol=1e-6)
    # and the op's reference agrees with the compiled code
    np.testing.assert_allclose(evaluate(compiled.graph, {"x": x})["y"], out["y"], rtol=1e-5, atol=1e-6)


def test_custom_op_is_gone_after_its_test():
    assert "TestSoftplus" not in PRIMITIVES


# --- the C++ of small graphs ----------------------------------------------------------------
@needs_gxx
def test_folded_rank_0_constants_and_int64_copies_compile(tmp_path):
    """A dot product of two constants folds to a rank-0 constant; Gemm with alpha/beta literals."""
    path = write_graph(tmp_path, """\
        graph: small
        inputs:
          x: {dtype: float32, shape: [2, 3]}
        outputs: [y, z, ids]
        constants:
          u: {value: [1.0, 2.0, 3.0]}
          w: {value: [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]}
          big: {value: [[-5000000000, 7]], dtype: int64}
        nodes:
          - {op: Identity, name: copy_ids, inputs: [big], outputs: [ids]}
          - {op: MatMul, name: dot, inputs: [u, u], outputs: [d]}
          - {op: Mul, name: scale, inputs: [x, d], outputs: [y]}
          - {op: Gemm, name: gemm, inputs: [x, w, d], outputs: [z], attrs: {alpha: 0.1, beta: -0.3}}
    """)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    compiled, out = compile_and_run(path, CPP, {"x": x}, tmp_path)
    assert compiled.graph.constants["d"].data.shape == ()
    assert out["ids"].dtype == np.int64 and out["ids"].tolist() == [[-5000000000, 7]]
    np.testing.assert_array_equal(out["y"], x * np.float32(14))
    w = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    np.testing.assert_allclose(out["z"], 0.1 * (x.astype(np.float64) @ w) - 0.3 * 14, rtol=1e-6, atol=1e-6)
    gemm = next(k for k in compiled.model.kernels if k.node.name == "gemm")
    assert "0.1f * acc + (-0.3f) * t_d[0]" in gemm.source
