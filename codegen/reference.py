"""Run a graph with the primitives' NumPy references: the oracle for `check` and for folding."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from tinsmith.ir import Graph
from tinsmith.ops import PRIMITIVES


def evaluate(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Values of the graph outputs for the given inputs."""
    env: dict[str, np.ndarray] = {name: c.data for name, c in graph.constants.items()}
    # a state's value when the first call starts (the compiled code's after init_ws()), unless given
    env.update({s.read: np.full(graph.types[s.read].shape, s.fill, graph.types[s.read].numpy_dtype)
                for s in graph.states})
    env.update({name: np.asarray(inputs[name], dtype=graph.types[name].numpy_dtype) for name in graph.inputs
                if name in inputs or name not in env})
    for node in graph.nodes:
        args = [env[n] if n else None for n in node.inputs]
        for out, value in zip(node.outputs, PRIMITIVES[node.op].reference(args, node.attrs)):
            env[out] = np.asarray(value, dtype=graph.types[out].numpy_dtype).reshape(graph.types[out].shape)
    return {name: env[name] for name in graph.outputs}
