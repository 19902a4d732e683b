"""The pipeline as one call: graph file -> generated files. The SCons tool and the command line
are thin shells around these functions."""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from codegen.assemble import assemble
from codegen.expand import expand_graph
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


def compile_graph(path: str | Path, backend: Backend = CPP) -> Compiled:
    """Run every stage up to assembly; nothing is written."""
    graph = lower(path)
    sched = schedule(graph)
    plan = plan_memory(graph, sched)
    model = generate(graph, sched, plan, backend)
    return Compiled(graph, sched, plan, model, assemble(model))


def write_files(files: dict[str, str], out_dir: str | Path) -> list[Path]:
    """Write each file atomically (temp file + rename), leaving unchanged files untouched so
    their timestamps and the builds that depend on them stay as they were."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in sorted(files.items()):
        target = out_dir / name
        data = text.encode("utf-8")
        if target.exists() and target.read_bytes() == data:
            written.append(target)
            continue
        fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise
        written.append(target)
    return written
