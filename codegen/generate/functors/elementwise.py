"""Elementwise functors: one scalar formula per op, with NumPy broadcasting of inputs."""
from __future__ import annotations

from typing import Callable

from codegen.generate.backend import CPP
from codegen.generate.loop_ir import Binary, Const, Expr, Load, Store, Unary, broadcast_index, const, flat_index, nest

UNARY_FORMULAS: dict[str, Callable[[Expr], Expr]] = {
    "Relu": lambda x: Binary("max", x, const(0)),
    "Sigmoid": lambda x: Binary("/", const(1), Binary("+", const(1), Unary("exp", Unary("neg", x)))),
    "Tanh": lambda x: Unary("tanh", x),
    "Exp": lambda x: Unary("exp", x),
    "Erf": lambda x: Unary("erf", x),
    "Sqrt": lambda x: Unary("sqrt", x),
    "Identity": lambda x: x,
}

BINARY_FORMULAS: dict[str, Callable[[Expr, Expr], Expr]] = {
    "Add": lambda a, b: Binary("+", a, b),
    "Sub": lambda a, b: Binary("-", a, b),
    "Mul": lambda a, b: Binary("*", a, b),
    "Div": lambda a, b: Binary("/", a, b),
    "Pow": lambda a, b: Binary("pow", a, b),
}


def elementwise(formula: Callable[..., Expr]):
    """A functor applying `formula` to the inputs at every output element."""
    def functor(graph, node_id, cluster_id, args, attrs):
        out = args.outputs[0]
        shape = out.type.shape

        def body(idx):
            operands = [Load(a.name, broadcast_index(idx, shape, a.type.shape)) for a in args.inputs]
            return [Store(out.name, flat_index(idx, shape), formula(*operands))]
        return nest(shape, "i", body)[0]
    return functor


for _op, _formula in {**UNARY_FORMULAS, **BINARY_FORMULAS}.items():
    CPP.register(_op)(elementwise(_formula))

__all__ = ["UNARY_FORMULAS", "BINARY_FORMULAS", "elementwise", "Const"]
