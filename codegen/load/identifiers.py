"""Which names from a model file may reach generated C and C++ code."""
from __future__ import annotations

import re
import reprlib

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

# Names the generated API itself declares next to user names (see codegen/assemble/templates).
GENERATED_API_NAMES = frozenset({"ws", "call", "init_ws", "Workspace", "kWorkspaceBytes",
                                 "kernels", "constants", "tinsmith"})


def identifier_problem(name: object) -> str | None:
    """Why `name` cannot be used as an identifier in generated code, or None if it can."""
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
    if name in GENERATED_API_NAMES:
        return f"'{name}' is a name the generated API uses itself"
    return None
