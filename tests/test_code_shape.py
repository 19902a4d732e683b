"""The code generator stays readable: no function under codegen/generate/ (the kernel families'
functors included) is longer than MAX_LINES: loop nests are built from named steps."""
from __future__ import annotations

import ast
from pathlib import Path

GENERATE = Path(__file__).resolve().parents[1] / "codegen" / "generate"
MAX_LINES = 60

# Functions another change is splitting, each with why it is still long. An entry here is a debt:
# the test below fails once the function is short, so that the entry is removed with the split.
PENDING: dict[str, str] = {}


def long_functions(folder: Path = GENERATE, limit: int = MAX_LINES) -> dict[str, int]:
    """'file.py:qualified.name' -> lines, for every function (nested ones too) longer than `limit`."""
    found: dict[str, int] = {}
    for path in sorted(folder.rglob("*.py")):
        def visit(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                name = prefix
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}{child.name}."
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = child.end_lineno - child.lineno + 1
                    if lines > limit:
                        found[f"{path.relative_to(folder)}:{name[:-1]}"] = lines
                visit(child, name)
        visit(ast.parse(path.read_text(), str(path)), "")
    return found


def test_no_functor_function_is_longer_than_the_limit():
    offenders = {name: lines for name, lines in long_functions().items() if name not in PENDING}
    assert not offenders, f"functions longer than {MAX_LINES} lines (split them into named steps): " + ", ".join(
        f"{name} ({lines})" for name, lines in sorted(offenders.items()))


def test_pending_entries_are_still_long():
    settled = sorted(set(PENDING) - set(long_functions()))
    assert not settled, f"no longer longer than {MAX_LINES} lines, remove from PENDING: {settled}"


def test_the_check_sees_nested_functions(tmp_path):
    """The measure itself: a nested function over the limit is found by its qualified name."""
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "k.py").write_text(f"def outer():\n    def inner():\n{body}\n    return inner\n")
    assert long_functions(tmp_path) == {"k.py:outer": MAX_LINES + 3, "k.py:outer.inner": MAX_LINES + 1}
