"""Where Tinsmith's own files are, in a checkout and in an installed package alike.

A checkout keeps the C++ runtime beside the generator (`runtime_cpp/` next to `codegen/`);
`pip install` ships the same folder inside the package as `codegen/runtime_cpp/`. Every
stage that needs the runtime asks here, so the two layouts differ in one place only.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
"""The `codegen` package: the generator's code, templates and target files."""


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
    a checkout, the folder the `tinsmith` package is installed in otherwise."""
    checkout = PACKAGE_DIR.parent / "site_scons" / "site_tools"
    if (checkout / "tinsmith" / "__init__.py").is_file():
        return checkout
    spec = importlib.util.find_spec("tinsmith")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("Tinsmith's SCons tool (the `tinsmith` package) is not installed; reinstall Tinsmith")
    return Path(next(iter(spec.submodule_search_locations))).resolve().parent
