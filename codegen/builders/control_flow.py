"""ONNX If and Loop, where the control flow is known when the graph is built.

A compiled graph runs the same kernels every call, so control flow is resolved at build time:
If needs a condition the graph already knows (a constant, or computed from constants and
shapes, as the function bodies of AffineGrid and others compute theirs), and its branch's nodes
take its place. Loop needs a constant trip count (and a condition known at every iteration):
it is unrolled, one copy of the body per iteration, each iteration's scan outputs stacked along
a new first axis. A condition or trip count computed at run time is an error that says so.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from tinsmith import limits
from tinsmith.builders.registry import builder
from tinsmith.load.subgraph import Subgraph
from tinsmith.ops.registry import ATTR_KINDS, Attr, OpError

MAX_OUTPUTS = 1024  # outputs one If or Loop node may name: a bound for the declared count


def _as_subgraph(v):
    if not isinstance(v, Subgraph):
        raise TypeError("a subgraph")
    return v


ATTR_KINDS["graph"] = _as_subgraph  # type: ignore[index]  (a registration: one more attribute kind)


def _rank0(g, value: np.ndarray, hint: str) -> str:
    """A rank-0 constant (GraphBuilder.constant keeps at least one dimension), folded at build time."""
    one = g.constant(np.asarray(value).reshape(1), hint)
    return g.add("Squeeze", [one, g.constant(np.array([0], np.int64), "axes")])[0]


def _known_bool(g, name: str, what: str, index: int) -> bool:
    value = g.value_of(name)
    if value is None:
        raise OpError(f"{what} must be known when the graph is built (a constant, or computed from "
                      "constants and shapes): a compiled graph cannot branch at run time", input=index)
    value = np.asarray(value)
    if value.size != 1:
        raise OpError(f"{what} must hold one value, not {value.size}", input=index)
    return bool(value.reshape(-1)[0])


def _rebind(body: Subgraph, names: dict[str, str]) -> Subgraph:
    """`body` reading `names[v]` wherever it reads a value v of the enclosing body (a nested If
    or Loop sees the values its enclosing body defined under their new names)."""
    def attr(v):
        return _rebind(v, names) if isinstance(v, Subgraph) else v
    nodes = tuple(replace(n, inputs=tuple(names.get(i, i) for i in n.inputs),
                          attrs={k: attr(v) for k, v in n.attrs.items()}) for n in body.nodes)
    defined = set(body.inputs) | set(body.constants) | {o for n in body.nodes for o in n.outputs}
    outputs = tuple(o if o in defined else names.get(o, o) for o in body.outputs)
    return replace(body, nodes=nodes, outputs=outputs)


def inline(g, body: Subgraph, bound: dict[str, str]) -> list[str]:
    """Add the body's nodes with its inputs bound to `bound` (body name -> value); names the body
    defines get fresh names, names it reads from the enclosing graph stay. Returns its outputs."""
    names = dict(bound)
    for name, data in body.constants.items():
        names[name] = _rank0(g, data, "body") if np.ndim(data) == 0 else g.constant(data, "body")
    for node in body.nodes:
        attrs = {k: _rebind(v, names) if isinstance(v, Subgraph) else v for k, v in node.attrs.items()}
        produced = g.add(node.op, [names.get(i, i) if i else "" for i in node.inputs], attrs)
        names.update({o: p for o, p in zip(node.outputs, produced) if o})
    return [names.get(o, o) for o in body.outputs]


@builder("If", inputs=1, outputs=MAX_OUTPUTS, attrs=[Attr("then_branch", "graph"), Attr("else_branch", "graph")])
def if_(g, inputs, attrs):
    """The branch the condition picks, in place of the node."""
    taken = attrs["then_branch"] if _known_bool(g, inputs[0], "If's condition", 0) else attrs["else_branch"]
    return inline(g, taken, {})


@builder("Loop", inputs=(0, -1), outputs=MAX_OUTPUTS, attrs=[Attr("body", "graph")])  # M and cond may be ""
def loop(g, inputs, attrs):
    """The body unrolled for each iteration: inputs M (trip count), cond, then the carried values;
    outputs the final carried values, then each scan output stacked over the iterations."""
    body: Subgraph = attrs["body"]
    if len(inputs) < 2:
        raise OpError(f"Loop takes M, cond and the carried values (at least 2 inputs), got {len(inputs)}")
    trip, cond, carried = inputs[0], inputs[1], list(inputs[2:])
    if len(body.inputs) != 2 + len(carried) or len(body.outputs) < 1 + len(carried):
        raise OpError(f"Loop's body takes {len(body.inputs)} inputs and returns {len(body.outputs)} values; "
                      f"expected 2 + {len(carried)} carried values in and at least 1 + {len(carried)} out")
    if not trip:
        raise OpError("Loop needs a trip count known when the graph is built (input 0): a compiled graph "
                      "cannot run a loop whose length depends on run-time values", input=0)
    count = g.value_of(trip)
    if count is None:
        raise OpError("Loop's trip count must be known when the graph is built (a constant, or computed from "
                      "constants and shapes)", input=0)
    count = int(np.asarray(count).reshape(-1)[0])
    bound = limits.current().graph_nodes
    if count * max(len(body.nodes), 1) > bound:
        raise OpError(f"Loop runs {count:,} iterations of {len(body.nodes)} nodes, more than the limit of "
                      f"{bound:,} primitives (limit 'graph_nodes')", input=0)
    going = _known_bool(g, cond, "Loop's condition", 1) if cond else True
    scans: list[list[str]] = [[] for _ in body.outputs[1 + len(carried):]]
    for i in range(count):
        if not going:
            break
        outs = inline(g, body, {body.inputs[0]: _rank0(g, np.array(i, np.int64), "iteration"),
                                body.inputs[1]: _rank0(g, np.array(True), "cond"),
                                **dict(zip(body.inputs[2:], carried))})
        going = _known_bool(g, outs[0], "Loop's condition (the body's first output)", 1)
        carried = outs[1:1 + len(carried)]
        for scan, value in zip(scans, outs[1 + len(carried):]):
            scan.append(value)
    if any(not scan for scan in scans):
        raise OpError("Loop runs no iteration, so its scan outputs have no shape Tinsmith can give them", input=0)
    axis = g.constant(np.array([0], np.int64), "axes")
    stacked = []
    for scan in scans:
        rows = [g.add("Unsqueeze", [v, axis])[0] for v in scan]
        stacked.append(rows[0] if len(rows) == 1 else g.add("Concat", rows, {"axis": 0})[0])
    return carried + stacked


def _stack(g, values: list[str], axis: int) -> str:
    """The values (of one shape) stacked along a new axis `axis` of the result."""
    rank = len(g.type_of(values[0]).shape) + 1
    where = g.constant(np.array([axis % rank], np.int64), "axes")
    rows = [g.add("Unsqueeze", [v, where])[0] for v in values]
    return rows[0] if len(rows) == 1 else g.add("Concat", rows, {"axis": axis % rank})[0]


@builder("Scan", inputs=(1, -1), outputs=MAX_OUTPUTS,
         attrs=[Attr("body", "graph"), Attr("num_scan_inputs", "int"), Attr("scan_input_axes", "ints", None),
                Attr("scan_input_directions", "ints", None), Attr("scan_output_axes", "ints", None),
                Attr("scan_output_directions", "ints", None)])
def scan(g, inputs, attrs):
    """The body unrolled along the scan inputs' scanned axis (its length is static): inputs are the
    initial states, then the scan inputs; outputs the final states, then the scan outputs stacked."""
    body: Subgraph = attrs["body"]
    m = attrs["num_scan_inputs"]
    states, scanned = list(inputs[:len(inputs) - m]), list(inputs[len(inputs) - m:])
    if m < 1 or len(body.inputs) != len(inputs) or len(body.outputs) < len(states):
        raise OpError(f"Scan's body takes {len(body.inputs)} inputs for {len(states)} states and {m} scan inputs")
    k = len(body.outputs) - len(states)

    def per(name: str, count: int) -> list[int]:
        given = attrs[name]
        if given is not None and len(given) != count:
            raise OpError(f"Scan's {name} has {len(given)} values for {count}", attr=name)
        return list(given) if given is not None else [0] * count
    in_axes, in_dirs = per("scan_input_axes", m), per("scan_input_directions", m)
    out_axes, out_dirs = per("scan_output_axes", k), per("scan_output_directions", k)
    lengths = {tuple(g.type_of(v).shape)[a] for v, a in zip(scanned, in_axes)}
    if len(lengths) != 1:
        raise OpError(f"Scan's scan inputs have different lengths along their scanned axes: {sorted(lengths)}")
    (length,) = lengths
    if length < 1:
        raise OpError("Scan over zero iterations leaves its scan outputs without a shape", input=len(states))
    outputs: list[list[str]] = [[] for _ in range(k)]
    for t in range(length):
        picked = [g.add("Gather", [v, _rank0(g, np.array(length - 1 - t if d else t, np.int64), "step")],
                        {"axis": a})[0] for v, a, d in zip(scanned, in_axes, in_dirs)]
        outs = inline(g, body, dict(zip(body.inputs, states + picked)))
        states = outs[:len(states)]
        for collected, value in zip(outputs, outs[len(states):]):
            collected.append(value)
    return states + [_stack(g, values[::-1] if d else values, a)
                     for values, a, d in zip(outputs, out_axes, out_dirs)]
