"""The report as a page to look at (NAME.html beside NAME.json): the graph with its clusters and
fused kernels, the workspace over time with the peak and what holds it, a table per layer, and
the summary figures. One self-contained file: inline CSS, SVG and a few lines of script, nothing
fetched from the network.

Everything comes from the report dict (NAME.json, or NAME.plan.json before measurement): fields
a report lacks (measured sizes, fused kernels, instructions per layer) are left out of the page
rather than guessed. Names in a report come from the model file, which is untrusted, so the
template escapes everything it writes (Jinja2 autoescape) and names never reach the script.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import jinja2

from tinsmith.files import write_if_changed
from tinsmith.measure.layer_details import attributes_text, kernel_code_bytes, scratch_label, weights
from tinsmith.measure.page_layout import Box, layered_layout
from tinsmith.measure.summary import size
from tinsmith.template_cache import cached

_TEMPLATES = cached(jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True))

# Geometry of the drawing, in pixels.
NODE_W, NODE_H = 210, 50          # one node: op and MACs, name, output shape
PORT_W, PORT_H = 170, 36          # a graph input or output
FUSE_PAD, FUSE_LABEL, FUSE_GAP = 6, 16, 6   # a kernel's box around the nodes it computes
HEADER = 44                       # column titles above the drawing
GUTTER = 74                       # between graph and memory chart: step labels
PAGE_W = 1340                     # the drawing fits this width unless the graph is wider
MEM_W = (320, 640)                # workspace offset axis: narrowest and widest
LIVE_GAP, LIVE_W = 20, 150        # bytes alive per step, as bars
ROW_VGAP = 34
LARGE_GRAPH_NODES = 40             # beyond this many nodes, drawing and table scroll in boxes of their own
CHAR_W = 6.9                      # average glyph width at the drawing's 12px font, for truncation

# Fill colour by what an op does; anything else is drawn neutral.
_OP_KINDS = {
    "compute": ("Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum"),
    "pool": ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "GlobalLpPool"),
    "norm": ("BatchNormalization", "InstanceNormalization", "LRN", "Softmax", "LogSoftmax"),
    "layout": ("Reshape", "Transpose", "Concat", "Slice", "Gather", "Pad", "Flatten", "Squeeze",
               "Unsqueeze", "Identity", "Split", "Expand", "Tile"),
}
_KIND_OF = {op: kind for kind, ops in _OP_KINDS.items() for op in ops}


@dataclass(frozen=True)
class Member:
    """One node of the graph, as a kernel computes it."""

    name: str
    op: str
    macs: int | None
    params: int | None
    outputs: tuple[str, ...]
    instructions: int | None
    source: str | None
    attrs: Mapping | None = None
    node_inputs: tuple[str, ...] = ()
    node_outputs: tuple[str, ...] = ()  # what the node computes, also a value fused away


@dataclass(frozen=True)
class Kernel:
    """One function of the generated code: the node it is named after and the nodes fused into it."""

    name: str
    cluster: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    members: tuple[Member, ...]

    @property
    def fused(self) -> bool:
        return len(self.members) > 1


def kernels(report: Mapping) -> list[Kernel]:
    """The report's kernels in schedule order. A kernel that computes several nodes lists the nodes
    after its own under `fused` (each with name, op, macs, params, outputs); its own MACs are then
    `node_macs`, and its `outputs` those of the last fused node."""
    result = []
    for n in report.get("nodes", []):
        fused = n.get("fused") or []
        own_params = n.get("params")
        if fused and own_params is not None:
            own_params -= sum(f.get("params") or 0 for f in fused)
        head = Member(n["name"], n.get("op", "?"), n.get("node_macs", n.get("macs")) if fused else n.get("macs"),
                      own_params, () if fused else tuple(n.get("outputs", ())), n.get("instructions"),
                      n.get("source"), n.get("attrs"), tuple(n.get("node_inputs", n.get("inputs", ()))),
                      tuple(n.get("node_outputs", ())))
        rest = [Member(f["name"], f.get("op", "?"), f.get("macs"), f.get("params"), tuple(f.get("outputs", ())),
                       f.get("instructions"), f.get("source"), f.get("attrs"), tuple(f.get("node_inputs", ())),
                       tuple(f.get("outputs", ()))) for f in fused]
        result.append(Kernel(n["name"], int(n.get("cluster", 0)), tuple(v for v in n.get("inputs", ()) if v),
                             tuple(n.get("outputs", ())), (head, *rest)))
    return result


@dataclass(frozen=True)
class Tensor:
    """A workspace value: where it lives and from which step to which (inclusive)."""

    name: str
    offset: int
    nbytes: int
    first: int
    last: int
    in_place_of: str | None = None
    overlaps: str | None = None  # the input this value is written over part of


def tensors(report: Mapping) -> list[Tensor]:
    return [Tensor(p["value"], int(p["offset"]), int(p["bytes"]), int(p["first_cluster"]), int(p["last_cluster"]),
                   p.get("in_place_of"), p.get("overlaps")) for p in report.get("plan", [])]


def live_bytes(ts: Sequence[Tensor], step: int) -> int:
    """Workspace bytes in use at `step`: the union of the live values' byte ranges, so a value
    written in place over another counts once."""
    spans = sorted((t.offset, t.offset + t.nbytes) for t in ts if t.first <= step <= t.last)
    total, end = 0, None
    for a, b in spans:
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def peak_step(ts: Sequence[Tensor], steps: int) -> int | None:
    """The first step with the most workspace bytes in use, or None without a workspace."""
    if not ts:
        return None
    return max(range(steps), key=lambda s: (live_bytes(ts, s), -s))


def _count(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def _short_count(n: int | None) -> str:
    if not n:
        return ""
    if n < 10_000:
        return f"{n:,}"
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)


def _bytes(n: int | None) -> str:
    if n is None:
        return "—"
    return f"{n:,} B" if n < 1024 else f"{n:,} B ({size(n)})"


def _fit(text: str, width: float) -> str:
    """`text` cut with an ellipsis to fit `width` pixels of the drawing's font."""
    most = max(int(width / CHAR_W), 2)
    return text if len(text) <= most else text[:most - 1] + "…"


def _shape(v: Mapping | None) -> str:
    if not v or "shape" not in v:  # a scratch buffer has bytes, no shape
        return ""
    dims = "×".join(str(d) for d in v["shape"]) or "scalar"
    return f"{dims} {v.get('dtype', '')}".strip()


def _value_types(report: Mapping) -> dict[str, dict]:
    """name -> {dtype, shape, bytes} for every value the report describes."""
    types = {}
    for p in report.get("plan", []):  # workspace sizes are rounded up to the alignment: a last resort
        types[p["value"]] = {"bytes": p["bytes"]}
    for v in (*report.get("values", []), *report.get("inputs", []), *report.get("outputs", [])):
        types[v["name"]] = dict(v)
    return types


def _node_view(m: Member, x: float, y: float, types: Mapping, kernel: Kernel) -> dict:
    outs = m.outputs or tuple(v for v in m.node_outputs if v in types)  # fused away: its value's shape
    out = types.get(outs[0]) if outs else None
    shape = _shape(out) + (f" (+{len(outs) - 1})" if len(outs) > 1 else "")
    macs = _short_count(m.macs)
    title = [f"{m.op} {m.name}", f"step {kernel.cluster}"]
    if attributes_text(m.attrs):
        title.append(attributes_text(m.attrs))
    title += [f"out {v}: {_shape(types.get(v))}" for v in outs]
    if m.macs:
        title.append(f"{m.macs:,} MACs")
    if m.params:
        title.append(f"{m.params:,} parameters")
    if kernel.fused:
        title.append(f"computed by kernel {kernel.name}")
    if m.source:
        title.append(m.source)
    return {"x": x, "y": y, "w": NODE_W, "h": NODE_H, "name": m.name, "op": m.op,
            "op_text": _fit(m.op, NODE_W - 16 - CHAR_W * (len(macs) + 5)), "macs_text": f"{macs} MACs" if macs else "",
            "name_text": _fit(m.name, NODE_W - 16), "shape_text": _fit(shape, NODE_W - 16),
            "kind": _KIND_OF.get(m.op, "other"), "title": "\n".join(title),
            "carries": " ".join(m.outputs or kernel.outputs)}


def _graph_view(report: Mapping, ks: Sequence[Kernel], types: Mapping, steps: int):
    """The graph's boxes and edges, laid out by step; returns them and the layout."""
    inputs = [v["name"] for v in report.get("inputs", [])]
    outputs = [v["name"] for v in report.get("outputs", [])]
    boxes = [Box(("in", v), 0, PORT_W, PORT_H) for v in inputs]
    for k in ks:
        n = len(k.members)
        h = NODE_H if n == 1 else FUSE_LABEL + 2 * FUSE_PAD + n * NODE_H + (n - 1) * FUSE_GAP
        boxes.append(Box(("k", k.name), k.cluster + 1, NODE_W + (2 * FUSE_PAD if n > 1 else 0), h))
    boxes += [Box(("out", v), steps + 1, PORT_W, PORT_H) for v in outputs]

    producer = {v: ("in", v) for v in inputs}
    for k in ks:
        for v in (*k.outputs, *(o for m in k.members for o in m.outputs)):
            producer[v] = ("k", k.name)
    carried: dict[tuple, list[str]] = {}
    for k in ks:
        for v in k.inputs:
            if v in producer and producer[v] != ("k", k.name):
                carried.setdefault((producer[v], ("k", k.name)), []).append(v)
    for v in outputs:
        if v in producer:
            carried.setdefault((producer[v], ("out", v)), []).append(v)
    edges = list(carried)
    layout = layered_layout(boxes, edges, vgap=ROW_VGAP)

    nodes, groups, ports = [], [], []
    for k in ks:
        at = layout.boxes[("k", k.name)]
        if k.fused:
            groups.append({"x": at.x, "y": at.y, "w": at.width, "h": at.height, "name": k.name,
                           "label": _fit(f"kernel {k.name}", at.width - 8),
                           "title": f"kernel {k.name} computes {', '.join(m.name for m in k.members)}"})
            for i, m in enumerate(k.members):
                nodes.append(_node_view(m, at.x + FUSE_PAD, at.y + FUSE_LABEL + FUSE_PAD + i * (NODE_H + FUSE_GAP),
                                        types, k))
        else:
            nodes.append(_node_view(k.members[0], at.x, at.y, types, k))
    for kind, names in (("in", inputs), ("out", outputs)):
        for v in names:
            at = layout.boxes[(kind, v)]
            label = ("input " if kind == "in" else "output ") + v
            ports.append({"x": at.x, "y": at.y, "w": at.width, "h": at.height, "kind": kind, "name": v,
                          "label": _fit(label, at.width - 16), "shape": _fit(_shape(types.get(v)), at.width - 16),
                          "title": f"{label}: {_shape(types.get(v))}"})
    edge_views = []
    for (src, dst), route in zip(edges, layout.routes):
        names = carried[(src, dst)]
        edge_views.append({"path": route.path, "carries": " ".join(names),
                           "title": "\n".join(f"{v}: {_shape(types.get(v))}" for v in names)})
    return {"nodes": nodes, "groups": groups, "ports": ports, "edges": edge_views}, layout


def _drawing(report: Mapping, ks: Sequence[Kernel], ts: Sequence[Tensor], types: Mapping, peak: int | None) -> dict:
    """The graph on the left and, row for row beside it, the workspace: each tensor as its byte
    range over the steps it lives, and the bytes in use at each step."""
    steps = max((k.cluster for k in ks), default=-1) + 1
    graph, layout = _graph_view(report, ks, types, steps)
    # Rows of the memory chart line up with the graph's: step s is layout row s + 1.
    mem_x = layout.width + GUTTER
    mem_w = min(max(PAGE_W - mem_x - LIVE_GAP - LIVE_W - 70, MEM_W[0]), MEM_W[1])
    workspace = max([int(report.get("ram", {}).get("workspace_bytes") or 0)] + [t.offset + t.nbytes for t in ts])
    scale = mem_w / workspace if workspace else 0
    band = []
    for s in range(steps):
        top, bottom = layout.rows[s + 1]
        band.append((top - ROW_VGAP / 2, bottom + ROW_VGAP / 2))
    live = [live_bytes(ts, s) for s in range(steps)]
    most = max(live, default=0)
    members_at = {s: [m.name for k in ks if k.cluster == s for m in k.members] for s in range(steps)}
    rows = []
    for s in range(steps):
        top, bottom = band[s]
        alive = [t.name for t in ts if t.first <= s <= t.last]
        rows.append({"step": s, "y": top, "h": bottom - top, "mid": (top + bottom) / 2, "peak": s == peak,
                     "as_high": s != peak and live[s] == most and most > 0,
                     "live": live[s], "live_w": LIVE_W * live[s] / most if most else 0,
                     "live_text": size(live[s]) if live[s] else "",
                     "title": f"step {s}: {', '.join(members_at[s])}\n{live[s]:,} B live"
                              + (f" in {', '.join(alive)}" if alive else "")})
    rects = []
    for i, t in enumerate(ts):
        if t.first >= steps or t.last < 0:
            continue
        y0, y1 = band[max(t.first, 0)][0] + 2, band[min(t.last, steps - 1)][1] - 2
        w = max(t.nbytes * scale, 1.0)
        shape = _shape(types.get(t.name))
        label = t.name if shape else scratch_label(t.name, {}) or t.name
        title = [f"{label}: {shape}" if shape else label,
                 f"{t.nbytes:,} B at offset {t.offset:,}..{t.offset + t.nbytes:,}",
                 f"steps {t.first}..{t.last}"]
        if t.in_place_of:
            title.append(f"written in place over {t.in_place_of}")
        if t.overlaps:
            title.append(f"written over {t.overlaps}, each byte after its last read")
        rects.append({"x": mem_x + t.offset * scale, "y": y0, "w": w, "h": y1 - y0, "name": t.name,
                      "label": _fit(label, w - 6) if w >= 34 and y1 - y0 >= 16 else "",
                      "detail": _fit(f"{size(t.nbytes)} @ {t.offset:,}", w - 6) if w >= 70 and y1 - y0 >= 32 else "",
                      "hue": (i * 47) % 360, "in_place": bool(t.in_place_of),
                      "peak": peak is not None and t.first <= peak <= t.last, "title": "\n".join(title)})
    ticks = []
    if workspace:
        for f in (0, 0.25, 0.5, 0.75, 1):
            ticks.append({"x": mem_x + f * mem_w, "label": size(int(round(f * workspace)))})
    live_x = mem_x + mem_w + LIVE_GAP
    width = live_x + LIVE_W + 70
    return {"width": width, "shrink": width < 1.4 * PAGE_W, "height": HEADER + layout.height, "header": HEADER,
            "graph_w": layout.width, "mem_x": mem_x, "mem_w": mem_w, "live_x": live_x, "live_w": LIVE_W,
            "step_x": layout.width + GUTTER / 2, "engine": layout.engine, **graph, "rows": rows, "rects": rects, "ticks": ticks, "workspace": workspace,
            "mem_top": band[0][0] if band else 0, "mem_bottom": band[-1][1] if band else 0}


def _table(ks: Sequence[Kernel], types: Mapping, report: Mapping) -> dict:
    """One row per node: its step, kernel, op, output shape, MACs, parameters, activation bytes,
    and instructions when the report has them for every node."""
    rows = []
    constants = {c["name"]: c for c in report.get("constants", ())}
    code = kernel_code_bytes(report)
    for k in ks:
        read = sum(types.get(v, {}).get("bytes", 0) for v in dict.fromkeys(k.inputs) if v in types)
        for i, m in enumerate(k.members):
            outs = m.outputs or (k.outputs if not k.fused else ())
            written = sum(types.get(v, {}).get("bytes", 0) for v in outs) if outs else None
            # a node whose output a fused node consumes in registers still has a shape: its value's
            shown = outs or tuple(v for v in m.node_outputs if v in types)
            ws = weights(m.node_inputs, constants)
            constant_bytes = sum(w["bytes"] for w in ws)
            code_bytes = code.get(k.name) if i == 0 else None
            flash = constant_bytes + (code_bytes or 0)
            rows.append({"step": k.cluster, "kernel": k.name if k.fused else "", "fused_into": i > 0,
                         "name": m.name, "op": m.op,
                         "shape": ", ".join(_shape(types.get(v)) for v in shown)
                         + (" (not stored: fused)" if shown and not outs else ""),
                         "attrs_text": attributes_text(m.attrs), "weights": [w["text"] for w in ws],
                         "flash_text": _count(flash) if flash else "",
                         "flash_title": f"constants {constant_bytes:,} B" + (f" + code {code_bytes:,} B"
                                                                             if code_bytes else ""),
                         "macs": m.macs, "macs_text": _count(m.macs), "params_text": _count(m.params),
                         "read_text": _count(read) if i == 0 else "", "written_text": _count(written),
                         "instructions_text": _count(m.instructions)})
    members = [m for k in ks for m in k.members]
    with_instructions = bool(members) and all(m.instructions is not None for m in members)
    total_instr = sum(m.instructions for m in members) if with_instructions else None
    return {"rows": rows, "fusion": any(k.fused for k in ks), "instructions": with_instructions,
            "macs_total": _count(report.get("macs", sum(m.macs or 0 for m in members))),
            "params_total": _count(report.get("params", sum(m.params or 0 for m in members))),
            "instructions_total": _count(total_instr)}


def _summary(report: Mapping) -> list[dict]:
    ram, flash = report.get("ram", {}), report.get("flash", {})
    if "stack_bytes" not in ram:
        stack_text = "—"  # not measured: a plan before compilation
    else:
        stack_text = "unbounded" if ram["stack_bytes"] is None else _bytes(ram["stack_bytes"])
    groups = [
        {"title": "RAM", "total": _bytes(ram.get("total_bytes")) if "total_bytes" in ram else "", "items": [
            ("workspace", _bytes(ram.get("workspace_bytes")), f"planner {ram['workspace_planner']}"
             if ram.get("workspace_planner") else ""),
            ("workspace lower bound", _bytes(ram.get("workspace_lower_bound_bytes")),
             "at the plan's granularity (outputs over their inputs counted once)"),
            *([("operator-granularity bound", _bytes(ram["workspace_operator_lower_bound_bytes"]),
                "every kernel's inputs and outputs apart")] if "workspace_operator_lower_bound_bytes" in ram else []),
            ("stack", stack_text,
             "worst case of call(); informative on the host"
             if ram.get("stack_detail", {}).get("hosted") else "worst case of call()"),
            ("static", _bytes(ram.get("static_bytes")), ""),
            ("inputs and outputs", _bytes(ram.get("io_bytes")), "the caller's buffers, not counted above"),
        ]},
        {"title": "Flash", "total": _bytes(flash.get("total_bytes")) if "total_bytes" in flash else "", "items": [
            ("code", _bytes(flash.get("code_bytes")), ""),
            ("constants", _bytes(flash.get("constant_bytes")), ""),
            ("library code called", _bytes(flash.get("library_code_bytes")), "")
            if "library_code_bytes" in flash else None,
        ]},
        {"title": "Work", "total": "", "items": [
            ("MACs", _count(report.get("macs")), ""),
            *([("instructions per call", _count(report["instructions"]["total"]),
                f"measured: {report['instructions'].get('emulator', 'emulator')}, "
                f"{report['instructions'].get('inputs', '')}".rstrip(", "))]
              if (report.get("instructions") or {}).get("total") is not None else []),
            ("parameters", _count(report.get("params")), ""),
            ("nodes", _count(sum(1 + len(n.get("fused") or ()) for n in report.get("nodes", []))), ""),
            ("kernels", _count(len(report.get("nodes", []))), "some compute several nodes")
            if any(n.get("fused") for n in report.get("nodes", [])) else None,
            ("steps (clusters)", _count(len(report.get("clusters", []))), "nodes in one step do not depend on each other"),
        ]},
    ]
    for g in groups:
        g["items"] = [{"label": a, "value": b, "note": c} for a, b, c in filter(None, g["items"])]
    return groups


def page_context(report: Mapping) -> dict:
    ks = kernels(report)
    ts = tensors(report)
    types = _value_types(report)
    steps = max((k.cluster for k in ks), default=-1) + 1
    peak = peak_step(ts, steps)
    holders = [t for t in ts if peak is not None and t.first <= peak <= t.last]
    values = {v["name"]: v for v in (*report.get("values", []), *report.get("inputs", []), *report.get("outputs", []))}
    return {
        "large": sum(len(k.members) for k in ks) > LARGE_GRAPH_NODES,
        "graph": report.get("graph", "?"), "target": report.get("target"), "source": report.get("source"),
        "summary": _summary(report),
        "drawing": _drawing(report, ks, ts, types, peak),
        "peak_nodes": [m.name for k in ks if k.cluster == peak for m in k.members],
        "table": _table(ks, types, report),
        "peak": None if peak is None else {
            "step": peak, "bytes": _bytes(live_bytes(ts, peak)),
            "nodes": [m.name for k in ks if k.cluster == peak for m in k.members],
            "again": [s for s in range(peak + 1, steps) if live_bytes(ts, s) == live_bytes(ts, peak)],
            "tensors": [{"name": scratch_label(t.name, values) or t.name, "bytes": _count(t.nbytes),
                         "offset": _count(t.offset),
                         "shape": _shape(types.get(t.name)) if t.name in values else ""} for t in holders]},
        "tensors": [{"name": t.name, "label": scratch_label(t.name, values) or t.name,
                     "shape": _shape(types.get(t.name)) if t.name in values else "", "bytes": _count(t.nbytes),
                     "offset": _count(t.offset), "end": _count(t.offset + t.nbytes), "first": t.first, "last": t.last,
                     "in_place_of": t.in_place_of or "", "peak": t in holders} for t in ts],
    }


def render_page(report: Mapping) -> str:
    """The HTML page for a report (NAME.json or NAME.plan.json); deterministic for a given report."""
    return _TEMPLATES.get_template("report.html.j2").render(page_context(report))


def write_page(report: Mapping, path: str | Path) -> Path:
    """Write the page atomically (a build never sees half of it)."""
    return write_if_changed(Path(path), render_page(report).encode("utf-8"))
