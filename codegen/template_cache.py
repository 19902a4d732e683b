"""Compiled Jinja2 templates kept as Python keeps compiled modules, in the package's __pycache__.

Jinja2 compiles a template to Python code before its first render, in every process: about 50 ms
of CPU for the C++ templates of `tinsmith generate` and as much for the report page, a tenth of
generating a small graph, paid again by each process a build starts. The compiled code is kept
in codegen/__pycache__/templates (ignored by git, by the generator's digest and by wheels) and
used only while it matches the template's source and the Python version (Jinja2 checks both).
It follows Python's own rules for bytecode: read whenever present, written unless
PYTHONDONTWRITEBYTECODE is set, and never an error where the folder cannot be written (an
installed package may be read-only). `tinsmith.compile_templates.compile_all()` writes it for
every template regardless, as `python -m compileall` does for modules.

This module sits below every module that makes an environment (tinsmith.escape among them), so
it imports none of them: knowing which modules those are is tinsmith.compile_templates' job.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import jinja2

PACKAGE_DIR = Path(__file__).resolve().parent
CACHE_DIR = PACKAGE_DIR / "__pycache__" / "templates"
# Every environment that keeps its compiled templates here, for compile_made().
_ENVIRONMENTS: list[jinja2.Environment] = []


class _PackageCache(jinja2.FileSystemBytecodeCache):
    """Jinja2's file cache, writing only where Python would write bytecode, and silently not
    where it cannot."""

    force_write = False

    def __init__(self):
        super().__init__(str(CACHE_DIR), "%s.jinja2")

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        # The template's place relative to the package, not its absolute path: a copy of the
        # package with its __pycache__ (as the tests make of the checkout) finds the same entries.
        where = os.path.relpath(filename, PACKAGE_DIR) if filename else ""
        return super().get_cache_key(name, where)

    def dump_bytecode(self, bucket) -> None:
        if sys.dont_write_bytecode and not self.force_write:
            return
        try:
            CACHE_DIR.mkdir(parents=True, exist_ok=True)
            super().dump_bytecode(bucket)
        except OSError:
            pass  # compiled again next time, as a module in a read-only folder is


_CACHE = _PackageCache()


def cached(environment: jinja2.Environment) -> jinja2.Environment:
    """`environment`, keeping its compiled templates in the package's __pycache__."""
    environment.bytecode_cache = _CACHE
    _ENVIRONMENTS.append(environment)
    return environment


def compile_made() -> None:
    """Write the compiled code of every template of every environment made so far (which
    environments those are is for the caller: tinsmith.compile_templates makes them all)."""
    _CACHE.force_write = True
    try:
        for environment in _ENVIRONMENTS:
            for name in environment.list_templates(extensions=["j2"]):
                environment.get_template(name)
    finally:
        _CACHE.force_write = False
