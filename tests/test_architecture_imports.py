"""The pipeline flows one way: no module of codegen imports, directly or through others, a module
that imports it back. Every import counts, module-level or inside a function (an import moved into
a function to dodge a cycle is still a cycle) or under `if TYPE_CHECKING:`.

An edge goes from the importing module to the module named: `from a.b import c` names `a.b.c` when
that is a module of codegen, else `a.b`. Importing a submodule also runs its package's `__init__`;
that implicit edge is left out, as import linters (grimp) do: every package whose `__init__`
imports submodules that import their siblings would otherwise be a cycle. `from a import name`
where `name` is not a module names `a`, the package's `__init__`, even when `__init__` took `name`
from a submodule: importing it runs that `__init__`, whose own imports are edges too.

Modules are named as the code imports them: `tinsmith.` + their path under codegen/ (the folder's
name is not the package's). The cycles not yet broken are listed in tests/data/import_cycles.txt,
each with what ties it together; the list may only shrink (as tests/sweep/findings.txt does).
"""
from __future__ import annotations

import ast
from pathlib import Path

CODEGEN = Path(__file__).resolve().parent.parent / "codegen"
KNOWN_CYCLES = Path(__file__).resolve().parent / "data" / "import_cycles.txt"
PACKAGE = "tinsmith"  # the import name of codegen/ (pyproject.toml maps the folder to it)


def module_names(root: Path = CODEGEN, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of the package whose folder is `root`, by the dotted name the code imports it
    as: `package` (not the folder's name: codegen/ is installed as `tinsmith`) + the path parts."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = (package, *path.relative_to(root).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _resolve(name: str, level: int, importer: str, is_package: bool) -> str:
    """The absolute name of a relative import (`from .x import y`) in module `importer`."""
    if level == 0:
        return name
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of `modules` that `module` imports anywhere in its source."""
    return {m for m in imported_names(module, path, modules) if m in modules and m != module}


def imported_names(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module name `module` imports anywhere in its source, of the package or not."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module or "", node.level, module, is_package)
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
    return found


def import_graph(root: Path = CODEGEN, package: str = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules it imports, over every module of the package at `root`."""
    modules = module_names(root, package)
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done (no cycle through it)
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of `graph` that hold a cycle (Tarjan's, without
    recursion: the graph has ~200 modules), sorted by their first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            nxt = next(successors, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while not component or member != node:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                if len(component) > 1 or node in graph[node]:
                    found.append(frozenset(component))
    return sorted(found, key=min)


def shortest_cycle(graph: dict[str, set[str]], start: str) -> list[str]:
    """The shortest cycle of `graph` through `start`, as [start, ..., start] (breadth first)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node]):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return path[::-1] + [start]
                if nxt not in came_from:
                    came_from[nxt] = node
                    following.append(nxt)
        frontier = following
    raise ValueError(f"{start} is in no cycle")


def known_cycles(path: Path = KNOWN_CYCLES) -> list[frozenset[str]]:
    """The cycles written down in `path`: one a line, its modules then `# what ties it together`."""
    listed = []
    for line in path.read_text(encoding="utf-8").splitlines():
        modules = line.split("#", 1)[0].split()
        if modules:
            listed.append(frozenset(modules))
    return listed


def cycle_problems(graph: dict[str, set[str]], listed: list[frozenset[str]]) -> list[str]:
    """What differs between the cycles of `graph` and those `listed`, each with what to do."""
    problems = []
    known = set().union(*listed)
    for component in cycles(graph):
        if component in listed:
            continue
        new = sorted(component - known)
        path = " -> ".join(shortest_cycle(graph, new[0] if new else min(component)))
        if new:
            problems.append(f"{', '.join(new)} joined an import cycle ({path}): break it (move the "
                            f"shared code down, or pass the function in), do not list it")
        else:
            problems.append(f"the listed cycles of {', '.join(sorted(component))} changed or merged "
                            f"({path}): break the new tie, or, if a listed cycle only shrank, write "
                            f"its modules as they are now in {KNOWN_CYCLES.name}")
    left = known - set().union(*cycles(graph))
    if left:
        problems.append(f"{', '.join(sorted(left))} no longer in an import cycle: remove them from "
                        f"tests/data/{KNOWN_CYCLES.name} (and a line left with one module or none)")
    return problems


def test_codegen_has_no_import_cycle_but_those_listed():
    problems = cycle_problems(import_graph(), known_cycles())
    assert not problems, "\n".join(problems)


def test_a_new_cycle_a_joining_module_and_a_broken_cycle_all_fail():
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": set(), "e": set()}
    assert cycle_problems(graph, [frozenset("ab")]) == []
    graph["d"].add("c")
    assert "c, d joined an import cycle" in cycle_problems(graph, [frozenset("ab")])[0]
    graph["b"].add("e")
    graph["e"].add("a")
    assert "e joined an import cycle (e -> a -> b -> e)" in cycle_problems(graph, [frozenset("ab"), frozenset("cd")])[0]
    graph["a"].clear()  # a -> b was the listed cycle's tie
    assert cycle_problems(graph, [frozenset("ab"), frozenset("cd")]) == [
        "a, b no longer in an import cycle: remove them from tests/data/import_cycles.txt (and a line "
        "left with one module or none)"]


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    # The folder is not named as the package, as codegen/ is not: the modules are still named
    # as the code imports them (naming them by folder once made every edge vanish).
    package = tmp_path / "folder"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("def f():\n    from ..c import thing\n    return thing\n")
    (package / "c.py").write_text("import pkg.a\nthing = 1\n")
    graph = import_graph(package, "pkg")
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.c"}
    assert find_cycle(graph) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]
    assert cycles(graph) == [{"pkg.a", "pkg.sub.b", "pkg.c"}]
    (package / "c.py").write_text("thing = 1\n")
    assert find_cycle(import_graph(package, "pkg")) is None
    assert cycles(import_graph(package, "pkg")) == []


def test_every_import_of_the_package_names_one_of_its_modules():
    """An import of `tinsmith...` that names no module the checker knows would be an edge it
    drops: a wrong module naming, or a module outside codegen/, would hide the graph."""
    modules = module_names()
    unknown = sorted(f"{module}: {name}" for module, path in modules.items()
                     for name in imported_names(module, path, modules)
                     if (name == PACKAGE or name.startswith(PACKAGE + ".")) and name not in modules)
    assert not unknown, "imports the import-cycle check cannot place:\n" + "\n".join(unknown)
    assert sum(map(len, import_graph().values())) > len(modules)  # one edge a module at least
