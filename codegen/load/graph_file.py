"""Graph YAML v1: read a graph file into a GraphSpec, checking its structure and names.

Types, op names and attributes are checked later, when the graph is expanded; this
module checks what the file alone can tell and remembers where everything was written.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from tinsmith import limits
from tinsmith.errors import GraphError, SourceLoc
from tinsmith.ir import Constant, TensorType
from tinsmith.ir.graph import DTYPES, INTEGER_DTYPES, QUANTIZED_DTYPES, Quant
from tinsmith.load.build_info import checked_graph_name, display_path
from tinsmith.load.constants import LoaderError, load_constant
from tinsmith.load.identifiers import identifier_hint, identifier_problem
from tinsmith.load.located_yaml import LocatedDict, LocatedList, read_yaml

TOP_LEVEL_KEYS = ("graph", "version", "inputs", "outputs", "states", "constants", "nodes")
STATE_KEYS = ("next", "fill")
NODE_KEYS = ("op", "name", "inputs", "outputs", "attrs")
SUPPORTED_DTYPES = tuple(DTYPES)  # element types a graph input may have
QUANT_KEYS = ("scale", "zero_point", "axis")


@dataclass(frozen=True)
class ValueSpec:
    """A graph input or output as declared: name, type (None if left to inference), where."""

    name: str
    type: TensorType | None
    loc: SourceLoc
    type_loc: SourceLoc | None = None  # where the type is written, if it is


@dataclass(frozen=True)
class NodeSpec:
    """A node as written: op may be a primitive or a builder; locations for every part."""

    op: str
    name: str | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any]
    loc: SourceLoc
    op_loc: SourceLoc
    input_locs: tuple[SourceLoc, ...]
    output_locs: tuple[SourceLoc, ...]
    attr_locs: Mapping[str, SourceLoc] = field(default_factory=dict)  # attribute values
    attr_key_locs: Mapping[str, SourceLoc] = field(default_factory=dict)  # attribute names
    name_loc: SourceLoc | None = None
    inputs_loc: SourceLoc | None = None  # the `inputs` list as a whole (node loc if not written)
    outputs_loc: SourceLoc | None = None


@dataclass(frozen=True)
class GraphSpec:
    """A graph file, structurally valid, constants loaded."""

    name: str
    path: str
    inputs: tuple[ValueSpec, ...]
    outputs: tuple[ValueSpec, ...]
    constants: tuple[Constant, ...]
    nodes: tuple[NodeSpec, ...]
    name_loc: SourceLoc
    states: tuple = ()  # ir.State: values kept between calls (a TFLite model's variable tensors)


_KIND_NAMES = {LocatedDict: "a mapping", LocatedList: "a list", str: "a string"}


def _expect(value: Any, kind: type, loc: SourceLoc, what: str, hint: str | None = None) -> Any:
    if not isinstance(value, kind):
        raise GraphError(loc, f"{what} must be {_KIND_NAMES.get(kind, kind.__name__)}, not {_shown(value)}",
                         hint)
    return value


def _shown(value: Any) -> str:
    """A short description of a wrongly typed YAML value, for messages."""
    if value is None:
        return "empty"
    if isinstance(value, (LocatedDict, dict)):
        return "a mapping"
    if isinstance(value, (LocatedList, list)):
        return "a list"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"'{value}'"
    return f"a {type(value).__name__}"


def _identifier(name: Any, loc: SourceLoc, what: str) -> str:
    kind = what if what in ("graph", "node") else "value"  # input, output, constant, value
    problem = identifier_problem(name, kind)
    if problem:
        raise GraphError(loc, f"invalid {what} name: {problem}", identifier_hint(name, kind))
    return name


def _unknown_key(d: LocatedDict, allowed: tuple[str, ...], what: str) -> None:
    for key in d:
        if key not in allowed:
            raise GraphError(d.key_locs[key], f"unknown key {_key(key)} in {what}",
                             f"allowed keys: {', '.join(allowed)}")


def _key(key: Any) -> str:
    return f"'{key}'" if isinstance(key, str) else repr(key)


def _positive_int(d: Any) -> bool:
    return isinstance(d, int) and not isinstance(d, bool) and d > 0


def _tensor_type(spec: Any, loc: SourceLoc, what: str) -> TensorType:
    spec = _expect(spec, LocatedDict, loc, f"the type of {what}",
                   "write e.g. {dtype: float32, shape: [1, 16]}")
    _unknown_key(spec, ("dtype", "shape", "quant"), f"the type of {what}")
    dtype = spec.get("dtype", "float32")
    if dtype not in SUPPORTED_DTYPES:
        raise GraphError(spec.at("dtype"), f"unsupported dtype {_shown(dtype)} for {what}",
                         f"supported: {', '.join(SUPPORTED_DTYPES)}")
    if "shape" not in spec:
        raise GraphError(spec.loc, f"{what} has no 'shape'", "add e.g. shape: [1, 16]")
    shape = spec["shape"]
    if not isinstance(shape, LocatedList):
        raise GraphError(spec.at("shape"), f"the shape of {what} must be a list of positive integers, "
                         f"not {_shown(shape)}", "write e.g. shape: [1, 16]")
    for i, d in enumerate(shape):
        if not _positive_int(d):
            raise GraphError(shape.at(i), f"dimension {i} of {what} must be a positive integer, "
                             f"not {_shown(d)}", "Tinsmith compiles static shapes only")
    problem = limits.shape_problem(shape)
    if problem:
        raise GraphError(spec.at("shape"), f"{what} {problem}",
                         limits.hint("rank" if "'rank'" in problem else "tensor_elements"))
    quant = _quant(spec, what) if "quant" in spec else None
    if quant is not None and dtype not in QUANTIZED_DTYPES:
        raise GraphError(spec.at("quant"), f"{what} is {dtype}, which cannot be quantized",
                         f"quantized types: {', '.join(QUANTIZED_DTYPES)}")
    return TensorType(dtype, tuple(shape), quant)


def _number_list(v: Any) -> list | None:
    """A number or a list of numbers as a list; None for anything else."""
    items = list(v) if isinstance(v, LocatedList) else [v]
    ok = items and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in items)
    return items if ok else None


def _quant(owner: LocatedDict, what: str) -> Quant:
    """`quant: {scale: 0.05, zero_point: -3}`, or per axis `{scale: [..], zero_point: [..], axis: 0}`."""
    spec = _expect(owner["quant"], LocatedDict, owner.at("quant"), f"the quantization of {what}",
                   "write e.g. quant: {scale: 0.05, zero_point: -3}")
    _unknown_key(spec, QUANT_KEYS, f"the quantization of {what}")
    if "scale" not in spec:
        raise GraphError(spec.loc, f"the quantization of {what} has no 'scale'", "add e.g. scale: 0.05")
    scale = _number_list(spec["scale"])
    if scale is None:
        raise GraphError(spec.at("scale"), f"the scale of {what} must be a number or a list of numbers")
    zero_point = _number_list(spec.get("zero_point", 0))
    if zero_point is None or not all(isinstance(z, int) for z in zero_point):
        raise GraphError(spec.at("zero_point"), f"the zero point of {what} must be an integer or a list of "
                         f"integers")
    axis = spec.get("axis")
    if axis is not None and (not isinstance(axis, int) or isinstance(axis, bool)):
        raise GraphError(spec.at("axis"), f"the quantization axis of {what} must be an integer")
    try:
        return Quant(tuple(scale), tuple(zero_point), axis)
    except ValueError as e:
        raise GraphError(spec.loc, f"the quantization of {what}: {e}") from None


def _without(d: LocatedDict, key: str) -> LocatedDict:
    """A copy of `d` without `key`, locations kept."""
    out = LocatedDict({k: v for k, v in d.items() if k != key})
    out.loc, out.key_locs, out.value_locs = d.loc, d.key_locs, d.value_locs
    return out


def _inputs(doc: LocatedDict) -> tuple[ValueSpec, ...]:
    if "inputs" not in doc:
        raise GraphError(doc.loc, "the graph declares no 'inputs'",
                         "add e.g. inputs: {x: {dtype: float32, shape: [1, 16]}}")
    inputs = _expect(doc["inputs"], LocatedDict, doc.at("inputs"), "'inputs'",
                     "map each input name to its type, e.g. x: {dtype: float32, shape: [1, 16]}")
    if not inputs:
        raise GraphError(doc.at("inputs"), "the graph declares no inputs",
                         "add e.g. x: {dtype: float32, shape: [1, 16]}")
    return tuple(ValueSpec(_identifier(name, inputs.key_locs[name], "input"),
                           _tensor_type(spec, inputs.value_locs[name], f"input '{name}'"),
                           inputs.key_locs[name], inputs.value_locs[name])
                 for name, spec in inputs.items())


def _outputs(doc: LocatedDict) -> tuple[ValueSpec, ...]:
    if "outputs" not in doc:
        raise GraphError(doc.loc, "the graph declares no 'outputs'", "add e.g. outputs: [y]")
    outputs = doc["outputs"]
    if isinstance(outputs, LocatedDict):  # outputs with declared types
        specs = tuple(ValueSpec(_identifier(n, outputs.key_locs[n], "output"),
                                _tensor_type(t, outputs.value_locs[n], f"output '{n}'"),
                                outputs.key_locs[n], outputs.value_locs[n]) for n, t in outputs.items())
    else:
        outputs = _expect(outputs, LocatedList, doc.at("outputs"), "'outputs'",
                          "list the output value names, e.g. outputs: [y]")
        specs = tuple(ValueSpec(_identifier(n, outputs.at(i), "output"), None, outputs.at(i))
                      for i, n in enumerate(outputs))
    if not specs:
        raise GraphError(doc.at("outputs"), "the graph declares no outputs", "add e.g. outputs: [y]")
    seen: dict[str, SourceLoc] = {}
    for spec in specs:
        if spec.name in seen:
            raise GraphError(spec.loc, f"output '{spec.name}' is listed twice")
        seen[spec.name] = spec.loc
    return specs


def _held_by(dtype: str, value: int | float) -> str | None:
    """Why an element of `dtype` cannot start from `value` (None: it can). Floating types hold any
    float (rounded, infinities and NaN included); integers hold whole numbers of their range. YAML
    integers have no bound, so a whole number is compared as one, never converted to a float."""
    if dtype in INTEGER_DTYPES or dtype == "bool":
        low, high = (0, 1) if dtype == "bool" else (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
        whole = isinstance(value, int) or (math.isfinite(value) and value == int(value))
        if not whole or not low <= int(value) <= high:
            return f"{dtype} cannot hold: it holds the whole numbers {low}..{high}"
        return None
    try:
        float(value)
    except OverflowError:
        return f"{dtype} cannot hold: it is past the largest float"
    return None


def _states(doc: LocatedDict, inputs, outputs) -> tuple:
    """`states:` (values kept between calls, see ir.State): each an input, mapped to the output that
    holds its value for the next call and, optionally, the value it starts from (`fill`, 0)."""
    from tinsmith.ir import State
    if doc.get("states") is None:
        return ()
    states = _expect(doc["states"], LocatedDict, doc.at("states"), "'states'",
                     "map each kept input to the output holding its next value, e.g. h: {next: h_next}")
    input_types, output_names = {v.name: v.type for v in inputs}, {v.name for v in outputs}
    result, nexts = [], set()
    for name, spec in states.items():
        loc = states.key_locs[name]
        spec = _expect(spec, LocatedDict, states.value_locs[name], f"state '{name}'", "write e.g. {next: h_next}")
        _unknown_key(spec, STATE_KEYS, f"state '{name}'")
        if name not in input_types:
            raise GraphError(loc, f"state '{name}' is not a graph input", "declare it under 'inputs' with its type")
        after = spec.get("next")
        if after not in output_names or after in nexts:
            raise GraphError(spec.at("next") if "next" in spec else loc,
                             f"state '{name}' needs 'next': a graph output no other state names",
                             "list the value that holds its next value under 'outputs'")
        fill = spec.get("fill", 0)
        if isinstance(fill, bool) or not isinstance(fill, (int, float)):
            raise GraphError(spec.at("fill"), f"state '{name}' starts from {fill!r}, not a number")
        held = None if input_types[name] is None else _held_by(input_types[name].dtype, fill)
        if held is not None:
            raise GraphError(spec.at("fill"), f"state '{name}' starts from {fill!r}, which {held}",
                             "give a value its type holds")
        nexts.add(after)
        result.append(State(name, after, fill))
    return tuple(result)


def _constants(doc: LocatedDict, base: Path) -> tuple[Constant, ...]:
    if doc.get("constants") is None:
        return ()
    constants = _expect(doc["constants"], LocatedDict, doc.at("constants"), "'constants'",
                        "map each constant name to its data, e.g. w: {file: weights/w.npy}")
    result = []
    for name, spec in constants.items():
        loc = constants.key_locs[name]
        _identifier(name, loc, "constant")
        spec = _expect(spec, LocatedDict, constants.value_locs[name], f"constant '{name}'",
                       "write e.g. {file: weights/w.npy}, {value: [1, 2]} or {random: normal, shape: [4]}")
        quant = _quant(spec, f"constant '{name}'") if "quant" in spec else None
        if quant is not None:
            spec = _without(spec, "quant")
        try:
            data, source = load_constant(spec, base)
        except LoaderError as e:
            if e.field is None or e.field not in spec:
                where = loc
            else:
                where = spec.key_locs[e.field] if e.on_key else spec.at(e.field)
            raise GraphError(where, f"constant '{name}': {e}", e.hint) from None
        if quant is not None and data.dtype.name not in QUANTIZED_DTYPES:
            raise GraphError(loc, f"constant '{name}' is {data.dtype.name}, which cannot be quantized",
                             "give it e.g. dtype: int8")
        result.append(Constant(name, data, source, loc, quant))
    return tuple(result)


def check_node_count(count: int, loc: SourceLoc, what: str = "the graph") -> None:
    """At most `graph_nodes` nodes: every later stage walks the nodes, some more than once."""
    bound = limits.current().graph_nodes
    if count > bound:
        raise GraphError(loc, f"{what} has {count:,} nodes, more than the limit of {bound:,} "
                         f"(limit 'graph_nodes')", limits.hint("graph_nodes"))


def _name_list(node: LocatedDict, key: str, what: str,
               allow_empty: bool) -> tuple[tuple[str, ...], tuple[SourceLoc, ...]]:
    names = node.get(key, LocatedList())
    if isinstance(names, str):  # a single name is accepted for a single value
        names_list = LocatedList([names])
        names_list.loc, names_list.item_locs = node.at(key), [node.at(key)]
        names = names_list
    if not isinstance(names, LocatedList):
        raise GraphError(node.at(key), f"'{key}' must be a list of value names, not {_shown(names)}",
                         f"write e.g. {key}: [x]")
    result = []
    for i, name in enumerate(names):
        if name == "" and allow_empty:
            result.append("")
        elif name == "":
            raise GraphError(names.at(i), f"a name in '{key}' cannot be empty",
                             '"" stands only for an omitted optional input')
        else:
            result.append(_identifier(name, names.at(i), what))
    return tuple(result), tuple(names.at(i) for i in range(len(names)))


def _node(raw: Any, loc: SourceLoc) -> NodeSpec:
    node = _expect(raw, LocatedDict, loc, "a node",
                   "write a node as a mapping, e.g. {op: Relu, inputs: [x], outputs: [y]}")
    _unknown_key(node, NODE_KEYS, "a node")
    if "op" not in node:
        raise GraphError(node.loc, "the node has no 'op'",
                         "add e.g. op: Relu (`python -m tinsmith ops` lists the ops)")
    op = _expect(node["op"], str, node.at("op"), "'op'", "write the op's name, e.g. op: Relu")
    name = _identifier(node["name"], node.at("name"), "node") if "name" in node else None
    inputs, input_locs = _name_list(node, "inputs", "value", allow_empty=True)
    if "outputs" not in node:
        raise GraphError(node.loc, f"the {op} node has no 'outputs'",
                         "name the values it writes, e.g. outputs: [y]")
    outputs, output_locs = _name_list(node, "outputs", "value", allow_empty=False)
    attrs = node.get("attrs")
    if attrs is None:
        attrs = LocatedDict()
        attrs.loc, attrs.key_locs, attrs.value_locs = node.loc, {}, {}
    attrs = _expect(attrs, LocatedDict, node.at("attrs"), "'attrs'",
                    "map attribute names to values, e.g. attrs: {axis: 1}")
    return NodeSpec(op, name, inputs, outputs, dict(attrs), node.loc, node.at("op"),
                    input_locs, output_locs, dict(attrs.value_locs), dict(attrs.key_locs),
                    node.at("name") if name is not None else None,
                    node.at("inputs"), node.at("outputs"))


def load_graph_spec(path: str | Path) -> GraphSpec:
    """Read a graph file. Every problem is a GraphError at its file, line and column."""
    path = Path(path)
    shown = display_path(path)
    doc = read_yaml(path, shown)
    if not isinstance(doc, LocatedDict):
        raise GraphError(getattr(doc, "loc", SourceLoc(shown, 1, 1)),
                         f"a graph file must be a YAML mapping, not {_shown(doc)}",
                         "start with 'graph: NAME'")
    _unknown_key(doc, TOP_LEVEL_KEYS, "the graph")
    if "graph" not in doc:
        raise GraphError(doc.loc, "the graph has no name", "add 'graph: NAME' at the top")
    name = checked_graph_name(doc["graph"], doc.at("graph"))
    version = doc.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version != 1:
        raise GraphError(doc.at("version"), f"unsupported graph file version {version!r}",
                         "this Tinsmith reads version 1")
    inputs, outputs = _inputs(doc), _outputs(doc)
    raw_nodes = doc.get("nodes")
    if raw_nodes is None:
        raw_nodes = LocatedList()
        raw_nodes.loc, raw_nodes.item_locs = doc.loc, []
    raw_nodes = _expect(raw_nodes, LocatedList, doc.at("nodes"), "'nodes'",
                        "write the nodes as a list, each item starting with '- op: ...'")
    check_node_count(len(raw_nodes), doc.at("nodes"))
    nodes = tuple(_node(raw, raw_nodes.at(i)) for i, raw in enumerate(raw_nodes))
    return GraphSpec(name, shown, inputs, outputs, _constants(doc, path.parent), nodes, doc.at("graph"),
                     _states(doc, inputs, outputs))

