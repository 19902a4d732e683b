"""The generated files of the example graphs: they compile cleanly under strict flags, contain
nothing firmware cannot afford, are readable (kernels named after nodes, YAML locations),
are deterministic, and the JSON report says what the code does."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES, GRAPHS, ROOT

RUNTIME_INCLUDE = ROOT / "runtime_cpp" / "include"
GENERATED = (".hpp", ".h", ".cpp", "_runner.cpp", ".plan.json")
STRICT = ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Wshadow", "-Wconversion",
          "-Wsign-conversion", "-Wdouble-promotion", "-Wold-style-cast", "-Wcast-align", "-Wundef",
          "-Wfloat-equal", "-fno-exceptions", "-fno-rtti"]
C_STRICT = ["-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only"]


def _compile(compiler: str, flags: list[str], source: Path, folder: Path, out: Path) -> None:
    cmd = [compiler, *flags, f"-I{folder}", f"-I{RUNTIME_INCLUDE}", "-c", str(source), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"


@pytest.mark.parametrize("compiler", ["g++", "clang++"])
@pytest.mark.parametrize("graph", EXAMPLES)
def test_sources_compile_without_warnings(graph, compiler, example_build, tmp_path):
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed")
    folder = example_build / graph
    for source in (f"{graph}.cpp", f"{graph}_runner.cpp"):
        _compile(compiler, STRICT, folder / source, folder, tmp_path / f"{source}.o")


@pytest.mark.parametrize("std", ["c99", "c11"])
@pytest.mark.parametrize("graph", EXAMPLES)
def test_c_header_compiles_as_c(graph, std, example_build, tmp_path):
    upper = graph.upper()
    user = tmp_path / "user.c"
    user.write_text(f'#include "{graph}.h"\n'
                    f"static unsigned char ws[{upper}_WORKSPACE_BYTES];\n"
                    f"int main(void) {{ {graph}_init_ws(ws); return 0; }}\n")
    cmd = ["gcc", f"-std={std}", *C_STRICT, f"-I{example_build / graph}", str(user)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _code_only(text: str) -> str:
    """The text without comments, string and character literals."""
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', " ", text, flags=re.S)


@pytest.mark.parametrize("graph", EXAMPLES)
def test_no_heap_exceptions_or_rtti(graph, example_build):
    forbidden = re.compile(r"\b(new|delete|malloc|calloc|realloc|free|throw|try|catch|typeid|"
                           r"dynamic_cast|std::vector|std::string)\b")
    for suffix in (".hpp", ".h", ".cpp"):
        code = _code_only((example_build / graph / f"{graph}{suffix}").read_text())
        assert not forbidden.findall(code), f"{graph}{suffix}: {forbidden.findall(code)}"
        # dependency-free: the model includes only its own headers, the runtime's buffer types
        # and freestanding-friendly standard headers
        includes = set(re.findall(r'#include\s*([<"][^>"]+[>"])', code))
        allowed = {f'"{graph}.hpp"', f'"{graph}.h"', '"tinsmith/buffer.hpp"', '"tinsmith/math.hpp"',
                   "<cstddef>", "<cstdint>", "<cstring>", "<stddef.h>", "<stdint.h>"}
        assert includes <= allowed, f"{graph}{suffix}: {includes - allowed}"


@pytest.mark.parametrize("graph", EXAMPLES)
def test_kernels_are_named_after_nodes_with_their_yaml_location(graph, example_build):
    report = json.loads((example_build / graph / f"{graph}.json").read_text())
    cpp = (example_build / graph / f"{graph}.cpp").read_text()
    yaml_lines = (GRAPHS / f"{graph}.yaml").read_text().splitlines()
    assert report["nodes"]
    for node in report["nodes"]:
        name, source = node["name"], node["source"]
        path, line, col = source.rsplit(":", 2)
        assert path == f"graphs/{graph}.yaml"
        # the comment right above the kernel carries the node's name and YAML location
        assert re.search(rf"^// {name}: [^\n]*\b{re.escape(source)}\n(?:[^\n]*\n)?void {name}\(", cpp, re.M), name
        # ...and the location is the node's line: the one naming it, or the composite
        # (LayerNormalization, Linear) that expanded into it
        text = yaml_lines[int(line) - 1]
        declared = re.search(r"name: (\w+)", text)
        assert declared and (name == declared[1] or name.startswith(declared[1] + "_")), (source, text)
        assert text[int(col) - 1] in "{-o", (source, text)
        assert f"kernels::{name}(" in cpp


def test_generation_is_deterministic(example_build, tmp_path):
    from tinsmith.pipeline import compile_graph

    assert compile_graph(GRAPHS / "encoder.yaml").files == compile_graph(GRAPHS / "encoder.yaml").files
    # separate processes with different string hash seeds, as separate builds would be
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    for seed in ("1", "2"):
        for graph in EXAMPLES:
            subprocess.run([sys.executable, "-m", "tinsmith", "generate", f"graphs/{graph}.yaml", "--target", "host",
                            "-o", str(tmp_path / seed / graph)], cwd=ROOT, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": path})
    for graph in EXAMPLES:
        for suffix in GENERATED:
            name = f"{graph}{suffix}"
            a, b = (tmp_path / "1" / graph / name).read_bytes(), (tmp_path / "2" / graph / name).read_bytes()
            assert a == b, name
            assert a == (example_build / graph / name).read_bytes(), f"{name} differs from the SCons build"


# MACs worked out by hand: Gemm/MatMul count M*K*N, nothing else counts
MACS = {"mlp": 1 * 64 * 32 + 1 * 32 * 10,
        "encoder": 3 * 8 * 16 * 16 + 8 * 16 * 8 + 8 * 8 * 16 + 8 * 16 * 16 + 8 * 16 * 32 + 8 * 32 * 16,
        "branches": 0}
CONSTANT_BYTES = {"mlp": 4 * (64 * 32 + 32 + 32 * 10 + 10)}
IO = {"mlp": ([("x", [1, 64])], [("probs", [1, 10])]),
      "encoder": ([("tokens", [8, 16])], [("encoded", [8, 16])]),
      "branches": ([("x", [2, 3, 4]), ("y", [4])], [("merged", [2, 24]), ("stats", [2, 6])])}


@pytest.mark.parametrize("graph", EXAMPLES)
def test_report_describes_the_generated_code(graph, example_build):
    folder = example_build / graph
    report = json.loads((folder / f"{graph}.plan.json").read_text())
    assert report["graph"] == graph and report["source"] == f"graphs/{graph}.yaml"
    ins, outs = IO[graph]
    assert [(v["name"], v["shape"], v["dtype"], v["bytes"]) for v in report["inputs"]] == \
        [(n, s, "float32", 4 * _prod(s)) for n, s in ins]
    assert [(v["name"], v["shape"], v["dtype"], v["bytes"]) for v in report["outputs"]] == \
        [(n, s, "float32", 4 * _prod(s)) for n, s in outs]
    assert report["macs"] == MACS[graph] == sum(n["macs"] for n in report["nodes"])
    if graph in CONSTANT_BYTES:
        assert report["flash"]["constant_bytes"] == CONSTANT_BYTES[graph]
    assert report["flash"]["constant_bytes"] == sum(c["bytes"] for c in report["constants"])

    # the workspace size is the same number in the report and both headers
    ws = report["ram"]["workspace_bytes"]
    assert re.search(rf"kWorkspaceBytes = {ws};", (folder / f"{graph}.hpp").read_text())
    assert re.search(rf"#define {graph.upper()}_WORKSPACE_BYTES {ws}u", (folder / f"{graph}.h").read_text())
    assert ws <= 1.05 * report["ram"]["workspace_lower_bound_bytes"]

    # clusters: every node in exactly one, and each reads only values from earlier clusters
    nodes = {n["name"]: n for n in report["nodes"]}
    assert sorted(sum(report["clusters"], [])) == sorted(nodes)
    produced_in = {out: n["cluster"] for n in report["nodes"] for out in n["outputs"]}
    for c, names in enumerate(report["clusters"]):
        assert names, f"cluster {c} is empty"
        for name in names:
            assert nodes[name]["cluster"] == c
            for value in nodes[name]["inputs"]:
                assert produced_in.get(value, -1) < c, (name, value)

    # plan: aligned, inside the workspace, and values alive at the same time never share bytes
    plan = report["plan"]
    graph_outputs = {n for n, _ in outs}
    for p in plan:
        assert p["offset"] % 16 == 0 and p["offset"] + p["bytes"] <= ws, p
        assert p["value"] in produced_in and p["value"] not in graph_outputs, p
    writes = {(o, i) for n in report["nodes"] for o in n["outputs"] for i in n["inputs"]}

    def in_place(a, b):  # an output written over (part of) an input that dies at its node
        return any((o["value"], i["value"]) in writes and i["last_cluster"] == o["first_cluster"] and (
                   (o["offset"] == i["offset"] and o["bytes"] == i["bytes"]) or
                   # an overlap the kernel's access order allows (the build's plan checker proved it)
                   (o.get("overlaps") == i["value"] and o["offset"] - i["offset"] == o["offset_from_input"]))
                   for o, i in ((a, b), (b, a)))

    for i, a in enumerate(plan):
        for b in plan[i + 1:]:
            alive_together = a["first_cluster"] <= b["last_cluster"] and b["first_cluster"] <= a["last_cluster"]
            disjoint = a["offset"] + a["bytes"] <= b["offset"] or b["offset"] + b["bytes"] <= a["offset"]
            assert disjoint or not alive_together or in_place(a, b), (a, b)


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def test_c_api_of_a_graph_without_workspace_accepts_null(tmp_path):
    """A graph with no intermediates declares a workspace of 0 bytes; C callers pass NULL."""
    from tinsmith.pipeline import compile_graph, write_files

    (tmp_path / "flip.yaml").write_text(
        "graph: flip\ninputs:\n  x: {dtype: float32, shape: [2, 3]}\noutputs: [y]\n"
        "nodes:\n  - {op: Transpose, name: flip, inputs: [x], outputs: [y]}\n")
    write_files(compile_graph(tmp_path / "flip.yaml").files, tmp_path)
    assert "#define FLIP_WORKSPACE_BYTES 0u" in (tmp_path / "flip.h").read_text()
    (tmp_path / "main.c").write_text(
        '#include <stdio.h>\n#include "flip.h"\n'
        "int main(void) {\n"
        "  const float x[FLIP_SIZE_x] = {1, 2, 3, 4, 5, 6};\n  float y[FLIP_SIZE_y];\n"
        "  flip_init_ws(NULL);\n  flip_call(x, y, NULL);\n"
        '  for (unsigned i = 0; i < FLIP_SIZE_y; ++i) printf("%g ", (double)y[i]);\n  return 0;\n}\n')
    _compile("g++", STRICT, tmp_path / "flip.cpp", tmp_path, tmp_path / "flip.o")
    _compile("gcc", ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"], tmp_path / "main.c", tmp_path,
             tmp_path / "main.o")
    subprocess.run(["gcc", "-o", str(tmp_path / "flip"), str(tmp_path / "main.o"), str(tmp_path / "flip.o"), "-lm"],
                   check=True)
    out = subprocess.run([str(tmp_path / "flip")], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "4", "2", "5", "3", "6"]
