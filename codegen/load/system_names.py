"""List the names that the headers of generated code make visible, for identifiers.py.

A graph, value or node name becomes a C or C++ identifier next to everything the generated
files include (<cmath>, <cstdint>, <cstring>, <cstdio>, <stddef.h>, ... and Tinsmith's own
runtime headers). A name equal to one of their macros is rewritten by the preprocessor; one
equal to a type hides that type from the code around it; a graph name equal to a global
function clashes with the namespace of the same name. The lists are data, checked into the
repository as system_names.txt, so that checking a name never depends on the machine:

    python -m tinsmith.load.system_names > codegen/load/system_names.txt

regenerates them from the host's g++ (glibc, libstdc++) and, where installed, Debian's
arm-none-eabi-g++ (newlib), with libclang listing declarations and the compiler's own
`-dM -E` listing macros (predefined ones included, in both strict and GNU modes).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_INCLUDE = ROOT / "runtime_cpp" / "include"
BAREMETAL = ROOT / "runtime_cpp" / "baremetal"

# What the generated files include (codegen/assemble/templates, firmware_main.cpp.j2) and
# what Tinsmith's runtime headers they include pull in.
CXX_HEADERS = ("cmath", "cstdint", "cstring", "cstddef", "cstdio", "stddef.h", "stdint.h",
               "atomic", "cstdlib",  # host-dispatch's level choice (codegen/assemble/dispatch.py)
               "tinsmith/buffer.hpp", "tinsmith/host_io.hpp", "measure.h", "semihost.h")
C_HEADERS = ("stddef.h", "stdint.h", "stdbool.h", "measure.h", "semihost.h")

# Standard header names of C17 and C++17: a graph's NAME.h must never stand in for one of
# them when the build folder is on the include path of a user's firmware.
STANDARD_HEADERS = """
assert complex ctype errno fenv float inttypes iso646 limits locale math setjmp signal stdalign
stdarg stdatomic stdbool stddef stdint stdio stdlib stdnoreturn string tgmath threads time uchar
wchar wctype
algorithm any array atomic bitset cassert ccomplex cctype cerrno cfenv cfloat charconv chrono
cinttypes ciso646 climits clocale cmath codecvt complex condition_variable csetjmp csignal
cstdalign cstdarg cstdbool cstddef cstdint cstdio cstdlib cstring ctgmath ctime cuchar cwchar
cwctype deque exception execution filesystem forward_list fstream functional future
initializer_list iomanip ios iosfwd iostream istream iterator limits list locale map memory
memory_resource mutex new numeric optional ostream queue random ratio regex scoped_allocator set
shared_mutex sstream stack stdexcept streambuf string string_view strstream system_error thread
tuple type_traits typeindex typeinfo unordered_map unordered_set utility valarray variant vector
""".split()

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_INCLUDE = re.compile(r'\s*#\s*include(?:_next)?\s*[<"]([^>"]+)[>"]')


def _usable(name: str) -> bool:
    """Names a graph file could spell at all (identifiers.py rejects '_x' and 'a__b' anyway)."""
    return bool(_NAME.match(name)) and "__" not in name


def _search_dirs(compiler: str, language: str) -> list[str]:
    """The compiler's #include <...> search list."""
    out = subprocess.run([compiler, "-x", language, "-E", "-v", "-"], input="", text=True,
                         capture_output=True, check=True).stderr
    dirs, inside = [], False
    for line in out.splitlines():
        if line.startswith("#include <...>"):
            inside = True
        elif line.startswith("End of search list"):
            break
        elif inside:
            dirs.append(line.strip())
    return dirs


def _source(headers: tuple[str, ...]) -> str:
    return "".join(f"#include <{h}>\n" for h in headers)


def _macros(compiler: str, language: str, std: str, headers: tuple[str, ...]) -> set[str]:
    """Every macro defined at the end of a file that includes `headers` (predefined ones too)."""
    out = subprocess.run([compiler, "-x", language, f"-std={std}", "-dM", "-E",
                          f"-I{RUNTIME_INCLUDE}", f"-I{BAREMETAL}", "-"], input=_source(headers),
                         text=True, capture_output=True, check=True).stdout
    return {m.group(1) for m in re.finditer(r"^#define (\w+)", out, re.M)}


def _declarations(compiler: str, language: str, std: str, headers: tuple[str, ...],
                  target: str | None) -> tuple[set[str], set[str], set[str]]:
    """(types, other global names, header stems) that a file including `headers` sees."""
    from clang import cindex
    from clang.cindex import CursorKind

    args = ["-x", language, f"-std={std}", "-nostdinc", "-nostdinc++",
            f"-I{RUNTIME_INCLUDE}", f"-I{BAREMETAL}"]
    args += [f"-isystem{d}" for d in _search_dirs(compiler, language)]
    if target:
        args.append(f"--target={target}")
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / ("probe.cpp" if language == "c++" else "probe.c")
        probe.write_text(_source(headers))
        tu = cindex.Index.create().parse(str(probe), args=args)
        errors = [d.spelling for d in tu.diagnostics if d.severity >= 3]
        if errors:
            raise SystemExit(f"{compiler} headers do not parse with libclang: {errors[:3]}")
        types: set[str] = set()
        others: set[str] = set()
        type_kinds = {CursorKind.TYPEDEF_DECL, CursorKind.STRUCT_DECL, CursorKind.UNION_DECL,
                      CursorKind.ENUM_DECL, CursorKind.CLASS_DECL, CursorKind.TYPE_ALIAS_DECL,
                      CursorKind.CLASS_TEMPLATE, CursorKind.TYPE_ALIAS_TEMPLATE_DECL}

        def visit(cursor) -> None:
            for c in cursor.get_children():
                if c.kind in (CursorKind.LINKAGE_SPEC, CursorKind.UNEXPOSED_DECL):
                    visit(c)  # extern "C" { ... }
                    continue
                if c.kind == CursorKind.ENUM_DECL and not c.is_scoped_enum():
                    others.update(e.spelling for e in c.get_children()
                                  if e.kind == CursorKind.ENUM_CONSTANT_DECL)
                if not c.spelling or not c.location.file:
                    continue
                (types if c.kind in type_kinds else others).add(c.spelling)

        visit(tu.cursor)
        stems = set()
        for inclusion in tu.get_includes():
            line = Path(inclusion.location.file.name).read_text(errors="replace") \
                .splitlines()[inclusion.location.line - 1]
            spelled = _INCLUDE.match(line)
            if spelled and "/" not in spelled.group(1):  # only top-level names can be shadowed
                stems.add(re.sub(r"\.(h|hpp|hh|hxx)\Z", "", spelled.group(1)))
    return types, others, stems


def scan() -> dict[str, set[str]]:
    """Macros, types, other global names and header stems, over every toolchain found."""
    found = {"macro": set(), "type": set(), "global": set(), "header": set(STANDARD_HEADERS)}
    toolchains = [("g++", "gcc", None), ("arm-none-eabi-g++", "arm-none-eabi-gcc", "arm-none-eabi")]
    for cxx, cc, target in toolchains:
        if not shutil.which(cxx):
            print(f"note: {cxx} not found; its headers are not scanned", file=sys.stderr)
            continue
        for compiler, language, stds, headers in ((cxx, "c++", ("c++17", "gnu++17"), CXX_HEADERS),
                                                  (cc, "c", ("c11", "gnu11"), C_HEADERS)):
            for std in stds:
                found["macro"] |= _macros(compiler, language, std, headers)
            types, others, stems = _declarations(compiler, language, stds[0], headers, target)
            found["type"] |= types
            found["global"] |= others
            found["header"] |= stems
    found["global"] -= found["type"]
    return {kind: {n for n in names if _usable(n)} for kind, names in found.items()}


def main() -> None:
    print("# Names visible to generated code, by kind (see codegen/load/system_names.py, which")
    print("# writes this file). macro: any name; type: any name; global: graph names;")
    print("# header: graph names (NAME.h would shadow that header).")
    for kind, names in scan().items():
        print(f"[{kind}]")
        for name in sorted(names):
            print(name)


if __name__ == "__main__":
    main()
