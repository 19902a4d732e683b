"""Several models in one arena: models that never run at the same time share one workspace.

Each generated model takes its workspace as an argument (`NAME_call(..., void* ws)` in C,
`NAME::call(..., NAME::Workspace& ws)` in C++), so models run one after the other can be handed
the same bytes. An arena is a list of such models; this module writes, for one arena:

- `ARENA.h`, a header for C and C++ that includes each model's header and declares one shared
  buffer: `ARENA_ARENA_BYTES` (the largest workspace, rounded up to the 16-byte alignment every
  workspace needs), the C type `ARENA_arena` (`arena.bytes` is what each `NAME_call()` takes)
  and, for C++, the union `ARENA::Arena` with one member per model, `arena.NAME`, the model's
  own `NAME::Workspace` (what `NAME::init_ws` and `NAME::call` take). A model's workspace holds
  nothing between calls that the next call needs, but `init_ws` must run again after another
  model used the bytes;
- `ARENA.arena.json`, the report: each model's workspace, the shared size and the saving (the
  sum of the workspaces minus the shared size).

Its input is the models' reports (NAME.plan.json or NAME.json, which both carry
`ram.workspace_bytes`), or an arena file listing graph files (see `load_arena_file`):

    # Keyword spotting and anomaly detection run in turn: one workspace for both.
    arena: kws_and_ad
    graphs: [kws_dscnn.yaml, ad_autoencoder.yaml]     # relative to this file
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from tinsmith.errors import SourceLoc, TinsmithError
from tinsmith.escape import cpp_templates, json_text
from tinsmith.load.identifiers import identifier_hint, identifier_problem
from tinsmith.load.located_yaml import LocatedDict, LocatedList, parse_yaml

ALIGNMENT = 16  # every workspace is 16-byte aligned (tinsmith::Workspace, NAME.h)
GRAPH_SUFFIXES = (".yaml", ".yml", ".onnx")


@functools.cache
def templates():
    """The arena header's template environment (escapes by rule, see codegen/escape.py), made
    when the first arena is written: the SCons tool imports this module for every build."""
    return cpp_templates(Path(__file__).parent)


class ArenaError(TinsmithError):
    """A problem in an arena file or with the models it lists."""


@dataclass(frozen=True)
class ArenaSpec:
    """An arena file read: its name and the graph files it lists (resolved), where each is."""

    name: str
    graphs: tuple[Path, ...]
    source: Path
    locs: tuple[SourceLoc, ...]
    name_loc: SourceLoc


@dataclass(frozen=True)
class Member:
    """One model of an arena: its graph name and the workspace it needs."""

    name: str
    workspace_bytes: int
    target: str | None = None  # the target its workspace was planned for, where known


def is_arena_file(path: str | Path) -> bool:
    """True for a YAML file whose top level names an `arena` (a graph file names a `graph`)."""
    path = Path(path)
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        return False
    try:
        head = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return any(line.startswith("arena:") for line in head.splitlines())


def check_name(name: object, loc: SourceLoc | None, what: str = "arena") -> str:
    """`name` if it can name an arena: it becomes a namespace, a C type and a header's stem,
    as a graph name does."""
    problem = identifier_problem(name, "graph")
    if problem:
        raise ArenaError(loc, f"{what} name: {problem}", identifier_hint(name, "graph"))
    return name  # type: ignore[return-value]


def load_arena_file(path: str | Path) -> ArenaSpec:
    """Read an arena file: `arena: NAME` and `graphs: [FILE, ...]` (paths relative to the
    file). Errors are reported where they are, as `path:line:col: error: ...`."""
    path = Path(path)
    try:
        data = parse_yaml(path.read_text(encoding="utf-8"), str(path))
    except OSError as e:
        raise ArenaError(None, f"cannot read arena file '{path}': {e.strerror}") from None
    except UnicodeDecodeError:
        raise ArenaError(SourceLoc(str(path), 1, 1), "an arena file must be UTF-8 text") from None
    except TinsmithError as e:
        raise ArenaError(e.loc, e.message, e.hint) from None
    top = SourceLoc(str(path), 1, 1)
    if not isinstance(data, LocatedDict):
        raise ArenaError(top, "an arena file must be a mapping with 'arena' and 'graphs'")
    for key in data:
        if key not in ("arena", "graphs"):
            raise ArenaError(data.key_locs.get(key, data.loc), f"unknown key '{key}' in an arena file",
                             "an arena file has 'arena' (its name) and 'graphs' (the graph files)")
    for key in ("arena", "graphs"):
        if key not in data:
            raise ArenaError(data.loc, f"an arena file needs '{key}'")
    name = check_name(data["arena"], data.at("arena"))
    listed = data["graphs"]
    if not isinstance(listed, LocatedList) or not listed:
        raise ArenaError(data.at("graphs"), "'graphs' must be a non-empty list of graph files")
    graphs, locs, seen = [], [], {}
    for i, item in enumerate(listed):
        loc = listed.at(i)
        if not isinstance(item, str) or not item:
            raise ArenaError(loc, f"item {i + 1} of 'graphs' must be the path of a graph file, not {item!r}")
        file = (path.parent / item).resolve()
        if file.suffix not in GRAPH_SUFFIXES:
            raise ArenaError(loc, f"'{item}' is not a graph file", "graph files end in .yaml, .yml or .onnx")
        if not file.is_file():
            raise ArenaError(loc, f"graph file '{item}' does not exist", f"paths are relative to {path.parent}")
        if file in seen:
            raise ArenaError(loc, f"'{item}' is listed twice", f"first at {seen[file]}")
        seen[file] = loc
        graphs.append(file)
        locs.append(loc)
    return ArenaSpec(name, tuple(graphs), path.resolve(), tuple(locs), data.at("arena"))


def members_from_reports(reports: Sequence[Mapping]) -> list[Member]:
    """Each model's name and workspace, from its report (NAME.plan.json or NAME.json)."""
    members = []
    for report in reports:
        try:
            name, size, target = report["graph"], report["ram"]["workspace_bytes"], report.get("target")
        except (KeyError, TypeError):
            raise ArenaError(None, "a model report without 'graph' and 'ram.workspace_bytes'",
                             "give the NAME.plan.json or NAME.json the generator wrote") from None
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ArenaError(None, f"the report of '{name}' has a bad workspace size {size!r}")
        members.append(Member(name, size, target))
    return members


def arena_target(members: Sequence[Member], chosen: str | None) -> str | None:
    """The target the arena is planned for: `chosen` (--target), else the one the reports name.
    Workspaces planned for different cores differ, so an arena mixing them, or a report made for
    another core than `chosen`, is an error naming the models."""
    named = {m.target for m in members if m.target}
    if chosen is not None:
        other = [m for m in members if m.target and m.target != chosen]
        if other:
            raise ArenaError(None, f"the report of '{other[0].name}' was made for target '{other[0].target}', "
                             f"the arena is for '{chosen}'",
                             f"give the reports of models built for {chosen}, or pass --target {other[0].target}")
        return chosen
    if len(named) > 1:
        listing = ", ".join(f"{m.name} for {m.target}" for m in members if m.target)
        raise ArenaError(None, f"the models' reports were made for different targets ({listing})",
                         "build every model of an arena for the core that runs them")
    return next(iter(named), None)


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def check_members(name: str, members: Sequence[Member], locs: Sequence[SourceLoc | None] = ()) -> None:
    """The names an arena header spells must be identifiers that do not clash: each model's
    namespace and macros, the arena's namespace, its C type and header."""
    check_name(name, None)
    seen: dict[str, str] = {}
    locs = list(locs) + [None] * (len(members) - len(locs))
    for member, loc in zip(members, locs):
        check_name(member.name, loc, "graph")
        # Case-insensitive: NAME_WORKSPACE_BYTES spells names in upper case, and on macOS
        # and Windows NAME.h and name.h are one file.
        key = member.name.lower()
        if key in seen:
            raise ArenaError(loc, f"two models of arena '{name}' are named '{seen[key]}' and '{member.name}'",
                             "models in one arena need different graph names (their headers and "
                             "namespaces would clash)")
        seen[key] = member.name
        if key in (name.lower(), f"{name}_arena".lower()) or member.name in ("Arena", "kArenaBytes"):
            raise ArenaError(loc, f"arena '{name}' has a model named '{member.name}', which is a name the "
                             "arena header declares itself", "rename the arena")
    if not members:
        raise ArenaError(None, f"arena '{name}' has no models")


def arena_report(name: str, members: Sequence[Member], source: str | None = None,
                 target: str | None = None) -> dict:
    """The arena's JSON report: each model's workspace, the shared buffer and the saving."""
    arena_bytes = _round_up(max(max(m.workspace_bytes for m in members), 1), ALIGNMENT)
    separate = sum(m.workspace_bytes for m in members)
    return {
        "arena": name,
        "source": source,
        "target": target,
        "models": [{"graph": m.name, "workspace_bytes": m.workspace_bytes} for m in members],
        "arena_bytes": arena_bytes,
        "alignment": ALIGNMENT,
        "separate_workspace_bytes": separate,
        "saved_bytes": separate - arena_bytes,
    }


def arena_summary(report: Mapping, target: str | None = None) -> str:
    """One line: `kws_and_ad [host]: arena 64,000 B for kws_dscnn 64,000 B, ad 1,024 B;
    saves 1,024 B`."""
    where = f" [{target}]" if target else ""
    models = ", ".join(f"{m['graph']} {m['workspace_bytes']:,} B" for m in report["models"])
    return (f"{report['arena']}{where}: arena {report['arena_bytes']:,} B shared by {models}; "
            f"saves {report['saved_bytes']:,} B of {report['separate_workspace_bytes']:,} B")


def write_arena(sources: Sequence[str | Path], out_dir: str | Path, name: str | None = None,
                target: str | None = None) -> dict:
    """Write NAME.h and NAME.arena.json into `out_dir` from one arena file (its graphs planned for
    `target`, host-dispatch by default as for the command line), or from the models' reports (NAME.plan.json or NAME.json) and
    `name`; returns the report."""
    import json

    from tinsmith.files import write_if_changed
    sources = [Path(s) for s in sources]
    if len(sources) == 1 and is_arena_file(sources[0]):
        spec = load_arena_file(sources[0])
        if name is not None and name != spec.name:
            raise ArenaError(spec.name_loc, f"the arena file names arena '{spec.name}', the command line '{name}'")
        members, locs, source = members_from_graphs(spec, target or "host-dispatch"), spec.locs, str(sources[0])
        target = members[0].target
        name = spec.name
    else:
        if name is None:
            raise ArenaError(None, "an arena made from model reports needs a name",
                             "pass --name NAME, or give one arena file that names it")
        reports = []
        for path in sources:
            if is_arena_file(path):
                raise ArenaError(None, f"{path} is an arena file: give it alone")
            try:
                reports.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError) as e:
                raise ArenaError(None, f"cannot read the model report {path}: {e}",
                                 "give the NAME.plan.json or NAME.json the generator wrote") from None
        members, locs, source = members_from_reports(reports), (), ", ".join(p.name for p in sources)
        target = arena_target(members, _target_name(target) if target else None)
    files = arena_files(name, members, source, locs, target)
    for file, text in sorted(files.items()):
        write_if_changed(Path(out_dir) / file, text.encode("utf-8"))
    return json.loads(files[f"{name}.arena.json"])


def arena_files(name: str, members: Sequence[Member], source: str | None = None,
                locs: Sequence[SourceLoc | None] = (), target: str | None = None) -> dict[str, str]:
    """The arena's files, by name: NAME.h and NAME.arena.json (deterministic bytes)."""
    check_members(name, members, locs)
    report = arena_report(name, members, source, target)
    header = templates().get_template("arena.h.j2").render(
        name=name, NAME=name.upper(), source=source or "the models' reports", target=target,
        arena_bytes=report["arena_bytes"], alignment=ALIGNMENT,
        models=[{"name": m.name, "NAME": m.name.upper(), "workspace_bytes": m.workspace_bytes}
                for m in members])
    return {f"{name}.h": header, f"{name}.arena.json": json_text(report)}


def _target_name(target: str) -> str:
    """A target's name (as reports spell it) from a built-in name or a target file."""
    from tinsmith.targets import load_target
    return load_target(target).name


def members_from_graphs(spec: ArenaSpec, target: str) -> list[Member]:
    """Plan each graph the arena file lists for `target` (nothing is written) and read its
    workspace: the kernels a target's backend picks decide the plan, so it must be the target
    the models are built for."""
    from tinsmith.pipeline import compile_graph
    label = _target_name(target)
    members = []
    for graph in spec.graphs:
        compiled = compile_graph(graph, target=target)
        members.append(Member(compiled.graph.name, compiled.workspace_bytes, label))  # (a dispatching target's: its largest level's)
    return members
