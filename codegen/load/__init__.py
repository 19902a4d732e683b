"""Stage 1, load: a graph file (graph YAML, or an ONNX model) -> GraphSpec (structure checked,
constants loaded). The file's suffix chooses the reader.

Importing the package costs little: what build tools ask of a graph before generating it, its
name and the files it reads (tinsmith.load.build_info), needs neither the IR nor NumPy, so the
readers, which need both, are imported when a graph is loaded."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tinsmith.load import onnx_initializer  # noqa: F401  (registers the `onnx` constant loader)
from tinsmith.load.build_info import graph_dependencies, graph_name, is_model, is_onnx, is_tflite
from tinsmith.load.constants import LOADERS, Loader, register_loader
from tinsmith.load.identifiers import identifier_problem

if TYPE_CHECKING:
    from tinsmith.load.graph_file import GraphSpec, NodeSpec, ValueSpec

# The graph file's structures, from tinsmith.load.graph_file when first asked for (see __getattr__).
_GRAPH_FILE_NAMES = ("GraphSpec", "NodeSpec", "ValueSpec")


def __getattr__(name: str):
    """`from tinsmith.load import GraphSpec` imports graph_file (and with it the IR and NumPy)
    only there, not for every user of the package."""
    if name in _GRAPH_FILE_NAMES:
        from tinsmith.load import graph_file
        return getattr(graph_file, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_graph_spec(path: str | Path) -> GraphSpec:
    """Read a graph file or an ONNX or TFLite model. Every problem is a GraphError at its location."""
    if is_tflite(path):
        from tinsmith.load.tflite_model import load_tflite_spec
        return load_tflite_spec(path)
    if is_onnx(path):
        from tinsmith.load.onnx_model import load_onnx_spec
        return load_onnx_spec(path)
    from tinsmith.load import graph_file
    return graph_file.load_graph_spec(path)


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
