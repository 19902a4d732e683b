"""Hostile names and paths stay outside the code: a model file, a weight file or the folder
they sit in cannot write a line of C or C++, a key of a graph file or a line of a message.

Each case either fails with one located error or builds, with the real SCons, g++ and
libclang, into code whose comments and strings hold the hostile text and whose code does not:
the code is what g++ itself sees once it has removed the comments (`-fpreprocessed -E`), and
the compiled runner agrees with NumPy or ONNX Runtime (rtol 1e-5, atol 1e-6: one short
float32 dot product or an elementwise op per output).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import ROOT, run_runner, scons, tinsmith
from tinsmith.escape import (UnescapedText, c_comment, c_string, cpp_templates, json_text, ld_comment,
                            one_line, yaml_comment, yaml_scalar)
from tinsmith.load.build_info import model_graph_name
from tinsmith.load.identifiers import identifier_problem, system_names

RTOL, ATOL = 1e-5, 1e-6
PAYLOAD = "int injected = 1;"
HOSTILE = [
    f"a\n{PAYLOAD}\n", f"a\r{PAYLOAD}", f"*/ {PAYLOAD} /*", f"models*/ {PAYLOAD}", "ends in a backslash\\",
    "backslash then spaces\\  ", "trigraph ??/", "??=define x", "/* opens", "// slashes", "tab\there",
    "esc \x1b[31m red", "line\u2028separator", "bidi \u202e override", "nul \x00 byte", "é ü 中",
    "bad utf-8 \udcff", 'quote " and \\" backslash',
]
ONE_LINE = re.compile(r"^\S.*(:\d+:\d+|\.onnx|\.tflite): (error|note): ")


def code_without_comments(path: Path) -> str:
    """What g++ compiles of `path` once comments are gone (directives kept, nothing expanded)."""
    proc = subprocess.run(["g++", "-x", "c++", "-fpreprocessed", "-dD", "-E", "-P", str(path)],
                          capture_output=True, text=True, check=True)
    return proc.stdout


def generated_sources(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix in (".cpp", ".h", ".hpp"))


def assert_not_in_code(folder: Path, word: str = "injected") -> None:
    """`word` is nowhere in the generated code outside comments and string literals."""
    for path in generated_sources(folder):
        code = re.sub(r'"(\\.|[^"\\])*"', '""', code_without_comments(path))
        assert word not in code, f"{path.name} holds {word!r} outside comments:\n{code}"


# --- the escaping functions, against the tools that read their output ----------------------------
def test_comments_and_strings_compile_to_exactly_the_text(tmp_path):
    """Each hostile text in a // comment, a /* */ comment and a string literal: g++ (C++17) and
    gcc (C89, which reads trigraphs) compile it under -Wall -Werror, no payload runs (#error
    would stop them), the line after each comment is still code, and the program prints the
    exact bytes of each text (up to a NUL, where C strings end)."""
    texts = HOSTILE + ["\n#error injected\n", "*/\n#error injected\n/*"]
    lines = ["#include <cstdio>", "int main() {", "  int seen = 0;"]
    for text in texts:
        lines += [f"  // {c_comment(text)}", "  seen += 1;", f"  /* {c_comment(text)} */ seen += 1;",
                  f'  for (const char* p = "{c_string(text)}"; *p; ++p) std::printf("%02x", *p & 0xff);',
                  '  std::printf("\\n");']
    lines += [f"  return seen == {2 * len(texts)} ? 0 : 1;", "}"]
    source = tmp_path / "t.cpp"
    source.write_text("\n".join(lines) + "\n")
    subprocess.run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-o", str(tmp_path / "t"), str(source)],
                   check=True)
    out = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True)
    assert out.returncode == 0
    assert out.stdout.splitlines() == [t.encode("utf-8", "surrogateescape").split(b"\0")[0].hex()
                                       for t in texts]
    c = tmp_path / "t.c"
    c.write_text("".join(f'/* {c_comment(t)} */ static const char* s{i} = "{c_string(t)}";\n'
                         for i, t in enumerate(texts)) +
                 f"int count(void) {{ return {' + '.join(f's{i}[0]' for i in range(len(texts)))}; }}\n")
    subprocess.run(["gcc", "-std=c89", "-pedantic", "-Wall", "-Wextra", "-Werror", "-c", "-o",
                    str(tmp_path / "t.o"), str(c)], check=True)


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_escapes_hold_their_promises(text):
    comment = c_comment(text)
    assert comment.isascii() and comment.isprintable(), comment
    assert "*/" not in comment and "/*" not in comment and "??" not in comment
    assert not comment.rstrip(" ").endswith("\\")
    assert c_comment(comment) == comment and ld_comment(text) == comment
    assert yaml.safe_load(f"key: {yaml_scalar(text)}  # {yaml_comment(text)}\nother: 1\n") == \
        {"key": text if "\udcff" not in text else text.replace("\udcff", "\xff"), "other": 1}
    line = one_line(text)
    assert len(f"x{line}x".splitlines()) == 1 and one_line(line) == line
    assert json.loads(json_text({"k": text})) == {"k": text} and json_text(text).isascii()


def test_templates_refuse_text_nobody_escaped(tmp_path):
    (tmp_path / "t.cpp.j2").write_text("// from {{ path }}\nint {{ name }} = {{ n }};\n")
    env = cpp_templates(tmp_path)
    hostile = "x\nint injected;"
    with pytest.raises(UnescapedText):
        env.get_template("t.cpp.j2").render(path=hostile, name="x", n=1)
    with pytest.raises(UnescapedText):
        env.get_template("t.cpp.j2").render(path="p", name=hostile, n=1)
    (tmp_path / "u.cpp.j2").write_text("// from {{ path | comment }}\nint {{ name }} = {{ n }};\n")
    assert env.get_template("u.cpp.j2").render(path=hostile, name="x", n=1) == \
        "// from x\\nint injected;\nint x = 1;\n"


# --- weight files and folders ------------------------------------------------------------------
GRAPH = """\
graph: {name}
inputs:
  x: {{dtype: float32, shape: [1, 4]}}
outputs: [y]
constants:
  w: {{file: w.npz, key: {key}}}
nodes:
  - {{op: MatMul, inputs: [x, w], outputs: [y]}}
"""


@pytest.mark.parametrize("folder, key", [
    (f"evil\n{PAYLOAD}\n", "w"),  # a newline in the graph file's folder
    ("models*", "w"),  # ends the /* */ comment of NAME.h early
    ("plain", f"k\n{PAYLOAD}\n//"),  # an .npz key holding a newline
    ("plain", f"k */ {PAYLOAD} /*"),
    ("plain", "k ends in a backslash\\"),  # would join the comment with the next line
    (f"models*\n{PAYLOAD}\n\\", "k??/"),
], ids=["newline-folder", "star-folder", "newline-key", "comment-key", "backslash-key", "all"])
def test_hostile_folders_and_keys_stay_in_comments(tmp_path, folder, key):
    graphs = tmp_path / folder / "graphs"
    graphs.mkdir(parents=True)
    w = np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32)
    np.savez(graphs / "w.npz", **{key: w})
    (graphs / "g.yaml").write_text(GRAPH.format(name="g", key=json.dumps(key)))
    build = tmp_path / "build"
    scons("-Q", f"graphs={graphs / 'g.yaml'}", f"build_dir={build}")
    out = build / "g"
    cpp = (out / "g.cpp").read_text()
    assert f"// w: float32[4, 3] from w.npz:{c_comment(key)}\n" in cpp
    assert_not_in_code(out)
    for path in generated_sources(out):
        for line in path.read_text().splitlines():
            assert not line.startswith(PAYLOAD), (path.name, line)
    json.loads((out / "g.plan.json").read_text())
    assert json.loads((out / "g.json").read_text())["constants"][0]["name"] == "w"
    x = np.random.default_rng(4).standard_normal((1, 4)).astype(np.float32)
    (y,) = run_runner(out / "g_runner", [x], [((1, 3), np.float32)], tmp_path)
    np.testing.assert_allclose(y, x @ w, rtol=RTOL, atol=ATOL)


# --- names -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["int64_t", "fabsf", "memcpy", "exit", "stderr", "stdint", "stdio",
                                  "string", "math", "STDIO", "features", "size_t", "M_PI", "tinsmith_model"])
def test_graph_names_that_clash_with_the_headers_are_located_errors(tmp_path, name):
    (tmp_path / "g.yaml").write_text(GRAPH.format(name=name, key="w"))
    proc = tinsmith("generate", "g.yaml", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    error, note = proc.stderr.splitlines()
    path = "g.yaml"
    assert error.startswith(f"{path}:1:8: error: invalid graph name: '{name}' ") or \
        error.startswith(f"{path}:1:8: error: invalid graph name: graph '{name}' would write {name}.h")
    assert note == (f"{path}:1:8: note: names become C and C++ identifiers in the generated code; "
                    f"rename it, e.g. to '{name}_'") or name.startswith("tinsmith_")
    assert not (tmp_path / "out").exists()


VALUE_GRAPH = """\
graph: g
inputs:
  x: {{dtype: float32, shape: [2, 3]}}
outputs: [y]
nodes:
  - {{op: Relu, name: act, inputs: [x], outputs: ["{value}"]}}
  - {{op: Relu, name: "{node}", inputs: ["{value}"], outputs: [y]}}
"""


@pytest.mark.parametrize("value, node, message", [
    ("EOF", "n", "'EOF' is a macro of the compiler or of the headers the generated code includes"),
    ("M_PI", "n", "'M_PI' is a macro of the compiler or of the headers the generated code includes"),
    ("INFINITY", "n", "'INFINITY' is a macro of the compiler or of the headers the generated code includes"),
    ("v", "NULL", "'NULL' is a macro of the compiler or of the headers the generated code includes"),
    ("v", "NAN", "'NAN' is a macro of the compiler or of the headers the generated code includes"),
    ("int64_t", "n", "'int64_t' is a type the headers the generated code includes declare"),
    ("run", "n", "'run' is a name the generated API uses itself"),
    ("Input_x", "n", "'Input_x' starts like the names the generated code makes up (Input_...)"),
    ("v", "TINSMITH_SH_READ_BINARY", "'TINSMITH_SH_READ_BINARY' starts like the names the generated "
                                         "code makes up (TINSMITH_...)"),
])
def test_value_and_node_names_that_clash_are_located_errors(tmp_path, value, node, message):
    (tmp_path / "g.yaml").write_text(VALUE_GRAPH.format(value=value, node=node))
    proc = tinsmith("generate", "g.yaml", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    what = "node" if value == "v" else "value"
    where = "6:50" if what == "value" else "7:22"
    assert proc.stderr.splitlines()[0] == f"g.yaml:{where}: error: invalid {what} name: {message}"
    assert not (tmp_path / "out").exists()


NAMES_GRAPH = """\
graph: workspace
inputs:
  exp: {dtype: float32, shape: [2, 3]}
outputs: [all, features]
constants:
  memcpy: {random: normal, shape: [3, 4], seed: 1}
  stdio: {value: 0.5}
nodes:
  - {op: MatMul, name: fabsf, inputs: [exp, memcpy], outputs: [abs]}
  - {op: Relu, name: int64_t, inputs: [abs], outputs: [all]}
  - {op: Mul, name: exit, inputs: [all, stdio], outputs: [half]}
  - {op: Exp, name: key_t, inputs: [half], outputs: [features]}
"""


def test_library_names_where_they_cannot_clash_build_and_run(tmp_path):
    """Values and kernels named after library functions (and nodes after types, which kernel
    code spells std::int64_t), a value `all` (once the runner's own name), a graph named
    `workspace` (the runner's own variable): all compile and compute."""
    path = tmp_path / "names.yaml"
    path.write_text(NAMES_GRAPH)
    build = tmp_path / "build"
    scons("-Q", f"graphs={path}", f"build_dir={build}")
    w = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)  # the random: loader
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    got_all, got_features = run_runner(build / "workspace" / "workspace_runner", [x],
                                       [((2, 4), np.float32), ((2, 4), np.float32)], tmp_path)
    expected = np.maximum(x @ w, 0)
    np.testing.assert_allclose(got_all, expected, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got_features, np.exp(expected * 0.5), rtol=RTOL, atol=ATOL)


def test_every_listed_name_is_refused_where_it_would_clash():
    """The checked-in lists hold what the headers declare (spot checks on both C libraries)."""
    names = system_names()
    for macro in ("EOF", "M_PI", "NULL", "INFINITY", "NAN", "stderr", "INT64_C", "TINSMITH_TICKS_UNKNOWN"):
        assert macro in names["macro"], macro
        assert all(identifier_problem(macro, kind) for kind in ("graph", "value", "node"))
    for name in ("int64_t", "size_t", "FILE", "uint8_t"):
        assert name in names["type"] and identifier_problem(name, "value") and not identifier_problem(name, "node")
    for name in ("fabsf", "memcpy", "exit", "printf", "tinsmith_sh_open"):
        assert identifier_problem(name, "graph")
    for name in ("fabsf", "memcpy", "exit", "printf", "exp"):
        assert identifier_problem(name, "value") is None and identifier_problem(name, "node") is None
    for header in ("stdint", "stdio", "string", "math", "cmath", "vector", "semihost", "measure", "newlib"):
        assert header in names["header"] and identifier_problem(header, "graph")
        assert header in ("semihost", "measure") or identifier_problem(header, "value") is None


def test_names_made_up_after_loading_are_checked_before_assembly(tmp_path):
    from dataclasses import replace

    from tinsmith.assemble import assemble
    from tinsmith.errors import GenerateError
    from tinsmith.pipeline import compile_graph
    path = tmp_path / "g.yaml"
    path.write_text(VALUE_GRAPH.format(value="v", node="n"))
    model = compile_graph(path).model
    made_up = replace(model.kernels[0], kernel=replace(model.kernels[0].kernel, name="NAN"))
    with pytest.raises(GenerateError) as info:
        assemble(replace(model, kernels=(made_up,) + model.kernels[1:]))
    assert str(info.value).splitlines()[0] == (
        f"{os.path.relpath(path)}:6:5: "
        "error: a name made from the graph cannot be used in generated code: 'NAN' is a macro of the "
        "compiler or of the headers the generated code includes")


def test_the_name_lists_hold_every_macro_the_generated_files_see(tmp_path):
    """The checked-in lists against the compiler: every macro visible at the end of each
    generated C and C++ file (g++ -dM -E, with the build's include paths) is refused.
    If this fails after a compiler or C library upgrade, regenerate the lists:
    python -m tinsmith.load.system_names > codegen/load/system_names.txt"""
    path = tmp_path / "g.yaml"
    path.write_text(VALUE_GRAPH.format(value="v", node="n"))
    build = tmp_path / "build"
    scons("-Q", f"graphs={path}", f"build_dir={build}")
    macros = set()
    for source, language, std in (("g.cpp", "c++", "c++17"), ("g_runner.cpp", "c++", "c++17"),
                                  ("g.hpp", "c++", "c++17"), ("g.h", "c", "c11"), ("g.h", "c++", "c++17")):
        out = subprocess.run(["g++", "-x", language, f"-std={std}", "-dM", "-E", f"-I{build / 'g'}",
                              f"-I{ROOT / 'runtime_cpp' / 'include'}", str(build / "g" / source)],
                             capture_output=True, text=True, check=True).stdout
        macros |= set(re.findall(r"^#define ([A-Za-z][A-Za-z0-9_]*)", out, re.M))
    usable = {m for m in macros if "__" not in m and not m.startswith(("TINSMITH_", "G_"))}
    assert len(usable) > 100
    assert sorted(usable - system_names()["macro"]) == []


# --- ONNX import -------------------------------------------------------------------------------
def _hostile_model(path: Path) -> tuple[Path, np.ndarray]:
    from onnx import TensorProto, helper, numpy_helper
    w = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["EOF", "M_PI"], ["INFINITY"], name="NULL"),
             helper.make_node("Relu", ["INFINITY"], ["int64_t"], name="stderr"),
             helper.make_node("Sigmoid", ["int64_t"], ["tinsmith_x"], name="Input_x")]
    graph = helper.make_graph(nodes, "stdio", [helper.make_tensor_value_info("EOF", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("tinsmith_x", TensorProto.FLOAT, [2, 4]),
                               helper.make_tensor_value_info("int64_t", TensorProto.FLOAT, [2, 4])],
                              [numpy_helper.from_array(w, "M_PI")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                              producer_name=f"evil\nconstants:\n  w: {{file: /etc/passwd}}\n# ",
                              producer_version="1\r\nversion: 2 */ #")
    model.ir_version = 8
    import onnx
    onnx.save(model, str(path))
    return path, w


def test_onnx_import_renames_names_that_would_clash_and_escapes_producer(tmp_path):
    model, w = _hostile_model(tmp_path / f"stdio\n{PAYLOAD}.onnx")
    assert model_graph_name(model) == "stdio_int_injected_1"
    out = tmp_path / "graphs" / "stdio.yaml"
    proc = tinsmith("import-onnx", str(model), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    header = text[:text.index("graph:")]
    assert all(line.startswith("#") for line in header.splitlines()), header
    assert "produced by evil\\nconstants:\\n  w: {file: /etc/passwd}\\n#  1\\r\\nversion: 2 */ #)" in header
    assert f"Imported from stdio\\n{PAYLOAD}.onnx (opset 18" in header
    doc = yaml.safe_load(text)
    assert set(doc) == {"graph", "version", "inputs", "outputs", "constants", "nodes"}
    assert doc["graph"] == "stdio_" and doc["version"] == 1
    assert list(doc["inputs"]) == ["EOF_"] and list(doc["constants"]) == ["M_PI_"]
    assert [n["name"] for n in doc["nodes"]] == ["NULL_", "stderr_", "n_Input_x"]
    assert [n["outputs"] for n in doc["nodes"]] == [["INFINITY_"], ["int64_t_"], ["v_tinsmith_x"]]
    build = tmp_path / "build"
    scons("-Q", f"graphs={out}", f"build_dir={build}")
    assert_not_in_code(build / "stdio_")
    x = np.random.default_rng(6).standard_normal((2, 3)).astype(np.float32)
    import onnxruntime
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"EOF": x})
    got = run_runner(build / "stdio_" / "stdio__runner", [x], [((2, 4), np.float32)] * 2, tmp_path)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)


# --- messages ----------------------------------------------------------------------------------
@pytest.mark.parametrize("folder", [f"a\nb.yaml:1:1: error: {PAYLOAD}", "esc\x1b[2Jcleared", "cr\rhere"])
def test_control_characters_in_paths_keep_messages_on_one_line(tmp_path, folder):
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "g.yaml").write_text(GRAPH.format(name="g", key="w"))  # w.npz is missing
    proc = tinsmith("generate", f"{folder}/g.yaml", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    shown = one_line(f"{folder}/g.yaml")
    assert "\\n" in shown or "\\x1b" in shown or "\\r" in shown
    assert proc.stderr.split("\n") == [
        f"{shown}:6:13: error: constant 'w': weight file 'w.npz' does not exist",
        f"{shown}:6:13: note: paths are relative to the graph file", ""]


def test_hostile_names_in_messages_stay_on_one_line(tmp_path):
    (tmp_path / "g.yaml").write_text(GRAPH.format(name="g", key="w").replace(
        "outputs: [y]", 'outputs: ["y\\nfake: error: x"]'))
    proc = tinsmith("generate", "g.yaml", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 1
    error, note = proc.stderr.splitlines()
    assert error == ("g.yaml:4:11: error: invalid output name: 'y\\nfake: error: x' is not a valid "
                     "identifier (use letters, digits and '_', starting with a letter)")


# --- linker scripts ----------------------------------------------------------------------------
@pytest.mark.skipif(not (shutil.which("arm-none-eabi-g++") and shutil.which("qemu-system-arm")),
                    reason="needs arm-none-eabi-g++ and qemu-system-arm (sh setup.sh installs them)")
def test_hostile_target_folder_and_board_name_stay_in_the_linker_script_comment(tmp_path):
    folder = tmp_path / "t*" / "x\nINCLUDE nothere.ld\n"
    folder.mkdir(parents=True)
    text = (ROOT / "codegen" / "targets" / "cortex-m4.yaml").read_text()
    target = folder / "board.yaml"
    target.write_text(text.replace("name: mps2-an386", 'name: "b */ INCLUDE nothere.ld /* \\n INCLUDE x.ld"'))
    from tinsmith.targets import load_target
    from tinsmith.targets.firmware import memory_script
    script = memory_script(load_target(target))
    assert script.count("*/") == 1 and script.count("/*") == 1
    assert [line.split()[0] for line in script.splitlines()[2:]] == \
        ["MEMORY", "{", "FLASH", "RAM", "}", "__stack_size", "INCLUDE"]
    graph = tmp_path / "g.yaml"
    graph.write_text(GRAPH.format(name="g", key="w"))
    w = np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32)
    np.savez(tmp_path / "w.npz", w=w)
    x = np.random.default_rng(4).standard_normal((1, 4)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    proc = tinsmith("run", str(graph), "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "out.npz"),
                    "--target", str(target), "--build-dir", str(tmp_path / "build"))
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], x @ w, rtol=RTOL, atol=ATOL)
