"""Command line: `python -m codegen COMMAND` (also installed as `tinsmith`).

Exit status: 0 on success, 1 on a user error (printed as path:line:col: error: ...),
2 on bad usage.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from codegen.errors import TinsmithError

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BUILD_DIR = "build/host"


def _scons_build(graph_path: Path, build_dir: Path, quiet: bool = True, graph=None) -> Path:
    """Build one graph with the SCons tool; return the path of its host runner.

    `graph` is the lowered graph when the caller has it; lowering first reports graph errors
    at the user's path before SCons runs."""
    from codegen.pipeline import lower

    if graph is None:
        graph = lower(graph_path)
    runner = build_dir.resolve() / graph.name / f"{graph.name}_runner"
    cmd = [sys.executable, "-m", "SCons", "-Q", "-C", str(ROOT), f"graphs={graph_path.resolve()}",
           f"build_dir={build_dir.resolve()}", str(runner)]
    proc = subprocess.run(cmd, capture_output=quiet, text=True)
    if proc.returncode != 0:
        detail = (proc.stdout + proc.stderr).strip() if quiet else ""
        raise TinsmithError(None, f"building {graph_path} failed" + (f":\n{detail}" if detail else ""))
    return runner


def _read_inputs(graph, path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {k: archive[k] for k in archive.files}
    except (OSError, ValueError) as e:
        raise TinsmithError(None, f"cannot read inputs from {path}: {e}") from None
    missing = [n for n in graph.inputs if n not in arrays]
    if missing:
        raise TinsmithError(None, f"{path} lacks input{'s' * (len(missing) > 1)} {', '.join(missing)}",
                            f"its arrays must be named after the graph inputs: {', '.join(graph.inputs)}")
    result = {}
    for name in graph.inputs:
        t = graph.types[name]
        a = arrays[name]
        if tuple(a.shape) != t.shape:
            raise TinsmithError(None, f"input '{name}' in {path} has shape {list(a.shape)}, "
                                f"the graph expects {list(t.shape)}")
        result[name] = np.ascontiguousarray(a, dtype=t.numpy_dtype)
    return result


def run_compiled(graph_path: Path, inputs: dict[str, np.ndarray], build_dir: Path,
                 graph=None) -> dict[str, np.ndarray]:
    """Build (if needed) and run the compiled graph on host; returns its outputs."""
    from codegen.pipeline import lower

    if graph is None:
        graph = lower(graph_path)
    runner = _scons_build(graph_path, build_dir, graph=graph)
    with tempfile.TemporaryDirectory() as tmp:
        in_file, out_file = Path(tmp) / "in.bin", Path(tmp) / "out.bin"
        in_file.write_bytes(b"".join(np.ascontiguousarray(inputs[n], dtype=graph.types[n].numpy_dtype)
                                     .astype("<" + graph.types[n].numpy_dtype.str[1:]).tobytes()
                                     for n in graph.inputs))
        proc = subprocess.run([str(runner), str(in_file), str(out_file)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise TinsmithError(None, f"{runner} failed: {proc.stderr.strip()}")
        data = out_file.read_bytes()
    outputs, offset = {}, 0
    for name in graph.outputs:
        t = graph.types[name]
        outputs[name] = np.frombuffer(data, dtype=t.numpy_dtype.newbyteorder("<"), count=t.size,
                                      offset=offset).reshape(t.shape).astype(t.numpy_dtype)
        offset += t.nbytes
    return outputs


def seeded_inputs(graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal inputs from a fixed seed, one array per graph input."""
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(graph.types[n].shape).astype(graph.types[n].numpy_dtype)
            for n in graph.inputs}


def cmd_generate(args) -> int:
    from codegen.pipeline import compile_graph, write_files
    write_files(compile_graph(args.graph).files, args.out_dir)
    return 0


def cmd_verify(args) -> int:
    from codegen.verify import VerifyError, verify_outputs
    try:
        verify_outputs(Path(args.report), [Path(p) for p in args.include])
    except VerifyError as e:
        print(e, file=sys.stderr)
        return 1
    if args.stamp:
        Path(args.stamp).write_text("verified\n")
    return 0


def cmd_build(args) -> int:
    runner = _scons_build(Path(args.graph), Path(args.build_dir), quiet=False)
    print(f"built {runner.parent}")
    return 0


def cmd_run(args) -> int:
    from codegen.pipeline import lower
    graph = lower(args.graph)
    inputs = _read_inputs(graph, Path(args.inputs))
    outputs = run_compiled(Path(args.graph), inputs, Path(args.build_dir), graph)
    try:
        with open(args.output, "wb") as f:  # a file object: np.savez would append .npz to a name
            np.savez(f, **outputs)
    except OSError as e:
        raise TinsmithError(None, f"cannot write outputs to {args.output}: {e.strerror}") from None
    return 0


def cmd_check(args) -> int:
    from codegen.pipeline import lower
    from codegen.reference import evaluate
    graph = lower(args.graph)
    inputs = seeded_inputs(graph, args.seed)
    got = run_compiled(Path(args.graph), inputs, Path(args.build_dir), graph)
    want = evaluate(graph, inputs)
    worst = 0.0
    for name in graph.outputs:
        diff = np.abs(got[name].astype(np.float64) - want[name].astype(np.float64))
        scale = np.maximum(np.abs(want[name].astype(np.float64)), args.atol / args.rtol)
        rel = float((diff / scale).max()) if diff.size else 0.0
        worst = max(worst, rel)
        print(f"{name}: max abs diff {float(diff.max()):.3g}, max rel diff {rel:.3g}")
    if worst > args.rtol:
        print(f"error: outputs differ from the NumPy reference by more than rtol={args.rtol}", file=sys.stderr)
        return 1
    return 0


def cmd_show(args) -> int:
    from codegen.pipeline import compile_graph
    c = compile_graph(args.graph)
    g = c.graph
    print(f"graph {g.name} ({g.source})")
    for n in g.inputs:
        print(f"  input  {n}: {g.types[n]}")
    for n in g.outputs:
        print(f"  output {n}: {g.types[n]}")
    for name, const in g.constants.items():
        print(f"  const  {name}: {const.type} from {const.source}")
    print("nodes (schedule order):")
    for node, cluster in zip(c.schedule.nodes, c.schedule.clusters):
        attrs = ", ".join(f"{k}={v}" for k, v in node.attrs.items() if v is not None)
        print(f"  [{cluster}] {node.name}: {node.op}({', '.join(node.inputs)}) -> "
              f"{', '.join(node.outputs)}: {', '.join(str(g.types[o]) for o in node.outputs)}"
              + (f"  {{{attrs}}}" if attrs else ""))
    print(f"clusters: {c.schedule.cluster_count}")
    print(f"memory plan: workspace {c.plan.workspace_bytes} bytes "
          f"(lower bound {c.plan.lower_bound_bytes})")
    for p in c.plan.placements:
        print(f"  {p.lifetime.value}: offset {p.offset}, {p.lifetime.nbytes} bytes, "
              f"clusters {p.lifetime.first}..{p.lifetime.last}")
    return 0


def cmd_ops(args) -> int:
    from codegen.builders import BUILDERS
    from codegen.ops import PRIMITIVES
    print("primitives: " + ", ".join(sorted(PRIMITIVES)))
    print("builders:   " + ", ".join(sorted(BUILDERS)))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tinsmith", description="Compile neural-network graphs to C++.")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name, fn, help, graph=True):
        p = sub.add_parser(name, help=help)
        if graph:
            p.add_argument("graph", help="graph YAML file")
        p.set_defaults(fn=fn)
        return p

    p = command("build", cmd_build, "build the graph's library and runner for the host")
    p.add_argument("--build-dir", default=DEFAULT_BUILD_DIR)
    p = command("run", cmd_run, "run the compiled graph on inputs from an .npz file")
    p.add_argument("--inputs", required=True, help=".npz with one array per graph input")
    p.add_argument("--output", required=True, help=".npz to write, one array per graph output")
    p.add_argument("--build-dir", default=DEFAULT_BUILD_DIR)
    p = command("check", cmd_check, "compare compiled outputs with the NumPy reference")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--atol", type=float, default=1e-6)
    p.add_argument("--build-dir", default=DEFAULT_BUILD_DIR)
    command("show", cmd_show, "print the expanded graph, clusters and memory plan")
    command("ops", cmd_ops, "list supported primitives and builders", graph=False)
    p = command("generate", cmd_generate, "write the generated sources (used by the SCons tool)")
    p.add_argument("-o", "--out-dir", required=True)
    p = command("verify", cmd_verify, "check generated headers with libclang (used by the SCons tool)",
                graph=False)
    p.add_argument("report", help="NAME.json next to the generated headers")
    p.add_argument("--stamp", help="file to write when verification passes")
    p.add_argument("-I", "--include", action="append", default=[], help="extra include directory")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        return args.fn(args)
    except TinsmithError as e:
        print(e, file=sys.stderr)
        return 1
