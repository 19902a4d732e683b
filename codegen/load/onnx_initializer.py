"""The `onnx` constant loader: {onnx: model.onnx, initializer: NAME} reads one initializer of an ONNX
model (tinsmith.load.onnx_model), which imports onnx only when a graph file uses it."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tinsmith.load.constants import Loader, LoaderError, register_loader
from tinsmith.load.located_yaml import LocatedDict

if TYPE_CHECKING:
    import numpy as np


def _load_onnx(spec: LocatedDict, base: Path) -> np.ndarray:
    """An initializer of an ONNX model: {onnx: model.onnx, initializer: NAME}."""
    if not isinstance(spec["onnx"], str) or not spec["onnx"]:
        raise LoaderError("'onnx' must be a path relative to the graph file", "onnx")
    if "initializer" not in spec:
        raise LoaderError("say which initializer of the model with 'initializer'", "onnx",
                          "add initializer: NAME")
    from tinsmith.load.onnx_model import read_initializer  # here: importing it costs what YAML graphs need not pay
    return read_initializer(base / spec["onnx"], spec["initializer"])


register_loader(Loader("onnx", frozenset({"onnx", "initializer"}), _load_onnx,
                       lambda s: f"{s['onnx']} initializer '{s['initializer']}'",
                       lambda s: [s["onnx"]] if isinstance(s.get("onnx"), str) else []))
