"""Tinsmith: compile neural-network graphs declared in YAML into dependency-free C++.

Stages, in the one direction data flows: load -> expand -> optimize -> schedule -> plan
-> generate -> assemble -> verify. `tinsmith.pipeline` runs them; the SCons tool in
site_scons/site_tools/tinsmith/ and `tinsmith.cli` are thin shells around it.
"""
