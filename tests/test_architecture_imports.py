"""The pipeline flows one way: no module of codegen imports, directly or through others, a module
that imports it back. Every import counts, module-level or inside a function (an import moved into
a function to dodge a cycle is still a cycle) or under `if TYPE_CHECKING:`.

An edge goes from the importing module to the module named: `from a.b import c` names `a.b.c` when
that is a module of codegen, else `a.b`. Importing a submodule also runs its package's `__init__`;
that implicit edge is left out, as import linters (grimp) do: every package whose `__init__`
imports submodules that import their siblings would otherwise be a cycle.
"""
from __future__ import annotations

import ast
from pathlib import Path

CODEGEN = Path(__file__).resolve().parent.parent / "codegen"

def module_names(root: Path = CODEGEN) -> dict[str, Path]:
    """Every module of the package at `root`, by dotted name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
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
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module or "", node.level, module, is_package)
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
    return {m for m in found if m in modules and m != module}


def import_graph(root: Path = CODEGEN) -> dict[str, set[str]]:
    """Module -> the modules it imports, over every module of the package at `root`."""
    modules = module_names(root)
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


def test_codegen_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "codegen has an import cycle: " + " -> ".join(cycle)


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("def f():\n    from ..c import thing\n    return thing\n")
    (package / "c.py").write_text("import pkg.a\nthing = 1\n")
    graph = import_graph(package)
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.c"}
    assert find_cycle(graph) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]
    (package / "c.py").write_text("thing = 1\n")
    assert find_cycle(import_graph(package)) is None
