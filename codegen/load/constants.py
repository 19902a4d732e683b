"""Constant loaders: one registration each, keyed by the field that selects it in the graph file.

A constant entry names exactly one loader field (`file`, `value` or `random`); the loader
checks its own fields and returns the data. Users may register loaders of their own.

The registry and what each entry refers to (`referenced_files`) are read without NumPy or the IR:
build tools ask which files a graph reads for every build. The functions that read data import
NumPy themselves.
"""
from __future__ import annotations

import math

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from tinsmith import limits
from tinsmith.escape import one_line
from tinsmith.files import irregular_file
from tinsmith.load.located_yaml import LocatedDict

if TYPE_CHECKING:
    import numpy as np


class LoaderError(Exception):
    """A constant that cannot be loaded; `field` names the entry field at fault (its value, or
    its key if `on_key`), None the constant as a whole."""

    def __init__(self, message: str, field: str | None = None, hint: str | None = None,
                 on_key: bool = False):
        # Messages quote file names, keys and archive members from the model: one line each.
        message, hint = one_line(message), one_line(hint) if hint else hint
        super().__init__(message)
        self.field = field
        self.hint = hint
        self.on_key = on_key


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


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_shape(spec: LocatedDict) -> None:
    shape = spec.get("shape")
    if not isinstance(shape, list) or not all(_is_int(d) and d > 0 for d in shape):
        raise LoaderError("'shape' must be a list of positive integers", "shape")
    _check_size(shape, "shape")


def _check_size(shape, field: str, what: str = "the constant") -> None:
    """A constant's shape within the limits, checked before its data is made or read."""
    problem = limits.shape_problem(shape, elements_limit="constant_elements")
    if problem:
        limit = "rank" if "'rank'" in problem else "constant_elements"
        raise LoaderError(f"{what} {problem}", field, limits.hint(limit))


def _stored_shape(f) -> tuple[int, ...] | None:
    """The shape an .npy header declares (None if the header cannot be read: np.load says why)."""
    import numpy as np
    try:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        return tuple(read(f, max_header_size=10_000)[0])
    except Exception:  # noqa: BLE001  (any malformed header)
        return None


def _check_stored_size(path: Path, rel: str, key: str | None) -> None:
    """The array in a weight file within the limits, checked from its header before the data is
    read (a small compressed archive can declare gigabytes)."""
    import zipfile
    try:
        if key is None:
            with open(path, "rb") as f:
                shape = _stored_shape(f)
        else:
            with zipfile.ZipFile(path) as archive:
                if f"{key}.npy" not in archive.namelist():
                    return
                with archive.open(f"{key}.npy") as f:
                    shape = _stored_shape(f)
    except Exception:  # noqa: BLE001  (np.load reports unreadable files)
        return
    if shape is not None:
        _check_size(shape, "file", f"the array in '{rel}'" + (f" under '{key}'" if key else ""))


# How each weight file format begins; anything else is not what its name says.
_MAGIC = {".npy": ((b"\x93NUMPY",), "a NumPy .npy file", "numpy.save"),
          ".npz": ((b"PK\x03\x04", b"PK\x05\x06"), "an .npz archive", "numpy.savez")}


def _load_file(spec: LocatedDict, base: Path) -> np.ndarray:
    import numpy as np
    rel = spec["file"]
    if not isinstance(rel, str) or not rel:
        raise LoaderError("'file' must be a path relative to the graph file", "file")
    path = base / rel
    suffix = path.suffix.lower()
    if suffix not in _MAGIC:
        raise LoaderError(f"cannot load '{rel}': only .npy and .npz files are supported", "file")
    if "shape" in spec:
        _check_shape(spec)
    if suffix == ".npy" and "key" in spec:
        raise LoaderError("'key' only applies to .npz files", "key", on_key=True)
    if suffix == ".npz" and "key" not in spec:
        raise LoaderError(f"'{rel}' is an .npz archive: say which array with 'key'", "file",
                          "add key: NAME")
    if suffix == ".npz" and not isinstance(spec["key"], str):
        raise LoaderError("'key' must be the name of an array in the archive", "key")
    problem = irregular_file(path)
    if problem:
        raise LoaderError(f"cannot read weight file '{rel}': {problem}", "file")
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except FileNotFoundError:
        raise LoaderError(f"weight file '{rel}' does not exist", "file",
                          "paths are relative to the graph file") from None
    except IsADirectoryError:
        raise LoaderError(f"weight file '{rel}' is a directory", "file") from None
    except OSError as e:
        raise LoaderError(f"cannot read weight file '{rel}': {e.strerror or e}", "file") from None
    magic, kind, writer = _MAGIC[suffix]
    if not head.startswith(magic):
        raise LoaderError(f"'{rel}' is not {kind}", "file", f"write it with {writer}")
    _check_stored_size(path, rel, spec["key"] if suffix == ".npz" else None)
    try:
        if suffix == ".npy":
            return np.load(path, allow_pickle=False)
        with np.load(path, allow_pickle=False) as archive:
            if spec["key"] not in archive.files:
                raise LoaderError(f"'{rel}' has no array '{spec['key']}'", "key",
                                  f"it holds: {', '.join(sorted(archive.files)) or 'nothing'}")
            return archive[spec["key"]]
    except LoaderError:
        raise
    except Exception as e:  # NumPy, zipfile and zlib each have their own ways to fail on bad data
        reason = "it holds Python objects, not numbers" if "allow_pickle" in str(e) else \
            (str(e) or type(e).__name__)
        raise LoaderError(f"cannot read weight file '{rel}': {reason}", "file") from None


def _file_deps(spec: Mapping[str, Any]) -> list[str]:
    return [spec["file"]] if isinstance(spec.get("file"), str) else []


def _load_value(spec: LocatedDict, base: Path) -> np.ndarray:
    import numpy as np
    wrong = LoaderError("'value' must be a number or a (nested, rectangular) list of numbers", "value")
    try:
        data = np.array(spec["value"])
    except (ValueError, TypeError):
        raise wrong from None
    if data.dtype.kind not in "iuf":  # strings, booleans, null, ragged lists, huge integers
        raise wrong
    # Unless told otherwise, written numbers are float32 data: `2` means 2.0.
    return data.astype(np.float64) if spec.get("dtype", "float32") == "float32" else data


FLOAT32_MAX = 3.4028234663852886e38  # float32's largest finite value, np.finfo(np.float32).max
_DISTRIBUTIONS = {
    "normal": lambda rng, shape, scale: rng.standard_normal(shape) * scale,
    "uniform": lambda rng, shape, scale: rng.uniform(-scale, scale, shape),
}


def _load_random(spec: LocatedDict, base: Path) -> np.ndarray:
    import numpy as np
    kind = spec["random"]
    if not isinstance(kind, str) or kind not in _DISTRIBUTIONS:
        raise LoaderError(f"unknown distribution '{kind}'", "random",
                          f"use one of: {', '.join(_DISTRIBUTIONS)}")
    if "shape" not in spec:
        raise LoaderError("a random constant needs 'shape', a list of positive integers",
                          hint="e.g. shape: [16, 8]")
    _check_shape(spec)
    shape = spec["shape"]
    seed = spec.get("seed", 0)
    scale = spec.get("scale", 1.0)
    if not _is_int(seed) or seed < 0:
        raise LoaderError("'seed' must be a non-negative integer", "seed")
    if not isinstance(scale, (int, float)) or isinstance(scale, bool):
        raise LoaderError("'scale' must be a number", "scale")
    if not (math.isfinite(scale) and scale >= 0):  # (a uniform draw needs low <= high)
        raise LoaderError(f"'scale' must be a finite number of at least 0, not {scale}", "scale")
    if scale > FLOAT32_MAX:  # float32 data; NumPy's uniform cannot even span [-scale, scale] near 1e308
        raise LoaderError(f"'scale' must be at most {FLOAT32_MAX:.7g} (float32's largest value), not {scale}",
                          "scale")
    rng = np.random.default_rng(seed)
    # abs: -0.0 is at least 0, but NumPy's uniform refuses low = 0.0 > high = -0.0
    return _DISTRIBUTIONS[kind](rng, tuple(shape), abs(float(scale)))


register_loader(Loader("file", frozenset({"file", "key", "shape"}), _load_file,
                       lambda s: f"{s['file']}" + (f":{s['key']}" if "key" in s else ""), _file_deps))
register_loader(Loader("value", frozenset({"value"}), _load_value, lambda s: "inline value"))
register_loader(Loader("random", frozenset({"random", "shape", "seed", "scale"}), _load_random,
                       lambda s: f"random {s['random']} (seed {s.get('seed', 0)})"))


# Stored element types map onto the two Tinsmith computes with.
_DTYPE_OF_KIND = {"f": "float32", "i": "int64", "u": "int64"}


def load_constant(spec: LocatedDict, base: Path) -> tuple[np.ndarray, str]:
    """Run the loader that `spec` selects; return the data (float32 or int64) and its description."""
    import numpy as np

    from tinsmith.ir.graph import FLOAT_DTYPES, INTEGER_DTYPES
    stored_dtypes = (*FLOAT_DTYPES, *INTEGER_DTYPES)  # a constant may ask for any float or integer type
    selected = [key for key in LOADERS if key in spec]
    if not selected:
        choices = ", ".join(f"'{k}'" for k in LOADERS)
        raise LoaderError(f"no data source; give one of {choices}", hint="e.g. {file: weights/w.npy}")
    if len(selected) > 1:
        raise LoaderError(f"give either '{selected[0]}' or '{selected[1]}', not both", selected[1],
                          on_key=True)
    loader = LOADERS[selected[0]]
    for field in spec:
        if field not in loader.fields and field != "dtype":
            allowed = ", ".join(sorted(loader.fields | {"dtype"}))
            raise LoaderError(f"unknown field '{field}' for a '{loader.key}' constant", field,
                              f"allowed fields: {allowed}", on_key=True)
    dtype = spec.get("dtype")
    if dtype is not None and dtype not in stored_dtypes:
        raise LoaderError(f"unsupported dtype {dtype!r}", "dtype", f"use {', '.join(stored_dtypes)}")
    data = np.asarray(loader.load(spec, base))
    _check_size(data.shape, selected[0])
    if data.dtype.kind not in _DTYPE_OF_KIND:
        raise LoaderError(f"data of type {data.dtype} is not supported (use float32 or int64)",
                          selected[0])
    if data.size == 0:
        raise LoaderError("the data is empty", selected[0])
    target = dtype or _DTYPE_OF_KIND[data.dtype.kind]
    whole = np.isfinite(data) & (data == np.round(data)) if data.dtype.kind == "f" else True
    if target == "int64" and not np.all(whole):
        raise LoaderError("an int64 constant must hold whole numbers", selected[0])
    if target == "int64" and not np.all((data >= -2.0 ** 63) & (data < 2.0 ** 63)):
        raise LoaderError("the data holds a number too large for int64", selected[0])
    if target in INTEGER_DTYPES:
        info = np.iinfo(target)
        if not np.all(whole) or not np.all((data >= info.min) & (data <= info.max)):
            raise LoaderError(f"an {target} constant must hold whole numbers in {info.min}..{info.max}",
                              selected[0])
    with np.errstate(over="ignore", invalid="ignore"):  # float32 overflow is reported below
        data = data.astype(target)
    if "shape" in spec and list(data.shape) != spec["shape"]:
        raise LoaderError(f"the data has shape {list(data.shape)}, but 'shape' says {spec['shape']}",
                          "shape")
    if data.dtype == np.float32 and not np.all(np.isfinite(data)):
        raise LoaderError("the data holds NaN or infinite values", selected[0])
    return np.require(data, requirements="C"), loader.describe(spec)


def referenced_files(spec: Mapping[str, Any]) -> list[str]:
    """Files (relative to the graph file) that a constant entry reads."""
    return [f for key, loader in LOADERS.items() if key in spec for f in loader.files(spec)]
