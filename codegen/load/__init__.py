"""Stage 1, load: graph YAML file -> GraphSpec (structure checked, constants loaded)."""
from codegen.load.constants import LOADERS, Loader, register_loader
from codegen.load.graph_file import (GraphSpec, NodeSpec, ValueSpec, graph_dependencies, graph_name,
                                     load_graph_spec)
from codegen.load.identifiers import identifier_problem

__all__ = ["LOADERS", "Loader", "register_loader", "GraphSpec", "NodeSpec", "ValueSpec",
           "graph_dependencies", "graph_name", "load_graph_spec", "identifier_problem"]
