"""Stage 1, load: a graph file (graph YAML, or an ONNX model) -> GraphSpec (structure checked,
constants loaded). The file's suffix chooses the reader."""
from __future__ import annotations

from pathlib import Path

from tinsmith.load import graph_file
from tinsmith.load import onnx_initializer  # noqa: F401  (registers the `onnx` constant loader)
from tinsmith.load.constants import LOADERS, Loader, register_loader
from tinsmith.load.graph_file import GraphSpec, NodeSpec, ValueSpec
from tinsmith.load.identifiers import identifier_problem

ONNX_SUFFIXES = (".onnx",)
TFLITE_SUFFIXES = (".tflite",)


def is_onnx(path: str | Path) -> bool:
    """True for the files the ONNX importer reads."""
    return Path(path).suffix.lower() in ONNX_SUFFIXES


def is_tflite(path: str | Path) -> bool:
    """True for the files the TFLite importer reads."""
    return Path(path).suffix.lower() in TFLITE_SUFFIXES


def is_model(path: str | Path) -> bool:
    """True for model files (ONNX, TFLite) as opposed to graph YAML files."""
    return is_onnx(path) or is_tflite(path)


def load_graph_spec(path: str | Path) -> GraphSpec:
    """Read a graph file or an ONNX or TFLite model. Every problem is a GraphError at its location."""
    if is_tflite(path):
        from tinsmith.load.tflite_model import load_tflite_spec
        return load_tflite_spec(path)
    if is_onnx(path):
        from tinsmith.load.onnx_model import load_onnx_spec
        return load_onnx_spec(path)
    return graph_file.load_graph_spec(path)


def graph_name(path: str | Path) -> str:
    """The graph's name (its outputs' file stem), read cheaply for build tools."""
    if is_tflite(path):
        from tinsmith.load.onnx_model import graph_name_of
        return graph_name_of(path)
    if is_onnx(path):
        from tinsmith.load.onnx_model import graph_name_of
        return graph_name_of(path)
    return graph_file.graph_name(path)


def graph_dependencies(path: str | Path) -> list[Path]:
    """Files a graph file or model reads besides itself (weights), for build tools to track."""
    if is_tflite(path):
        return []  # a flatbuffer holds its weights
    if is_onnx(path):
        from tinsmith.load.onnx_model import onnx_dependencies
        return onnx_dependencies(path)
    return graph_file.graph_dependencies(path)


def original_names(path: str | Path) -> dict[str, str]:
    """A model's original tensor names that import renamed, each mapped to its identifier."""
    if is_tflite(path):
        from tinsmith.load.tflite_model import original_names as tflite_names
        return tflite_names(path)
    if is_onnx(path):
        from tinsmith.load.onnx_model import read_onnx
        return {old: new for new, old in read_onnx(path).values.items()}
    return {}


__all__ = ["LOADERS", "Loader", "register_loader", "GraphSpec", "NodeSpec", "ValueSpec",
           "graph_dependencies", "graph_name", "is_model", "is_onnx", "is_tflite", "original_names", "load_graph_spec", "identifier_problem"]
