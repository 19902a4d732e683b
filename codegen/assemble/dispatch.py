"""Assemble a library that holds a model's kernels for several ISA levels (tinsmith.targets.levels)
and runs the widest the CPU has: the model's own headers and runner, with the workspace the
largest level's; one GRAPH.cpp with every level's kernels (each further level's inside a target
pragma that compiles it for its level) and the code that chooses."""
from __future__ import annotations

from tinsmith.assemble import render, report, template_context
from tinsmith.escape import json_text
from tinsmith.generate import GeneratedModel
from tinsmith.targets.levels import PIN_VARIABLE, Level


def _level_context(context: dict, model: GeneratedModel, level: Level, shared: set[str]) -> dict:
    """What model.cpp.j2 reads to lay out `level`'s kernels in a namespace of their own, reading
    the constants `shared` from the one copy in GRAPH.cpp."""
    g = model.graph
    api = [*g.api_inputs, *g.api_outputs]
    stored = {s[k]: f"state::{s[k]}" for s in context["states"] for k in ("read", "write")}
    params = [f"const {g.types[n].cpp_type}* {n}" for n in g.api_inputs] + \
             [f"{g.types[n].cpp_type}* {n}" for n in g.api_outputs] + ["unsigned char* ws"]
    every = [*g.inputs, *g.outputs]  # what run() takes: the API's values and the states' storage
    return {"name": level.name, "namespace": f"tinsmith_{level.identifier}",
            "params": ", ".join(params),
            "args": ", ".join([stored.get(n, n) for n in every] + ["ws"]),
            "forward": ", ".join([*api, "ws"]),
            "shared": sorted(shared),
            "shared_decls": [d for c, d in zip(model.constants, context["constant_decls"]) if c.name in shared]}


def _shared_constants(models: list[tuple[Level, GeneratedModel]]) -> list[set[str]]:
    """Per level, the constants it reads from the first level's copy: those whose definition is
    the first level's byte for byte (weights laid out the same for every vector width); for the
    first level, every constant another level reads."""
    first = {c.name: c.source for c in models[0][1].constants}
    shared = [{c.name for c in model.constants if first.get(c.name) == c.source} for _, model in models[1:]]
    return [set().union(*shared), *shared]


def assemble_levels(models: list[tuple[Level, GeneratedModel]], constants_section: str | None = None,
                    share_constants: bool = True) -> dict[str, str]:
    """Every generated file of a dispatching library, from the model generated for each level
    (narrowest first); file name -> text, deterministic. With `share_constants` (not for constants
    copied to RAM, which are not const) levels read equal constants from one copy."""
    first = models[0][1]
    g = first.graph
    workspace = max(m.plan.workspace_bytes for _, m in models)
    contexts = [(level, model, template_context(model, constants_section)) for level, model in models]
    levels = [{"name": level.name, "namespace": f"tinsmith_{level.identifier}", "requires": list(level.requires),
               "pragma_target": level.pragma_target, "index": i} for i, (level, _, _) in enumerate(contexts)]
    api = template_context(first, constants_section) | {"workspace_bytes": workspace}
    files = {f"{g.name}{suffix}": render(template, api)
             for suffix, template in ((".hpp", "model.hpp.j2"), (".h", "model.h.j2"))}
    files[f"{g.name}_runner.cpp"] = render("runner.cpp.j2", api | {"dispatch": True})  # it prints the level
    shared = _shared_constants(models) if share_constants else [set()] * len(models)
    # The further levels' code first, each without the file's preamble (includes, the shared
    # constants' one copy): GRAPH.cpp holds it between the first level's code and the dispatcher.
    for i, (level, model, context) in enumerate(contexts[1:], 1):
        levels[i]["source"] = render("model.cpp.j2", context | {
            "level": _level_context(context, model, level, shared[i]), "dispatch": None, "embedded": True})
    level, model, context = contexts[0]
    files[f"{g.name}.cpp"] = render("model.cpp.j2", context | {
        "level": _level_context(context, model, level, shared[0]), "embedded": False, "dispatch": {
            "levels": levels, "pin_variable": PIN_VARIABLE, "workspace_bytes": workspace,
            "args_cpp": ", ".join([f"{n}.data" for n in (*g.api_inputs, *g.api_outputs)] + ["ws.bytes"]),
            "args_c": ", ".join([*g.api_inputs, *g.api_outputs, "static_cast<unsigned char*>(ws)"])}})
    plan = report(first)
    # The header's workspace is the largest level's (each level plans its own); the report keeps
    # the first level's plan and lists every level's workspace.
    plan["ram"]["workspace_bytes"] = workspace
    plan["levels"] = [{"name": level.name, "target": level.target.name, "requires": list(level.requires),
                       "workspace_bytes": model.plan.workspace_bytes} for level, model in models]
    files[f"{g.name}.plan.json"] = json_text(plan)
    return files
