"""YAML parsing that remembers where every mapping key, value and list item came from."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tinsmith import limits
from tinsmith.errors import GraphError, SourceLoc
from tinsmith.files import irregular_file


class LocatedDict(dict):
    """A YAML mapping; `loc` is its own position, `key_locs`/`value_locs` those of its entries."""

    loc: SourceLoc
    key_locs: dict[Any, SourceLoc]
    value_locs: dict[Any, SourceLoc]

    def at(self, key: Any) -> SourceLoc:
        """Position of the value under `key`, else of the mapping itself."""
        return self.value_locs.get(key, self.loc)


class LocatedList(list):
    """A YAML sequence; `loc` is its own position, `item_locs[i]` that of item i."""

    loc: SourceLoc
    item_locs: list[SourceLoc]

    def at(self, index: int) -> SourceLoc:
        """Position of item `index`."""
        return self.item_locs[index] if index < len(self.item_locs) else self.loc


def _loc(loader: "_Loader", node: yaml.Node) -> SourceLoc:
    return SourceLoc(loader.source_path, node.start_mark.line + 1, node.start_mark.column + 1)


class _Loader(yaml.SafeLoader):
    source_path = "<graph>"

    def __init__(self, stream):
        super().__init__(stream)
        self.alias_values = 0  # values the aliases read so far add to the document (`*a` repeats `&a`)
        self.expanded_sizes: dict[int, int] = {}  # node id -> values it stands for, aliases expanded

    def compose_node(self, parent, index):
        """PyYAML's composition, counting what each alias repeats: a few lines of nested aliases
        can stand for billions of values (a "billion laughs" document), so the total is bounded
        by the alias_expansion limit before anything walks the repeated values."""
        alias = self.peek_event() if self.check_event(yaml.AliasEvent) else None
        node = super().compose_node(parent, index)
        if alias is not None:
            self.alias_values += _expanded_size(node, self.expanded_sizes)
            bound = limits.current().alias_expansion
            if self.alias_values > bound:
                mark = alias.start_mark
                raise GraphError(SourceLoc(self.source_path, mark.line + 1, mark.column + 1),
                                 f"YAML aliases here expand to more than {bound:,} values "
                                 f"(limit 'alias_expansion')", limits.hint("alias_expansion"))
        return node


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many values `node` stands for once every alias inside it is copied out (memoised:
    a shared node is counted once per use, but computed once)."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    if isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(child, sizes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
    else:
        size = 1
    sizes[id(node)] = size
    return size


# YAML 1.1 reads 1e-5 and 1.0e5 as strings; graph files mean numbers (as YAML 1.2 does).
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LocatedDict:
    written = {id(pair) for pair in node.value}
    loader.flatten_mapping(node)  # `<<` merge keys: merged entries come first, written ones override
    result = LocatedDict()
    result.loc, result.key_locs, result.value_locs = _loc(loader, node), {}, {}
    merged: set[Any] = set()
    for pair in node.value:
        key_node, value_node = pair
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise GraphError(_loc(loader, key_node), "a mapping key must be a plain value") from None
        if key in result and key not in merged:
            first = result.key_locs[key]
            raise GraphError(_loc(loader, key_node), f"duplicate key '{key}'",
                             f"'{key}' was first given at line {first.line}")
        if id(pair) in written:
            merged.discard(key)
        else:
            merged.add(key)
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_locs[key] = _loc(loader, key_node)
        result.value_locs[key] = _loc(loader, value_node)
    return result


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> LocatedList:
    result = LocatedList(loader.construct_object(child, deep=True) for child in node.value)
    result.loc = _loc(loader, node)
    result.item_locs = [_loc(loader, child) for child in node.value]
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def _yaml_error(e: yaml.MarkedYAMLError, path: str) -> GraphError:
    """PyYAML's problem (and the context it arose in) as a located GraphError."""
    mark = e.problem_mark or e.context_mark
    loc = SourceLoc(path, mark.line + 1, mark.column + 1) if mark else SourceLoc(path, 1, 1)
    problem, context, hint = e.problem or "", e.context or "", None
    if context and not context.startswith("while"):  # e.g. "expected a single document"
        problem, context = f"{context}, {problem}" if problem else context, ""
    if "'\\t'" in problem:
        hint = "indent with spaces; YAML does not allow tabs"
    elif "single document" in problem:
        hint = "a graph file holds one YAML document; remove the '---' line"
    elif problem.startswith("mapping values are not allowed"):
        hint = "is an indentation wrong, or does a value containing ': ' need quotes?"
    elif context and e.context_mark and e.context_mark is not mark:
        hint = f"{context} started at line {e.context_mark.line + 1}, column {e.context_mark.column + 1}"
    return GraphError(loc, f"invalid YAML: {problem or context}", hint)


def parse_yaml(text: str, path: str) -> Any:
    """Parse one YAML document into plain values with LocatedDict/LocatedList containers."""
    loader = None
    try:
        loader = _Loader(text)
        loader.source_path = path
        return loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        raise _yaml_error(e, path) from None
    except yaml.reader.ReaderError as e:  # a control character YAML does not allow
        before = text[:e.position]
        loc = SourceLoc(path, before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1)
        raise GraphError(loc, f"invalid YAML: control character U+{e.character:04X} is not allowed") from None
    except yaml.YAMLError as e:
        raise GraphError(SourceLoc(path, 1, 1), f"invalid YAML: {e}") from None
    except RecursionError:
        raise GraphError(SourceLoc(path, 1, 1), "invalid YAML: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()


def _undecodable(path: str, data: bytes, e: UnicodeDecodeError) -> GraphError:
    before = data[:e.start].decode("utf-8", "replace")
    line = before.count("\n") + 1
    col = len(before) - (before.rfind("\n") + 1) + 1
    return GraphError(SourceLoc(path, line, col),
                      f"the graph file is not UTF-8 text (byte 0x{data[e.start]:02x})",
                      "save the file as UTF-8")


def read_yaml(path: Path, display_path: str | None = None) -> Any:
    """Read and parse a YAML file; unreadable files are a GraphError, not a traceback."""
    shown = display_path or str(path)
    problem = irregular_file(path)
    if problem:
        raise GraphError(SourceLoc(shown, 1, 1), f"cannot read graph file: {problem}")
    try:
        data = path.read_bytes()
    except OSError as e:
        reason = e.strerror or str(e)
        raise GraphError(SourceLoc(shown, 1, 1), f"cannot read graph file: {reason}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _undecodable(shown, data, e) from None
    return parse_yaml(text, shown)
