"""The pipeline as one call: graph file -> generated files. The SCons tool and the command line
are thin shells around these functions."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from codegen.assemble import assemble
from codegen.expand import expand_graph
from codegen.files import write_if_changed
from codegen.generate import CPP, Backend, GeneratedModel, generate
from codegen.ir import Graph
from codegen.load import load_graph_spec
from codegen.optimize import optimize
from codegen.plan import MemoryPlan, plan_memory
from codegen.schedule import Schedule, schedule


def lower(path: str | Path) -> Graph:
    """Load, expand and optimize a graph file."""
    return optimize(expand_graph(load_graph_spec(path)))


@dataclass(frozen=True)
class Compiled:
    graph: Graph
    schedule: Schedule
    plan: MemoryPlan
    model: GeneratedModel
    files: dict[str, str]


def compile_graph(path: str | Path, backend: Backend = CPP, constants_in_ram: bool = False) -> Compiled:
    """Run every stage up to assembly; nothing is written. Constants stay in flash unless
    `constants_in_ram`."""
    graph = lower(path)
    sched = schedule(graph)
    plan = plan_memory(graph, sched)
    model = generate(graph, sched, plan, backend, constants_in_ram)
    return Compiled(graph, sched, plan, model, assemble(model))


def write_files(files: dict[str, str], out_dir: str | Path) -> list[Path]:
    """Write each file atomically, leaving unchanged files untouched so their timestamps and the
    builds that depend on them stay as they were."""
    return [write_if_changed(Path(out_dir) / name, text.encode("utf-8")) for name, text in sorted(files.items())]
