"""The fixed input pattern a runner uses when it is given no inputs (the host runner's
`static_cast<T>(int(i % 17) - 8) / 8`, in C++'s arithmetic for each element type), and the raw
outputs of a run read back by element type: so `tinsmith emulate` on a target feeds and prints
what the host runner does, for every element type."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


def _dtype(name: str) -> np.dtype:
    from tinsmith.ir.graph import DTYPES
    return np.dtype(DTYPES[name][0])


def smoke_pattern(dtype: str, count: int) -> np.ndarray:
    """`count` elements of the pattern as element type `dtype`."""
    t = _dtype(dtype)
    v = (np.arange(count, dtype=np.int64) % 17) - 8
    if t.kind in "fcV":  # floating point: a real division
        return (v.astype(np.float64) / 8).astype(t)
    if t.kind == "b":  # bool(v) promoted to int, divided by 8: 0
        return np.zeros(count, bool)
    stored = v.astype(t)  # static_cast<T>: unsigned types wrap
    quotient = np.trunc(stored.astype(np.float64) / 8)  # C++ integer division truncates toward zero
    return quotient.astype(np.int64).astype(t)


def smoke_bytes(values: Sequence[Mapping]) -> bytes:
    """The runner's inputs (report entries with 'dtype' and 'bytes') as raw little-endian data."""
    data = []
    for v in values:
        dtype = v.get("dtype", "float32")
        count = v["bytes"] // max(_dtype(dtype).itemsize, 1)
        data.append(smoke_pattern(dtype, count).astype(_dtype(dtype).newbyteorder("<")).tobytes())
    return b"".join(data)


def read_outputs(values: Sequence[Mapping], data: bytes) -> list[np.ndarray]:
    """The outputs (report entries with 'dtype', 'shape' and 'bytes') from a runner's raw data."""
    arrays, offset = [], 0
    for v in values:
        dtype = _dtype(v.get("dtype", "float32"))
        count = v["bytes"] // max(dtype.itemsize, 1)
        if offset + v["bytes"] > len(data):
            raise ValueError(f"output '{v['name']}' needs {v['bytes']} bytes at offset {offset}; the run wrote "
                             f"{len(data)}")
        arrays.append(np.frombuffer(data, dtype=dtype.newbyteorder("<"), count=count, offset=offset)
                      .astype(dtype).reshape(v["shape"]))
        offset += v["bytes"]
    return arrays
