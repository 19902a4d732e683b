"""Frozen values of the graph IR; passes return new graphs instead of editing these."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import ml_dtypes
import numpy as np

from tinsmith.errors import SourceLoc
from tinsmith.ir.element_types import NARROW_DTYPES


def _ml_dtypes() -> dict:
    """bfloat16, the float8 formats, float4 and the 4- and 2-bit integers: NumPy spells them
    through ml_dtypes."""
    types = {"bfloat16": (np.dtype(ml_dtypes.bfloat16), "std::uint16_t", "uint16_t")}
    for name in NARROW_DTYPES:  # those the installed ml_dtypes has
        if hasattr(ml_dtypes, name):
            types[name] = (np.dtype(getattr(ml_dtypes, name)), "std::uint8_t", "uint8_t")
    return types


# Element types Tinsmith knows, with their NumPy and C++ spellings (the generated API's types).
# float16 and bfloat16 are storage types: the API holds their bits in uint16_t and kernels compute
# with them in float, rounding to nearest even on every store (docs/KERNELS.md); so are the NARROW
# ones, a byte per element.
DTYPES: Mapping[str, tuple[np.dtype, str, str]] = {
    "float32": (np.dtype(np.float32), "float", "float"),
    "float64": (np.dtype(np.float64), "double", "double"),
    "float16": (np.dtype(np.float16), "std::uint16_t", "uint16_t"),
    **_ml_dtypes(),
    "int64": (np.dtype(np.int64), "std::int64_t", "int64_t"),
    # C spells it `bool` through <stdbool.h> (C99 `_Bool`); one byte, 0 or 1, as NumPy and ONNX store it.
    "bool": (np.dtype(np.bool_), "bool", "bool"),
    # Quantized data and its accumulators (see Quant and docs/INT8.md), and integer data.
    "int8": (np.dtype(np.int8), "std::int8_t", "int8_t"),
    "uint8": (np.dtype(np.uint8), "std::uint8_t", "uint8_t"),
    "int16": (np.dtype(np.int16), "std::int16_t", "int16_t"),
    "int32": (np.dtype(np.int32), "std::int32_t", "int32_t"),
    "uint16": (np.dtype(np.uint16), "std::uint16_t", "uint16_t"),
    "uint32": (np.dtype(np.uint32), "std::uint32_t", "uint32_t"),
    "uint64": (np.dtype(np.uint64), "std::uint64_t", "uint64_t"),
}
# Families of element types, as ONNX's type constraints name them.
FLOAT_DTYPES = tuple(t for t in ("float32", "float64", "float16", "bfloat16") if t in DTYPES)
NARROW_DTYPES = tuple(t for t in NARROW_DTYPES if t in DTYPES)
INTEGER_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
def largest_finite(dtype: str) -> float | None:
    """The largest finite value of a float8 format with a sign (what Cast's saturate clamps to),
    else None (float8_e8m0fnu saturates by its own rule)."""
    if not dtype.startswith("float8") or dtype == "float8_e8m0fnu" or dtype not in DTYPES:
        return None
    return float(ml_dtypes.finfo(DTYPES[dtype][0]).max)


QUANTIZED_DTYPES = ("int8", "uint8", "int16", "int32")


@dataclass(frozen=True)
class Quant:
    """Affine quantization of an integer tensor: real = scale * (q - zero_point).

    One scale and zero point for the whole tensor (`axis` None), or one per index of `axis`
    (per-axis, as TFLite's per-channel weights and ONNX's per-axis QuantizeLinear)."""

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "scale", tuple(float(s) for s in np.atleast_1d(self.scale)))
        object.__setattr__(self, "zero_point", tuple(int(z) for z in np.atleast_1d(self.zero_point)))
        if len(self.scale) != len(self.zero_point) and len(self.zero_point) != 1:
            raise ValueError(f"{len(self.scale)} scales but {len(self.zero_point)} zero points")
        if self.axis is None and len(self.scale) != 1:
            raise ValueError("several scales need an axis")
        if not all(s > 0 and math.isfinite(s) for s in self.scale):
            raise ValueError("scales must be positive and finite")

    @property
    def per_axis(self) -> bool:
        return self.axis is not None

    def scales(self, count: int = 1) -> np.ndarray:
        """The scales as float64, repeated to `count` entries for a per-tensor quantization."""
        s = np.asarray(self.scale, np.float64)
        return np.repeat(s, count) if len(s) == 1 else s

    def zero_points(self, count: int = 1) -> np.ndarray:
        z = np.asarray(self.zero_point, np.int64)
        return np.repeat(z, count) if len(z) == 1 else z

    def __str__(self) -> str:
        def short(v):
            return str(v[0]) if len(v) == 1 else f"[{len(v)}]"
        axis = "" if self.axis is None else f", axis={self.axis}"
        return f"q(scale={short(self.scale)}, zero_point={short(self.zero_point)}{axis})"


@dataclass(frozen=True)
class TensorType:
    """Element type and static shape of a value."""

    dtype: str
    shape: tuple[int, ...]
    quant: Quant | None = None  # integer data that stands for real numbers

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * DTYPES[self.dtype][0].itemsize

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numpy_dtype(self) -> np.dtype:
        return DTYPES[self.dtype][0]

    @property
    def cpp_type(self) -> str:
        return DTYPES[self.dtype][1]

    @property
    def c_type(self) -> str:
        return DTYPES[self.dtype][2]

    def __str__(self) -> str:
        text = f"{self.dtype}[{', '.join(map(str, self.shape))}]"
        return f"{text} {self.quant}" if self.quant is not None else text


@dataclass(frozen=True, eq=False)
class Constant:
    """Build-time data: weights and shape operands. `source` says where it was loaded from."""

    name: str
    data: np.ndarray
    source: str
    loc: SourceLoc
    quant: Quant | None = None  # quantized weights: what the integers stand for

    @property
    def type(self) -> TensorType:
        return TensorType(self.data.dtype.name, tuple(int(d) for d in self.data.shape), self.quant)


@dataclass(frozen=True)
class Node:
    """One primitive operation: ONNX op name, value names in and out, ONNX attributes."""

    op: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    loc: SourceLoc | None = field(default=None, compare=False)


@dataclass(frozen=True)
class State:
    """A value that persists between calls (TFLite's variable tensors: an LSTM's cell state, an SVDF's
    activation state). Inside the compiler it is graph input `read` (its value when a call starts) and
    graph output `write` (its value for the next call); the generated code keeps both in static
    storage of its own, copies `write` to `read` when a call ends, fills `read` with `fill` at
    init_ws() and reset_state(), and leaves both out of the API."""

    read: str
    write: str
    fill: float = 0.0


@dataclass(frozen=True)
class Graph:
    """A typed graph of primitives, nodes in a valid topological order."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    types: Mapping[str, TensorType] = field(hash=False)
    constants: Mapping[str, Constant] = field(hash=False, compare=False)
    nodes: tuple[Node, ...]
    source: str = ""
    states: tuple[State, ...] = ()

    @property
    def api_inputs(self) -> tuple[str, ...]:
        """The inputs the caller passes: the graph inputs that are not a state's value."""
        hidden = {s.read for s in self.states}
        return tuple(v for v in self.inputs if v not in hidden)

    @property
    def api_outputs(self) -> tuple[str, ...]:
        """The outputs the caller receives: the graph outputs that are not a state's next value."""
        hidden = {s.write for s in self.states}
        return tuple(v for v in self.outputs if v not in hidden)

    def producers(self) -> dict[str, int]:
        """Map each node-produced value to the index of its producing node."""
        return {out: i for i, node in enumerate(self.nodes) for out in node.outputs if out}

    def consumers(self) -> dict[str, list[int]]:
        """Map each value to the indices of the nodes that read it."""
        readers: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            for name in dict.fromkeys(n for n in node.inputs if n):
                readers.setdefault(name, []).append(i)
        return readers

    def is_intermediate(self, value: str) -> bool:
        """True for values that need workspace: produced by a node, not a graph output."""
        return value not in self.outputs and value not in self.inputs and value not in self.constants
