"""The pipeline as one call: graph file -> generated files. The SCons tool and the command line
are thin shells around these functions."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from tinsmith.assemble import assemble
from tinsmith.expand import expand_graph
from tinsmith.files import make_rule, touch, write_if_changed
from tinsmith.fuse import fuse
from tinsmith.generate import (CPP, PORTABLE_CAPS, Backend, Capabilities, GeneratedModel, Kernels, generate,
                              render_model, scratch_bytes)
from tinsmith.generate.backend import check_kernels
from tinsmith.generate.backends import backend_for
from tinsmith.ir import Graph
from tinsmith.load import load_graph_spec
from tinsmith.optimize import optimize
from tinsmith.plan import MemoryPlan
from tinsmith.planners.check import check_plan
from tinsmith.planners.rows import best_candidate, pipeline_of, plan_with_rows, schedules_to_generate
from tinsmith.schedule import Schedule, schedule


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
    levels: tuple["Compiled", ...] = ()  # a dispatching target's compile per ISA level, narrowest first

    @property
    def workspace_bytes(self) -> int:
        """The workspace the library's header asks for: the largest level's, or the plan's."""
        return max((c.plan.workspace_bytes for c in self.levels), default=self.plan.workspace_bytes)


def compile_graph(path: str | Path, backend: Backend | None = None, constants_in_ram: bool = False,
                  target: str | Path | None = None, fusion: bool = True,
                  constants_section: str | None = None, threads: int | None = None) -> Compiled:
    """Run every stage up to assembly; nothing is written. Constants stay in flash unless
    `constants_in_ram`, or go in linker section `constants_section` (a target's placement). The
    backend and its capabilities come from `target` (a built-in target's name or a target file;
    none: the portable C++ backend) unless `backend` is given; `threads` replaces the target's
    thread count."""
    if constants_section is not None:
        _check_constants_section(constants_section, constants_in_ram)
    levels = _levels(target, backend)
    if levels:
        return _compile_levels(path, levels, constants_in_ram, fusion, constants_section, threads)
    backend, caps = _backend(backend, target, threads)
    return _compile_lowered(lower(path), backend, caps, constants_in_ram, fusion, constants_section)


def _compile_lowered(graph: Graph, backend: Backend, caps: Capabilities, constants_in_ram: bool, fusion: bool,
                     constants_section: str | None) -> Compiled:
    """compile_graph from the lowered graph on: every stage that depends on the backend."""
    graph, sched = scheduled(graph, backend, caps, fusion)
    sched, plan, kernels = plan_and_generate(graph, sched, backend, caps)
    model = render_model(kernels, sched, plan, constants_in_ram)
    check_plan(model)  # every workspace byte against the kernels' access order
    return Compiled(graph, sched, plan, model, assemble(model, constants_section))


def _levels(target, backend: Backend | None) -> tuple:
    """The ISA levels a build of `target` holds (tinsmith.targets.levels); none for a target
    without levels or when a backend is given."""
    if target is None or backend is not None:
        return ()
    from tinsmith.targets import load_target
    return load_target(target).levels


def _compile_levels(path, levels, constants_in_ram: bool, fusion: bool, constants_section: str | None,
                    threads: int | None) -> Compiled:
    """The model generated for each level as that level's target does it, in one dispatching
    library (tinsmith.assemble.dispatch); the first level's graph, schedule and plan, with
    `levels` holding each level's compile."""
    from tinsmith.assemble.dispatch import assemble_levels
    graph = lower(path)  # what every level starts from: lowering does not depend on the target
    compiled = [_compile_lowered(graph, *_backend(None, level.target, threads), constants_in_ram, fusion,
                                 constants_section) for level in levels]
    files = assemble_levels([(level, c.model) for level, c in zip(levels, compiled)], constants_section,
                            share_constants=not constants_in_ram)
    first = compiled[0]
    return Compiled(first.graph, first.schedule, first.plan, first.model, files, tuple(compiled))


def _backend(backend: Backend | None, target: str | Path | None, threads: int | None = None
             ) -> tuple[Backend, Capabilities]:
    """The backend and capabilities: `target`'s (none: the portable ones), `backend` if given;
    `threads` over the target's thread count."""
    if target is None:
        if threads not in (None, 1):
            from tinsmith.targets import TargetError
            raise TargetError(None, "several threads need a hosted target (host or host-native)")
        return backend or CPP, PORTABLE_CAPS
    from tinsmith.targets import load_target, with_threads
    loaded = load_target(target)
    chosen, caps = backend_for(loaded if threads is None else with_threads(loaded, threads))
    return backend or chosen, caps


def scheduled(source: str | Path | Graph, backend: Backend, caps: Capabilities, fusion: bool = True
              ) -> tuple[Graph, Schedule]:
    """The graph (a file, lowered first, or a lowered graph) in the target's layout, scheduled, with
    the fusions the backend allows."""
    graph = source if isinstance(source, Graph) else lower(source)
    if caps.channels_last:
        from tinsmith.layout import channels_last
        graph = channels_last(graph)
    check_kernels(graph, backend, caps)  # every node has a kernel for its element types, or a named error
    sched = schedule(graph)
    return graph, fuse(graph, sched, backend, caps) if fusion else sched


def plan_and_generate(graph: Graph, sched: Schedule, backend: Backend, caps: Capabilities
                      ) -> tuple[Schedule, MemoryPlan, Kernels]:
    """Generate the kernels once, for the schedule and for the row pipeline that may replace a run of
    its convolutions (tinsmith.planners.rows), then plan the workspace from their access order; the
    plan may take the pipeline's schedule."""
    scratch = scratch_bytes(graph, sched, backend, caps)
    candidate = best_candidate(graph, sched, scratch)
    kernels = generate(graph, schedules_to_generate(sched, candidate), backend, caps)
    sched, plan = plan_with_rows(graph, sched, kernels, scratch, candidate)
    return sched, plan, kernels


def generate_model(graph: Graph, sched: Schedule, plan: MemoryPlan, backend: Backend = CPP,
                   constants_in_ram: bool = False, caps: Capabilities = PORTABLE_CAPS,
                   with_constants: bool = True) -> GeneratedModel:
    """The kernels of `sched` (with the row pipelines it runs) generated and rendered with `plan`,
    a plan made elsewhere: for tools and tests that plan a schedule themselves."""
    pipes = {n.name: p for n, _ in sched.kernel_heads() if (p := pipeline_of(graph, sched, n.name))}
    kernels = generate(graph, [(sched, pipes)], backend, caps)
    return render_model(kernels, sched, plan, constants_in_ram, with_constants)


def _check_constants_section(section: str, constants_in_ram: bool) -> None:
    from tinsmith.errors import TinsmithError
    from tinsmith.escape import ld_section_name, one_line
    if constants_in_ram:
        raise TinsmithError(None, "constants cannot both be copied to RAM and placed in a linker section",
                            "drop one: constants-in-RAM, or the constants' placement")
    try:
        ld_section_name(section)
    except ValueError:
        raise TinsmithError(None, f"'{one_line(section)}' cannot name the constants' linker section",
                            "a section name is a '.' and then letters, digits and '_' (no further '.'), "
                            "e.g. .ext_weights, and not one the toolchain uses (.text, .rodata, .data ...)") from None


LIBRARY_SUFFIXES = (".cpp", ".hpp", ".h")
"""What a library build compiles: NAME.cpp and the headers beside it. The rest of the
generated files (the host runner NAME_runner.cpp with its main(), NAME.plan.json) serve the
SCons tool's runner, report and test firmware."""


def library_files(files: dict[str, str], name: str) -> dict[str, str]:
    """The generated files a project compiles into its own library (a dispatching target's every
    level is in NAME.cpp)."""
    return {name + suffix: files[name + suffix] for suffix in LIBRARY_SUFFIXES}


def write_files(files: dict[str, str], out_dir: str | Path, stamp: str | Path | None = None,
                depfile: str | Path | None = None, inputs: Sequence[str | Path] = ()) -> list[Path]:
    """Write each file atomically, leaving unchanged files untouched so their timestamps and the
    builds that depend on them stay as they were.

    A build tool that compares timestamps cannot tell from untouched outputs that the generator
    ran, and would run it on every build after an edit that changes no output (a comment in the
    graph file). `stamp` is a file written last, with a new timestamp on every run, to depend
    on instead. `depfile` is a Make-syntax rule naming the stamp as depending on `inputs` (the
    graph and the weight files it reads); without a stamp, the depfile is its own stamp."""
    unique = dict.fromkeys(str(p) for p in inputs)  # weights often share one archive
    rule = make_rule([stamp if stamp is not None else depfile], unique) if depfile is not None else None
    written = [write_if_changed(Path(out_dir) / name, text.encode("utf-8")) for name, text in sorted(files.items())]
    if rule is not None:
        touch(Path(depfile), rule.encode("utf-8"))
    if stamp is not None and (depfile is None or Path(stamp) != Path(depfile)):
        touch(Path(stamp), "".join(f"{p.name}\n" for p in written).encode("utf-8"))
    return written
