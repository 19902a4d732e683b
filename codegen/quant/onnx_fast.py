"""ONNX's integer convolutions and matrix products on the int8 kernels of TFLite's primitives.

ONNX lays activations out NCHW and requantizes in float (codegen/ops/quantized_onnx.py); the fast
int8 kernels (Cortex-M DSP, host vectors, the portable tiles) serve TFLite's primitives, which
take NHWC int8 data and a fixed-point requantization. This pass rewrites, where the arithmetic
allows it,

    QLinearConv (group 1, rank 4)          -> QConv2D,    weights stored [M, KH, KW, C]
    QLinearConv (group = C, M = C x mult)  -> QDepthwise, weights stored [1, KH, KW, M]
    QLinearMatMul (constant 2-D B)         -> QFullyConnected, weights stored [N, K]
    QLinearGlobalAveragePool (rank 4)      -> itself, channels last, on a rewritten convolution's output

when the activations are int8 or uint8 with one scale and zero point, the weights are int8 with
zero points 0 (per tensor or per output channel; the quantizers' symmetric weights) and a bias
is int32. The primitives requantize as ONNX does (their attribute requantize: float): the int32
sum as float32 times ONNX's own float32 (x_scale * w_scale) / y_scale, rounded half to even, so
the outputs are the scalar ONNX kernels' to the bit; only the loops that compute the sums change.

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

from codegen.ir import Constant, Graph, Node, TensorType
from codegen.ir.names import numbered
from codegen.ops import PRIMITIVES, check_attrs
from codegen.ops.channels_last import perm_to_first, perm_to_last, to_last
from codegen.ops.conv import kernel_from, windows
from codegen.ops.quantized_onnx import act_range, output_scales
from codegen.ops.registry import InferArgs

SIGNED_SHIFT = 128  # uint8 v stands for the same real as int8 v - 128 with the zero point less 128


def _zero_points(values: np.ndarray | None) -> np.ndarray:
    return np.zeros(1, np.int64) if values is None else np.asarray(values, np.int64).reshape(-1)


def _is_move_only(shape: Sequence[int], perm: Sequence[int]) -> bool:
    """Whether transposing `shape` by `perm` keeps the order of its axes longer than 1 (a reshape)."""
    moved = [p for p in perm if shape[p] != 1]
    return moved == sorted(moved)


class _Rewriter:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.types = dict(graph.types)
        self.consts = dict(graph.constants)
        self.taken = set(self.types) | set(self.consts) | {n.name for n in graph.nodes}
        self.nodes: list[Node] = []
        self.signed: dict[str, str] = {}  # uint8 value -> its int8 copy
        self.nhwc: dict[str, str] = {}  # NCHW value -> its NHWC int8 copy

    # --- graph building ---------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        name = numbered(base, self.taken)
        self.taken.add(name)
        return name

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
        attrs = check_attrs(prim.attrs, attrs, op)
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

    def shift(self, value: str, to: str, loc, out: str | None = None) -> str:
        """uint8 `value` as int8 (to='int8'), or int8 as uint8: the same reals, the integers moved by 128."""
        t = self.types[value]
        scale = t.quant.scale[0] if t.quant is not None else 1.0
        zp = t.quant.zero_point[0] if t.quant is not None else (0 if to == "int8" else -SIGNED_SHIFT)
        attrs = {"x_scale": scale, "x_zero_point": zp, "y_scale": scale,
                 "y_zero_point": zp - SIGNED_SHIFT if to == "int8" else zp + SIGNED_SHIFT, "dtype": to}
        return self.emit("Requantize", self.fresh(f"{value}_as_{to}"), (value,), attrs, loc, out)

    # --- the values the rewritten nodes read and write --------------------------------------
    def int8(self, value: str, loc) -> str:
        if self.types[value].dtype == "int8":
            return value
        if value not in self.signed:
            self.signed[value] = self.shift(value, "int8", loc)
        return self.signed[value]

    def int8_nhwc(self, value: str, loc) -> str:
        if value not in self.nhwc:
            v = self.int8(value, loc)
            self.nhwc[value] = self.move(v, perm_to_last(self.types[v].rank), loc)
        return self.nhwc[value]

    def restore(self, node: Node, made: str, nhwc: bool) -> None:
        """Make the node's original output from `made` (int8, NHWC if `nhwc`): back to the
        model's layout, shape and element type. Unread, these conversions are dropped later."""
        want = node.outputs[0]
        wanted = self.types[want]
        if nhwc:
            self.nhwc[want] = made
        signed = want if wanted.dtype == "int8" else self.fresh(f"{want}_int8")
        if nhwc:
            made = self.move(made, perm_to_first(wanted.rank), node.loc, signed)
        else:
            made = self.reshape(made, wanted.shape, node.loc, signed)
        if wanted.dtype != "int8":
            self.signed[want] = made
            self.shift(made, wanted.dtype, node.loc, want)

    # --- per node ---------------------------------------------------------------------------
    def quant_params(self, node: Node, x_at: int, w_at: int, channels: int):
        """(the primitive's quantization attributes, in int8 terms; the output scales per channel,
        or one if they are all equal), or None when the node's numbers do not fit the int8 kernels."""
        x, y = self.types[node.inputs[x_at]], self.types[node.outputs[0]]
        w = self.data(node.inputs[w_at])
        w_zp = self.data(node.inputs[w_at + 2])
        scales = [self.data(node.inputs[i]) for i in (x_at + 1, w_at + 1, w_at + 3)]
        if x.dtype not in ("int8", "uint8") or y.dtype not in ("int8", "uint8") or w is None \
                or w.dtype != np.int8 or _zero_points(w_zp).any() or any(s is None for s in scales):
            return None
        x_zp = int(_zero_points(self.data(node.inputs[x_at + 2]))[0]) - (SIGNED_SHIFT if x.dtype == "uint8" else 0)
        y_zp = int(_zero_points(self.data(node.inputs[w_at + 4]))[0])
        lo, hi = act_range(node.attrs, y.dtype)
        down = SIGNED_SHIFT if y.dtype == "uint8" else 0
        real = output_scales(*(np.asarray(s, np.float32).reshape(-1) for s in scales), channels)
        if (real == real[0]).all():
            real = real[:1]
        attrs = {"x_zero_point": x_zp, "y_scale": float(scales[2].reshape(-1)[0]), "y_zero_point": y_zp - down,
                 "act_min": lo - down, "act_max": hi - down, "requantize": "float"}
        return attrs, real

    def requant_inputs(self, node: Node, scales: np.ndarray, bias_at: int) -> list[str]:
        bias = node.inputs[bias_at] if len(node.inputs) > bias_at else ""
        return [bias, self.constant(f"{node.name}_scale", scales, node, "(x_scale * w_scale) / y_scale"), ""]

    def qlinear_conv(self, node: Node) -> bool:
        x_name, w_name = node.inputs[0], node.inputs[3]
        x, w = self.types[x_name], self.types[w_name]
        group = node.attrs["group"]
        m, c = w.shape[0], x.shape[1]
        depthwise = group > 1 and group == c and w.shape[1] == 1 and m % c == 0
        if x.rank != 4 or not (group == 1 or depthwise):
            return False
        params = self.quant_params(node, 0, 3, m)
        if params is None:
            return False
        attrs, scales = params
        wins = windows(x.shape[2:], kernel_from(node.attrs, w, 2), node.attrs)
        attrs.update(strides=tuple(v.stride for v in wins), dilations=tuple(v.dilation for v in wins),
                     pads=(wins[0].pad_begin, wins[1].pad_begin, wins[0].pad_end, wins[1].pad_end))
        wdata = self.data(w_name)
        if depthwise:
            op, stored = "QDepthwise", np.transpose(wdata, (1, 2, 3, 0))  # [1, KH, KW, M]
            attrs["depth_multiplier"] = m // c
        else:
            op, stored = "QConv2D", np.transpose(wdata, (0, 2, 3, 1))  # [M, KH, KW, C]
        weights = self.constant(f"{w_name}_nhwc", stored, node, "weights stored channels last")
        inputs = [self.int8_nhwc(x_name, node.loc), weights, *self.requant_inputs(node, scales, 8)]
        self.restore(node, self.emit(op, node.name, inputs, attrs, node.loc), nhwc=True)
        return True

    def qlinear_matmul(self, node: Node) -> bool:
        a, b = self.types[node.inputs[0]], self.types[node.inputs[3]]
        if b.rank != 2 or self.data(node.inputs[3]) is None:
            return False
        params = self.quant_params(node, 0, 3, b.shape[1])
        if params is None:
            return False
        attrs, scales = params
        weights = self.constant(f"{node.inputs[3]}_rows", self.data(node.inputs[3]).T, node,
                                "weights stored one row per output")
        inputs = [self.int8(node.inputs[0], node.loc), weights, *self.requant_inputs(node, scales, 8)]
        y = self.types[node.outputs[0]]
        if y.dtype == "int8" and y.shape == (a.size // b.shape[0], b.shape[1]):  # the rows are the output
            self.emit("QFullyConnected", node.name, inputs, attrs, node.loc, node.outputs[0])
        else:
            self.restore(node, self.emit("QFullyConnected", node.name, inputs, attrs, node.loc), nhwc=False)
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
        self.restore(node, pooled, nhwc=True)
        return True

    def run(self) -> Graph:
        rewrites = {"QLinearConv": self.qlinear_conv, "QLinearMatMul": self.qlinear_matmul,
                    "QLinearGlobalAveragePool": self.qlinear_global_average_pool}
        for node in self.graph.nodes:
            rewrite = rewrites.get(node.op)
            if rewrite is None or not rewrite(node):
                self.nodes.append(node)
        return replace(self.graph, nodes=tuple(self.nodes), types=self.types, constants=self.consts)


def qlinear_on_int8_kernels(graph: Graph) -> Graph:
    """`graph` with ONNX's integer convolutions, matrix products and global pools on TFLite's int8
    primitives where their arithmetic fits (see the module doc); unread conversions stay for
    drop_dead_nodes to remove."""
    if not any(n.op.startswith("QLinear") for n in graph.nodes):
        return graph
    return _Rewriter(graph).run()
