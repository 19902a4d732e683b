"""Tinsmith: compile neural-network graphs declared in YAML into dependency-free C++.

Stages, in the one direction data flows: load -> expand -> optimize -> schedule -> plan
-> generate -> assemble -> verify. `tinsmith.pipeline` runs them; the SCons tool in
site_scons/site_tools/tinsmith/ and `tinsmith.cli` are thin shells around it.

The package's folder in a checkout is codegen/. What a build script needs from it is here:

    import tinsmith
    env = Environment(tools=["default", "tinsmith"], toolpath=[tinsmith.toolpath()])
"""

def toolpath() -> str:
    """The folder to pass as SCons's `toolpath` so that `tools=["tinsmith"]` finds Tinsmith's
    SCons tool, wherever Tinsmith is installed."""
    from tinsmith.paths import scons_toolpath
    return str(scons_toolpath())


def baremetal_dir() -> str:
    """The folder of Tinsmith's bare-metal test runtime (startup.c, semihost.c/.h, measure.c/.h,
    sections.ld), as `tinsmith include-dir --baremetal` prints it: for firmware examples that
    borrow it for a QEMU board."""
    from tinsmith.paths import BAREMETAL_DIR
    return str(BAREMETAL_DIR)
