"""The graph IR every stage passes along: typed values, constants, and primitive nodes."""
from tinsmith.ir.graph import Constant, Graph, Node, TensorType

__all__ = ["Constant", "Graph", "Node", "TensorType"]
