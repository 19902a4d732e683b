"""What a build tool needs of a graph file before generating it: the graph's name (the stem of
every output file) and the other files it reads (weights), for graph YAML, ONNX and TFLite.

This reads no more than that, and imports neither the IR nor NumPy: the SCons tool asks it for
every graph of every build, most of which have nothing to do (tinsmith.load.graph_file reads a
graph YAML file in full, with every check).
"""
from __future__ import annotations

import os
from pathlib import Path

from tinsmith.errors import GraphError, SourceLoc
from tinsmith.files import irregular_file
from tinsmith.load.constants import referenced_files
from tinsmith.load.identifiers import identifier_hint, identifier_problem, valid_identifier
from tinsmith.load.located_yaml import LocatedDict, read_yaml

ONNX_SUFFIXES = (".onnx",)
TFLITE_SUFFIXES = (".tflite",)
GRAPH_NAME_MAX = 200  # the name is the stem of every output file; file names hold at most 255 bytes


def is_onnx(path: str | Path) -> bool:
    """True for the files the ONNX importer reads."""
    return Path(path).suffix.lower() in ONNX_SUFFIXES


def is_tflite(path: str | Path) -> bool:
    """True for the files the TFLite importer reads."""
    return Path(path).suffix.lower() in TFLITE_SUFFIXES


def is_model(path: str | Path) -> bool:
    """True for model files (ONNX, TFLite) as opposed to graph YAML files."""
    return is_onnx(path) or is_tflite(path)


def display_path(path: Path) -> str:
    """How a graph path appears in messages and generated comments: relative when it can be."""
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def checked_graph_name(name: object, loc: SourceLoc) -> str:
    """`name`, the value of a graph file's `graph:` key, if it can name the generated files."""
    problem = identifier_problem(name, "graph")
    if problem:
        raise GraphError(loc, f"invalid graph name: {problem}", identifier_hint(name, "graph"))
    if len(name) > GRAPH_NAME_MAX:
        raise GraphError(loc, f"the graph name has {len(name)} characters, more than {GRAPH_NAME_MAX}",
                         "it names the generated files (NAME.hpp, libNAME.a, ...): choose a shorter one")
    return name


def model_graph_name(path: str | Path) -> str:
    """The graph name of a model file: its stem as an identifier (ONNX graph names are often
    generic, like 'main_graph'), cut to the length a graph file allows."""
    once = valid_identifier(Path(path).stem, "g", "graph")
    return valid_identifier(once[:GRAPH_NAME_MAX - 1], "g", "graph")


def graph_name(path: str | Path) -> str:
    """The graph's name (its outputs' file stem); a GraphError where a graph file names none."""
    if is_model(path):
        return model_graph_name(path)
    shown = display_path(Path(path))
    doc = read_yaml(Path(path), shown)
    if not isinstance(doc, LocatedDict) or "graph" not in doc:
        raise GraphError(SourceLoc(shown, 1, 1), "the graph has no name", "add 'graph: NAME' at the top")
    return checked_graph_name(doc["graph"], doc.at("graph"))


def graph_dependencies(path: str | Path) -> list[Path]:
    """Files a graph file or model reads besides itself (weights), for build tools to track;
    a file that cannot be read gives [] (generating it reports why)."""
    if is_tflite(path):
        return []  # a flatbuffer holds its weights
    if is_onnx(path):
        return onnx_dependencies(path)
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


def onnx_dependencies(path: str | Path) -> list[Path]:
    """Files an ONNX model reads besides itself (external tensor data), for build tools."""
    path = Path(path)
    if irregular_file(path):  # (never block the build tool's scan; generation reports the file)
        return []
    try:
        import onnx  # here: it imports NumPy, which YAML graphs need not pay for
        model = onnx.load(str(path), load_external_data=False)
    except Exception:
        return []
    files = {entry.value for t in model.graph.initializer for entry in t.external_data
             if entry.key == "location"}
    return [path.parent / f for f in sorted(files)]
