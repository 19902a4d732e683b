"""Frozen values of the graph IR; passes return new graphs instead of editing these."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from codegen.errors import SourceLoc

# Element types Tinsmith knows, with their NumPy and C++ spellings.
DTYPES: Mapping[str, tuple[np.dtype, str, str]] = {
    "float32": (np.dtype(np.float32), "float", "float"),
    "int64": (np.dtype(np.int64), "std::int64_t", "int64_t"),
    # C spells it `bool` through <stdbool.h> (C99 `_Bool`); one byte, 0 or 1, as NumPy and ONNX store it.
    "bool": (np.dtype(np.bool_), "bool", "bool"),
}


@dataclass(frozen=True)
class TensorType:
    """Element type and static shape of a value."""

    dtype: str
    shape: tuple[int, ...]

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
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True, eq=False)
class Constant:
    """Build-time data: weights and shape operands. `source` says where it was loaded from."""

    name: str
    data: np.ndarray
    source: str
    loc: SourceLoc

    @property
    def type(self) -> TensorType:
        return TensorType(self.data.dtype.name, tuple(int(d) for d in self.data.shape))


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
class Graph:
    """A typed graph of primitives, nodes in a valid topological order."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    types: Mapping[str, TensorType] = field(hash=False)
    constants: Mapping[str, Constant] = field(hash=False, compare=False)
    nodes: tuple[Node, ...]
    source: str = ""

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
