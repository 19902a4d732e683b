"""ONNX's integer convolutions and matrix products on the int8 kernels of TFLite's primitives.

ONNX lays activations out NCHW and requantizes in float (codegen/ops/quantized_onnx.py); the fast
int8 kernels (Cortex-M DSP, host vectors, the portable tiles) serve TFLite's primitives, which
take NHWC int8 data and a fixed-point requantization. This pass rewrites, where the arithmetic
allows it,

    QLinearConv, ConvInteger (group 1, rank 4)  -> QConv2D,    weights stored [M, KH, KW, C]
    QLinearConv, ConvInteger (group = C)        -> QDepthwise, weights stored [1, KH, KW, M]
    QLinearMatMul, MatMulInteger (constant 2-D) -> QFullyConnected, weights stored [N, K]
    QLinearGlobalAveragePool (rank 4)           -> itself, channels last, reading a rewritten node
    QLinearAdd (rank 4, no broadcasting)        -> itself on NHWC int8 values, reading a rewritten node

when the activations are int8 or uint8 with one scale and zero point, the weights are int8 with
zero points 0 (per tensor or per output channel; the quantizers' symmetric weights) and a bias
is int32 (a single zero point for x: MatMulInteger's per-row ones stay). The primitives
requantize as ONNX does (their attribute requantize: float): the int32 sum as float32 times
ONNX's own float32 (x_scale * w_scale) / y_scale, rounded half to even, so the outputs are the
scalar ONNX kernels' to the bit; only the loops that compute the sums change. ConvInteger and
MatMulInteger keep the int32 sums (requantize: none).

uint8 activations become int8 ones at the boundary (v - 128 with the zero point less 128, which
is exact), and convolution inputs and outputs move between NCHW and NHWC with Transpose (a
Reshape when only size-1 axes move). Each rewritten node records its NHWC int8 result, so the
next rewritten node reads that directly: a chain of convolutions is NHWC int8 from its first
input to its last output, and the conversions back to the model's layout and element type that
nothing reads are dropped as dead nodes. Anything else (int16 data, weights with zero points,
other groupings, ranks other than 4) keeps its ONNX operator and its scalar kernel.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from tinsmith.ir import Constant, Graph, Node
from tinsmith.ir.rewriter import GraphRewriter
from tinsmith.ops import PRIMITIVES, check_attrs
from tinsmith.ops.channels_last import perm_to_first, perm_to_last
from tinsmith.ops.conv import kernel_from, windows
from tinsmith.ops.quantized_onnx import act_range, output_scales
from tinsmith.ops.registry import InferArgs

SIGNED_SHIFT = 128  # uint8 v stands for the same real as int8 v - 128 with the zero point less 128
# where a node's operands are: x, x's zero point, weights, their zero points, bias, and for the
# QLinear forms the inputs x_scale, w_scale, y_scale and y_zero_point
OPERANDS = {"QLinearConv": (0, 2, 3, 5, 8, (1, 4, 6, 7)), "QLinearMatMul": (0, 2, 3, 5, 8, (1, 4, 6, 7)),
            "ConvInteger": (0, 2, 1, 3, None, None), "MatMulInteger": (0, 2, 1, 3, None, None)}


def _zero_points(values: np.ndarray | None) -> np.ndarray:
    return np.zeros(1, np.int64) if values is None else np.asarray(values, np.int64).reshape(-1)


def _is_move_only(shape: Sequence[int], perm: Sequence[int]) -> bool:
    """Whether transposing `shape` by `perm` keeps the order of its axes longer than 1 (a reshape)."""
    moved = [p for p in perm if shape[p] != 1]
    return moved == sorted(moved)


class _Rewriter(GraphRewriter):
    def __init__(self, graph: Graph):
        super().__init__(graph)
        self.signed: dict[tuple[str, int], str] = {}  # (uint8 value, its zero point) -> its int8 copy
        self.nhwc: dict[str, str] = {}  # NCHW value -> its NHWC int8 copy

    # --- graph building ---------------------------------------------------------------------
    def data(self, name: str) -> np.ndarray | None:
        return np.asarray(self.consts[name].data) if name and name in self.consts else None

    def constant(self, base: str, data: np.ndarray, node: Node, why: str) -> str:
        name = self.fresh(base)
        self.consts[name] = Constant(name, np.ascontiguousarray(data), f"{why} for '{node.name}'", node.loc)
        self.types[name] = self.consts[name].type
        return name

    def emit(self, op: str, name: str, inputs: Sequence[str], attrs: dict, loc, out: str | None = None) -> str:
        """Add a node (attributes checked, output typed by the primitive's inference); its output."""
        prim = PRIMITIVES[op]
        attrs = check_attrs(prim.attrs, {k: v for k, v in attrs.items() if v is not None}, op)
        args = InferArgs(tuple(self.types[i] if i else None for i in inputs), attrs,
                         tuple(self.data(i) for i in inputs))
        (typ,) = prim.infer(args)
        out = out or self.fresh(f"{name}_out")
        self.taken.add(out)
        old = self.types.get(out)
        if old is None or (old.dtype, old.shape) != (typ.dtype, typ.shape):  # (a value remade keeps its type)
            self.types[out] = typ
        self.nodes.append(Node(op, name, tuple(inputs), (out,), attrs, loc))
        return out

    def reshape(self, value: str, shape: Sequence[int], loc, out: str | None = None) -> str:
        shape_name = self.fresh(f"{value}_shape")
        self.consts[shape_name] = Constant(shape_name, np.array(shape, np.int64), "layout change", loc)
        self.types[shape_name] = self.consts[shape_name].type
        return self.emit("Reshape", self.fresh(f"{value}_reshape"), (value, shape_name), {}, loc, out)

    def move(self, value: str, perm: Sequence[int], loc, out: str | None = None) -> str:
        """`value` transposed by `perm`: a Reshape when only axes of size 1 move."""
        shape = self.types[value].shape
        if _is_move_only(shape, perm):
            return self.reshape(value, [shape[p] for p in perm], loc, out)
        return self.emit("Transpose", self.fresh(f"{value}_transpose"), (value,), {"perm": tuple(perm)}, loc, out)

    def shift(self, value: str, to: str, zero_point: int, loc, out: str | None = None) -> str:
        """uint8 `value` as int8 (to='int8'), or int8 as uint8: the same reals, the integers and the
        zero point (the reader's, where the value's type does not say) moved by 128."""
        t = self.types[value]
        scale = t.quant.scale[0] if t.quant is not None else 1.0
        moved = zero_point - SIGNED_SHIFT if to == "int8" else zero_point + SIGNED_SHIFT
        attrs = {"x_scale": scale, "x_zero_point": zero_point, "y_scale": scale, "y_zero_point": moved, "dtype": to}
        return self.emit("Requantize", self.fresh(f"{value}_as_{to}"), (value,), attrs, loc, out)

    # --- the values the rewritten nodes read and write --------------------------------------
    def int8(self, value: str, zero_point: int, loc) -> str:
        """`value` as int8 data; `zero_point` is the uint8 zero point its reader gives it."""
        if self.types[value].dtype == "int8":
            return value
        if (value, zero_point) not in self.signed:
            self.signed[value, zero_point] = self.shift(value, "int8", zero_point, loc)
        return self.signed[value, zero_point]

    def int8_nhwc(self, value: str, zero_point: int, loc) -> str:
        if value not in self.nhwc:
            v = self.int8(value, zero_point, loc)
            self.nhwc[value] = self.move(v, perm_to_last(self.types[v].rank), loc)
        return self.nhwc[value]

    def restore(self, node: Node, made: str, nhwc: bool, zero_point: int) -> None:
        """Make the node's original output from `made` (int8 with `zero_point`, NHWC if `nhwc`):
        back to the model's layout, shape and element type. Unread, they are dropped later."""
        want = node.outputs[0]
        wanted = self.types[want]
        if nhwc:
            self.nhwc[want] = made
        signed = self.fresh(f"{want}_int8") if wanted.dtype == "uint8" else want
        if nhwc:
            made = self.move(made, perm_to_first(wanted.rank), node.loc, signed)
        elif self.types[made].shape != wanted.shape:
            made = self.reshape(made, wanted.shape, node.loc, signed)
        if wanted.dtype == "uint8":
            self.signed[want, zero_point + SIGNED_SHIFT] = made
            self.shift(made, wanted.dtype, zero_point, node.loc, want)

    # --- per node ---------------------------------------------------------------------------
    def numbers(self, node: Node, channels: int) -> tuple[dict, list[str]] | None:
        """The primitive's quantization attributes (in int8 terms) and its bias and requantization
        inputs, or None when the node's numbers do not fit the int8 kernels."""
        at = OPERANDS[node.op]
        operand = [node.inputs[i] if i is not None and i < len(node.inputs) else "" for i in at[:5]]
        x, y = self.types[operand[0]], self.types[node.outputs[0]]
        w, w_zp, x_zp = self.data(operand[2]), self.data(operand[3]), _zero_points(self.data(operand[1]))
        if x.dtype not in ("int8", "uint8") or w is None or w.dtype != np.int8 or _zero_points(w_zp).any() \
                or x_zp.size != 1 or (operand[1] and self.data(operand[1]) is None):
            return None
        attrs = {"x_zero_point": int(x_zp[0]) - (SIGNED_SHIFT if x.dtype == "uint8" else 0)}
        if at[5] is None:  # ConvInteger, MatMulInteger: the int32 sums are the output
            return {**attrs, "y_scale": 1.0, "requantize": "none"}, ["", "", ""]
        scales = [self.data(node.inputs[i]) for i in at[5][:3]]
        if y.dtype not in ("int8", "uint8") or any(v is None for v in scales):
            return None
        y_zp = int(_zero_points(self.data(node.inputs[at[5][3]]))[0])
        lo, hi = act_range(node.attrs, y.dtype)
        down = SIGNED_SHIFT if y.dtype == "uint8" else 0
        real = output_scales(*(np.asarray(v, np.float32).reshape(-1) for v in scales), channels)
        attrs.update({"y_scale": float(scales[2].reshape(-1)[0]), "y_zero_point": y_zp - down,
                      "act_min": lo - down, "act_max": hi - down, "requantize": "float"})
        scale = self.constant(f"{node.name}_scale", real[:1] if (real == real[0]).all() else real, node,
                              "(x_scale * w_scale) / y_scale")
        return attrs, [operand[4], scale, ""]

    def conv(self, node: Node) -> bool:
        """QLinearConv, ConvInteger: QConv2D (group 1) or QDepthwise (group = C)."""
        at = OPERANDS[node.op]
        x_name, w_name = node.inputs[at[0]], node.inputs[at[2]]
        x, w = self.types[x_name], self.types[w_name]
        group = node.attrs["group"]
        m, c = w.shape[0], x.shape[1]
        depthwise = group > 1 and group == c and w.shape[1] == 1 and m % c == 0
        params = self.numbers(node, m) if x.rank == 4 and (group == 1 or depthwise) else None
        if params is None:
            return False
        attrs, more = params
        wins = windows(x.shape[2:], kernel_from(node.attrs, w, 2), node.attrs)
        attrs.update(strides=tuple(v.stride for v in wins), dilations=tuple(v.dilation for v in wins),
                     pads=(wins[0].pad_begin, wins[1].pad_begin, wins[0].pad_end, wins[1].pad_end))
        if depthwise:
            op, stored = "QDepthwise", np.transpose(self.data(w_name), (1, 2, 3, 0))  # [1, KH, KW, M]
            attrs["depth_multiplier"] = m // c
        else:
            op, stored = "QConv2D", np.transpose(self.data(w_name), (0, 2, 3, 1))  # [M, KH, KW, C]
        weights = self.constant(f"{w_name}_nhwc", stored, node, "weights stored channels last")
        x_int8 = self.int8_nhwc(x_name, attrs["x_zero_point"] + SIGNED_SHIFT, node.loc)
        made = self.emit(op, node.name, [x_int8, weights, *more], attrs, node.loc)
        self.restore(node, made, True, attrs.get("y_zero_point", 0))
        return True

    def matmul(self, node: Node) -> bool:
        """QLinearMatMul, MatMulInteger with constant 2-D weights: QFullyConnected over the rows."""
        at = OPERANDS[node.op]
        a, b = self.types[node.inputs[at[0]]], self.types[node.inputs[at[2]]]
        params = self.numbers(node, b.shape[1]) if b.rank == 2 else None
        if params is None:
            return False
        attrs, more = params
        weights = self.constant(f"{node.inputs[at[2]]}_rows", self.data(node.inputs[at[2]]).T, node,
                                "weights stored one row per output")
        inputs = [self.int8(node.inputs[at[0]], attrs["x_zero_point"] + SIGNED_SHIFT, node.loc), weights, *more]
        y = self.types[node.outputs[0]]
        if y.dtype != "uint8" and y.shape == (a.size // b.shape[0], b.shape[1]):  # the rows are the output
            self.emit("QFullyConnected", node.name, inputs, attrs, node.loc, node.outputs[0])
        else:
            made = self.emit("QFullyConnected", node.name, inputs, attrs, node.loc)
            self.restore(node, made, False, attrs.get("y_zero_point", 0))
        return True

    def qlinear_global_average_pool(self, node: Node) -> bool:
        """On the NHWC int8 values of a rewritten convolution; any other input stays NCHW."""
        x = node.inputs[0]
        if self.types[x].rank != 4 or x not in self.nhwc:
            return False
        a = node.attrs
        down = SIGNED_SHIFT if a["dtype"] == "uint8" else 0
        attrs = {**a, "x_zero_point": a["x_zero_point"] - down, "y_zero_point": a["y_zero_point"] - down,
                 "dtype": "int8", "channels_last": 1}
        pooled = self.emit(node.op, node.name, [self.nhwc[x]], attrs, node.loc)
        self.restore(node, pooled, True, attrs["y_zero_point"])
        return True

    def qlinear_add(self, node: Node) -> bool:
        """On NHWC int8 values when one input is a rewritten node's output and both have the
        output's shape (a residual connection); elementwise, so the layout does not matter."""
        a = node.attrs
        y = self.types[node.outputs[0]]
        if y.rank != 4 or not any(v in self.nhwc for v in node.inputs) \
                or any(self.types[v].shape != y.shape for v in node.inputs):
            return False
        down = SIGNED_SHIFT if a["dtype"] == "uint8" else 0
        attrs = {**a, "a_zero_point": a["a_zero_point"] - down, "b_zero_point": a["b_zero_point"] - down,
                 "y_zero_point": a["y_zero_point"] - down, "dtype": "int8",
                 **{k: a[k] - down for k in ("act_min", "act_max") if a.get(k) is not None}}
        inputs = [self.int8_nhwc(v, a[f"{ab}_zero_point"], node.loc) for v, ab in zip(node.inputs, "ab")]
        self.restore(node, self.emit(node.op, node.name, inputs, attrs, node.loc), True, attrs["y_zero_point"])
        return True

    def run(self) -> Graph:
        rewrites = {"QLinearConv": self.conv, "ConvInteger": self.conv, "QLinearMatMul": self.matmul,
                    "MatMulInteger": self.matmul,
                    "QLinearGlobalAveragePool": self.qlinear_global_average_pool, "QLinearAdd": self.qlinear_add}
        for node in self.graph.nodes:
            rewrite = rewrites.get(node.op)
            if rewrite is None or not rewrite(node):
                self.nodes.append(node)
        return replace(self.graph, nodes=tuple(self.nodes), types=self.types, constants=self.consts)


def qlinear_on_int8_kernels(graph: Graph) -> Graph:
    """`graph` with ONNX's integer convolutions, matrix products and global pools on TFLite's int8
    primitives where their arithmetic fits (see the module doc); unread conversions stay for
    drop_dead_nodes to remove."""
    if not any(n.op in OPERANDS for n in graph.nodes):
        return graph
    return _Rewriter(graph).run()
