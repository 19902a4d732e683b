"""Constant loaders: one registration each, keyed by the field that selects it in the graph file.

A constant entry names exactly one loader field (`file`, `value` or `random`); the loader
checks its own fields and returns the data. Users may register loaders of their own.
"""
from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from codegen.load.located_yaml import LocatedDict


class LoaderError(Exception):
    """A constant that cannot be loaded; `field` names the entry field at fault."""

    def __init__(self, message: str, field: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.field = field
        self.hint = hint


@dataclass(frozen=True)
class Loader:
    """Loads one kind of constant. `fields` are the entry fields it accepts besides `dtype`."""

    key: str
    fields: frozenset[str]
    load: Callable[[LocatedDict, Path], np.ndarray]
    describe: Callable[[LocatedDict], str]
    files: Callable[[Mapping[str, Any]], list[str]] = lambda spec: []


LOADERS: dict[str, Loader] = {}


def register_loader(loader: Loader) -> Loader:
    """Register a loader under its selecting key."""
    LOADERS[loader.key] = loader
    return loader


def _load_file(spec: LocatedDict, base: Path) -> np.ndarray:
    rel = spec["file"]
    if not isinstance(rel, str):
        raise LoaderError("'file' must be a path relative to the graph file", "file")
    path = base / rel
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".npz"):
        raise LoaderError(f"cannot load '{rel}': only .npy and .npz files are supported", "file")
    if suffix == ".npy" and "key" in spec:
        raise LoaderError("'key' only applies to .npz files", "key")
    if suffix == ".npz" and not isinstance(spec.get("key"), str):
        raise LoaderError(f"'{rel}' is an .npz archive: say which array with 'key'", "file")
    try:
        if suffix == ".npy":
            return np.load(path, allow_pickle=False)
        with np.load(path, allow_pickle=False) as archive:
            if spec["key"] not in archive.files:
                raise LoaderError(f"'{rel}' has no array '{spec['key']}'", "key",
                                  f"it holds: {', '.join(sorted(archive.files)) or 'nothing'}")
            return archive[spec["key"]]
    except FileNotFoundError:
        raise LoaderError(f"weight file '{rel}' does not exist", "file",
                          "paths are relative to the graph file") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise LoaderError(f"cannot read weight file '{rel}': {e}", "file") from None


def _file_deps(spec: Mapping[str, Any]) -> list[str]:
    return [spec["file"]] if isinstance(spec.get("file"), str) else []


def _load_value(spec: LocatedDict, base: Path) -> np.ndarray:
    value = spec["value"]
    try:
        data = np.array(value, dtype=np.float64 if spec.get("dtype", "float32") == "float32" else None)
    except (ValueError, TypeError):
        raise LoaderError("'value' must be a number or a (nested, rectangular) list of numbers",
                          "value") from None
    if data.dtype.kind not in "iuf" or data.dtype == object:
        raise LoaderError("'value' must be a number or a (nested, rectangular) list of numbers", "value")
    return data


_DISTRIBUTIONS = {
    "normal": lambda rng, shape, scale: rng.standard_normal(shape) * scale,
    "uniform": lambda rng, shape, scale: rng.uniform(-scale, scale, shape),
}


def _load_random(spec: LocatedDict, base: Path) -> np.ndarray:
    kind = spec["random"]
    if kind not in _DISTRIBUTIONS:
        raise LoaderError(f"unknown distribution '{kind}'", "random",
                          f"use one of: {', '.join(_DISTRIBUTIONS)}")
    shape = spec.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0
                                              for d in shape):
        raise LoaderError("a random constant needs 'shape', a list of positive integers", "shape")
    seed = spec.get("seed", 0)
    scale = spec.get("scale", 1.0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise LoaderError("'seed' must be a non-negative integer", "seed")
    if not isinstance(scale, (int, float)) or isinstance(scale, bool):
        raise LoaderError("'scale' must be a number", "scale")
    rng = np.random.default_rng(seed)
    return _DISTRIBUTIONS[kind](rng, tuple(shape), float(scale))


register_loader(Loader("file", frozenset({"file", "key", "shape"}), _load_file,
                       lambda s: f"{s['file']}" + (f":{s['key']}" if "key" in s else ""), _file_deps))
register_loader(Loader("value", frozenset({"value"}), _load_value, lambda s: "inline value"))
register_loader(Loader("random", frozenset({"random", "shape", "seed", "scale"}), _load_random,
                       lambda s: f"random {s['random']} (seed {s.get('seed', 0)})"))

# Stored element types map onto the two Tinsmith computes with.
_DTYPE_OF_KIND = {"f": "float32", "i": "int64", "u": "int64"}


def load_constant(spec: LocatedDict, base: Path) -> tuple[np.ndarray, str]:
    """Run the loader that `spec` selects; return the data (float32 or int64) and its description."""
    selected = [key for key in LOADERS if key in spec]
    if len(selected) != 1:
        choices = ", ".join(f"'{k}'" for k in LOADERS)
        raise LoaderError(f"a constant needs exactly one of {choices}")
    loader = LOADERS[selected[0]]
    for field in spec:
        if field not in loader.fields and field != "dtype":
            allowed = ", ".join(sorted(loader.fields | {"dtype"}))
            raise LoaderError(f"unknown field '{field}' for a '{loader.key}' constant", field,
                              f"allowed fields: {allowed}")
    dtype = spec.get("dtype")
    if dtype is not None and dtype not in ("float32", "int64"):
        raise LoaderError(f"unsupported dtype '{dtype}'", "dtype", "use float32 or int64")
    data = np.asarray(loader.load(spec, base))
    if data.dtype.kind not in _DTYPE_OF_KIND:
        raise LoaderError(f"constant data of type {data.dtype} is not supported (use float32 or int64)",
                          selected[0])
    data = data.astype(dtype or _DTYPE_OF_KIND[data.dtype.kind])
    if "shape" in spec and isinstance(spec["shape"], list) and list(data.shape) != spec["shape"]:
        raise LoaderError(f"constant has shape {list(data.shape)}, but the graph says {spec['shape']}",
                          "shape")
    if data.dtype == np.float32 and not np.all(np.isfinite(data)):
        raise LoaderError("constant holds NaN or infinite values", selected[0])
    return np.ascontiguousarray(data), loader.describe(spec)


def referenced_files(spec: Mapping[str, Any]) -> list[str]:
    """Files (relative to the graph file) that a constant entry reads."""
    return [f for key, loader in LOADERS.items() if key in spec for f in loader.files(spec)]
