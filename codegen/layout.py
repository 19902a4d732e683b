"""The channels-last layout pass: conv chains computed NHWC, the model's layout at the boundary.

Kernels whose vectors run over channels want channels innermost: a depthwise convolution then
loads whole vectors at every tap, a pointwise one is a matrix product with output channels
contiguous, and a bias or a residual add fused into a convolution's stores is a vector operation.
On a target whose capabilities say `channels_last: true`, this pass rewrites

    Conv (rank 4, group 1 or depthwise)        -> ConvNHWC, weights stored [kh, kw, C/group, M]
                                                  (reading an NCHW input, the image, as it is)
    AveragePool, MaxPool, GlobalAveragePool    -> AveragePoolNHWC / MaxPoolNHWC, when fed NHWC
    elementwise and broadcast nodes fed NHWC   -> the same op on the NHWC values

and moves values between the layouts with Transpose nodes only where a value crosses from one
layout to the other: graph inputs into a depthwise convolution or a pool, and NHWC values read by any other
node or leaving the graph. Graph inputs and outputs keep their names, types and layout, so the
generated API is the model's. Everything else is left as it was.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from tinsmith.ir import Constant, Graph, Node, TensorType
from tinsmith.ir.rewriter import GraphRewriter
from tinsmith.ops import PRIMITIVES, check_attrs
from tinsmith.ops.channels_last import perm_to_first, perm_to_last, to_last, weights_to_hwio
from tinsmith.ops.registry import Pattern
from tinsmith.optimize import drop_dead_nodes

_POOLS = {"AveragePool": "AveragePoolNHWC", "MaxPool": "MaxPoolNHWC", "GlobalAveragePool": "AveragePoolNHWC"}


class _Rewriter(GraphRewriter):
    def __init__(self, graph: Graph):
        super().__init__(graph)
        self.nhwc: dict[str, str] = {}  # value -> the name of its channels-last copy
        self.back: set[str] = set()  # NHWC values whose NCHW original has been made again

    def nhwc_type(self, value: str) -> TensorType:
        t = self.types[value]
        return TensorType(t.dtype, to_last(t.shape))

    def new_output(self, value: str) -> str:
        """A fresh channels-last name for `value`, which the rewritten node computes."""
        name = self.fresh(f"{value}_nhwc")
        self.types[name] = self.nhwc_type(value)
        self.nhwc[value] = name
        return name

    def constant(self, base: str, data: np.ndarray, source: str, loc) -> str:
        name = self.fresh(base)
        self.consts[name] = Constant(name, np.ascontiguousarray(data), source, loc)
        self.types[name] = self.consts[name].type
        return name

    def to_nhwc(self, value: str, node: Node) -> str:
        """The channels-last copy of `value`, made by a Transpose (or at build time) if needed."""
        if value in self.nhwc:
            return self.nhwc[value]
        if value in self.consts:  # an operand broadcast against a rank-4 value: ranks aligned first
            c = self.consts[value]
            data = c.data.reshape((1,) * (4 - c.data.ndim) + c.data.shape)
            name = self.constant(f"{value}_nhwc", np.transpose(data, perm_to_last(4)),
                                 f"{c.source}, channels last", c.loc)
            self.nhwc[value] = name
            return name
        rank = self.types[value].rank
        out = self.new_output(value)
        self.back.add(out)  # the original stays available as it is
        # right after the value is made (graph inputs: first), so that the copy is ready before
        # any kernel that might take its reader as a fused consumer
        made = [i for i, n in enumerate(self.nodes) if value in n.outputs]
        self.nodes.insert(made[0] + 1 if made else 0, Node("Transpose", self.fresh(f"{value}_to_nhwc"), (value,),
                                                           (out,), {"perm": perm_to_last(rank)}, node.loc))
        return out

    def to_nchw(self, value: str, node: Node | None) -> None:
        """Make `value` (computed channels last) exist again in the model's layout."""
        copy = self.nhwc[value]
        if copy in self.back:
            return
        self.back.add(copy)
        rank = self.types[value].rank
        self.nodes.append(Node("Transpose", self.fresh(f"{value}_to_nchw"), (copy,), (value,),
                               {"perm": perm_to_first(rank)}, node.loc if node is not None else None))

    # --- per node -------------------------------------------------------------------------
    def conv(self, node: Node) -> Node | None:
        x, w = node.inputs[0], node.inputs[1]
        xt, wt = self.types[x], self.types[w]
        group = node.attrs.get("group", 1)
        if xt.rank != 4 or xt.dtype != "float32" or w not in self.consts or len(node.outputs) != 1:
            return None
        if group != 1 and not (group == xt.shape[1] == wt.shape[0] and wt.shape[1] == 1):
            return None
        wc = self.consts[w]
        hwio = self.constant(f"{w}_hwio", weights_to_hwio(wc.data), f"{wc.source}, stored [kh, kw, C/group, M]",
                             wc.loc)
        attrs = dict(node.attrs)
        # a convolution of a value not yet channels last (the image) reads it as it is
        direct = group == 1 and x not in self.nhwc
        inputs = (x if direct else self.to_nhwc(x, node), hwio) + tuple(node.inputs[2:])
        attrs["input_nchw"] = int(direct)
        return Node("ConvNHWC", node.name, inputs, (self.new_output(node.outputs[0]),), attrs, node.loc)

    def pool(self, node: Node) -> Node | None:
        x = node.inputs[0]
        if x not in self.nhwc or len(node.outputs) != 1 or self.types[x].rank != 4:
            return None
        attrs = dict(node.attrs)
        if node.op == "GlobalAveragePool":
            attrs = {"kernel_shape": tuple(self.types[x].shape[2:])}
        op = _POOLS[node.op]
        attrs = check_attrs(PRIMITIVES[op].attrs, {k: v for k, v in attrs.items() if v is not None}, op)
        return Node(op, node.name, (self.nhwc[x],), (self.new_output(node.outputs[0]),), attrs, node.loc)

    def pointwise(self, node: Node) -> Node | None:
        """An elementwise or broadcast node on an NHWC value of its own output's shape."""
        if len(node.outputs) != 1 or not any(i in self.nhwc for i in node.inputs if i):
            return None
        shape = self.types[node.outputs[0]].shape
        if len(shape) != 4:
            return None
        for i in node.inputs:
            if not i or i in self.nhwc:
                continue
            t = self.types[i]
            if i in self.consts:
                if t.rank > 4:
                    return None
            elif t.shape != shape:
                return None
        inputs = tuple(i if not i or (i in self.consts and self.types[i].size == 1 and i not in self.nhwc)
                       else self.to_nhwc(i, node) for i in node.inputs)
        return Node(node.op, node.name, inputs, (self.new_output(node.outputs[0]),), dict(node.attrs), node.loc)

    def run(self) -> Graph:
        for node in self.graph.nodes:
            new = None
            if node.op == "Conv":
                new = self.conv(node)
            elif node.op in _POOLS:
                new = self.pool(node)
            elif PRIMITIVES[node.op].pattern in (Pattern.ELEMENTWISE, Pattern.BROADCAST):
                new = self.pointwise(node)
            if new is None:
                for i in node.inputs:
                    if i in self.nhwc and i not in self.consts:
                        self.to_nchw(i, node)
                new = node
            self.nodes.append(new)
        for out in self.graph.outputs:
            if out in self.nhwc:
                self.to_nchw(out, None)
        return drop_dead_nodes(replace(self.graph, nodes=tuple(self.nodes), types=self.types,
                                       constants=self.consts))


def channels_last(graph: Graph) -> Graph:
    """`graph` with its convolution chains channels last (see the module doc)."""
    return _Rewriter(graph).run()
