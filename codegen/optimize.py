"""Stage 3, optimize: graph-to-graph passes that keep the numbers and shrink the work."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from codegen.ir import Constant, Graph
from codegen.ops import PRIMITIVES

Pass = Callable[[Graph], Graph]


def fold_constants(graph: Graph) -> Graph:
    """Evaluate nodes whose inputs are all constants at build time; their outputs become constants."""
    constants = dict(graph.constants)
    nodes = []
    for node in graph.nodes:
        args = [n for n in node.inputs if n]
        if args and all(a in constants for a in args) and not set(node.outputs) & set(graph.outputs):
            data = [constants[n].data if n else None for n in node.inputs]
            results = PRIMITIVES[node.op].reference(data, node.attrs)
            for out, value in zip(node.outputs, results):
                t = graph.types[out]
                # C order, and the inferred shape: np.ascontiguousarray alone would make a rank-0
                # result rank 1, so the constant's type would disagree with the graph's.
                value = np.ascontiguousarray(np.asarray(value, dtype=t.numpy_dtype)).reshape(t.shape)
                constants[out] = Constant(out, value, f"folded from node '{node.name}'", node.loc)
        else:
            nodes.append(node)
    return replace(graph, constants=constants, nodes=tuple(nodes))


def drop_dead_nodes(graph: Graph) -> Graph:
    """Remove nodes and constants that no graph output depends on."""
    live = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if live & set(node.outputs):
            kept.append(node)
            live.update(n for n in node.inputs if n)
    kept.reverse()
    constants = {k: c for k, c in graph.constants.items() if k in live}
    types = {k: t for k, t in graph.types.items()
             if k in live or k in graph.inputs or any(k in n.outputs for n in kept)}
    return replace(graph, nodes=tuple(kept), constants=constants, types=types)


DEFAULT_PASSES: Sequence[Pass] = (fold_constants, drop_dead_nodes)


def optimize(graph: Graph, passes: Sequence[Pass] = DEFAULT_PASSES) -> Graph:
    """Run the passes in order."""
    for p in passes:
        graph = p(graph)
    return graph
