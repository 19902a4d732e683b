"""Stage 3, optimize: graph-to-graph passes that keep the numbers and shrink the work."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

import numpy as np

from tinsmith.ir import Constant, Graph, Node, TensorType
from tinsmith.ir.names import numbered
from tinsmith.ops import PRIMITIVES
from tinsmith.quant.onnx_fast import qlinear_on_int8_kernels

Pass = Callable[[Graph], Graph]


def fold_constants(graph: Graph) -> Graph:
    """Evaluate nodes whose inputs are all constants at build time; their outputs become constants."""
    constants = dict(graph.constants)
    nodes = []
    for node in graph.nodes:
        args = [n for n in node.inputs if n]
        if args and all(a in constants for a in args) and not set(node.outputs) & set(graph.outputs):
            data = [constants[n].data if n else None for n in node.inputs]
            results = PRIMITIVES[node.op].reference(data, node.attrs)
            for out, value in zip(node.outputs, results):
                t = graph.types[out]
                # C order, and the inferred shape: np.ascontiguousarray alone would make a rank-0
                # result rank 1, so the constant's type would disagree with the graph's.
                value = np.ascontiguousarray(np.asarray(value, dtype=t.numpy_dtype)).reshape(t.shape)
                constants[out] = Constant(out, value, f"folded from node '{node.name}'", node.loc)
        else:
            nodes.append(node)
    return replace(graph, constants=constants, nodes=tuple(nodes))


def drop_dead_nodes(graph: Graph) -> Graph:
    """Remove nodes and constants that no graph output depends on."""
    live = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if live & set(node.outputs):
            kept.append(node)
            live.update(n for n in node.inputs if n)
    kept.reverse()
    constants = {k: c for k, c in graph.constants.items() if k in live}
    types = {k: t for k, t in graph.types.items()
             if k in live or k in graph.inputs or any(k in n.outputs for n in kept)}
    return replace(graph, nodes=tuple(kept), constants=constants, types=types)


# --- fold_batch_norm ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Affine:
    """A BatchNormalization y = x * s + shift (per channel, float64) to fold into x's producer."""

    bn: Node
    s: np.ndarray
    shift: np.ndarray


def _new_constant(graph: Graph, consts: dict[str, Constant], types: dict[str, TensorType], base: str,
                  data: np.ndarray, like: np.dtype, source: str, bn: Node) -> str:
    """Add a constant named after `base` (numbered if taken) holding `data` cast to `like`."""
    taken = set(types) | set(consts) | {n.name for n in graph.nodes}
    name = numbered(base, taken)
    consts[name] = Constant(name, np.ascontiguousarray(data.astype(like)), source, bn.loc)
    types[name] = consts[name].type
    return name


def _fold_into(graph: Graph, bn_index: int) -> Graph | None:
    """`graph` with BatchNormalization node `bn_index` folded into the node producing its input,
    or None when that is not possible (or would change what other nodes see)."""
    bn = graph.nodes[bn_index]
    consts, types = dict(graph.constants), dict(graph.types)
    x = bn.inputs[0]
    if bn.attrs.get("training_mode") or len(bn.outputs) != 1 or not all(p in consts for p in bn.inputs[1:5]):
        return None
    producers, readers = graph.producers(), graph.consumers()
    if x in graph.outputs or readers.get(x) != [bn_index] or x not in producers:
        return None
    scale, bias, mean, var = (consts[p].data.astype(np.float64) for p in bn.inputs[1:5])
    # epsilon is a float32 attribute: add it as the float32 it is, in float64 arithmetic.
    denominator = var + float(np.float32(bn.attrs.get("epsilon", 1e-5)))
    if not np.all(denominator > 0):  # a negative or NaN variance: the node's NaNs are its own, unfolded
        return None
    s = scale / np.sqrt(denominator)
    fold = _Affine(bn, s, bias - mean * s)
    pi = producers[x]
    node = graph.nodes[pi]
    rewrite = _REWRITES.get(node.op)
    result = rewrite(graph, pi, fold, consts, types) if rewrite else None
    if result is None:
        return None
    nodes = list(graph.nodes)
    for i, new in result.items():
        nodes[i] = new
    nodes = [n for n in nodes if n is not None]
    used = {v for n in nodes for v in n.inputs} | {v for n in nodes for v in n.outputs} | set(graph.inputs)
    types = {k: t for k, t in types.items() if k in used or k in consts}
    return replace(graph, nodes=tuple(nodes), constants=consts, types=types)


def _const(consts: Mapping[str, Constant], name: str) -> np.ndarray | None:
    return consts[name].data if name in consts else None


def _fold_conv(graph, pi, fold, consts, types):
    """Conv(X, W, b) -> BN: W'[m] = W[m] * s[m], b' = b * s + shift (output channel m on axis 0 of W)."""
    conv, bn = graph.nodes[pi], fold.bn
    w = _const(consts, conv.inputs[1])
    b = _const(consts, conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] else np.zeros(len(fold.s))
    if w is None or b is None or w.ndim < 3 or w.shape[0] != len(fold.s) or b.shape != fold.s.shape:
        return None
    source = f"{{}} of node '{conv.name}' with BatchNormalization '{bn.name}' folded in"
    w2 = w.astype(np.float64) * fold.s.reshape((-1,) + (1,) * (w.ndim - 1))
    wn = _new_constant(graph, consts, types, f"{conv.name}_weight", w2, w.dtype, source.format("weight"), bn)
    bn_ = _new_constant(graph, consts, types, f"{conv.name}_bias", b.astype(np.float64) * fold.s + fold.shift,
                        w.dtype, source.format("bias"), bn)
    return {pi: replace(conv, inputs=(conv.inputs[0], wn, bn_), outputs=bn.outputs),
            graph.nodes.index(bn): None}


def _fold_gemm(graph, pi, fold, consts, types):
    """Gemm(A, B, C) -> BN over the columns: B' scales column m by s[m], C' = beta*C*s + shift, beta=1."""
    gemm, bn = graph.nodes[pi], fold.bn
    w = _const(consts, gemm.inputs[1])
    c = _const(consts, gemm.inputs[2]) if len(gemm.inputs) > 2 and gemm.inputs[2] else np.zeros(())
    trans = gemm.attrs.get("transB", 0)
    if w is None or c is None or w.ndim != 2 or w.shape[0 if trans else 1] != len(fold.s):
        return None
    source = f"{{}} of node '{gemm.name}' with BatchNormalization '{bn.name}' folded in"
    w2 = w.astype(np.float64) * (fold.s[:, None] if trans else fold.s[None, :])
    c2 = gemm.attrs.get("beta", 1.0) * c.astype(np.float64) * fold.s + fold.shift
    wn = _new_constant(graph, consts, types, f"{gemm.name}_weight", w2, w.dtype, source.format("weight"), bn)
    cn = _new_constant(graph, consts, types, f"{gemm.name}_bias", c2, w.dtype, source.format("bias"), bn)
    return {pi: replace(gemm, inputs=(gemm.inputs[0], wn, cn), outputs=bn.outputs,
                        attrs={**gemm.attrs, "beta": 1.0}),
            graph.nodes.index(bn): None}


def _matmul_weight(graph, mi, fold, consts, types) -> str | None:
    """The scaled copy of MatMul node `mi`'s constant [K, M] weight, for a rank-2 product."""
    mm = graph.nodes[mi]
    w = _const(consts, mm.inputs[1])
    if w is None or w.ndim != 2 or w.shape[1] != len(fold.s) or graph.types[mm.outputs[0]].rank != 2:
        return None
    return _new_constant(graph, consts, types, f"{mm.name}_weight", w.astype(np.float64) * fold.s[None, :],
                         w.dtype, f"weight of node '{mm.name}' with BatchNormalization '{fold.bn.name}' "
                         f"folded in", fold.bn)


def _fold_matmul(graph, pi, fold, consts, types):
    """MatMul(A, W) -> BN: A @ W' and the BatchNormalization becomes an Add of the shift."""
    bn = fold.bn
    wn = _matmul_weight(graph, pi, fold, consts, types)
    if wn is None:
        return None
    mm = graph.nodes[pi]
    shift = _new_constant(graph, consts, types, f"{bn.name}_shift", fold.shift, consts[wn].data.dtype,
                          f"shift of BatchNormalization '{bn.name}' after folding its scale", bn)
    return {pi: replace(mm, inputs=(mm.inputs[0], wn)),
            graph.nodes.index(bn): Node("Add", bn.name, (mm.outputs[0], shift), bn.outputs, {}, bn.loc)}


def _fold_add(graph, pi, fold, consts, types):
    """MatMul(A, W) -> Add(., b) -> BN: A @ W' + (b * s + shift)."""
    add, bn = graph.nodes[pi], fold.bn
    producers, readers = graph.producers(), graph.consumers()
    for side in (0, 1):
        m, b_name = add.inputs[side], add.inputs[1 - side]
        b = _const(consts, b_name)
        mi = producers.get(m)
        if b is None or mi is None or graph.nodes[mi].op != "MatMul" or readers.get(m) != [pi] \
                or m in graph.outputs:
            continue
        if b.ndim > 2:
            return None
        wn = _matmul_weight(graph, mi, fold, consts, types)
        if wn is None:
            return None
        bias = _new_constant(graph, consts, types, f"{add.name}_bias", b.astype(np.float64) * fold.s + fold.shift,
                             b.dtype, f"bias of node '{add.name}' with BatchNormalization '{bn.name}' folded in",
                             bn)
        mm = graph.nodes[mi]
        inputs = (m, bias) if side == 0 else (bias, m)
        return {mi: replace(mm, inputs=(mm.inputs[0], wn)),
                pi: replace(add, inputs=inputs, outputs=bn.outputs),
                graph.nodes.index(bn): None}
    return None


_REWRITES = {"Conv": _fold_conv, "Gemm": _fold_gemm, "MatMul": _fold_matmul, "Add": _fold_add}


def fold_batch_norm(graph: Graph) -> Graph:
    """Fold each BatchNormalization (inference) into the Conv, Gemm, MatMul or MatMul+Add that
    produces its input, when nothing else reads that value: new weight and bias constants are
    computed in float64 and stored in the weight's type."""
    i = 0
    while i < len(graph.nodes):
        folded = _fold_into(graph, i) if graph.nodes[i].op == "BatchNormalization" else None
        if folded is None:
            i += 1
        else:  # the BatchNormalization is gone (or replaced in place): look at index i again
            graph = folded
    return graph


def gemm_weights_by_row(graph: Graph) -> Graph:
    """Store a constant B that only a Gemm with transB reads transposed, and clear transB: the
    kernel then reads B row by row, each output's sum still in k order, and a vector kernel reads
    consecutive outputs' weights from consecutive bytes (one layout for every backend)."""
    readers = graph.consumers()
    consts, types, nodes = dict(graph.constants), dict(graph.types), list(graph.nodes)
    for i, node in enumerate(nodes):
        if node.op != "Gemm" or not node.attrs.get("transB") or len(node.inputs) < 2:
            continue
        b = node.inputs[1]
        if b not in consts or len(readers.get(b, [])) != 1 or consts[b].data.ndim != 2 or b in graph.outputs:
            continue
        old = consts[b]
        consts[b] = Constant(b, np.ascontiguousarray(old.data.T), f"{old.source}, transposed for '{node.name}'",
                             old.loc)
        types[b] = consts[b].type
        nodes[i] = replace(node, attrs={**node.attrs, "transB": 0})
    return replace(graph, constants=consts, types=types, nodes=tuple(nodes))


DEFAULT_PASSES: Sequence[Pass] = (fold_constants, fold_batch_norm, qlinear_on_int8_kernels, drop_dead_nodes,
                                  gemm_weights_by_row)


def optimize(graph: Graph, passes: Sequence[Pass] = DEFAULT_PASSES) -> Graph:
    """Run the passes in order."""
    for p in passes:
        graph = p(graph)
    return graph
