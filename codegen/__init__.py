"""Tinsmith: compile neural-network graphs declared in YAML into dependency-free C++.

Stages, in the one direction data flows: load -> expand -> optimize -> schedule -> plan
-> generate -> assemble -> verify. `codegen.pipeline` runs them; the SCons tool in
site_scons/site_tools/tinsmith/ and `codegen.cli` are thin shells around it.
"""
