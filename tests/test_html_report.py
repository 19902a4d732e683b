"""The report as a page (NAME.html): written by the SCons build beside NAME.json, self-contained,
showing every node, the peak of the workspace and what holds it, and a table per layer that
agrees with the JSON. The page is read back with Python's HTML parser, and the figures it must
show are worked out here from the JSON, independently of the code that draws them.
"""
from __future__ import annotations

import copy
import functools
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tinsmith.measure.page import render_page
from conftest import EXAMPLES, GRAPHS, scons

VOID = {"meta", "link", "br", "img", "input", "hr", "area", "base", "col", "embed", "source", "track", "wbr"}


class Element:
    def __init__(self, tag: str, attrs: dict, parent: "Element | None"):
        self.tag, self.attrs, self.parent, self.children, self.text = tag, attrs, parent, [], []

    @property
    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def all_text(self) -> str:
        return "".join(self.text + [c.all_text() for c in self.children])

    def iter(self):
        yield self
        for c in self.children:
            yield from c.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs):
        return [e for e in self.iter() if (tag is None or e.tag == tag) and (cls is None or cls in e.classes)
                and all(e.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def find(self, *args, **kwargs) -> "Element":
        found = self.find_all(*args, **kwargs)
        assert found, f"no {args} {kwargs}"
        return found[0]


class Tree(HTMLParser):
    """The page as a tree of elements, checking that every element it opens is closed."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.root = self.current = Element("#root", {}, None)
        self.feed(text)
        self.close()
        assert self.current is self.root, f"<{self.current.tag}> is never closed"

    def handle_starttag(self, tag, attrs):
        element = Element(tag, dict(attrs), self.current)
        self.current.children.append(element)
        if tag not in VOID:
            self.current = element

    def handle_startendtag(self, tag, attrs):
        self.current.children.append(Element(tag, dict(attrs), self.current))

    def handle_endtag(self, tag):
        assert self.current.tag == tag, f"</{tag}> closes <{self.current.tag}>"
        self.current = self.current.parent

    def handle_data(self, data):
        self.current.text.append(data)


def page(folder: Path, name: str) -> tuple[Element, dict, str]:
    text = (folder / name / f"{name}.html").read_text(encoding="utf-8")
    return Tree(text).root, json.loads((folder / name / f"{name}.json").read_text(encoding="utf-8")), text


def unfused_plan(name: str) -> dict:
    """The plan of an example graph compiled with fusion off: one kernel per node, for the tests
    that make fused reports of their own."""
    from tinsmith.pipeline import compile_graph
    return json.loads(compile_graph(GRAPHS / f"{name}.yaml", fusion=False).files[f"{name}.plan.json"])


def own_figures(report: dict) -> dict[str, tuple[int, int]]:
    """Each node's own (MACs, parameters), in schedule order, whether a kernel computes it
    alone or fused into another node's kernel."""
    figures = {}
    for k in report["nodes"]:
        fused = k.get("fused", [])
        figures[k["name"]] = (k.get("node_macs", k["macs"]), k["params"] - sum(f["params"] for f in fused))
        figures.update({f["name"]: (f["macs"], f["params"]) for f in fused})
    return figures


def holders_of_peak(report: dict) -> tuple[int, set[str]]:
    """The first step with the most workspace bytes in use (overlapping ranges counted once) and
    the values alive then, from the plan's offsets and lifetimes."""
    best = None
    for step in range(len(report["clusters"])):
        alive = [p for p in report["plan"] if p["first_cluster"] <= step <= p["last_cluster"]]
        used = set()
        for p in alive:
            used.update(range(p["offset"], p["offset"] + p["bytes"]))
        if best is None or len(used) > best[0]:
            best = (len(used), step, {p["value"] for p in alive})
    return best[1], best[2]


@pytest.mark.parametrize("name", EXAMPLES)
def test_page_shows_every_node_and_value(example_build, name):
    root, report, _ = page(example_build, name)
    drawn = {g.attrs["data-node"]: g for g in root.find_all("g", "node")}
    fused = [f for n in report["nodes"] for f in n.get("fused", ())]  # drawn inside their kernel's box
    assert set(drawn) == {n["name"] for n in report["nodes"]} | {f["name"] for f in fused}
    for n in report["nodes"]:
        texts = [t.all_text() for t in drawn[n["name"]].find_all("text")]
        assert n["name"] in texts and n["op"] in texts, texts
    shapes = {v["name"]: "×".join(map(str, v["shape"])) for v in report["values"]}
    for n in (n for n in report["nodes"] if "fused" not in n):  # each node shows the shape it writes
        assert shapes[n["outputs"][0]] in drawn[n["name"]].find("text", "shape").all_text()
    tensors = {g.attrs["data-tensor"] for g in root.find("g", id="memory").find_all("g", "tensor")}
    assert tensors == {p["value"] for p in report["plan"]}
    ports = {(g.attrs["class"].split()[-1], g.attrs["data-value"]) for g in root.find_all("g", "port")}
    assert ports == {("port-in", v["name"]) for v in report["inputs"]} | {("port-out", v["name"]) for v in report["outputs"]}
    if fused:  # edges inside a fused kernel: see test_fused_kernels_are_boxes_around_their_nodes
        return
    # an edge per producer -> reader pair, naming the values it carries
    carried = {v for e in root.find_all("path", "edge") for v in e.attrs["data-v"].split()}
    produced = {v for n in report["nodes"] for v in n["outputs"]} | {v["name"] for v in report["inputs"]}
    read = {v for n in report["nodes"] for v in n["inputs"]} | {v["name"] for v in report["outputs"]}
    assert carried == produced & read


@pytest.mark.parametrize("name", EXAMPLES)
def test_peak_is_marked_with_the_tensors_that_hold_it(example_build, name):
    root, report, _ = page(example_build, name)
    step, holders = holders_of_peak(report)
    peak = root.find(id="peak")
    assert int(peak.attrs["data-step"]) == step
    assert {li.attrs["data-tensor"] for li in peak.find_all("li", "peak-tensor")} == holders
    marked = {g.attrs["data-tensor"] for g in root.find("g", id="memory").find_all("g", "tensor") if "peak" in g.classes}
    assert marked == holders
    (bar,) = [g for g in root.find_all("g", "live") if "peak" in g.classes]
    assert int(bar.attrs["data-step"]) == step
    at_peak = {g.attrs["data-node"] for g in root.find_all("g", "node") if "at-peak" in g.classes}
    kernels = {k["name"]: k for k in report["nodes"]}
    assert at_peak == {m for k in report["clusters"][step]
                       for m in [k, *(f["name"] for f in kernels[k].get("fused", []))]}


@pytest.mark.parametrize("name", EXAMPLES)
def test_layer_table_agrees_with_the_report(example_build, name):
    root, report, _ = page(example_build, name)
    table = root.find("table", id="layers")
    rows = {tr.attrs["data-node"]: tr for tr in table.find_all("tr", "layer")}
    figures = own_figures(report)
    assert list(rows) == list(figures)
    number = lambda td: int(td.all_text().replace(",", ""))
    for name, (macs, params) in figures.items():
        assert number(rows[name].find("td", "macs")) == macs
        assert number(rows[name].find("td", "params")) == params
    total = table.find("tr", "total").find_all("td")
    assert str(f"{report['macs']:,}") in [td.all_text() for td in total]
    headers = [th.all_text() for th in table.find_all("th")]
    assert "instructions" not in headers  # no per-layer figures in the report: no column


@pytest.mark.parametrize("name", EXAMPLES)
def test_page_is_self_contained(example_build, name):
    root, report, text = page(example_build, name)
    for needle in ("http:", "https:", "//"):
        assert needle not in text
    assert not root.find_all("link") and not root.find_all("img") and not root.find_all("iframe")
    assert all("src" not in e.attrs and "href" not in e.attrs for e in root.iter())
    assert [s.attrs for s in root.find_all("script")] == [{}]
    summary = root.find(id="summary").all_text()
    for figure in (report["ram"]["workspace_bytes"], report["ram"]["workspace_lower_bound_bytes"],
                   report["ram"]["stack_bytes"], report["flash"]["code_bytes"], report["flash"]["constant_bytes"]):
        assert f"{figure:,} B" in summary


def renamed(value, names: dict):
    """`value` (a report) with every string in `names` replaced, wherever it appears."""
    if isinstance(value, dict):
        return {renamed(k, names): renamed(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed(v, names) for v in value]
    return names.get(value, value) if isinstance(value, str) else value


HOSTILE = {"mlp": "<script>alert('graph')</script>", "fc1": "<script>alert(1)</script>",
           "h1": '"><img src=x onerror=alert(2)>', "x": "</svg><b>&amp;x</b>"}


def test_hostile_names_appear_as_text():
    text = render_page(renamed(unfused_plan("mlp"), HOSTILE))
    root = Tree(text).root
    assert len(root.find_all("script")) == 1 and not root.find_all("img") and not root.find_all("b")
    assert "<script>alert" not in text and "<img" not in text
    (node,) = [g for g in root.find_all("g", "node") if g.attrs["data-node"] == HOSTILE["fc1"]]
    assert HOSTILE["fc1"] in [t.all_text() for t in node.find_all("text")]
    assert root.find("h1").all_text().startswith(HOSTILE["mlp"])
    assert any(g.attrs["data-tensor"] == HOSTILE["h1"] for g in root.find_all("g", "tensor"))
    assert any(g.attrs["data-value"] == HOSTILE["x"] for g in root.find_all("g", "port"))


def fused(report: dict, ops=("Relu", "Softmax")) -> dict:
    """`report` as kernel fusion writes it: a node of `ops` whose first input only it reads is
    computed by the kernel that writes that input, listed under the kernel's `fused`; clusters and
    lifetimes are those of the kernels that remain."""
    r = copy.deepcopy(report)
    kernels, producer = [], {}
    readers = {}
    for n in r["nodes"]:
        for v in n["inputs"]:
            readers[v] = readers.get(v, 0) + 1
    for n in r["nodes"]:
        head = producer.get(n["inputs"][0]) if n["inputs"] else None
        if n["op"] in ops and head is not None and readers[n["inputs"][0]] == 1:
            head.setdefault("fused", []).append({k: n[k] for k in ("name", "op", "macs", "params", "outputs", "source")})
            head.setdefault("node_macs", head["macs"])
            head["macs"] += n["macs"]
            head["params"] += n["params"]
            head["outputs"] = n["outputs"]
        else:
            head = n
            kernels.append(n)
        for v in n["outputs"]:
            producer[v] = head
    steps = sorted({k["cluster"] for k in kernels})
    for k in kernels:
        k["cluster"] = steps.index(k["cluster"])
    r["nodes"], r["clusters"] = kernels, [[k["name"] for k in kernels if k["cluster"] == c] for c in range(len(steps))]
    kept = []
    for p in r["plan"]:
        read = [k["cluster"] for k in kernels if p["value"] in k["inputs"]]
        if read:
            kept.append({**p, "first_cluster": producer[p["value"]]["cluster"], "last_cluster": max(read)})
    r["plan"] = kept
    return r


def test_fused_kernels_are_boxes_around_their_nodes():
    report = unfused_plan("mlp")
    r = fused(report)
    assert [(k["name"], [f["name"] for f in k.get("fused", [])]) for k in r["nodes"]] == \
        [("fc1", ["act1"]), ("fc2", ["classify"])]
    root = Tree(render_page(r)).root
    nodes = {g.attrs["data-node"]: g.find("rect").attrs for g in root.find_all("g", "node")}
    assert set(nodes) == {n["name"] for n in report["nodes"]}  # every node still drawn
    boxes = {g.attrs["data-kernel"]: g.find("rect").attrs for g in root.find_all("g", "kernel")}
    assert set(boxes) == {k["name"] for k in r["nodes"] if k.get("fused")}
    inside = lambda a, b: all(float(a[k]) >= float(b[k]) for k in ("x", "y")) and \
        float(a["x"]) + float(a["width"]) <= float(b["x"]) + float(b["width"]) and \
        float(a["y"]) + float(a["height"]) <= float(b["y"]) + float(b["height"])
    for k in r["nodes"]:
        members = [k["name"]] + [f["name"] for f in k.get("fused", [])]
        for m in members:
            if k.get("fused"):
                assert inside(nodes[m], boxes[k["name"]]), m
        others = [b for name, b in boxes.items() if name != k["name"]]
        assert not any(inside(nodes[m], b) for m in members for b in others)
    table = root.find("table", id="layers")
    assert "kernel" in [th.all_text() for th in table.find_all("th")]
    macs = {tr.attrs["data-node"]: int(tr.find("td", "macs").all_text().replace(",", "")) for tr in table.find_all("tr", "layer")}
    assert macs == {n["name"]: n["macs"] for n in report["nodes"]}  # each node's own MACs, fused or not
    assert not Tree(render_page(report)).root.find_all("g", "kernel")  # no fusion in the plan: no boxes


def test_instructions_column_when_the_report_has_them():
    r = unfused_plan("encoder")
    for i, n in enumerate(r["nodes"]):
        n["instructions"] = 1000 + 37 * i
    table = Tree(render_page(r)).root.find("table", id="layers")
    assert "instructions" in [th.all_text() for th in table.find_all("th")]
    got = {tr.attrs["data-node"]: int(tr.find("td", "instructions").all_text().replace(",", ""))
           for tr in table.find_all("tr", "layer")}
    assert got == {n["name"]: n["instructions"] for n in r["nodes"]}


def test_layout_keeps_boxes_apart_and_edges_downward(tmp_path_factory):
    import re

    from shared_builds import every_plan
    from tinsmith.measure.page import page_context
    plans = every_plan(tmp_path_factory.getbasetemp())  # (the session's, shared with the browser's pages)
    for path in sorted(GRAPHS.glob("*.yaml")):
        report = json.loads((plans / f"{path.stem}.plan.json").read_text(encoding="utf-8"))
        drawing = page_context(report)["drawing"]
        boxes = [(b["x"], b["y"], b["w"], b["h"]) for b in drawing["ports"] + drawing["nodes"]]
        for i, (x, y, w, h) in enumerate(boxes):
            for (x2, y2, w2, h2) in boxes[i + 1:]:
                assert x + w <= x2 or x2 + w2 <= x or y + h <= y2 or y2 + h2 <= y, (path.name, boxes[i])
            assert 0 <= x and x + w <= drawing["graph_w"]
        assert drawing["engine"] == "dot"  # Graphviz is installed where the tests run
        outlines = boxes + [(g["x"], g["y"], g["w"], g["h"]) for g in drawing["groups"]]
        for e in drawing["edges"]:
            points = [tuple(map(float, p.split(","))) for p in re.split(r"[MCL ]+", e["path"]) if p]
            (x0, y0), (x1, y1) = points[0], points[-1]
            assert y0 < y1, (path.name, e["path"])
            # from the bottom of the box it leaves to the top of the box it enters
            assert any(abs(y0 - (y + h)) < 1.5 and x - 1 <= x0 <= x + w + 1 for x, y, w, h in outlines), e["path"]
            assert any(abs(y1 - y) < 1.5 and x - 1 <= x1 <= x + w + 1 for x, y, w, h in outlines), e["path"]


def test_scons_clean_removes_the_page(tmp_path):
    build = tmp_path / "build"
    args = (f"graphs={GRAPHS / 'mlp.yaml'}", f"build_dir={build}")
    scons("-Q", *args)
    assert (build / "mlp" / "mlp.html").is_file() and (build / "mlp" / "mlp.json").is_file()
    assert (build / "mlp" / "mlp.verified").is_file()
    scons("-Q", "-c", *args)
    assert not (build / "mlp" / "mlp.html").exists() and not (build / "mlp" / "mlp.json").exists()
    # nothing the build wrote is left behind, the verification stamp included
    assert [p.name for p in build.rglob("*") if p.is_file()] == [".sconsign.dblite"]


def test_without_graphviz_the_page_keeps_rows_and_says_so(monkeypatch, tmp_path):
    """Without Graphviz's programs on PATH the boxes stay in their schedule rows, apart, edges
    straight from a box's bottom to a later box's top, and the page says how to get a layout."""
    from tinsmith.measure.page import page_context
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no dot
    report = unfused_plan("branches")
    context = page_context(report)
    drawing = context["drawing"]
    assert drawing["engine"] == "rows"
    boxes = [(b["x"], b["y"], b["w"], b["h"]) for b in drawing["ports"] + drawing["nodes"]]
    for i, (x, y, w, h) in enumerate(boxes):
        for (x2, y2, w2, h2) in boxes[i + 1:]:
            assert x + w <= x2 or x2 + w2 <= x or y + h <= y2 or y2 + h2 <= y, boxes[i]
    assert all(e["path"].startswith("M") and " L" in e["path"] for e in drawing["edges"])
    assert "install Graphviz" in render_page(report)


def _plan(model: Path, target: str) -> dict:
    """The model's plan for the target, compiled once per module (several tests read vww's for
    the Cortex-M4); each caller gets its own copy."""
    return copy.deepcopy(_compiled_plan(model, target))


@functools.lru_cache(maxsize=None)
def _compiled_plan(model: Path, target: str) -> dict:
    from tinsmith.pipeline import compile_graph
    compiled = compile_graph(model, target=target)
    return json.loads(compiled.files[f"{compiled.graph.name}.plan.json"])


def _rows(root: Element) -> dict[str, Element]:
    return {tr.attrs["data-node"]: tr for tr in root.find("table", id="layers").find_all("tr", cls="layer")}


def test_layer_rows_show_attributes_weights_quantization_and_flash():
    """The int8 kws on the Cortex-M4: each convolution row names its strides and pads, its weights'
    shape and type with their per-channel scales, and its flash: the bytes of the constants it
    reads, worked out here from the report's constants."""
    plan = _plan(Path(__file__).resolve().parents[1] / "models" / "kws_dscnn_int8.tflite", "cortex-m4")
    rows = _rows(Tree(render_page(plan)).root)
    constants = {c["name"]: c for c in plan["constants"]}
    node = next(n for n in plan["nodes"] if n["op"] == "QDepthwise")
    row = rows[node["name"]]
    attrs = row.find("td", cls="attrs").all_text()
    assert f"strides {'×'.join(map(str, node['attrs']['strides']))}" in attrs
    assert f"pads {'×'.join(map(str, node['attrs']['pads']))}" in attrs
    assert "dilations" not in attrs  # all 1: a default is not worth a word
    weight = constants[node["node_inputs"][1]]
    q = weight["quant"]
    assert weight["dtype"] == "int8" and q["channels"] == weight["shape"][-1]
    shown = [d.all_text() for d in row.find("td", cls="weights").find_all("div")]
    assert shown[0] == (f"{'×'.join(map(str, weight['shape']))} int8 ({q['channels']} scales "
                        f"{q['scale_min']:.3g}–{q['scale_max']:.3g} (axis {q['axis']}), zero point 0)")
    read = sum(constants[v]["bytes"] for v in dict.fromkeys(node["node_inputs"]) if v in constants)
    assert int(row.find("td", cls="flash").all_text().replace(",", "")) == read
    # activations: one scale and zero point each, in the report's values
    value = next(v for v in plan["values"] if v["name"] == node["outputs"][0])
    assert set(value["quant"]) == {"scale", "zero_point"}


def test_conv_row_shows_its_output_shape_when_a_fused_relu_stores_it():
    plan = _plan(GRAPHS / "vww_mobilenet.yaml", "cortex-m4")
    rows = _rows(Tree(render_page(plan)).root)
    kernel = next(n for n in plan["nodes"] if n["op"] == "Conv" and n.get("fused"))
    relu_out = next(v for v in plan["values"] if v["name"] == kernel["outputs"][0])
    shape = "×".join(map(str, relu_out["shape"])) + " " + relu_out["dtype"]
    assert rows[kernel["name"]].find("td", cls="shape").all_text() == f"{shape} (not stored: fused)"
    assert rows[kernel["fused"][0]["name"]].find("td", cls="shape").all_text() == shape
    attrs = rows[kernel["name"]].find("td", cls="attrs").all_text()
    assert "kernel " in attrs and "strides " in attrs


def test_scratch_buffers_have_readable_names():
    """A kernel's scratch buffer (planned as KERNEL.BUFFER) reads as such, with no made-up shape."""
    plan = _plan(GRAPHS / "vww_mobilenet.yaml", "cortex-m4")
    scratch = [p["value"] for p in plan["plan"] if "." in p["value"]]
    assert scratch, "vww on the Cortex-M4 plans a scratch pixel buffer"
    root = Tree(render_page(plan)).root
    for name in scratch:
        kernel, buffer = name.rsplit(".", 1)
        row = root.find("tr", data_tensor=name)
        cells = [td.all_text() for td in row.find_all("td")]
        assert cells[0] == f"scratch '{buffer}' of {kernel}" and cells[1] == "", cells
    assert "scalar" not in root.find("table", id="tensors").all_text()


def test_measured_code_bytes_join_the_layer_flash():
    plan = unfused_plan("mlp")
    first = plan["nodes"][0]
    plan["flash"] = {"functions": [{"name": f"mlp::(anonymous namespace)::kernels::{first['name']}(float const*)",
                                    "symbol": "x", "bytes": 312}]}
    constants = {c["name"]: c["bytes"] for c in plan["constants"]}
    read = sum(constants.get(v, 0) for v in dict.fromkeys(first["node_inputs"]))
    cell = _rows(Tree(render_page(plan)).root)[first["name"]].find("td", cls="flash")
    assert int(cell.all_text().replace(",", "")) == read + 312
    assert cell.attrs["title"] == f"constants {read:,} B + code 312 B"


def test_large_graphs_fold_and_scroll_in_their_own_box():
    plan = _plan(GRAPHS / "vww_mobilenet.yaml", "host")
    root = Tree(render_page(plan)).root
    for section in ("graph-section", "layers-section"):
        details = root.find("details", id=section)
        assert "open" in details.attrs and details.find("summary")
        assert "tall" in details.find("div", cls="scroll").classes
    assert root.find("input", id="search")
    small = Tree(render_page(unfused_plan("mlp"))).root
    assert "tall" not in small.find("details", id="graph-section").find("div", cls="scroll").classes


def test_dot_runs_bounded_simplex_passes_on_large_graphs_only():
    """A large graph's layout asks dot for a bounded number of network-simplex passes per node (an
    LSTM's 622 boxes took 20 s of CPU unbounded, a landmark model minutes); small graphs keep
    dot's full search, so their pages do not change."""
    from tinsmith.measure.page_layout import BOUNDED_ABOVE, Box, _dot_source
    for count in (BOUNDED_ABOVE, BOUNDED_ABOVE + 1):
        boxes = [Box(i, i // 4, 40.0, 20.0) for i in range(count)]
        edges = [(i, i + 4) for i in range(count - 4)]
        source, _ = _dot_source(boxes, edges, 24, 34)
        assert ("nslimit=" in source) == (count > BOUNDED_ABOVE)
