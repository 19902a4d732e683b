"""QDQ folding: ONNX models quantized in the QDQ format (QuantizeLinear / DequantizeLinear pairs
around float operators, as onnxruntime.quantization writes them) become integer operators.

    DequantizeLinear -> Conv   [-> Relu | Clip] -> QuantizeLinear  =>  QLinearConv
    DequantizeLinear -> MatMul [-> Relu | Clip] -> QuantizeLinear  =>  QLinearMatMul
    DequantizeLinear -> Gemm   [-> Relu | Clip] -> QuantizeLinear  =>  QLinearMatMul (+ int32 bias)
    DequantizeLinear -> Add    [-> Relu | Clip] -> QuantizeLinear  =>  QLinearAdd
    DequantizeLinear -> AveragePool             -> QuantizeLinear  =>  QLinearAveragePool
    DequantizeLinear -> GlobalAveragePool       -> QuantizeLinear  =>  QLinearGlobalAveragePool
    DequantizeLinear -> Reshape | Flatten | Transpose -> QuantizeLinear (same scale and zero point)
                                                       =>  the same operator on the integers

as ONNX Runtime fuses them, with the same float requantization (codegen/ops/quantized_onnx.py).
A pattern folds only when every scale and zero point is a constant, the activations are
quantized per tensor, weights per tensor or per output channel, and a bias is int32 with zero
point 0 and the scale the product of the input and weight scales (what the quantizer writes).
A ReLU or a Clip with constant bounds between the operator and its QuantizeLinear becomes the
output clamp. Anything else stays as written and runs through QuantizeLinear and
DequantizeLinear, which are operators like any other (MaxPool, AveragePool, Softmax, Flatten, ...:
exact for MaxPool and the reshapes, whose QuantizeLinear restores the very integers);
DequantizeLinear nodes left without consumers are dropped.

The pass works on the GraphSpec's nodes before expansion, so the integer operators are
checked and typed like nodes written in the model.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping, Sequence

import numpy as np

from tinsmith.ir import Constant
from tinsmith.load.graph_file import NodeSpec
from tinsmith.quant.fixed_point import DTYPE_RANGES

MOVES = ("Reshape", "Flatten", "Transpose")  # data movement: the integers move as they are
FOLDED_OPS = ("Conv", "MatMul", "Gemm", "Add", "AveragePool", "GlobalAveragePool", *MOVES)
ACTIVATIONS = ("Relu", "Clip")
BIAS_RTOL = 1e-5  # bias scale vs input scale x weight scale: float32 products, rounded once


class _Graph:
    """Producers and consumers of the values of a node list, and the constants' data."""

    def __init__(self, nodes: Sequence[NodeSpec], constants: Mapping[str, Constant], outputs: set[str]):
        self.nodes = list(nodes)
        self.constants = dict(constants)
        self.outputs = outputs
        self.producer = {o: i for i, n in enumerate(self.nodes) for o in n.outputs}
        self.consumers: dict[str, list[int]] = {}
        for i, n in enumerate(self.nodes):
            for v in n.inputs:
                if v:
                    self.consumers.setdefault(v, []).append(i)

    def data(self, name: str) -> np.ndarray | None:
        c = self.constants.get(name) if name else None
        return None if c is None else np.asarray(c.data)

    def only_consumer(self, value: str) -> int | None:
        """The one node reading `value`, if exactly one does and it is not a graph output."""
        users = self.consumers.get(value, [])
        return users[0] if len(users) == 1 and value not in self.outputs else None


class _Dq:
    """A DequantizeLinear feeding a pattern: its integer input and constant parameters."""

    def __init__(self, node: NodeSpec, scale: np.ndarray, zp: np.ndarray | None, axis: int):
        self.node = node
        self.q = node.inputs[0]
        self.scale_name = node.inputs[1]
        self.zp_name = node.inputs[2] if len(node.inputs) > 2 else ""
        self.scale = scale.astype(np.float32).reshape(-1)
        self.zp = None if zp is None else zp.reshape(-1)
        self.axis = axis

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1 and (self.zp is None or self.zp.size == 1)


def _dequantized(g: _Graph, value: str) -> _Dq | None:
    i = g.producer.get(value)
    node = g.nodes[i] if i is not None else None
    if node is None or node.op != "DequantizeLinear" or node.attrs.get("block_size", 0):
        return None
    scale = g.data(node.inputs[1])
    zp = g.data(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    if scale is None or (len(node.inputs) > 2 and node.inputs[2] and zp is None):
        return None
    return _Dq(node, scale, zp, int(node.attrs.get("axis", 1)))


def _quantized_after(g: _Graph, value: str) -> tuple[list[int], NodeSpec, tuple[int | None, int | None]] | None:
    """The QuantizeLinear that `value` reaches (through at most one ReLU or Clip), the nodes
    passed, and the clamp the activation adds in the output's integers (None: none)."""
    passed: list[int] = []
    clamp: tuple[int | None, int | None] = (None, None)
    i = g.only_consumer(value)
    if i is not None and g.nodes[i].op in ACTIVATIONS:
        act = g.nodes[i]
        passed.append(i)
        bounds = _activation_bounds(g, act)
        if bounds is None:
            return None
        clamp = bounds
        i = g.only_consumer(act.outputs[0])
    if i is None:
        return None
    q = g.nodes[i]
    if q.op != "QuantizeLinear" or len(q.inputs) < 3 or not q.inputs[2] or q.attrs.get("block_size", 0) \
            or q.attrs.get("output_dtype", 0):
        return None
    scale, zp = g.data(q.inputs[1]), g.data(q.inputs[2])
    if scale is None or zp is None or scale.size != 1 or zp.size != 1 or zp.dtype.name not in ("int8", "uint8"):
        return None
    return passed + [i], q, _clamp(clamp, float(np.float32(scale.reshape(-1)[0])), int(zp.reshape(-1)[0]),
                                   zp.dtype.name)


def _activation_bounds(g: _Graph, act: NodeSpec) -> tuple[float | None, float | None] | None:
    """A ReLU's or constant Clip's real bounds (None for an open side); None if not constant."""
    if act.op == "Relu":
        return 0.0, None
    lo = g.data(act.inputs[1]) if len(act.inputs) > 1 and act.inputs[1] else None
    hi = g.data(act.inputs[2]) if len(act.inputs) > 2 and act.inputs[2] else None
    if (len(act.inputs) > 1 and act.inputs[1] and lo is None) or (len(act.inputs) > 2 and act.inputs[2] and hi is None):
        return None
    return (None if lo is None else float(lo.reshape(-1)[0])), (None if hi is None else float(hi.reshape(-1)[0]))


def _clamp(bounds, scale: float, zp: int, dtype: str) -> tuple[int | None, int | None]:
    """Real bounds as the quantized output's integers: Q(clip(v)) = clip(Q(v), Q(lo), Q(hi)),
    since quantizing is monotonic."""
    lo, hi = DTYPE_RANGES[dtype]

    def q(v: float) -> int:
        return int(np.clip(np.rint(np.float32(v) / np.float32(scale)) + zp, lo, hi))
    return (None if bounds[0] is None else q(bounds[0])), (None if bounds[1] is None else q(bounds[1]))


def _act_attrs(clamp) -> dict:
    return {k: v for k, v in (("act_min", clamp[0]), ("act_max", clamp[1])) if v is not None}


def _int_dtype(g: _Graph, dq: _Dq, types: Mapping[str, str]) -> str | None:
    data = g.data(dq.q)
    return data.dtype.name if data is not None else types.get(dq.q)


def _bias_ok(g: _Graph, bias: _Dq | None, x: _Dq, w: _Dq, count: int) -> bool:
    if bias is None:
        return True
    data = g.data(bias.q)
    if data is None or data.dtype.name != "int32" or data.shape != (count,) or \
            (bias.zp is not None and bias.zp.any()):
        return False
    want = (np.float32(x.scale[0]) * np.broadcast_to(w.scale, count)).astype(np.float32)
    return bool(np.allclose(np.broadcast_to(bias.scale, count), want, rtol=BIAS_RTOL, atol=0))


class _Folder:
    def __init__(self, g: _Graph, types: Mapping[str, str], fresh: Callable[[str], str]):
        self.g = g
        self.types = types  # integer values' element types, as far as known before expansion
        self.fresh = fresh
        self.replaced: dict[int, NodeSpec] = {}
        self.removed: set[int] = set()

    def fold(self, i: int) -> None:
        node = self.g.nodes[i]
        after = _quantized_after(self.g, node.outputs[0]) if len(node.outputs) == 1 else None
        if after is None:
            return
        passed, q, clamp = after
        if node.op in MOVES and len(passed) > 1:
            return
        y_dtype = self.g.data(q.inputs[2]).dtype.name
        ins = [_dequantized(self.g, v) if v else None for v in node.inputs]
        folded = getattr(self, f"_{node.op.lower()}")(node, ins, q, clamp, y_dtype)
        if folded is None:
            return
        self.replaced[i] = folded
        self.removed.update(passed)

    def _node(self, node: NodeSpec, op: str, inputs: Sequence[str], q: NodeSpec, attrs: dict) -> NodeSpec:
        locs = tuple(node.loc for _ in inputs)
        return replace(node, op=op, inputs=tuple(inputs), outputs=(q.outputs[0],), attrs=attrs,
                       input_locs=locs, output_locs=(node.loc,), attr_locs={k: node.loc for k in attrs},
                       attr_key_locs={k: node.loc for k in attrs})

    def _activation(self, dq: _Dq | None, y_dtype: str) -> bool:
        return dq is not None and dq.per_tensor and _int_dtype(self.g, dq, self.types) == y_dtype

    def _conv(self, node, ins, q, clamp, y_dtype):
        x, w = ins[0], ins[1]
        bias = ins[2] if len(ins) > 2 else None
        if not self._activation(x, y_dtype) or w is None or self.g.data(w.q) is None:
            return None
        wdata = self.g.data(w.q)
        if wdata.dtype.name not in ("int8", "uint8") or not (w.per_tensor or w.axis == 0):
            return None
        if len(node.inputs) > 2 and node.inputs[2] and not _bias_ok(self.g, bias, x, w, wdata.shape[0]):
            return None
        inputs = [x.q, x.scale_name, x.zp_name, w.q, w.scale_name, w.zp_name, q.inputs[1], q.inputs[2]]
        if bias is not None:
            inputs.append(bias.q)
        return self._node(node, "QLinearConv", inputs, q, {**node.attrs, **_act_attrs(clamp)})

    def _matmul(self, node, ins, q, clamp, y_dtype, trans_b: bool = False, bias: _Dq | None = None):
        a, b = ins[0], ins[1]
        if not self._activation(a, y_dtype) or b is None or self.g.data(b.q) is None:
            return None
        bdata = self.g.data(b.q)
        if bdata.dtype.name not in ("int8", "uint8") or bdata.ndim != 2:
            return None
        column_axis = 0 if trans_b else 1
        if not (b.per_tensor or b.axis % 2 == column_axis):
            return None
        count = bdata.shape[column_axis]
        if bias is not None and not _bias_ok(self.g, bias, a, b, count):
            return None
        b_name = b.q
        if trans_b:  # the weights as [K, N], transposed once at build time
            b_name = self.fresh(f"{b.q}_t")
            source = self.g.constants[b.q]
            self.g.constants[b_name] = Constant(b_name, np.ascontiguousarray(bdata.T), source.source, source.loc)
        inputs = [a.q, a.scale_name, a.zp_name, b_name, b.scale_name, b.zp_name, q.inputs[1], q.inputs[2]]
        if bias is not None:
            inputs.append(bias.q)
        return self._node(node, "QLinearMatMul", inputs, q, _act_attrs(clamp))

    def _gemm(self, node, ins, q, clamp, y_dtype):
        a = node.attrs
        if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
            return None
        bias = ins[2] if len(ins) > 2 else None
        if len(node.inputs) > 2 and node.inputs[2] and bias is None:
            return None
        return self._matmul(node, ins, q, clamp, y_dtype, bool(a.get("transB", 0)), bias)

    def _add(self, node, ins, q, clamp, y_dtype):
        a, b = ins[0], ins[1]
        if not (self._activation(a, y_dtype) and self._activation(b, y_dtype)):
            return None
        ys, yz = self.g.data(q.inputs[1]), self.g.data(q.inputs[2])
        attrs = {"a_scale": float(a.scale[0]), "a_zero_point": _zp(a), "b_scale": float(b.scale[0]),
                 "b_zero_point": _zp(b), "y_scale": float(np.float32(ys.reshape(-1)[0])),
                 "y_zero_point": int(yz.reshape(-1)[0]), "dtype": y_dtype, **_act_attrs(clamp)}
        return self._node(node, "QLinearAdd", [a.q, b.q], q, attrs)

    def _globalaveragepool(self, node, ins, q, clamp, y_dtype):
        x = ins[0]
        if not self._activation(x, y_dtype) or clamp != (None, None):
            return None
        ys, yz = self.g.data(q.inputs[1]), self.g.data(q.inputs[2])
        attrs = {"x_scale": float(x.scale[0]), "x_zero_point": _zp(x), "y_scale": float(np.float32(ys.reshape(-1)[0])),
                 "y_zero_point": int(yz.reshape(-1)[0]), "dtype": y_dtype}
        return self._node(node, "QLinearGlobalAveragePool", [x.q], q, attrs)


    def _averagepool(self, node, ins, q, clamp, y_dtype):
        """2-D and up, padding not counted (count_include_pad=0), no ceil mode or dilations."""
        a = node.attrs
        if a.get("count_include_pad", 0) or a.get("ceil_mode", 0) or any(d != 1 for d in a.get("dilations") or ()) \
                or a.get("auto_pad", "NOTSET") != "NOTSET" or clamp != (None, None):
            return None
        folded = self._globalaveragepool(node, ins, q, clamp, y_dtype)
        if folded is None:
            return None
        pool = {k: a[k] for k in ("kernel_shape", "pads", "strides") if k in a}
        return replace(folded, op="QLinearAveragePool", attrs={**folded.attrs, **pool},
                       attr_locs={k: node.loc for k in {**folded.attrs, **pool}},
                       attr_key_locs={k: node.loc for k in {**folded.attrs, **pool}})

    def _move(self, node, ins, q, clamp, y_dtype):
        """Q(DQ(v)) is v when both use one scale and zero point ((k * s) / s rounds back to k), so
        a reshape or transpose between them can move the integers themselves."""
        x = ins[0]
        ys, yz = self.g.data(q.inputs[1]), self.g.data(q.inputs[2])
        if not self._activation(x, y_dtype) or np.float32(ys.reshape(-1)[0]) != x.scale[0] \
                or int(yz.reshape(-1)[0]) != _zp(x):
            return None
        return self._node(node, node.op, [x.q, *node.inputs[1:]], q, dict(node.attrs))

    _reshape = _flatten = _transpose = _move


def _zp(dq: _Dq) -> int:
    return 0 if dq.zp is None else int(dq.zp[0])


def fold_qdq(nodes: Sequence[NodeSpec], originals: Sequence[str], constants: Sequence[Constant],
             input_types: Mapping[str, str], outputs: Sequence[str], fresh: Callable[[str], str]
             ) -> tuple[tuple[NodeSpec, ...], tuple[str, ...], tuple[Constant, ...]]:
    """The nodes with QDQ patterns folded (see the module docstring), each node's original name,
    and the constants (new ones appended, those no longer read kept: expansion ignores them)."""
    if not any(n.op == "DequantizeLinear" for n in nodes):
        return tuple(nodes), tuple(originals), tuple(constants)
    g = _Graph(nodes, {c.name: c for c in constants}, set(outputs))
    types = dict(input_types)
    for n in g.nodes:  # integer values a QuantizeLinear makes: the type of its zero point
        if n.op == "QuantizeLinear" and len(n.inputs) > 2 and g.data(n.inputs[2]) is not None:
            types[n.outputs[0]] = g.data(n.inputs[2]).dtype.name
    folder = _Folder(g, types, fresh)
    for i, n in enumerate(g.nodes):
        if n.op in FOLDED_OPS and i not in folder.removed:
            folder.fold(i)
    kept = [(folder.replaced.get(i, n), originals[i]) for i, n in enumerate(g.nodes) if i not in folder.removed]
    kept = _without_unread_dequantize(kept, set(outputs))
    return tuple(n for n, _ in kept), tuple(o for _, o in kept), tuple(g.constants.values())


def _without_unread_dequantize(kept: list[tuple[NodeSpec, str]], outputs: set[str]) -> list[tuple[NodeSpec, str]]:
    while True:
        read = {v for n, _ in kept for v in n.inputs} | outputs
        dead = [k for k, (n, _) in enumerate(kept) if n.op == "DequantizeLinear" and n.outputs[0] not in read]
        if not dead:
            return kept
        kept = [item for k, item in enumerate(kept) if k not in set(dead)]
