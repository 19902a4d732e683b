"""`python -m tinsmith` end to end: compiled outputs against the independent oracle, and the
messages and exit statuses users see.

Tolerance: the compiled code computes in float32 and the oracle in float64 from the same
float32 weights and inputs. float32 rounds at 6e-8 relative; the longest chains here (a
64-term dot product, LayerNorm, Softmax, erf) accumulate a few dozen roundings of O(1)
values, so agreement to rtol=1e-5 leaves a 10x margin over what we measure (<= 1e-6 on
values not near zero). Outputs near zero come from cancellation (residual sums, x - x/e),
where the error is a few ulps of the O(1) operands, not of the result: atol=1e-6 covers that
(measured <= 7e-7) and is still far below any real bug (a wrong index or a missing term
changes values by 1e-2 or more).
"""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

import oracle
from conftest import EXAMPLES, GRAPHS, ROOT

RTOL, ATOL = 1e-5, 1e-6
OUTPUTS = {"mlp": ["probs"], "encoder": ["encoded"], "branches": ["merged", "stats"]}


@pytest.mark.parametrize("graph", EXAMPLES)
def test_run_agrees_with_oracle(graph, example_build, tinsmith_cmd, tmp_path):
    inputs = oracle.seeded_inputs(graph, seed=1)
    np.savez(tmp_path / "in.npz", **inputs)
    out = tmp_path / "out.npz"
    proc = tinsmith_cmd("run", str(GRAPHS / f"{graph}.yaml"), "--inputs", str(tmp_path / "in.npz"),
                        "--output", str(out), "--build-dir", str(example_build), "--target", "host")
    assert proc.returncode == 0, proc.stderr
    want = oracle.evaluate(graph, inputs)
    with np.load(out) as got:
        assert sorted(got.files) == sorted(OUTPUTS[graph])
        for name in OUTPUTS[graph]:
            assert got[name].dtype == np.float32
            assert got[name].shape == want[name].shape
            np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL, err_msg=name)


def test_runner_calls_the_model_once_per_input_set_in_a_row(example_build, tmp_path):
    """IN.bin holding three sets of inputs: three calls, OUT.bin their outputs in turn, each what
    a run of its set alone gives (NumPy's reference, independently); a file of part of a set is
    refused and OUT.bin is not written."""
    from tinsmith.pipeline import lower
    from tinsmith.reference import evaluate
    graph = lower(GRAPHS / "encoder.yaml")
    runner = example_build / "encoder" / "encoder_runner"
    sets = [oracle.seeded_inputs("encoder", seed=s) for s in (3, 4, 5)]
    data = b"".join(np.ascontiguousarray(inputs[n], "<f4").tobytes() for inputs in sets for n in graph.inputs)
    (tmp_path / "in.bin").write_bytes(data)
    subprocess.run([str(runner), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")], check=True)
    got = np.frombuffer((tmp_path / "out.bin").read_bytes(), "<f4").reshape(3, -1)
    for k, inputs in enumerate(sets):
        want = np.concatenate([evaluate(graph, inputs)[n].reshape(-1) for n in graph.outputs])
        np.testing.assert_allclose(got[k], want, rtol=RTOL, atol=ATOL, err_msg=f"set {k}")
    (tmp_path / "part.bin").write_bytes(data[:len(data) // 3 + 4])
    proc = subprocess.run([str(runner), str(tmp_path / "part.bin"), str(tmp_path / "none.bin")],
                          capture_output=True, text=True)
    per_call = len(data) // 3
    assert proc.returncode == 1 and not (tmp_path / "none.bin").exists()
    assert proc.stderr == (f"tinsmith: {tmp_path / 'part.bin'}: expected a multiple of {per_call} bytes "
                           f"(the inputs of one call), file holds {per_call + 4} bytes\n")


@pytest.mark.parametrize("graph", EXAMPLES)
def test_numpy_reference_agrees_with_oracle(graph):
    """`check` compares with tinsmith.reference; that reference must itself be right."""
    from tinsmith.pipeline import lower
    from tinsmith.reference import evaluate

    inputs = oracle.seeded_inputs(graph, seed=2)
    got = evaluate(lower(GRAPHS / f"{graph}.yaml"), inputs)
    for name, want in oracle.evaluate(graph, inputs).items():
        np.testing.assert_allclose(got[name], want, rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("graph", EXAMPLES)
def test_check_reports_each_output_and_exits_0(graph, example_build, tinsmith_cmd):
    proc = tinsmith_cmd("check", str(GRAPHS / f"{graph}.yaml"), "--build-dir", str(example_build),
                        "--target", "host")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(OUTPUTS[graph])
    for name, line in zip(OUTPUTS[graph], lines):
        m = re.fullmatch(rf"{name}: max abs diff (\S+), (\S+) of the tolerance \(summation length (\d+)\)", line)
        assert m, line
        assert float(m[1]) < 1e-5 and float(m[2]) < 0.1 and int(m[3]) >= 1


def test_show_prints_nodes_clusters_and_memory_plan(example_build, tinsmith_cmd):
    import json

    proc = tinsmith_cmd("show", str(GRAPHS / "branches.yaml"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # clusters worked out by hand from branches.yaml: a node's cluster is one more than the
    # latest cluster among its producers; the dead Add is dropped; Erf is computed inside the
    # kernel of the Pow it reads (fused), so it runs in that kernel's cluster
    expected = {"gate": 0, "squash": 0, "grow": 0, "gated": 1, "ratio": 1, "square": 1,
                "diff": 2, "smooth": 1, "join": 3, "flatten": 4, "mean_rows": 4, "merge_out": 5}
    shown = dict((m[2], int(m[1])) for m in re.finditer(r"^  \[(\d+)\] (\w+): ", out, re.M))
    assert shown == expected
    assert "unused_branch" not in out
    assert re.search(r"^clusters: 6$", out, re.M)
    report = json.loads((example_build / "branches" / "branches.json").read_text())
    ws = report["ram"]["workspace_bytes"]
    assert re.search(rf"^memory plan: workspace {ws} bytes \(lower bound \d+\)$", out, re.M)
    placements = re.findall(r"^  (\w+): offset (\d+), (\d+) bytes, clusters (\d+)\.\.(\d+)$", out, re.M)
    assert {p[0] for p in placements} == {p["value"] for p in report["plan"]}
    for value, offset, nbytes, first, last in placements:
        assert int(offset) % 16 == 0 and int(offset) + int(nbytes) <= ws, value


def test_run_with_missing_input_exits_1(tinsmith_cmd, tmp_path):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, y=np.zeros(4, np.float32))
    proc = tinsmith_cmd("run", str(GRAPHS / "branches.yaml"), "--inputs", str(inputs),
                        "--output", str(tmp_path / "out.npz"), "--build-dir", str(tmp_path / "build"))
    assert proc.returncode == 1
    assert proc.stderr == (f"error: {inputs} lacks input x\n"
                           "note: its arrays must be named after the graph inputs: x, y\n")
    assert not (tmp_path / "out.npz").exists()
    assert not (tmp_path / "build").exists()  # the inputs are checked before anything is built


def test_run_with_wrong_shape_exits_1(tinsmith_cmd, tmp_path):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.zeros((2, 64), np.float32))
    proc = tinsmith_cmd("run", str(GRAPHS / "mlp.yaml"), "--inputs", str(inputs),
                        "--output", str(tmp_path / "out.npz"), "--build-dir", str(tmp_path / "build"))
    assert proc.returncode == 1
    assert proc.stderr == f"error: input 'x' in {inputs} has shape [2, 64], the graph expects [1, 64]\n"


def test_graph_error_exits_1_with_location(tinsmith_cmd, tmp_path):
    (tmp_path / "bad.yaml").write_text(
        "graph: bad\n"
        "inputs:\n"
        "  x: {dtype: float32, shape: [2]}\n"
        "outputs: [y]\n"
        "nodes:\n"
        "  - {op: Relu, inputs: [x], outputs: [y], attrs: {alpha: 1}}\n")
    proc = tinsmith_cmd("build", "bad.yaml", "--build-dir", "out", cwd=tmp_path)
    assert proc.returncode == 1
    assert re.match(r"bad\.yaml:6:\d+: error: ", proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_usage_exits_2(tinsmith_cmd):
    assert tinsmith_cmd("run", str(GRAPHS / "mlp.yaml")).returncode == 2
    assert tinsmith_cmd("frobnicate").returncode == 2


def test_build_and_run_a_graph_outside_the_repository(tinsmith_cmd, tmp_path):
    w = np.random.default_rng(5).standard_normal((3, 2)).astype(np.float32)
    (tmp_path / "weights").mkdir()
    np.save(tmp_path / "weights" / "w.npy", w)
    (tmp_path / "affine.yaml").write_text(
        "graph: affine\n"
        "inputs:\n"
        "  x: {dtype: float32, shape: [4, 3]}\n"
        "outputs: [y]\n"
        "constants:\n"
        "  w: {file: weights/w.npy}\n"
        "  b: {value: [0.5, -0.25]}\n"
        "nodes:\n"
        "  - {op: Gemm, inputs: [x, w, b], outputs: [h]}\n"
        "  - {op: Sigmoid, inputs: [h], outputs: [y]}\n")
    proc = tinsmith_cmd("build", "affine.yaml", "--build-dir", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder = tmp_path / "out" / "affine"
    assert f"built {folder}" in proc.stdout
    for name in ("affine.hpp", "affine.h", "affine.cpp", "affine.json", "libaffine.a", "affine_runner"):
        assert (folder / name).is_file(), name

    x = np.random.default_rng(6).standard_normal((4, 3)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    proc = tinsmith_cmd("run", "affine.yaml", "--inputs", "in.npz", "--output", "out.bin",
                        "--build-dir", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    want = 1 / (1 + np.exp(-(x.astype(np.float64) @ w + np.array([0.5, -0.25]))))
    with np.load(tmp_path / "out.bin") as got:  # written at exactly the path given
        np.testing.assert_allclose(got["y"], want, rtol=RTOL, atol=ATOL)


def test_show_gives_each_node_its_macs_and_parameters(tinsmith_cmd):
    import numpy as np

    proc = tinsmith_cmd("show", str(GRAPHS / "mlp.yaml"))
    assert proc.returncode == 0, proc.stderr
    weights = np.load(GRAPHS / "weights" / "mlp.npz")
    (k1, n1), (k2, n2) = weights["w1"].shape, weights["w2"].shape  # one row in, Gemm without transB
    want = {"fc1": (k1 * n1, weights["w1"].size + weights["b1"].size),
            "fc2": (k2 * n2, weights["w2"].size + weights["b2"].size)}
    for name, (macs, params) in want.items():
        line = next(line for line in proc.stdout.splitlines() if line.strip().split(" ")[1] == f"{name}:")
        assert f"MACs {macs:,}  params {params:,}" in line, line
    assert f"total: {sum(m for m, _ in want.values()):,} MACs, {sum(p for _, p in want.values()):,} parameters" in proc.stdout


def test_show_html_writes_the_report_page_and_opens_it(tmp_path, tinsmith_cmd):
    opened = tmp_path / "opened"
    # the browser Python's webbrowser module starts: here a shell that records the address
    browser = tmp_path / "browser"
    browser.write_text(f"#!/bin/sh\necho \"$1\" > {opened}\n")
    browser.chmod(0o755)
    page = tmp_path / "mlp.html"
    proc = tinsmith_cmd("show", "--html", str(page), str(GRAPHS / "mlp.yaml"), env={"BROWSER": str(browser)})
    assert proc.returncode == 0, proc.stderr
    text = page.read_text(encoding="utf-8")
    assert all(f'data-node="{n}"' in text for n in ("fc1", "act1", "fc2", "classify"))
    assert opened.read_text().strip() == page.resolve().as_uri()


def test_build_instructions_needs_an_emulated_core(tinsmith_cmd, tmp_path):
    proc = tinsmith_cmd("build", str(GRAPHS / "mlp.yaml"), "--instructions", "--build-dir", str(tmp_path / "b"),
                        cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "error: --instructions counts instructions on an emulated core; target 'host-dispatch' has no emulator" \
        in proc.stderr


def test_summary_line_shows_measured_instructions():
    from tinsmith.measure import summary
    from tinsmith.measure.emulated import with_instructions
    report = {"graph": "mlp", "target": "cortex-m4", "macs": 2368,
              "ram": {"workspace_bytes": 176, "stack_bytes": 48, "total_bytes": 224},
              "flash": {"code_bytes": 312, "constant_bytes": 9600, "total_bytes": 9912},
              "nodes": [{"name": "fc1"}, {"name": "fc2", "fused": [{"name": "act"}]}]}
    assert "instructions" not in summary(report)
    measured = with_instructions(report, 5123, [3000, 2100], "qemu-system-arm -icount", "seeded")
    assert summary(measured).endswith("| 2,368 MACs | 5,123 instructions (measured on the emulator)")
    assert [n["instructions"] for n in measured["nodes"]] == [3000, 2100]
    assert measured["nodes"][1]["fused"][0]["instructions"] == 0  # counted in its kernel


def test_readme_summary_line_is_what_the_build_plans():
    """The README's sample line for mlp on the Cortex-M4: workspace, lower bound (never above the
    workspace) and MACs as the generator plans them for that core."""
    from tinsmith.pipeline import compile_graph
    readme = (GRAPHS.parent / "README.md").read_text()
    m = re.search(r"`mlp \[cortex-m4\]: RAM [^`]*\(workspace (\d+) B, lower bound (\d+) B[^`]*\| ([\d,]+) MACs`",
                  readme)
    assert m, "README shows a summary line for mlp on the Cortex-M4"
    plan = compile_graph(GRAPHS / "mlp.yaml", target="cortex-m4").plan
    workspace, bound, macs = int(m[1]), int(m[2]), int(m[3].replace(",", ""))
    assert (workspace, bound) == (plan.workspace_bytes, plan.lower_bound_bytes) and bound <= workspace
    assert macs == 2368


def test_show_html_says_so_when_no_browser_opens(tmp_path, tinsmith_cmd):
    page = tmp_path / "mlp.html"
    proc = tinsmith_cmd("show", "--html", str(page), str(GRAPHS / "mlp.yaml"),
                        env={"BROWSER": "false", "DISPLAY": "", "WAYLAND_DISPLAY": ""})
    assert proc.returncode == 0, proc.stderr
    assert f"no web browser could be opened here: open {page.resolve()} in one" in proc.stdout
    assert page.is_file()


def test_run_returns_outputs_under_their_model_names(tmp_path, tinsmith_cmd):
    """An ONNX output named `and` (a C++ keyword, so `and_` in the generated code) comes back as `and`."""
    import onnx
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["and"])], "kw",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("and", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "kw.onnx"))
    x = np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    proc = tinsmith_cmd("run", "kw.onnx", "--inputs", "in.npz", "--output", "out.npz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = np.load(tmp_path / "out.npz")
    assert out.files == ["and"]
    np.testing.assert_array_equal(out["and"], np.maximum(x, 0))


def test_unknown_target_suggests_the_closest_and_ops_prints_columns(tinsmith_cmd, tmp_path):
    proc = tinsmith_cmd("build", str(GRAPHS / "mlp.yaml"), "--target", "cortex_m4", cwd=tmp_path)
    assert proc.returncode == 1
    assert "error: unknown target 'cortex_m4'; did you mean 'cortex-m4'?" in proc.stderr, proc.stderr
    ops = tinsmith_cmd("ops", cwd=tmp_path, env={"COLUMNS": "80"}).stdout.splitlines()
    from tinsmith.builders import BUILDERS
    from tinsmith.ops import PRIMITIVES
    assert ops[0].startswith(f"primitives ({len(PRIMITIVES)}") and max(map(len, ops)) <= 80
    listed = {name for line in ops if line.startswith("  ") for name in line.split()}
    assert listed == set(PRIMITIVES) | set(BUILDERS)


def test_missing_cross_compiler_is_named_with_an_install_hint(tinsmith_cmd, tmp_path):
    proc = tinsmith_cmd("build", str(GRAPHS / "mlp.yaml"), "--target", "cortex-m4", "--build-dir",
                        str(tmp_path / "b"), cwd=tmp_path, env={"PATH": "/nonexistent"})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "error: the compiler for target 'cortex-m4', arm-none-eabi-g++, is not on PATH" in proc.stderr
    assert "apt-get install gcc-arm-none-eabi" in proc.stderr


@pytest.mark.parametrize("program", [["-m", "codegen"], ["codegen"]])
def test_the_checkout_runs_its_generator_under_the_folder_name_too(program, tmp_path):
    """In a checkout, `python -m codegen` (the design's command line) and `python codegen` (how the
    SCons tool of a checkout that is not installed runs it) are the `tinsmith` command."""
    folder_run = subprocess.run([sys.executable, *program, "ops"], cwd=ROOT, capture_output=True, text=True)
    installed = subprocess.run([sys.executable, "-m", "tinsmith", "ops"], cwd=tmp_path, capture_output=True, text=True)
    assert folder_run.returncode == 0, folder_run.stderr
    assert folder_run.stdout == installed.stdout and "primitives (" in installed.stdout
