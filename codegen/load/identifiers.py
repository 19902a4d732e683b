"""Which names from a model file may reach generated C and C++ code.

A name is checked for what it becomes (see docs/SECURITY.md):

| kind  | becomes                                          | may not be                              |
|-------|--------------------------------------------------|-----------------------------------------|
| all   | an identifier in code that includes the standard | a keyword, a macro of the compiler or   |
|       | headers (system_names.txt) and the runtime's     | those headers, a name the generated API |
|       |                                                  | uses, Input_/Output_/tinsmith_ prefixes |
| value | a parameter of NAME_call() in C, next to types   | also a type of those headers (int64_t)  |
|       | spelt unqualified                                |                                         |
| graph | a namespace and C functions at global scope, and | also any global name of those headers   |
|       | the file stem of NAME.h on an include path       | (fabsf, exit), or a header's name       |

Node names become kernel functions inside the model's own namespace, where library functions
and types are only ever spelt qualified (std::int64_t, tinsmith::math::exp), so they need only the first row.
Names that builders and expansion make up from checked ones ("derived": `relu_y`, `ln_mean`)
are checked again before assembly for what breaks anywhere: syntax, keywords and macros.
"""
from __future__ import annotations

import functools
import re
import reprlib
from pathlib import Path

_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")

# C11 and C++17 keywords and alternative tokens: none may name a graph, value or node.
KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
char32_t class compl concept const const_cast consteval constexpr constinit continue co_await
co_return co_yield decltype default delete do double dynamic_cast else enum explicit export
extern false float for friend goto if inline int long mutable namespace new noexcept not not_eq
nullptr operator or or_eq private protected public register reinterpret_cast requires restrict
return short signed sizeof static static_assert static_cast struct switch template this
thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
wchar_t while xor xor_eq _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn
_Static_assert _Thread_local main std
""".split())

# Names the generated API itself declares next to user names (see codegen/assemble/templates):
# a value named `run` would hide run() inside call(), one named `ws` the workspace parameter.
GENERATED_API_NAMES = frozenset({"ws", "call", "init_ws", "run", "Workspace", "kWorkspaceBytes",
                                 "kernels", "constants", "tinsmith"})

# Prefixes of names the generated code and runtime make up: Input_x and Output_y are the
# buffer types of values x and y; tinsmith_ starts the runtime's and the runner's own names.
RESERVED_PREFIXES = ("Input_", "Output_")
RESERVED_PREFIX_ANY_CASE = "tinsmith_"

KINDS = ("graph", "value", "node", "derived")
SYSTEM_NAMES = Path(__file__).with_name("system_names.txt")


@functools.lru_cache(maxsize=None)
def system_names() -> dict[str, frozenset[str]]:
    """Names the standard and runtime headers make visible, by kind (macro, type, global,
    header), from system_names.txt (written by codegen/load/system_names.py)."""
    kinds: dict[str, set[str]] = {}
    current = None
    for line in SYSTEM_NAMES.read_text(encoding="ascii").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = kinds.setdefault(line.strip("[]"), set())
        else:
            current.add(line)
    return {kind: frozenset(names) for kind, names in kinds.items()}


def identifier_problem(name: object, kind: str = "value") -> str | None:
    """Why `name` cannot name a `kind` ("graph", "value", "node" or "derived") in generated code,
    or None if it can."""
    if not isinstance(name, str):
        shown = ("a mapping" if isinstance(name, dict) else "a list" if isinstance(name, list)
                 else "empty" if name is None else reprlib.repr(name))
        return f"a name must be a string, not {shown}"
    if not name:
        return "a name cannot be empty"
    if not _IDENTIFIER.match(name):
        return (f"'{name}' is not a valid identifier (use letters, digits and '_', "
                f"starting with a letter)")
    if "__" in name:
        return f"'{name}' contains '__', which C and C++ reserve"
    if name in KEYWORDS:
        return f"'{name}' is a C or C++ keyword"
    if kind == "derived":
        return (f"'{name}' is a macro of the compiler or of the headers the generated code includes"
                if name in system_names()["macro"] else None)
    if name in GENERATED_API_NAMES:
        return f"'{name}' is a name the generated API uses itself"
    if name.startswith(RESERVED_PREFIXES) or name.lower().startswith(RESERVED_PREFIX_ANY_CASE):
        return f"'{name}' starts like the names the generated code makes up ({name.split('_')[0]}_...)"
    system = system_names()
    if name in system["macro"]:
        return f"'{name}' is a macro of the compiler or of the headers the generated code includes"
    if kind in ("value", "graph") and name in system["type"]:
        return f"'{name}' is a type the headers the generated code includes declare"
    if kind == "graph" and name in system["global"]:
        return (f"'{name}' is declared by the headers the generated code includes, and a graph "
                f"name is a global name")
    # Case-insensitive: on macOS and Windows, STDIO.h is stdio.h.
    if kind == "graph" and name.lower() in system["header"]:
        return (f"graph '{name}' would write {name}.h, which would stand in for the header "
                f"<{name.lower()}.h>")
    return None


def identifier_hint(name: object, kind: str = "value") -> str:
    """What to do about a name identifier_problem rejects."""
    hint = "names become C and C++ identifiers in the generated code"
    # Names that look fine but clash with what the headers declare are the surprising ones.
    if isinstance(name, str) and _IDENTIFIER.match(name) and "__" not in name \
            and name not in KEYWORDS and name not in GENERATED_API_NAMES:
        hint += f"; rename it, e.g. to '{valid_identifier(name, kind[0], kind)}'"
    return hint


def valid_identifier(name: str, prefix: str, kind: str = "value") -> str:
    """`name` made a valid `kind` identifier: other characters become '_', `prefix` goes before a
    leading digit, and a name that is still refused gets a trailing '_' (`float_`, `EOF_`) or,
    if that is not enough, `prefix` in front (`v_tinsmith_x`)."""
    s = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", name)).strip("_")
    if not s or not s[0].isalpha():
        s = f"{prefix}{s}" if s[:1].isdigit() or not s else f"{prefix}_{s}"
    candidates = [s, f"{s}_", f"{prefix}_{s}"] + [f"{prefix}_{s}_{k}" for k in range(2, 100)]
    return next(c for c in candidates if identifier_problem(c, kind) is None)
