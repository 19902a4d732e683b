"""The graph IR every stage passes along: typed values, constants, and primitive nodes."""
from tinsmith.ir.graph import Constant, Graph, Node, State, TensorType

__all__ = ["Constant", "Graph", "Node", "State", "TensorType"]
