"""TFLite's IF and WHILE (codegen/load/tflite_control.py reads their subgraphs), expanded like ONNX
If and Loop (control_flow.py) into the kernels one call runs every time.

TfliteIf with a condition known when the graph is built inlines the branch it picks; with a
condition computed at run time it computes both branches and selects each output elementwise
(Where), which gives TFLite's results whenever the branches have no effects beyond their
outputs, as TFLite's branch subgraphs do not. TfliteWhile is unrolled: its condition subgraph must
be known at every iteration (a counter from a constant against a constant), as Loop's must.
"""
from __future__ import annotations

from tinsmith import limits
from tinsmith.builders.control_flow import MAX_OUTPUTS, _known_bool, inline
from tinsmith.builders.registry import builder
from tinsmith.load.subgraph import Subgraph
from tinsmith.ops.registry import Attr, OpError


@builder("TfliteIf", inputs=(1, -1), outputs=MAX_OUTPUTS,
         attrs=[Attr("then_branch", "graph"), Attr("else_branch", "graph")])
def tflite_if(g, inputs, attrs):
    """IF(cond, operands...): the branch's outputs, each branch's inputs bound to the operands."""
    cond, operands = inputs[0], list(inputs[1:])
    branches: list[Subgraph] = [attrs["then_branch"], attrs["else_branch"]]
    for which, body in zip(("then", "else"), branches):
        if len(body.inputs) != len(operands):
            raise OpError(f"IF's {which} branch takes {len(body.inputs)} inputs, IF passes {len(operands)}")
    if len(branches[0].outputs) != len(branches[1].outputs):
        raise OpError(f"IF's branches return {len(branches[0].outputs)} and {len(branches[1].outputs)} values")
    if g.value_of(cond) is not None:
        taken = branches[0] if _known_bool(g, cond, "IF's condition", 0) else branches[1]
        return inline(g, taken, dict(zip(taken.inputs, operands)))
    then_out, else_out = (inline(g, body, dict(zip(body.inputs, operands))) for body in branches)
    selected = []
    for k, (a, b) in enumerate(zip(then_out, else_out)):
        if g.type_of(a).shape != g.type_of(b).shape or g.type_of(a).dtype != g.type_of(b).dtype:
            raise OpError(f"IF's branches return output {k} as {g.type_of(a)} and {g.type_of(b)}: with a condition "
                          f"computed at run time, Tinsmith computes both and selects, which needs one type")
        selected.append(g.add("Where", [cond, a, b])[0])
    return selected


@builder("TfliteWhile", inputs=(1, -1), outputs=MAX_OUTPUTS, attrs=[Attr("cond", "graph"), Attr("body", "graph")])
def tflite_while(g, inputs, attrs):
    """WHILE(values...): while cond(values) holds, values = body(values); the final values."""
    cond, body = attrs["cond"], attrs["body"]
    values = list(inputs)
    if len(cond.inputs) != len(values) or len(body.inputs) != len(values) or len(body.outputs) != len(values):
        raise OpError(f"WHILE carries {len(values)} values, but its condition takes {len(cond.inputs)} and its body "
                      f"takes {len(body.inputs)} and returns {len(body.outputs)}")
    bound = limits.current().graph_nodes
    iterations = 0
    while True:
        (going,) = inline(g, cond, dict(zip(cond.inputs, values)))[:1]
        if not _known_bool(g, going, "WHILE's condition (a counter from a constant, against a constant)", 0):
            return values
        iterations += 1
        if iterations * max(len(body.nodes), 1) > bound:
            raise OpError(f"WHILE runs more than {iterations - 1:,} iterations of {len(body.nodes)} nodes, beyond the "
                          f"limit of {bound:,} primitives (limit 'graph_nodes')")
        values = inline(g, body, dict(zip(body.inputs, values)))
