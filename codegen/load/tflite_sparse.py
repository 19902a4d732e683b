"""TFLite's sparse constant tensors and DENSIFY, folded at build time.

A sparse tensor stores only its kept values, in the order of its SparsityParameters' traversal:
one level per dimension of the traversal order (the tensor's own dimensions, then the block
dimensions of `block_map`), each DENSE (every index 0 .. dense_size - 1) or SPARSE_CSR (the indices
array_indices[array_segments[p] .. array_segments[p + 1]) under position p of the level above).
DENSIFY writes them into the dense tensor, zeros elsewhere (the format as the TFLite schema defines
it). MediaPipe's models keep pruned float16 weights this way (DENSIFY, then DEQUANTIZE); Tinsmith
stores the dense float32 weights in flash, as TFLite's own kernels run on the densified tensor.
"""
from __future__ import annotations

import math

import numpy as np

from tinsmith.load.tflite_reader import Reader, Unsupported, tflite_schema

DENSE, SPARSE_CSR = 0, 1
_INDEX_VECTORS = {1: "Int32Vector", 2: "Uint16Vector", 3: "Uint8Vector"}  # SparseIndexVector's union


def _index_vector(r: Reader, kind: int, table, what: str) -> np.ndarray:
    if kind not in _INDEX_VECTORS or table is None:
        raise Unsupported(f"its {what} is missing or of an unknown index type ({kind})")
    vector = getattr(tflite_schema(), _INDEX_VECTORS[kind])()
    vector.Init(table.Bytes, table.Pos)
    values = vector.ValuesAsNumpy()
    return np.asarray(values, np.int64) if isinstance(values, np.ndarray) else np.zeros(0, np.int64)


def _levels(r: Reader, i: int, sparsity, rank: int) -> tuple[list[int], list[int], list]:
    """(traversal order, block map, per level: its size (DENSE) or (segments, indices)), checked."""
    order = [int(d) for d in (sparsity.TraversalOrderAsNumpy() if sparsity.TraversalOrderLength() else [])]
    block_map = [int(d) for d in (sparsity.BlockMapAsNumpy() if sparsity.BlockMapLength() else [])]
    depth = rank + len(block_map)
    if sorted(order) != list(range(depth)) or sparsity.DimMetadataLength() != depth:
        raise Unsupported(f"sparse tensor '{r.original(i)}' has a traversal order {order} or "
                          f"{sparsity.DimMetadataLength()} dimension metadata that do not fit its {rank} dimensions "
                          f"and {len(block_map)} block dimensions")
    if any(not 0 <= d < rank for d in block_map) or len(set(block_map)) != len(block_map):
        raise Unsupported(f"sparse tensor '{r.original(i)}' has a block map {block_map} outside its dimensions")
    levels = []
    for level in range(depth):
        meta = sparsity.DimMetadata(level)
        if meta.Format() == DENSE:
            levels.append(int(meta.DenseSize()))
        elif meta.Format() == SPARSE_CSR:
            levels.append((_index_vector(r, meta.ArraySegmentsType(), meta.ArraySegments(), "array segments"),
                           _index_vector(r, meta.ArrayIndicesType(), meta.ArrayIndices(), "array indices")))
        else:
            raise Unsupported(f"sparse tensor '{r.original(i)}' has dimension format {meta.Format()}")
    return order, block_map, levels


def densify_values(r: Reader, i: int) -> np.ndarray:
    """Sparse constant tensor i as a dense array of its shape."""
    sparsity, shape = r.tensor(i).Sparsity(), r.shape(i)
    values = r.stored_values(i)
    if values is None:
        raise Unsupported(f"tensor '{r.original(i)}' is not a constant (DENSIFY reads a stored sparse tensor)")
    if sparsity is None:  # (a dense tensor: nothing to do)
        return r.data(i)
    order, block_map, levels = _levels(r, i, sparsity, len(shape))
    # Every stored value's index at each level, level by level: `position` is where the level's
    # parent sits (the row of a CSR level's segments), as the format defines.
    position = np.zeros(1, np.int64)
    index = np.zeros((1, 0), np.int64)
    for level in levels:
        if isinstance(level, int):
            if position.size * max(level, 0) > math.prod(shape):  # (a damaged size: do not expand it)
                raise Unsupported(f"sparse tensor '{r.original(i)}' has a dense dimension of {level} that its "
                                  f"shape {list(shape)} does not hold")
            position = (position[:, None] * level + np.arange(level)).reshape(-1)
            index = np.concatenate([np.repeat(index, level, axis=0),
                                    np.tile(np.arange(level), len(index))[:, None]], axis=1)
            continue
        segments, indices = level
        if position.size and (position.max() + 1 >= segments.size or np.any(np.diff(segments) < 0)
                              or segments[0] < 0 or segments[-1] > indices.size):
            raise Unsupported(f"sparse tensor '{r.original(i)}' has array segments that do not fit its indices")
        starts, counts = segments[position], segments[position + 1] - segments[position]
        owner = np.repeat(np.arange(position.size), counts)
        position = starts[owner] + (np.arange(owner.size) - np.repeat(np.cumsum(counts) - counts, counts))
        index = np.concatenate([index[owner], indices[position][:, None]], axis=1)
    if len(index) != values.size:
        raise Unsupported(f"sparse tensor '{r.original(i)}' stores {values.size} values where its sparsity "
                          f"metadata describes {len(index)}")
    dense_index = np.zeros((len(index), len(shape)), np.int64)
    blocks = [levels_size(levels[order.index(len(shape) + b)]) for b in range(len(block_map))]
    for k, dim in enumerate(order):
        if dim < len(shape):
            dense_index[:, dim] = index[:, k]
    for k, dim in enumerate(order):
        if dim >= len(shape):
            b = dim - len(shape)
            dense_index[:, block_map[b]] = dense_index[:, block_map[b]] * blocks[b] + index[:, k]
    if np.any(dense_index < 0) or np.any(dense_index >= np.asarray(shape)):
        raise Unsupported(f"sparse tensor '{r.original(i)}' has indices outside its shape {list(shape)}")
    dense = np.zeros(math.prod(shape), values.dtype)
    dense[np.ravel_multi_index(tuple(dense_index.T), shape)] = values
    return dense.reshape(shape)


def levels_size(level) -> int:
    """A block dimension's size: its DENSE size (TFLite's blocks are dense)."""
    if not isinstance(level, int):
        raise Unsupported("a sparse block dimension (Tinsmith takes dense blocks)")
    return level


def densify(r: Reader, op, inputs, outputs) -> None:
    """DENSIFY(sparse constant): the dense tensor, computed at build time."""
    x, y = int(inputs[0]), int(outputs[0])
    dense = densify_values(r, x)
    if tuple(dense.shape) != r.shape(y):
        raise Unsupported(f"its output has shape {list(r.shape(y))}, the sparse tensor's is {list(dense.shape)}")
    r.set_constant(y, dense)
