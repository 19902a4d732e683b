"""Random valid graphs for property tests of the schedule and the memory plan."""
from __future__ import annotations

import random

import numpy as np

from tinsmith.errors import SourceLoc
from tinsmith.ir import Constant, Graph, Node, TensorType

UNARY = ("Relu", "Sigmoid", "Softmax")  # Softmax: same shape, but not elementwise


def random_graph(rng: random.Random, n_nodes: int) -> Graph:
    """A valid random graph of 1-D tensors of assorted sizes: unary ops, Add (equal sizes), Mul (one
    side may be a single element, broadcast), Concat, and a constant or two. Unread values are
    outputs, and sometimes a value that is read is one too."""
    types: dict[str, TensorType] = {}
    constants: dict[str, Constant] = {}
    inputs = []

    def size() -> int:
        return 1 if rng.random() < 0.2 else rng.randint(1, 40)

    for i in range(rng.randint(1, 3)):
        types[f"in{i}"] = TensorType("float32", (size(),))
        inputs.append(f"in{i}")
    for i in range(rng.randint(0, 2)):
        data = np.ones(size(), np.float32)
        constants[f"c{i}"] = Constant(f"c{i}", data, "test", SourceLoc("t", 1, 1))
        types[f"c{i}"] = constants[f"c{i}"].type
    values = list(types)

    def pick() -> str:
        return values[max(0, len(values) - 1 - int(rng.expovariate(0.25)))]

    nodes = []
    for i in range(n_nodes):
        a, out = pick(), f"v{i}"
        n_a = types[a].shape[0]
        kind = rng.choice(["Relu", "Add", "Mul", "Concat", "Unary"])
        if kind == "Add":
            node = Node("Add", f"n{i}", (a, rng.choice([v for v in values if types[v] == types[a]])), (out,))
        elif kind == "Mul":
            b = rng.choice([v for v in values if types[v].shape[0] in (1, n_a) or n_a == 1])
            node = Node("Mul", f"n{i}", (a, b) if rng.random() < 0.5 else (b, a), (out,))
        elif kind == "Concat":
            node = Node("Concat", f"n{i}", (a,) + tuple(pick() for _ in range(rng.randint(1, 2))), (out,),
                        {"axis": 0})
        else:
            op = "Relu" if kind == "Relu" else rng.choice(UNARY)
            node = Node(op, f"n{i}", (a,), (out,), {"axis": 0} if op == "Softmax" else {})
        sizes = [types[v].shape[0] for v in node.inputs]
        types[out] = TensorType("float32", (sum(sizes) if kind == "Concat" else max(sizes),))
        nodes.append(node)
        values.append(out)
    produced = [n.outputs[0] for n in nodes]
    read = {v for n in nodes for v in n.inputs}
    outputs = [v for v in produced if v not in read]
    outputs += [v for v in produced if v in read and rng.random() < 0.1]
    return Graph("random", tuple(inputs), tuple(outputs), types, constants, tuple(nodes))
