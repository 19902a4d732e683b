"""Random valid graphs for property tests of the schedule and the memory plan."""
from __future__ import annotations

import random

import numpy as np

from codegen.errors import SourceLoc
from codegen.ir import Constant, Graph, Node, TensorType


def random_graph(rng: random.Random, n_nodes: int) -> Graph:
    """A valid random graph of 1-D tensors of assorted sizes: Relu, Add (equal sizes), Concat, and a
    constant or two. Unread values are outputs, and sometimes a value that is read is one too."""
    types: dict[str, TensorType] = {}
    constants: dict[str, Constant] = {}
    inputs = []
    for i in range(rng.randint(1, 3)):
        types[f"in{i}"] = TensorType("float32", (rng.randint(1, 40),))
        inputs.append(f"in{i}")
    for i in range(rng.randint(0, 2)):
        data = np.ones(rng.randint(1, 40), np.float32)
        constants[f"c{i}"] = Constant(f"c{i}", data, "test", SourceLoc("t", 1, 1))
        types[f"c{i}"] = constants[f"c{i}"].type
    values = list(types)

    def pick() -> str:
        return values[max(0, len(values) - 1 - int(rng.expovariate(0.25)))]

    nodes = []
    for i in range(n_nodes):
        a, out = pick(), f"v{i}"
        kind = rng.choice(["Relu", "Add", "Concat"])
        if kind == "Add":
            node = Node("Add", f"n{i}", (a, rng.choice([v for v in values if types[v] == types[a]])), (out,))
        elif kind == "Concat":
            node = Node("Concat", f"n{i}", (a,) + tuple(pick() for _ in range(rng.randint(1, 2))), (out,),
                        {"axis": 0})
        else:
            node = Node("Relu", f"n{i}", (a,), (out,))
        size = sum(types[v].shape[0] for v in node.inputs) if kind == "Concat" else types[a].shape[0]
        types[out] = TensorType("float32", (size,))
        nodes.append(node)
        values.append(out)
    produced = [n.outputs[0] for n in nodes]
    read = {v for n in nodes for v in n.inputs}
    outputs = [v for v in produced if v not in read]
    outputs += [v for v in produced if v in read and rng.random() < 0.1]
    return Graph("random", tuple(inputs), tuple(outputs), types, constants, tuple(nodes))
