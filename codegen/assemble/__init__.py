"""Stage 7, assemble: lay out the generated files with Jinja2 templates and write the report."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from tinsmith.errors import GenerateError
from tinsmith.escape import cpp_templates, json_text, ld_section_name
from tinsmith.generate import GeneratedModel, kernel_states
from tinsmith.generate.render import element_literals
from tinsmith.ir import TensorType
from tinsmith.load.identifiers import identifier_problem
from tinsmith.planners.rows import pipeline_report

_TEMPLATES = cpp_templates(Path(__file__).parent / "templates")  # escapes by rule, see codegen/escape.py
_WS = re.compile(r"\bws\b")  # the workspace parameter of run(); 'ws' is reserved for it


def _io(model: GeneratedModel, names) -> list[dict]:
    return [{"name": n, "dtype": model.graph.types[n].dtype, "ctype": model.graph.types[n].cpp_type,
             "shape": list(model.graph.types[n].shape), "size": model.graph.types[n].size,
             "bytes": model.graph.types[n].nbytes} for n in names]


def _states(model: GeneratedModel) -> list[dict]:
    """The values kept between calls (see ir.State), each with the C++ type of its storage."""
    g = model.graph
    return [{"read": s.read, "write": s.write, "ctype": g.types[s.read].cpp_type, "dtype": g.types[s.read].dtype,
             "shape": list(g.types[s.read].shape), "size": g.types[s.read].size, "bytes": g.types[s.read].nbytes,
             "fill": s.fill, "fill_literal": _fill_literal(g.types[s.read], s.fill)} for s in g.states]


def _state_bytes(model: GeneratedModel) -> int:
    """Static storage of the state: each graph state's value and next value, and the kernels' states."""
    return 2 * sum(model.graph.types[s.read].nbytes for s in model.graph.states) + \
        sum(s.nbytes for s in kernel_states(model.kernels))


def _fill_literal(t: TensorType, fill: float) -> str:
    """A state's starting value as a C++ literal of its element type, spelt as constants are (an
    infinity, a NaN, float16's bits); the graph file checked that the type holds it."""
    with np.errstate(over="ignore"):  # past the type's largest finite value: an infinity, as a cast gives
        return element_literals(np.full(1, fill, t.numpy_dtype))[0]


def _values(model: GeneratedModel) -> list[dict]:
    """Type and size of every value a kernel reads or writes, constants aside, in order of first use."""
    g = model.graph
    names = dict.fromkeys([*g.inputs, *(v for k in model.kernels for v in (*k.node.inputs, *k.node.outputs)),
                           *g.outputs])
    return [{"name": v, "dtype": g.types[v].dtype, "shape": list(g.types[v].shape), "bytes": g.types[v].nbytes,
             **({"quant": _quant(g.types[v].quant)} if g.types[v].quant else {})}
            for v in names if v and v not in g.constants and v in g.types]


def _json_attr(value):
    """An attribute as the report shows it: numbers, strings and short lists as they are; arrays
    and subgraphs by their shape or kind (the report describes, it does not round-trip)."""
    import numpy as np
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str, np.generic)) for v in value):
        return [v.item() if isinstance(v, np.generic) else v for v in value] if len(value) <= 16 \
            else f"{len(value)} values"
    if isinstance(value, np.ndarray):
        return value.tolist() if value.size <= 16 else f"array {'x'.join(map(str, value.shape))} {value.dtype}"
    return type(value).__name__


def _attrs(node) -> dict:
    return {k: _json_attr(v) for k, v in node.attrs.items() if v is not None}


def _quant(q) -> dict | None:
    """Scales and zero points for the report: one pair, or per channel their count and range."""
    if q is None:
        return None
    if len(q.scale) == 1:
        return {"scale": q.scale[0], "zero_point": q.zero_point[0]}
    return {"axis": q.axis, "channels": len(q.scale), "scale_min": min(q.scale), "scale_max": max(q.scale),
            "zero_points": sorted(set(q.zero_point))[:8]}


def _kernel_entry(k, params: dict[str, int]) -> dict:
    def node_params(node) -> int:
        return sum(params.get(v, 0) for v in dict.fromkeys(node.inputs))
    entry = {"name": k.node.name, "op": k.node.op, "cluster": k.cluster,
             "inputs": [p.buffer for p in k.kernel.params if not p.writes] if k.fused else list(k.node.inputs),
             "outputs": list(k.fused[-1].outputs) if k.fused else list(k.node.outputs), "macs": k.macs,
             "params": sum(node_params(n) for n in (k.node, *k.fused)),
             "source": str(k.node.loc) if k.node.loc else None, "attrs": _attrs(k.node),
             "node_inputs": list(k.node.inputs), "node_outputs": list(k.node.outputs)}
    if k.fused:
        entry["fused"] = [{"name": n.name, "op": n.op, "macs": m, "params": node_params(n),
                           "outputs": list(n.outputs), "source": str(n.loc) if n.loc else None,
                           "attrs": _attrs(n), "node_inputs": list(n.inputs)}
                          for n, m in zip(k.fused, k.node_macs[1:])]
        entry["node_macs"] = k.node_macs[0]
    return entry


def report(model: GeneratedModel) -> dict:
    """The JSON report: interface, RAM, flash, MACs, clusters and the memory plan."""
    g, plan = model.graph, model.plan
    strip = lambda items: [{k: v for k, v in d.items() if k not in ("ctype", "size")} for d in items]
    constant_bytes = sum(c.nbytes for c in model.constants)
    # Parameters: elements of the constants kernels read (shape operands fold away).
    params = {c.name: g.constants[c.name].data.size for c in model.constants}
    in_place = plan.in_place_of()
    overlaps = {out: (v, shift) for out, v, shift in plan.overlaps}
    return {
        "graph": g.name,
        "source": g.source,
        "inputs": strip(_io(model, g.api_inputs)),
        "outputs": strip(_io(model, g.api_outputs)),
        # values kept between calls in the library's static storage, outside the workspace (ir.State)
        "states": [{k: s[k] for k in ("read", "write", "dtype", "shape", "bytes", "fill")} for s in _states(model)],
        # kernels' own state (a stateful operator's memory), in the same storage, zeroed by reset_state()
        "kernel_states": [{"kernel": s.kernel, "buffer": s.buffer, "dtype": s.dtype, "bytes": s.nbytes}
                          for s in kernel_states(model.kernels)],
        "ram": {"workspace_bytes": plan.workspace_bytes,
                "workspace_lower_bound_bytes": plan.lower_bound_bytes, "workspace_planner": plan.planner,
                # every kernel's inputs and outputs apart: what planning below the operator boundary saves on
                "workspace_operator_lower_bound_bytes": plan.operator_lower_bound_bytes,
                "in_place_variants": dict(plan.variants),
                # convolutions run row by row in one kernel: rings, and what it recomputes (tinsmith.planners.rows)
                "row_pipelines": pipeline_report(g, model.schedule),
                "io_bytes": sum(g.types[n].nbytes for n in g.api_inputs + g.api_outputs),
                "state_bytes": _state_bytes(model)},
        "flash": {"constant_bytes": constant_bytes},
        "macs": sum(k.macs for k in model.kernels),
        "params": sum(params.values()),
        "clusters": [[k.node.name for k in model.kernels if k.cluster == c]
                     for c in range(model.schedule.cluster_count)],
        # one entry per kernel, named after its node; nodes fused into it are listed under it with
        # their own MACs and parameters, and the values between them take no workspace
        "nodes": [_kernel_entry(k, params) for k in model.kernels],
        "constants": [{"name": c.name, "bytes": c.nbytes, "params": params[c.name],
                       "dtype": g.constants[c.name].data.dtype.name, "shape": list(g.constants[c.name].data.shape),
                       **({"quant": _quant(g.constants[c.name].quant)} if g.constants[c.name].quant else {})}
                      for c in model.constants],
        # the values the report draws: shapes of what kernels read and write
        "values": _values(model),
        "plan": [{"value": p.lifetime.value, "offset": p.offset, "bytes": p.lifetime.nbytes,
                  "first_cluster": p.lifetime.first, "last_cluster": p.lifetime.last,
                  **({"in_place_of": in_place[p.lifetime.value]} if p.lifetime.value in in_place else {}),
                  **({"overlaps": overlaps[p.lifetime.value][0], "offset_from_input": overlaps[p.lifetime.value][1]}
                     if p.lifetime.value in overlaps else {})}
                 for p in plan.placements],
    }


def _check_names(model: GeneratedModel) -> None:
    """Last line of defence: names made up after loading (by builders, by expansion) that become
    identifiers are checked again, so no macro or keyword reaches the code."""
    g = model.graph
    named = [(g.name, None)] + [(n, None) for n in g.inputs + g.outputs] + \
        [(c.name, g.constants[c.name].loc) for c in model.constants] + \
        [(k.kernel.name, k.node.loc) for k in model.kernels]
    for name, loc in named:
        problem = identifier_problem(name, "derived")
        if problem:
            raise GenerateError(loc, f"a name made from the graph cannot be used in generated code: {problem}",
                                "rename the node or value it was made from")


def _clusters(model: GeneratedModel) -> list[dict]:
    """Each cluster's kernels and how it runs: on the worker pool (`parallel`) when one of its kernels
    is split into parts or two have work enough for a thread each; otherwise in turn on the caller's."""
    from tinsmith.generate.parallel import SPLIT_WORK
    result = []
    for c in range(model.schedule.cluster_count):
        kernels = [k for k in model.kernels if k.cluster == c]
        split = [k for k in kernels if k.parts_source]
        parallel = model.threads > 1 and (bool(split) or sum(k.work >= SPLIT_WORK for k in kernels) >= 2)
        result.append({"index": c, "kernels": kernels, "parallel": parallel, "split": split,
                       "whole": sorted((k for k in kernels if not k.parts_source), key=lambda k: -k.work)})
    return result


def assemble(model: GeneratedModel, constants_section: str | None = None) -> dict[str, str]:
    """Render every generated file; returns file name -> text (deterministic for a given model).
    With `constants_section` (a checked name, see codegen/escape.py), constants are declared in
    that linker section for builds that define TINSMITH_PLACE_SECTIONS."""
    context = template_context(model, constants_section)
    g = model.graph
    files = {f"{g.name}{suffix}": render(template, context)
             for suffix, template in ((".hpp", "model.hpp.j2"), (".h", "model.h.j2"),
                                      (".cpp", "model.cpp.j2"), ("_runner.cpp", "runner.cpp.j2"))}
    files[f"{g.name}.plan.json"] = json_text(report(model))
    return files


def render(template: str, context: dict) -> str:
    """One template of templates/ rendered with `context` (see template_context)."""
    return _TEMPLATES.get_template(template).render(context)


def template_context(model: GeneratedModel, constants_section: str | None = None) -> dict:
    """What the templates read: the model's interface, kernels, clusters and plan."""
    _check_names(model)
    g = model.graph
    inputs, outputs = _io(model, g.api_inputs), _io(model, g.api_outputs)
    states, kept = _states(model), kernel_states(model.kernels)
    stored = {s[k]: f"state::{s[k]}" for s in states for k in ("read", "write")}
    every_input, every_output = _io(model, g.inputs), _io(model, g.outputs)
    cpp_params = ", ".join([f"const Input_{v['name']}& {v['name']}" for v in inputs] +
                           [f"Output_{v['name']}& {v['name']}" for v in outputs] + ["Workspace& ws"])
    c_params = ", ".join([f"const {g.types[v['name']].c_type}* {v['name']}" for v in inputs] +
                         [f"{g.types[v['name']].c_type}* {v['name']}" for v in outputs] + ["void* ws"])
    run_params = ", ".join([f"const {v['ctype']}* {v['name']}" for v in every_input] +
                           [f"{v['ctype']}* {v['name']}" for v in every_output] + ["unsigned char* ws"])
    names = [v["name"] for v in every_input + every_output]
    return {
        "name": g.name, "NAME": g.name.upper(), "source": g.source,
        "inputs": inputs, "outputs": outputs,
        # int64 and the quantized types are <stdint.h> types
        "uses_int64": any(v["dtype"] not in ("float32", "bool") for v in inputs + outputs),
        "uses_bool": any(v["dtype"] == "bool" for v in inputs + outputs),
        # inputs no kernel reads (EyeLike, Dropout's ratio, a value only Shape looks at) and outputs
        # no kernel writes (zero-size tensors): run() voids them
        "unused_inputs": [v["name"] for v in every_input + every_output
                          if not any(a == v["name"] for k in model.kernels for a in k.call_args)],
        "workspace_bytes": model.plan.workspace_bytes,
        "constants": model.constants, "kernels": model.kernels, "prelude": model.prelude,
        "clusters": _clusters(model),
        "threads": model.threads,
        "run_fields": [(f"const {v['ctype']}*", v["name"]) for v in inputs] +
                      [(f"{v['ctype']}*", v["name"]) for v in outputs] + [("unsigned char*", "ws")],
        # TINSMITH_KERNEL_DONE(i) after kernel i: i indexes the report's "nodes"
        "kernel_index": {k.kernel.name: i for i, k in enumerate(model.kernels)},
        # a whole-word match: value names such as 'three_rows' contain "ws" too
        "ws_used": any(_WS.search(a) for k in model.kernels for a in k.call_args),
        "cpp_params": cpp_params, "c_params": c_params, "run_params": run_params,
        "run_args_cpp": ", ".join([stored.get(n, f"{n}.data") for n in names] + ["ws.bytes"]),
        "run_args_c": ", ".join([f"{g.name}::{stored[n]}" if n in stored else n for n in names] +
                                ["static_cast<unsigned char*>(ws)"]),
        "states": states,
        "kernel_states": kept,
        "keeps_state": bool(states or kept),
        # what the header names as the state: the graph's states, then the kernels that keep one
        "state_names": [s["read"] for s in states] + list(dict.fromkeys(s.kernel for s in kept)),
        "state_bytes": _state_bytes(model),
        "runner_args": ", ".join([f"in_{v['name']}" for v in inputs] +
                                 [f"out_{v['name']}" for v in outputs] + ["tinsmith_workspace"]),
        "constants_section": ld_section_name(constants_section) if constants_section else None,
        # the definitions' own declarations (see functors/constants.py), redeclared with the section
        "constant_decls": [f"const {g.constants[c.name].type.cpp_type} {c.name}[{g.constants[c.name].type.size}]"
                           for c in model.constants],
        "input_bytes": sum(v["bytes"] for v in inputs),
        "output_bytes": sum(v["bytes"] for v in outputs),
        # a level of a dispatching library (tinsmith.assemble.dispatch): none, the model's own API;
        # `embedded`: a further level's code, which the first level's file holds
        "level": None, "dispatch": None, "embedded": False,
    }
