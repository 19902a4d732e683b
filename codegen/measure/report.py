"""The model's final report: the generator's plan (workspace, constants, MACs) plus what the
target's compiler made of it, measured from the object file: code and constant bytes per
section and per function, static RAM, and the worst-case stack of the entry points.
"""
from __future__ import annotations

import copy
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Mapping

from tinsmith.measure.binutils import Binary, MeasureError, demangle, read_binary
from tinsmith.measure.frames import (Frame, frames_by_symbol, qualified_name, read_callgraph_info,
                                    read_stack_usage)
from tinsmith.measure.probe import link_probe
from tinsmith.measure.stack import HOSTED_EXTERNAL_CALL_BYTES, Node, call_graph, deepest, reachable
from tinsmith.targets import Target, load_target

# An exception taken during the call stacks 8 words (26 with the FPU's lazy context) on the
# current stack before its handler runs; the figure is the model's alone.
_INTERRUPT_NOTE = ("the figure is the call's own: an interrupt taken during it adds its exception frame "
                   "(32 bytes, 104 with FPU context) and its handler's stack")


def _entries(model: Binary, names: Mapping[str, str], graph_name: str) -> list[str]:
    c_entry = f"{graph_name}_call"
    if c_entry not in model.functions:
        raise MeasureError(None, f"{model.path.name} does not define {c_entry}",
                           "is it the object compiled from the generated NAME.cpp?")
    cxx = sorted(s for s in model.functions if qualified_name(names.get(s, s)) == f"{graph_name}::call")
    return [c_entry] + cxx


def _section_bytes(model: Binary) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for section in model.sections:
        if section.kind is not None:
            totals[section.kind] += section.size
    return totals


def _model_functions(model: Binary, names: Mapping[str, str]) -> list[dict]:
    """Model functions by code size, largest first; folded duplicates (one body, several
    names) are listed once."""
    places: dict[tuple[str, int], list[str]] = defaultdict(list)
    for f in model.functions.values():
        places[(f.section, f.address)].append(f.symbol)
    rows = []
    for symbols in places.values():
        symbols.sort(key=lambda s: (not model.functions[s].symbol.endswith("_call"), s))
        size = max(model.functions[s].size for s in symbols)
        rows.append({"name": names.get(symbols[0], symbols[0]), "symbol": symbols[0], "bytes": size,
                     **({"aliases": [names.get(s, s) for s in symbols[1:]]} if len(symbols) > 1 else {})})
    rows.sort(key=lambda r: (-r["bytes"], r["name"]))
    return rows


def _compiler_frames(model: Binary, names: Mapping[str, str], callgraph_info: Path | None,
                     stack_usage: Path | None, notes: list[str]) -> dict[str, Frame]:
    ci = read_callgraph_info(callgraph_info) if callgraph_info and callgraph_info.is_file() else None
    su = read_stack_usage(stack_usage) if stack_usage and stack_usage.is_file() else None
    if ci is None and su is None:
        notes.append(f"no {model.path.stem}.ci or .su beside the object (compile with -fstack-usage, "
                     f"better -fcallgraph-info=su): the model's frames are bounded from its disassembly")
    elif ci is None:
        notes.append(f"frames matched to symbols by name from {stack_usage.name}; -fcallgraph-info=su "
                     f"(a .ci file) would match them exactly")
    return frames_by_symbol(model.functions, names, ci, su)


def _library_code_bytes(graph: Mapping[str, Node], used: list[str], image: Binary | None) -> int:
    if image is None:
        return 0
    places = {}
    for symbol in used:
        if graph[symbol].origin == "library":
            fn = image.functions.get(symbol)
            places[fn.address if fn else symbol] = graph[symbol].size
    return sum(places.values())


def _stack(model: Binary, target: Target, entries: list[str], image: Binary | None, image_label: str | None,
           frames: Mapping[str, Frame], names: dict[str, str], notes: list[str]) -> dict:
    """The worst-case stack of the entry points, with the detail the report shows."""
    graph = call_graph(model, frames, image, image_label, hosted=not target.baremetal)
    names.update(demangle(target, [s for s in graph if s not in names]))
    results = [deepest(graph, e) for e in entries]
    used = reachable(graph, entries)
    bounded = all(r.bytes is not None for r in results)
    worst = max(results, key=lambda r: -1 if r.bytes is None else r.bytes) if bounded else \
        next(r for r in results if r.bytes is None)
    switched = [names.get(s, s) for s in used if graph[s].computed_jumps]
    if switched:
        notes.append(f"computed jumps taken to be switch tables within their function: {', '.join(switched)}")
    if target.baremetal:
        notes.append(_INTERRUPT_NOTE)
    else:
        notes.append(f"hosted target: calls into shared libraries are bounded by a {HOSTED_EXTERNAL_CALL_BYTES}-byte "
                     f"margin each, so the figure is informative")
    detail = {
        "entry": worst.entry,
        "path": [names.get(s, s) for s in worst.path],
        "entries": [{"name": names.get(r.entry, r.entry), "symbol": r.entry, "bytes": r.bytes,
                     "path": [names.get(s, s) for s in r.path],
                     **({"unbounded_because": r.why_unbounded} if r.bytes is None else {})} for r in results],
        "functions": [{"name": names.get(s, s), "symbol": s, "origin": graph[s].origin,
                       "frame_bytes": graph[s].frame.bytes, "bounded_by": graph[s].frame.how,
                       "calls": [names.get(c, c) for c in graph[s].calls],
                       **({"unbounded_because": graph[s].frame.why_unbounded}
                          if graph[s].frame.bytes is None else {})} for s in used],
        "library_image": image_label,
        "hosted": not target.baremetal,
        "notes": notes,
    }
    return {"bytes": worst.bytes if bounded else None, "why_unbounded": None if bounded else worst.why_unbounded,
            "detail": detail, "library_code_bytes": _library_code_bytes(graph, used, image)}


def measure_model(plan_report: Mapping, model_object: str | Path, target: Target | str,
                  firmware: str | Path | None = None, *, stack_usage: str | Path | None = None,
                  callgraph_info: str | Path | None = None) -> dict:
    """The final JSON report: `plan_report` (the generator's NAME.plan.json) with the flash,
    static RAM and worst-case stack measured from `model_object` (the model compiled for
    `target`, with -fstack-usage and preferably -fcallgraph-info=su, whose NAME.su and
    NAME.ci sit beside it unless given). Library functions the model calls are bounded
    from `firmware` (a linked image holding the model) or, on a bare-metal target without
    one, from a probe image linked here."""
    target = load_target(target)
    model_object = Path(model_object)
    model = read_binary(target, model_object)
    graph_name = plan_report["graph"]
    names = demangle(target, model.functions)
    notes: list[str] = []
    frames = _compiler_frames(model, names, Path(callgraph_info) if callgraph_info else model_object.with_suffix(".ci"),
                              Path(stack_usage) if stack_usage else model_object.with_suffix(".su"), notes)
    entries = _entries(model, names, graph_name)
    with tempfile.TemporaryDirectory(prefix="tinsmith-measure-") as folder:
        image, image_label = None, None
        if firmware is not None:
            image, image_label = read_binary(target, Path(firmware)), f"firmware image {Path(firmware).name}"
        elif target.baremetal:
            probe, how = link_probe(target, model_object, entries, Path(folder) / f"{graph_name}_probe.elf")
            if probe is not None:
                image, image_label = read_binary(target, probe), "probe image"
                notes.append(f"library functions read from a probe image linked from the model object: {how}")
            else:
                notes.append(f"no probe image, so library calls are unbounded: {how}")
        stack = _stack(model, target, entries, image, image_label, frames, names, notes)

    sections = _section_bytes(model)
    report = copy.deepcopy(dict(plan_report))
    report["target"] = target.name
    ram = dict(report.get("ram", {}))
    static = sections.get("data", 0) + sections.get("bss", 0)
    workspace = ram.get("workspace_bytes", 0)
    ram.update(static_bytes=static, stack_bytes=stack["bytes"],
               total_bytes=None if stack["bytes"] is None else workspace + static + stack["bytes"],
               **({"stack_unbounded_because": stack["why_unbounded"]} if stack["bytes"] is None else {}),
               stack_detail=stack["detail"])
    flash = dict(report.get("flash", {}))
    if "constant_bytes" in flash:
        flash["constant_data_bytes"] = flash.pop("constant_bytes")
    flash.update(code_bytes=sections.get("code", 0), constant_bytes=sections.get("constants", 0),
                 data_init_bytes=sections.get("data", 0), other_bytes=sections.get("other", 0))
    flash["total_bytes"] = sum(flash[k] for k in ("code_bytes", "constant_bytes", "data_init_bytes", "other_bytes"))
    flash["library_code_bytes"] = stack["library_code_bytes"]
    flash["functions"] = _model_functions(model, names)
    report["ram"], report["flash"] = ram, flash
    return report


def with_kernel_instructions(report: Mapping, counts: list[int]) -> dict:
    """The report with each kernel's instructions on the emulated core (`counts[i]` for nodes[i],
    from tinsmith.targets.qemu.kernel_instructions). A node fused into a kernel is counted in it,
    so its own entry says 0; the per-layer table of the report page then shows them all."""
    if len(counts) != len(report.get("nodes", ())):
        raise ValueError(f"{len(counts)} kernel counts for a report of {len(report.get('nodes', ()))} kernels")
    result = copy.deepcopy(dict(report))
    for node, count in zip(result["nodes"], counts):
        node["instructions"] = count
        for fused in node.get("fused") or ():
            fused["instructions"] = 0
    return result
