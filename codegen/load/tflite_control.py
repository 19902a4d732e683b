"""TFLite's IF and WHILE: their subgraphs converted operator by operator (through the same
registrations as the main subgraph) into Subgraph attributes of the TfliteIf and TfliteWhile
builders (codegen/builders/tflite_control.py), which expand them when the graph is built: IF on a
run-time condition computes both branches and selects, WHILE is unrolled and needs a condition
known at every iteration."""
from __future__ import annotations

from tinsmith.load.subgraph import Subgraph, SubgraphNode
from tinsmith.load.tflite_reader import Reader, Unsupported, options


def subgraph(r: Reader, index: int, what: str) -> Subgraph:
    """Subgraph `index` of the model as a Subgraph: its operators converted, its constants loaded."""
    from tinsmith.load import tflite_model  # (it reads the operator table, which imports this module)
    from tinsmith.load.tflite_operators import OPERATORS
    if not 0 < index < r.model.SubgraphsLength():
        raise Unsupported(f"a {what} subgraph {index} the model does not hold (it has {r.model.SubgraphsLength()})")
    graph = r.model.Subgraphs(index)
    body = Reader(r.path, r.where, r.model, graph)
    tflite_model.names_of_tensors(body, graph)
    for k, name in enumerate(tflite_model.operator_names(body, r.model, graph)):
        if name not in OPERATORS:
            raise Unsupported(f"its {what} subgraph {index} holds {name} (operator {k}), which Tinsmith does not "
                              f"support")
        problem = tflite_model.convert_operator(body, k, name, graph.Operators(k))
        if problem:
            raise Unsupported(f"its {what} subgraph {index}: {problem}")
    if body.states:
        raise Unsupported(f"its {what} subgraph {index} keeps state between invocations")
    inputs = tuple(body.names[int(i)] for i in graph.InputsAsNumpy())
    outputs = tuple(body.value(int(i)) if body.data(int(i)) is not None else body.names[int(i)]
                    for i in graph.OutputsAsNumpy())
    nodes = tuple(SubgraphNode(n.op, n.inputs, n.outputs, dict(n.attrs)) for n in body.nodes)
    return Subgraph(inputs, nodes, outputs, {name: c.data for name, c in body.constants.items()})


def if_(r: Reader, op, inputs, outputs) -> None:
    opts = options(op, "IfOptions")
    branches = {"then_branch": subgraph(r, int(opts.ThenSubgraphIndex()), "then"),
                "else_branch": subgraph(r, int(opts.ElseSubgraphIndex()), "else")}
    r.emit("TfliteIf", [r.value(i) for i in inputs], [r.names[int(o)] for o in outputs], branches)


def while_(r: Reader, op, inputs, outputs) -> None:
    opts = options(op, "WhileOptions")
    parts = {"cond": subgraph(r, int(opts.CondSubgraphIndex()), "condition"),
             "body": subgraph(r, int(opts.BodySubgraphIndex()), "body")}
    r.emit("TfliteWhile", [r.value(i) for i in inputs], [r.names[int(o)] for o in outputs], parts)
