"""One graph file computed on the host the way `tinsmith run` computes it, for tests whose subject
is the numbers of many small graphs (quantized operators one by one) rather than the build.

`tinsmith run` (tinsmith.cli.run_compiled) starts SCons, which starts the generator, verifies
the headers, compiles the model, its runner and the runtime, measures the object and links:
two interpreters and five compilers per graph, more than a tiny graph's kernels cost. Here the
pipeline runs in the test's own process, libclang verifies the headers as the SCons tool does,
and the model and its runner are compiled by one compiler process with the host target's flags
and -Werror (conformance/batch.py, a batch of one). The inputs and outputs are encoded as the
runner reads and writes them (tinsmith.cli). The SCons path itself, and the report it measures,
are what tests/test_e2e_scons.py, test_scons_tool.py and test_cli.py test.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np


def run_on_host(graph_path: Path, inputs: dict[str, np.ndarray], build_dir: Path, graph=None
                ) -> dict[str, np.ndarray]:
    """What run_compiled(graph_path, inputs, build_dir, graph) returns for the host target."""
    from conformance.batch import build_batches
    from tinsmith.build_steps import verify_step
    from tinsmith.cli import _input_bytes, _output_arrays
    from tinsmith.pipeline import compile_graph, lower, write_files

    if graph is None:
        graph = lower(graph_path)
    compiled = compile_graph(graph_path, target="host")
    name = compiled.graph.name
    write_files(compiled.files, build_dir / "cases" / name)  # where build_batches keeps a case
    verify_step(build_dir / "cases" / name / f"{name}.plan.json")
    programs, failures = build_batches([(name, compiled.files)], build_dir, jobs=1, batch_size=1,
                                       log=lambda _: None)
    assert not failures, failures
    in_file, out_file = build_dir / "in.bin", build_dir / "out.bin"
    in_file.write_bytes(_input_bytes(graph, inputs))
    proc = subprocess.run(programs[name].command(str(in_file), str(out_file)), capture_output=True, text=True)
    assert proc.returncode == 0, f"{graph_path} on the host failed: {proc.stderr}"
    return _output_arrays(graph, out_file.read_bytes())
