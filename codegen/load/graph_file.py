"""Graph YAML v1: read a graph file into a GraphSpec, checking its structure and names.

Types, op names and attributes are checked later, when the graph is expanded; this
module checks what the file alone can tell and remembers where everything was written.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from codegen.errors import GraphError, SourceLoc
from codegen.ir import Constant, TensorType
from codegen.load.constants import LoaderError, load_constant, referenced_files
from codegen.load.identifiers import identifier_problem
from codegen.load.located_yaml import LocatedDict, LocatedList, read_yaml

TOP_LEVEL_KEYS = ("graph", "version", "inputs", "outputs", "constants", "nodes")
NODE_KEYS = ("op", "name", "inputs", "outputs", "attrs")
SUPPORTED_DTYPES = ("float32",)  # element types a graph input may have


@dataclass(frozen=True)
class ValueSpec:
    """A graph input or output as declared: name, type (None if left to inference), where."""

    name: str
    type: TensorType | None
    loc: SourceLoc


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
    attr_locs: Mapping[str, SourceLoc] = field(default_factory=dict)


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


def display_path(path: Path) -> str:
    """How a graph path appears in messages and generated comments: relative when it can be."""
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def _expect(value: Any, kind: type, loc: SourceLoc, what: str) -> Any:
    if not isinstance(value, kind):
        names = {LocatedDict: "a mapping", LocatedList: "a list", str: "a string"}
        raise GraphError(loc, f"{what} must be {names.get(kind, kind.__name__)}")
    return value


def _identifier(name: Any, loc: SourceLoc, what: str) -> str:
    problem = identifier_problem(name)
    if problem:
        raise GraphError(loc, f"invalid {what} name: {problem}",
                         "names become C and C++ identifiers in the generated code")
    return name


def _unknown_key(d: LocatedDict, allowed: tuple[str, ...], what: str) -> None:
    for key in d:
        if key not in allowed:
            raise GraphError(d.key_locs[key], f"unknown key '{key}' in {what}",
                             f"allowed keys: {', '.join(allowed)}")


def _tensor_type(spec: Any, loc: SourceLoc, what: str) -> TensorType:
    spec = _expect(spec, LocatedDict, loc, f"the type of {what}")
    _unknown_key(spec, ("dtype", "shape"), f"the type of {what}")
    dtype = spec.get("dtype", "float32")
    if dtype not in SUPPORTED_DTYPES:
        raise GraphError(spec.at("dtype"), f"unsupported dtype '{dtype}' for {what}",
                         f"supported: {', '.join(SUPPORTED_DTYPES)}")
    if "shape" not in spec:
        raise GraphError(spec.loc, f"{what} needs a 'shape' (a list of positive integers)")
    shape = spec["shape"]
    if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
        raise GraphError(spec.at("shape"), f"the shape of {what} must be a list of positive integers",
                         "Tinsmith compiles static shapes only")
    return TensorType(dtype, tuple(shape))


def _inputs(doc: LocatedDict) -> tuple[ValueSpec, ...]:
    if "inputs" not in doc:
        raise GraphError(doc.loc, "the graph declares no 'inputs'")
    inputs = _expect(doc["inputs"], LocatedDict, doc.at("inputs"), "'inputs'")
    return tuple(ValueSpec(_identifier(name, inputs.key_locs[name], "input"),
                           _tensor_type(spec, inputs.value_locs[name], f"input '{name}'"),
                           inputs.key_locs[name])
                 for name, spec in inputs.items())


def _outputs(doc: LocatedDict) -> tuple[ValueSpec, ...]:
    if "outputs" not in doc:
        raise GraphError(doc.loc, "the graph declares no 'outputs'")
    outputs = doc["outputs"]
    if isinstance(outputs, LocatedDict):  # outputs with declared types
        specs = tuple(ValueSpec(_identifier(n, outputs.key_locs[n], "output"),
                                _tensor_type(t, outputs.value_locs[n], f"output '{n}'"),
                                outputs.key_locs[n]) for n, t in outputs.items())
    else:
        outputs = _expect(outputs, LocatedList, doc.at("outputs"), "'outputs'")
        specs = tuple(ValueSpec(_identifier(n, outputs.at(i), "output"), None, outputs.at(i))
                      for i, n in enumerate(outputs))
    if not specs:
        raise GraphError(doc.at("outputs"), "the graph declares no outputs")
    seen: dict[str, SourceLoc] = {}
    for spec in specs:
        if spec.name in seen:
            raise GraphError(spec.loc, f"output '{spec.name}' is listed twice")
        seen[spec.name] = spec.loc
    return specs


def _constants(doc: LocatedDict, base: Path) -> tuple[Constant, ...]:
    if "constants" not in doc or doc["constants"] is None:
        return ()
    constants = _expect(doc["constants"], LocatedDict, doc.at("constants"), "'constants'")
    result = []
    for name, spec in constants.items():
        loc = constants.key_locs[name]
        _identifier(name, loc, "constant")
        spec = _expect(spec, LocatedDict, constants.value_locs[name], f"constant '{name}'")
        try:
            data, source = load_constant(spec, base)
        except LoaderError as e:
            where = spec.key_locs.get(e.field, spec.loc) if e.field else spec.loc
            raise GraphError(where, f"constant '{name}': {e}", e.hint) from None
        result.append(Constant(name, data, source, loc))
    return tuple(result)


def _name_list(node: LocatedDict, key: str, what: str, allow_empty: bool) -> tuple[tuple[str, ...], tuple[SourceLoc, ...]]:
    names = node.get(key, LocatedList())
    if not isinstance(names, LocatedList):
        names_list = LocatedList([names])  # a single name is accepted for a single value
        names_list.loc, names_list.item_locs = node.at(key), [node.at(key)]
        names = names_list
    result = []
    for i, name in enumerate(names):
        if name == "" and allow_empty:
            result.append("")
        else:
            result.append(_identifier(name, names.at(i), what))
    return tuple(result), tuple(names.at(i) for i in range(len(names)))


def _node(raw: Any, loc: SourceLoc, index: int) -> NodeSpec:
    node = _expect(raw, LocatedDict, loc, f"node {index}")
    _unknown_key(node, NODE_KEYS, "a node")
    if "op" not in node:
        raise GraphError(node.loc, f"node {index} has no 'op'")
    op = _expect(node["op"], str, node.at("op"), "'op'")
    name = _identifier(node["name"], node.at("name"), "node") if "name" in node else None
    inputs, input_locs = _name_list(node, "inputs", "value", allow_empty=True)
    if "outputs" not in node:
        raise GraphError(node.loc, f"node {name or index} ({op}) has no 'outputs'")
    outputs, output_locs = _name_list(node, "outputs", "value", allow_empty=False)
    attrs = node.get("attrs") or LocatedDict()
    attrs = _expect(attrs, LocatedDict, node.at("attrs"), "'attrs'")
    attr_locs = {k: attrs.value_locs.get(k, attrs.loc) for k in attrs} if attrs else {}
    return NodeSpec(op, name, inputs, outputs, dict(attrs), node.loc, node.at("op"),
                    input_locs, output_locs, attr_locs)


def load_graph_spec(path: str | Path) -> GraphSpec:
    """Read a graph file. Every problem is a GraphError at its file, line and column."""
    path = Path(path)
    shown = display_path(path)
    doc = read_yaml(path, shown)
    if not isinstance(doc, LocatedDict):
        raise GraphError(SourceLoc(shown, 1, 1), "a graph file must be a YAML mapping",
                         "start with 'graph: NAME'")
    _unknown_key(doc, TOP_LEVEL_KEYS, "the graph")
    if "graph" not in doc:
        raise GraphError(doc.loc, "the graph has no name", "add 'graph: NAME' at the top")
    name = _identifier(doc["graph"], doc.at("graph"), "graph")
    if doc.get("version", 1) != 1:
        raise GraphError(doc.at("version"), f"unsupported graph file version {doc['version']!r}",
                         "this Tinsmith reads version 1")
    raw_nodes = doc.get("nodes") or LocatedList()
    raw_nodes = _expect(raw_nodes, LocatedList, doc.at("nodes"), "'nodes'")
    nodes = tuple(_node(raw, raw_nodes.at(i), i) for i, raw in enumerate(raw_nodes))
    return GraphSpec(name, shown, _inputs(doc), _outputs(doc), _constants(doc, path.parent),
                     nodes, doc.at("graph"))


def graph_name(path: str | Path) -> str:
    """The graph's name (its outputs' file stem), read cheaply for build tools."""
    doc = read_yaml(Path(path), display_path(Path(path)))
    if not isinstance(doc, LocatedDict) or "graph" not in doc:
        raise GraphError(SourceLoc(display_path(Path(path)), 1, 1), "the graph has no name",
                         "add 'graph: NAME' at the top")
    return _identifier(doc["graph"], doc.at("graph"), "graph")


def graph_dependencies(path: str | Path) -> list[Path]:
    """Files a graph file reads (weights), for build tools to track; unreadable files give []."""
    path = Path(path)
    try:
        doc = read_yaml(path)
    except GraphError:
        return []
    constants = doc.get("constants") if isinstance(doc, dict) else None
    if not isinstance(constants, dict):
        return []
    return [path.parent / f for spec in constants.values() if isinstance(spec, dict)
            for f in referenced_files(spec)]
