"""`check --per-layer`: find the first node whose compiled output is wrong.

The lowered graph (primitives, after expansion and optimization) is written as a graph file of
its own, in which every value a node computes is also a graph output, and built for the target
by the same SCons tool as any graph. Running it once gives every intermediate value as the
compiled code computed it. Each node is then checked on its own: its NumPy reference is
evaluated on the inputs the compiled code actually gave that node, so errors made upstream do
not count against it, and its tolerance is that of its own reduction length. The first node in
graph order outside its tolerance is the one whose kernel is wrong.

Exposing every value means none of them is fused away or written over in place: the probe
build checks each kernel, not how the plan and fusion combine them (the ordinary `check` does).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from tinsmith.errors import SourceLoc
from tinsmith.ir import Graph, Node
from tinsmith.load.graph_file import GraphSpec, NodeSpec, ValueSpec
from tinsmith.load.write_yaml import Notes, write_graph
from tinsmith.ops import PRIMITIVES
from tinsmith.tolerance import reduction_length, within_tolerance


@dataclass(frozen=True)
class LayerResult:
    """How far one node's compiled outputs are from its reference on the same inputs."""

    node: Node
    max_abs_diff: float
    ratio: float          # largest difference over allowed difference: above 1.0 fails
    length: int           # the node's reduction length, in its tolerance

    @property
    def ok(self) -> bool:
        return self.ratio <= 1.0


def probe_graph_file(graph: Graph, path: Path) -> Path:
    """Write `graph` as a graph file at `path` whose outputs are the graph's outputs and then every
    value a node computes, in node order; returns the path. The file's own locations stand in
    for the original's (it is read back only by the build). Its states (ir.State) are plain inputs
    and outputs there, so that their next values show: run it on with_starting_states."""
    here = SourceLoc(str(path), 1, 1)
    exposed = list(graph.outputs) + [v for n in graph.nodes for v in n.outputs
                                     if v and v not in graph.outputs and v not in graph.inputs]
    # an attribute the op left unset is None after checking; a graph file leaves it out
    nodes = tuple(NodeSpec(n.op, n.name, n.inputs, n.outputs, {k: v for k, v in n.attrs.items() if v is not None},
                           here, here,
                           tuple(here for _ in n.inputs), tuple(here for _ in n.outputs)) for n in graph.nodes)
    spec = GraphSpec(graph.name, str(path),
                     tuple(ValueSpec(v, graph.types[v], here) for v in graph.inputs),
                     tuple(ValueSpec(v, graph.types[v], here) for v in dict.fromkeys(exposed)),
                     tuple(graph.constants.values()), nodes, here)
    path.parent.mkdir(parents=True, exist_ok=True)
    note = (f"Every value of {graph.name} (from {graph.source or 'its graph file'}) as an output, "
            "written by `check --per-layer`.")
    write_graph(spec, path, Notes(header=(note,)))
    return path


def check_layers(graph: Graph, values: Mapping[str, np.ndarray], rtol: float, atol: float) -> list[LayerResult]:
    """Each node's compiled outputs (in `values`, with the graph's inputs and constants) against
    its NumPy reference evaluated on the compiled inputs it read."""
    env: dict[str, np.ndarray] = {name: c.data for name, c in graph.constants.items()}
    env.update(values)
    results = []
    for node in graph.nodes:
        args = [env[v] if v else None for v in node.inputs]
        want = PRIMITIVES[node.op].reference(args, node.attrs)
        length = reduction_length(graph, node)
        worst_ratio, worst_diff = 0.0, 0.0
        for out, expected in zip(node.outputs, want):
            if not out:
                continue
            t = graph.types[out]
            expected = np.asarray(expected, dtype=t.numpy_dtype).reshape(t.shape)
            got = env[out]
            _, ratio = within_tolerance(got, expected, length, rtol, atol)
            diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
            worst_ratio = max(worst_ratio, ratio)
            worst_diff = max(worst_diff, float(np.nanmax(diff)) if diff.size else 0.0)
        results.append(LayerResult(node, worst_diff, worst_ratio, length))
    return results


def with_starting_states(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`inputs` and each state's value when the first call starts: what the probe of a graph with
    states takes (one call from the starting state)."""
    return {**{s.read: np.full(graph.types[s.read].shape, s.fill, graph.types[s.read].numpy_dtype)
               for s in graph.states}, **inputs}


def run_per_layer(graph: Graph, inputs: Mapping[str, np.ndarray], build_dir: Path,
                  run: Callable[[Path, Mapping[str, np.ndarray], Path], Mapping[str, np.ndarray]],
                  rtol: float, atol: float) -> list[LayerResult]:
    """Write the probe of `graph` under `build_dir`, build and run it with `run(graph file,
    inputs, build folder)` (which returns the outputs by name), and check every node."""
    probe_path = probe_graph_file(graph, build_dir / "probe" / f"{graph.name}.yaml")
    inputs = with_starting_states(graph, inputs)
    values = dict(run(probe_path, inputs, build_dir))
    missing = [v for n in graph.nodes for v in n.outputs if v and v not in values]
    assert not missing, f"the probe build lost values {missing}"  # the probe exposes every one
    values.update(inputs)
    return check_layers(graph, values, rtol, atol)
