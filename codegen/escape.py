"""The one escaping rule for text that leaves the generator: one function per output language.

Model files, weight files and their paths are untrusted: a graph folder named `a\\nint x;` or an
.npz key holding `*/` must not write code into a user's firmware, keys into a graph file or
lines into a terminal. Every string that reaches a generated file passes through one of these
functions, which either escape it for the place it lands in or reject it:

- C and C++: `c_comment` (inside `//` or `/* */`), `c_string` (inside "..."), `c_identifier`;
- YAML: `yaml_scalar`, `yaml_comment`;
- JSON: `json_text`;
- linker scripts: `ld_comment`, `ld_file_name`, `ld_section_name`;
- Make dependency files: `make_path`;
- messages on a terminal: `one_line`.

Jinja2 templates that write C or C++ get them through `cpp_templates`: every `{{ ... }}` must be
an integer, an identifier, or text a filter has escaped (`comment`, `cstring`) or marked as
generated code (`code`); anything else stops the build with an internal error, so a template
cannot forget to escape.
"""
from __future__ import annotations

import json
import math
import re
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jinja2

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_NUMBER = re.compile(r"-?[0-9]+\Z")
# Characters that end a line, change the text's direction or are no text at all.
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _code_point(c: str) -> str:
    o = ord(c)
    if 0xDC80 <= o <= 0xDCFF:  # a byte of a file name that is not UTF-8 (surrogateescape)
        return f"\\x{o - 0xDC00:02x}"
    if o < 0x100:
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c, f"\\x{o:02x}")
    return f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def one_line(text: str) -> str:
    """`text` for a one-line message: line breaks, control and format characters (bidi
    overrides included) escaped as \\n, \\xNN, \\uNNNN; other characters kept. Idempotent."""
    return "".join(_code_point(c) if unicodedata.category(c) in _HIDDEN else c for c in str(text))


def _ascii(text: str) -> str:
    """Printable ASCII only, the rest escaped as in `one_line`. Backslashes stay as they are, so
    that escaping twice changes nothing (comments are read by people, not parsed)."""
    return "".join(c if " " <= c <= "~" else _code_point(c) for c in text)


def c_comment(text: str) -> str:
    """`text` inside a C or C++ comment, `//` or `/* */`, in a C89 to C++17 compiler: printable
    ASCII on one line; `*/` and `/*` broken up; `??` written `?\\?` (no trigraph); and no
    backslash at the end, which would join the comment with the next line of code. Idempotent."""
    text = str(text)
    stripped = text.rstrip(" ")
    tail = text[len(stripped):]
    last = stripped.endswith("\\")
    out = _ascii(stripped[:-1] if last else stripped) + ("\\x5c" if last else "") + tail
    out = out.replace("*/", "*\\/").replace("/*", "/\\*")
    while "??" in out:
        out = out.replace("??", "?\\?")
    return out


def c_string(text: str) -> str:
    """`text` inside a C or C++ string literal (without the quotes): printable ASCII kept except
    `\\`, `"` and `?` (trigraphs), which are escaped; every other byte of its UTF-8 as a
    three-digit octal escape, which no following character can extend."""
    out = []
    for byte in str(text).encode("utf-8", "surrogateescape"):
        c = chr(byte)
        if c in '\\"?':
            out.append("\\" + c)
        elif " " <= c <= "~":
            out.append(c)
        else:
            out.append(f"\\{byte:03o}")
    return "".join(out)


def c_identifier(text: str) -> str:
    """`text` if it is a C identifier; otherwise ValueError (names are checked when they are
    read, see codegen/load/identifiers.py, so this is a last line of defence)."""
    if not isinstance(text, str) or not _IDENTIFIER.match(text):
        raise ValueError(f"not a C identifier: {text!r}")
    return text


# Plain YAML scalars that would read back as something other than the same string.
_YAML_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~", ""})


def yaml_scalar(text: str) -> str:
    """`text` as a YAML scalar that reads back as the same string: plain when it is a simple
    name, else double-quoted with every non-printable or non-ASCII character escaped."""
    text = str(text)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", text) and text.lower() not in _YAML_WORDS:
        return text
    body = "".join('\\"' if c == '"' else c if c != "\\" and " " <= c <= "~" else
                   "\\\\" if c == "\\" else _code_point(c) for c in text)
    return f'"{body}"'


def yaml_comment(text: str) -> str:
    """`text` inside a YAML `#` comment: printable ASCII on one line (YAML also ends lines at
    \\x85, \\u2028 and \\u2029)."""
    return _ascii(str(text))


def json_text(value: Any, indent: int | None = 2) -> str:
    """`value` as a JSON document (one trailing newline): ASCII only, strict JSON: a float that is
    not finite (a model may give an attribute -inf) is the string "Infinity", "-Infinity" or "NaN"."""
    return json.dumps(_finite(value), indent=indent, ensure_ascii=True, allow_nan=False) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def ld_comment(text: str) -> str:
    """`text` inside a GNU ld script `/* */` comment."""
    return c_comment(text)


def ld_file_name(name: str) -> str:
    """A file name an ld script may name unquoted (INCLUDE, INPUT): letters, digits, `_.-`."""
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name):
        raise ValueError(f"not a file name a linker script can name: {name!r}")
    return name


# A linker section a target may name: a dot, then an identifier, with no further dot (so no
# pattern of sections.ld such as `.rodata.*` can take it), at most 64 characters.
SECTION_NAME = re.compile(r"\.[A-Za-z_][A-Za-z0-9_]{0,62}\Z")
# Sections the toolchain or sections.ld already give a meaning to.
RESERVED_SECTIONS = frozenset({
    ".text", ".rodata", ".data", ".bss", ".vectors", ".stack", ".heap", ".init", ".fini",
    ".init_array", ".fini_array", ".preinit_array", ".ctors", ".dtors", ".tdata", ".tbss", ".got",
    ".plt", ".comment", ".eh_frame", ".gcc_except_table", ".noinit", ".tinsmith_stack"})


def ld_section_name(name: str) -> str:
    """A section name the generated code and the memory script may spell (inside a C string
    and unquoted in an ld script): `SECTION_NAME`, not one of `RESERVED_SECTIONS`, nor starting
    like the toolchain's own (.ARM, .gnu, .note, .debug, .rel); otherwise ValueError."""
    if not isinstance(name, str) or not SECTION_NAME.match(name) or name in RESERVED_SECTIONS or \
            name.lower().startswith((".arm", ".gnu", ".note", ".debug", ".rel", ".stab", ".symtab", ".strtab")):
        raise ValueError(f"not a section name a target may use: {one_line(str(name))!r}")
    return name


def make_path(path: str | Path) -> str:
    """A path in a Make rule (a depfile), escaped as GCC's -MD output escapes it. Make has no
    way to write a line break or NUL in a file name: such a path is rejected."""
    text = str(path)
    if any(c in text for c in "\n\r\0"):
        raise ValueError(f"a Make rule cannot name a path with a line break: {one_line(text)!r}")
    return text.replace(" ", "\\ ").replace("#", "\\#").replace("$", "$$")


class Escaped(str):
    """Text a filter has made safe for where the template puts it."""


class UnescapedText(Exception):
    """A template put text into generated code without escaping it: a bug in Tinsmith."""


def _finalize_cpp(value: Any) -> Any:
    if isinstance(value, Escaped):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and (_IDENTIFIER.match(value) or _NUMBER.match(value)):
        return value
    raise UnescapedText(f"{value!r} would reach generated code unescaped: filter it with "
                        "comment, cstring or code")


def cpp_templates(folder: Path) -> "jinja2.Environment":
    """A Jinja2 environment for C and C++ templates in `folder` that escapes by rule (see above)."""
    import jinja2  # here, so that messages (codegen/errors.py) do not pay for it
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(folder), keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, autoescape=False,
                             finalize=_finalize_cpp)
    env.filters["comment"] = lambda v: Escaped(c_comment(v))
    env.filters["cstring"] = lambda v: Escaped(c_string(v))
    # Generated code: built by the generator from checked identifiers and numbers only.
    env.filters["code"] = lambda v: Escaped(v)
    from tinsmith.template_cache import cached
    return cached(env)
