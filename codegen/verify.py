"""Verify generated headers with libclang before anything is compiled against them.

A header that parses but declares the wrong API (arguments swapped, a float buffer
where the graph has int64, a workspace smaller than planned) compiles and links fine
and corrupts memory at run time. So the build checks each header against the report
the generator wrote next to it, using the sizes and types the compiler itself computes.
"""

from __future__ import annotations

import ctypes
import functools
import json
import math
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from clang import cindex
from clang.cindex import CursorKind, Diagnostic, ExceptionSpecificationKind, TypeKind

from tinsmith.escape import one_line
from tinsmith.ir.element_types import NARROW_DTYPES
from tinsmith.paths import RUNTIME_INCLUDE


_CXX = ("-x", "c++", "-std=c++17", "-Wall", "-Wextra")
_C = ("-x", "c", "-std=c11", "-Wall", "-Wextra")

# Integers are matched by signedness and width, not by spelling, because std::int64_t
# is `long` on LP64 hosts and `long long` elsewhere.
_SIGNED = frozenset({TypeKind.SCHAR, TypeKind.SHORT, TypeKind.INT, TypeKind.LONG,
                     TypeKind.LONGLONG})
_UNSIGNED = frozenset({TypeKind.UCHAR, TypeKind.USHORT, TypeKind.UINT, TypeKind.ULONG,
                       TypeKind.ULONGLONG})
# dtype -> (acceptable canonical kinds, size in bytes, C spelling)
_DTYPES = {
    "float32": (frozenset({TypeKind.FLOAT}), 4, "float"),
    "float64": (frozenset({TypeKind.DOUBLE}), 8, "double"),
    "bool": (frozenset({TypeKind.BOOL}), 1, "bool"),
    **{f"int{8 * n}": (_SIGNED, n, f"int{8 * n}_t") for n in (1, 2, 4, 8)},
    **{f"uint{8 * n}": (_UNSIGNED, n, f"uint{8 * n}_t") for n in (1, 2, 4, 8)},
    # storage types: their bits, in unsigned integers (codegen/generate/storage_types.py)
    **{t: (_UNSIGNED, 2, "uint16_t") for t in ("float16", "bfloat16")},
    **{t: (_UNSIGNED, 1, "uint8_t") for t in NARROW_DTYPES},
}


class VerifyError(Exception):
    """Generated headers are malformed or disagree with their report; one problem a line."""


@dataclass(frozen=True)
class _Param:
    """A parameter the report says `call` takes, in order."""

    name: str
    dtype: str | None  # None for the workspace
    const: bool
    nbytes: int
    count: int  # what the C header's macro states: elements, or the workspace's bytes


class _Problems(list):
    """Messages for one header, each `path:line:col: error: message`."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = path

    def add(self, node, message: str) -> None:
        """Record message at node's location (a cursor or diagnostic), else at the file."""
        loc = node.location if node is not None else None
        where = f"{loc.file.name}:{loc.line}:{loc.column}" if loc and loc.file else self.path
        self.append(f"{one_line(str(where))}: error: {one_line(message)}")


def _buffer_bytes(value: dict) -> int:
    """sizeof the tinsmith::Buffer of a report's input or output: its bytes, or for an empty
    tensor the one element it keeps (C++ has no zero-length arrays)."""
    if value["bytes"] or not value["shape"]:
        return value["bytes"]
    return _DTYPES[value["dtype"]][1]


def verify_outputs(report_path: Path, include_dirs: Sequence[Path]) -> None:
    """Check NAME.hpp and NAME.h next to the report NAME.json; raise VerifyError if wrong."""
    report_path = Path(report_path)
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
        graph = report["graph"]
        params = [_Param(v["name"], v["dtype"], is_input, _buffer_bytes(v), math.prod(v["shape"]))
                  for key, is_input in (("inputs", True), ("outputs", False))
                  for v in report[key]]
        ws_bytes = report["ram"]["workspace_bytes"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        problem = f"malformed report ({type(exc).__name__}: {exc})"
        raise VerifyError(f"{one_line(str(report_path))}: error: {one_line(problem)}") from None
    # sizeof(Workspace<N>) rounds up to its 16-byte alignment, and is 16 even for N == 0.
    params.append(_Param("ws", None, False, -(-max(ws_bytes, 1) // 16) * 16, ws_bytes))
    includes = [f"-I{d}" for d in (RUNTIME_INCLUDE, *include_dirs)] + list(builtin_include_args())
    problems = _check_cpp_header(report_path.with_name(f"{graph}.hpp"), graph, params, includes)
    problems += _check_c_header(report_path.with_name(f"{graph}.h"), graph, params, includes)
    if problems:
        raise VerifyError("\n".join(problems))


def _check_cpp_header(hpp: Path, graph: str, params: list[_Param], includes: list) -> _Problems:
    """Problems with the C++ API: diagnostics, then call, init_ws and kWorkspaceBytes."""
    args = [*_CXX, *includes]
    tu, problems = _parse(hpp, args)
    if tu is None:
        return problems
    # libclang cannot size a class template specialization that nothing has instantiated,
    # and a header naming Buffer<...> only through references never instantiates one;
    # so parse again with a sizeof forcing each referenced type.
    types = sorted({a.type.get_pointee().get_canonical().spelling
                    for f in _namespace_members(tu, graph) if f.kind == CursorKind.FUNCTION_DECL
                    for a in f.get_arguments() if a.type.kind == TypeKind.LVALUEREFERENCE})
    tu, problems = _parse(hpp, args, "".join(f"static_assert(sizeof({t}) > 0, \"\");\n"
                                             for t in types))
    if tu is None:
        return problems
    members = _namespace_members(tu, graph)
    if not members:
        problems.add(None, f"no namespace '{graph}'")
        return problems
    ws_type = None
    for param, want in _matched(_function(members, "call", problems), params, problems):
        if not _is_ref(param, want.const, problems):
            continue
        record = param.type.get_pointee().get_canonical()
        if record.get_size() != want.nbytes:
            problems.add(param, f"'{want.name}' has type '{record.spelling}' of "
                                f"{record.get_size()} bytes, the report says {want.nbytes}")
        if want.dtype is None:
            ws_type = record
            continue
        data = next((f for f in record.get_fields() if f.spelling == "data"), None)
        if data is None or data.type.kind != TypeKind.CONSTANTARRAY:
            problems.add(param, f"'{record.spelling}' has no array member 'data'")
        else:
            _check_dtype(data.type.element_type, want, param, problems)
    for param, _ in _matched(_function(members, "init_ws", problems), params[-1:], problems):
        if _is_ref(param, False, problems) and ws_type is not None \
                and param.type.get_pointee().get_canonical() != ws_type:
            problems.add(param, f"init_ws takes '{param.type.spelling}', "
                                f"call takes '{ws_type.spelling} &'")
    k = [m for m in members if m.kind == CursorKind.VAR_DECL and m.spelling == "kWorkspaceBytes"]
    if not k:
        problems.add(None, f"no constant '{graph}::kWorkspaceBytes'")
    elif _evaluate_int(k[0]) != params[-1].count:
        problems.add(k[0], f"kWorkspaceBytes is {_evaluate_int(k[0])}, "
                           f"the report says {params[-1].count}")
    return problems


def _check_c_header(h: Path, graph: str, params: list[_Param], includes: list) -> _Problems:
    """Problems with the C API: diagnostics as C and as C++, entry points, size macros."""
    tu, problems = _parse(h, [*_C, *includes], suffix=" (parsed as C)",
                          options=cindex.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD)
    if tu is not None:
        top = list(tu.cursor.get_children())
        for name, wanted in ((f"{graph}_call", params), (f"{graph}_init_ws", params[-1:])):
            func = _function(top, name, problems, noexcept=False)
            for param, want in _matched(func, wanted, problems):
                pointee = param.type.get_pointee()
                is_void = pointee.kind == TypeKind.VOID
                if (param.type.kind != TypeKind.POINTER or (want.dtype is None) != is_void
                        or pointee.is_const_qualified() != want.const):
                    c_type = _DTYPES[want.dtype][2] if want.dtype in _DTYPES else want.dtype
                    problems.add(param, f"'{want.name}' must be '{'const ' * want.const}"
                                        f"{c_type or 'void'}*', is '{param.type.spelling}'")
                elif want.dtype is not None:
                    _check_dtype(pointee, want, param, problems)
        # C callers size their buffers from these macros, so a wrong one corrupts memory.
        macros = {c.spelling: c for c in top if c.kind == CursorKind.MACRO_DEFINITION}
        for want in params:
            suffix = "WORKSPACE_BYTES" if want.dtype is None else f"SIZE_{want.name}"
            name = f"{graph.upper()}_{suffix}"
            if name not in macros:
                problems.add(None, f"no macro {name}")
                continue
            value = [t.spelling for t in macros[name].get_tokens()][1:]  # after the name
            if len(value) != 1 or _int_literal(value[0]) != want.count:
                problems.add(macros[name], f"{name} is '{' '.join(value)}', "
                                           f"the report says {want.count}")
    elif not h.is_file():
        return problems
    tu, cxx_problems = _parse(h, [*_CXX, *includes], suffix=" (parsed as C++)")
    problems += cxx_problems
    for func in tu.cursor.walk_preorder() if tu is not None else ():
        # Without extern "C", C++ callers look for mangled names and fail to link.
        if func.kind == CursorKind.FUNCTION_DECL and func.spelling.startswith(f"{graph}_") \
                and func.semantic_parent.kind != CursorKind.LINKAGE_SPEC:
            problems.add(func, f"'{func.spelling}' is not extern \"C\" when parsed as C++")
    return problems


def _parse(header: Path, args: list, extra: str = "", suffix: str = "", options: int = 0):
    """Parse a virtual file next to header that includes it; return (tu, problems).

    tu is None when the header is missing or has errors: what follows would only
    repeat them in other words.
    """
    problems = _Problems(header)
    if not header.is_file():
        problems.add(None, "generated header not found")
        return None, problems
    # Parsing the header as the main file would warn "#pragma once in main file".
    probe = str(header.with_name(f".tinsmith-verify-{header.name}"))
    source = f'#include "{header.name}"\n{extra}'
    try:
        tu = cindex.Index.create().parse(probe, args=args, unsaved_files=[(probe, source)],
                                         options=options)
    except cindex.TranslationUnitLoadError as exc:
        problems.add(None, f"libclang could not parse it: {exc}")
        return None, problems
    for d in tu.diagnostics:
        if d.severity >= Diagnostic.Warning:
            option = f" [{d.option}]" if d.option else ""  # says a warning stopped the build
            problems.add(d, f"{d.spelling}{option}{suffix}")
    return (None if _has_errors(tu) else tu), problems


def _has_errors(tu: cindex.TranslationUnit) -> bool:
    return any(d.severity >= Diagnostic.Error for d in tu.diagnostics)


def _namespace_members(tu: cindex.TranslationUnit, name: str) -> list:
    return [m for ns in tu.cursor.get_children()
            if ns.kind == CursorKind.NAMESPACE and ns.spelling == name for m in ns.get_children()]


def _function(cursors: list, name: str, problems: _Problems, noexcept: bool = True):
    """The one declaration of function name among cursors, or None (recorded as a problem)."""
    found = [c for c in cursors if c.kind == CursorKind.FUNCTION_DECL and c.spelling == name]
    if len(found) != 1:
        problems.add(None, f"expected one declaration of '{name}', found {len(found)}")
        return None
    if found[0].result_type.kind != TypeKind.VOID:
        problems.add(found[0], f"'{name}' must return void")
    # The generated code never throws; saying so spares exception-enabled callers the
    # unwinding paths around each call.
    spec = found[0].exception_specification_kind
    if noexcept and spec != ExceptionSpecificationKind.BASIC_NOEXCEPT:
        problems.add(found[0], f"'{name}' must be noexcept")
    return found[0]


def _matched(func, wanted: list[_Param], problems: _Problems) -> list:
    """(parameter, expectation) pairs whose names agree; the rest are recorded as problems."""
    if func is None:
        return []
    got = list(func.get_arguments())
    if len(got) != len(wanted):
        problems.add(func, f"'{func.spelling}' takes {len(got)} parameters, expected "
                           f"{len(wanted)} ({', '.join(w.name for w in wanted)})")
    pairs = []
    for i, (param, want) in enumerate(zip(got, wanted), start=1):
        if param.spelling == want.name:
            pairs.append((param, want))
        else:  # usually a wrong order, where checking types against another value is noise
            problems.add(param, f"parameter {i} is '{param.spelling}', expected '{want.name}'")
    return pairs


def _is_ref(param: cindex.Cursor, const: bool, problems: _Problems) -> bool:
    """Whether param is `T&` (`const T&` if const); records a problem if not."""
    pointee = param.type.get_pointee()
    if param.type.kind == TypeKind.LVALUEREFERENCE and pointee.is_const_qualified() == const:
        return True
    problems.add(param, f"'{param.spelling}' must be a {'const' if const else 'non-const'} "
                        f"reference, is '{param.type.spelling}'")
    return False


def _check_dtype(element: cindex.Type, want: _Param, param, problems: _Problems) -> None:
    """Record a problem unless element is the C/C++ type of want.dtype."""
    if want.dtype not in _DTYPES:
        problems.add(param, f"'{want.name}' has dtype '{want.dtype}', which verify does not know")
        return
    kinds, size, _ = _DTYPES[want.dtype]
    canonical = element.get_canonical()
    if canonical.kind not in kinds or canonical.get_size() != size:
        spelling = canonical.spelling.removeprefix("const ")
        problems.add(param, f"'{want.name}' has element type '{spelling}', "
                            f"the report says {want.dtype}")


def _int_literal(text: str) -> int | None:
    try:
        return int(text.rstrip("uUlL"), 0)
    except ValueError:
        return None


def _evaluate_int(cursor: cindex.Cursor) -> int | None:
    """The integer a constant's initializer evaluates to, or None if it is not one."""
    # cindex does not wrap clang_Cursor_Evaluate, so call it through ctypes.
    lib = cindex.conf.lib
    lib.clang_Cursor_Evaluate.argtypes = [cindex.Cursor]
    lib.clang_Cursor_Evaluate.restype = ctypes.c_void_p
    for name, restype in (("clang_EvalResult_getKind", ctypes.c_int),
                          ("clang_EvalResult_getAsLongLong", ctypes.c_longlong),
                          ("clang_EvalResult_dispose", None)):
        getattr(lib, name).argtypes, getattr(lib, name).restype = [ctypes.c_void_p], restype
    result = lib.clang_Cursor_Evaluate(cursor)
    if not result:
        return None
    try:
        is_int = lib.clang_EvalResult_getKind(result) == 1  # CXEval_Int
        return lib.clang_EvalResult_getAsLongLong(result) if is_int else None
    finally:
        lib.clang_EvalResult_dispose(result)


@functools.lru_cache(maxsize=None)
def builtin_include_args() -> tuple[str, ...]:
    """Arguments that let libclang find stddef.h and the like, if it cannot on its own."""
    # The libclang wheel on PyPI ships without clang's builtin headers. Borrow the host
    # compiler's, searched after the system headers so that they only fill that gap.
    probe = "tinsmith-probe.c"
    tu = cindex.Index.create().parse(probe, args=["-x", "c"],
                                     unsaved_files=[(probe, "#include <stddef.h>\n")])
    if not _has_errors(tu):
        return ()
    for compiler in filter(None, map(shutil.which, ("clang", "gcc", "cc"))):
        out = subprocess.run([compiler, "-print-file-name=include"], capture_output=True,
                             text=True, check=False).stdout.strip()
        if out and (Path(out) / "stddef.h").is_file():
            return ("-idirafter", out)
    return ()
