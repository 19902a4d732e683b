"""YAML parsing that remembers where every mapping key, value and list item came from."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from codegen.errors import GraphError, SourceLoc


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


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LocatedDict:
    loader.flatten_mapping(node)
    result = LocatedDict()
    result.loc, result.key_locs, result.value_locs = _loc(loader, node), {}, {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise GraphError(_loc(loader, key_node), "a mapping key must be a plain value") from None
        if key in result:
            first = result.key_locs[key]
            raise GraphError(_loc(loader, key_node), f"duplicate key '{key}'",
                             f"'{key}' was first given at line {first.line}")
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


def parse_yaml(text: str, path: str) -> Any:
    """Parse one YAML document into plain values with LocatedDict/LocatedList containers."""
    loader = _Loader(text)
    loader.source_path = path
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        loc = SourceLoc(path, mark.line + 1, mark.column + 1) if mark else SourceLoc(path, 1, 1)
        raise GraphError(loc, f"invalid YAML: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise GraphError(SourceLoc(path, 1, 1), f"invalid YAML: {e}") from None
    finally:
        loader.dispose()


def read_yaml(path: Path, display_path: str | None = None) -> Any:
    """Read and parse a YAML file; unreadable files are a GraphError, not a traceback."""
    shown = display_path or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise GraphError(SourceLoc(shown, 1, 1), f"cannot read graph file: {reason}") from None
    return parse_yaml(text, shown)
