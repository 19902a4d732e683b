"""Where Tinsmith's own files are, in a checkout and in an installed package alike.

A checkout keeps the C++ runtime beside the generator (`runtime_cpp/` next to `codegen/`, the
folder that is the `tinsmith` package); `pip install` ships the same folder inside the package
as `tinsmith/runtime_cpp/`, and the SCons tool as `tinsmith/site_tools/`. Every
stage that needs the runtime asks here, so the two layouts differ in one place only.
"""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
"""The `tinsmith` package (codegen/ in a checkout): the generator's code, templates and target files."""


def _runtime_dir() -> Path:
    for candidate in (PACKAGE_DIR / "runtime_cpp", PACKAGE_DIR.parent / "runtime_cpp"):
        if (candidate / "include").is_dir():
            return candidate
    raise RuntimeError(f"Tinsmith's C++ runtime is missing: neither {PACKAGE_DIR / 'runtime_cpp'} nor "
                       f"{PACKAGE_DIR.parent / 'runtime_cpp'} exists; reinstall Tinsmith")


RUNTIME_DIR = _runtime_dir()
"""The C++ runtime: include/ (headers generated code includes), src/ (host runner I/O),
baremetal/ (startup, semihosting and linker scripts of the test firmware)."""
RUNTIME_INCLUDE = RUNTIME_DIR / "include"
BAREMETAL_DIR = RUNTIME_DIR / "baremetal"


def scons_toolpath() -> Path:
    """The folder to give SCons as `toolpath` for the `tinsmith` tool: site_scons/site_tools in
    a checkout, the package's own site_tools/ folder when installed from a wheel."""
    for candidate in (PACKAGE_DIR.parent / "site_scons" / "site_tools", PACKAGE_DIR / "site_tools"):
        if (candidate / "tinsmith" / "__init__.py").is_file():
            return candidate
    raise RuntimeError(f"Tinsmith's SCons tool is missing: neither {PACKAGE_DIR.parent / 'site_scons' / 'site_tools'} "
                       f"nor {PACKAGE_DIR / 'site_tools'} holds tinsmith/__init__.py; reinstall Tinsmith")
