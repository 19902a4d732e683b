"""Several models in one arena: mlp and encoder share one workspace, built with the tool's
TinsmithArena and run in turn (C++ and C API) on the host; outputs match the NumPy oracle and
each model run alone, and the reported saving is the one the models' own reports imply."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import oracle
from conftest import GRAPHS, ROOT, scons, tinsmith

TOOL = ROOT / "site_scons" / "site_tools"

SCONSTRUCT = """\
import os
env = Environment(ENV=os.environ.copy(), tools=['default', 'tinsmith'], toolpath=[{tool!r}])
env['TINSMITH_BUILD_DIR'] = '#build'
arena = env.TinsmithArena({arena_args})
libs = env.TinsmithModel({mlp!r}) + env.TinsmithModel({encoder!r})
app = env.Clone()
app.Append(CPPPATH=[arena[0].dir] + [lib.dir for lib in libs] + ['$TINSMITH_INCLUDE'],
           CCFLAGS=['-Wall', '-Wextra', '-Werror'])
app.Program('both_cpp', ['main.cpp'] + libs)
app.Program('both_c', ['main_c.c'] + libs, LIBS=['m'])
"""

# Runs mlp, encoder, mlp, encoder on one arena, re-running init_ws whenever the other model used
# it, and writes the four outputs: the second run of each must equal the first.
MAIN_CPP = """\
#include <cstdio>
#include "pair.h"

static pair::Arena arena;
static mlp::Input_x x;
static mlp::Output_probs probs;
static encoder::Input_tokens tokens;
static encoder::Output_encoded encoded;

int main(int, char** argv) {
  std::FILE* in = std::fopen(argv[1], "rb");
  if (!in || std::fread(x.data, sizeof x.data, 1, in) != 1 ||
      std::fread(tokens.data, sizeof tokens.data, 1, in) != 1) return 1;
  std::fclose(in);
  std::FILE* out = std::fopen(argv[2], "wb");
  for (int round = 0; round < 2; ++round) {
    mlp::init_ws(arena.mlp);
    mlp::call(x, probs, arena.mlp);
    std::fwrite(probs.data, sizeof probs.data, 1, out);
    encoder::init_ws(arena.encoder);
    encoder::call(tokens, encoded, arena.encoder);
    std::fwrite(encoded.data, sizeof encoded.data, 1, out);
  }
  return std::fclose(out) == 0 ? 0 : 1;
}
"""

MAIN_C = """\
#include <stdio.h>
#include "pair.h"

static pair_arena arena;
static float x[MLP_SIZE_x], probs[MLP_SIZE_probs];
static float tokens[ENCODER_SIZE_tokens], encoded[ENCODER_SIZE_encoded];

int main(int argc, char** argv) {
  FILE* in = fopen(argv[1], "rb");
  FILE* out;
  int round;
  (void)argc;
  if (!in || fread(x, sizeof x, 1, in) != 1 || fread(tokens, sizeof tokens, 1, in) != 1) return 1;
  fclose(in);
  out = fopen(argv[2], "wb");
  for (round = 0; round < 2; ++round) {
    mlp_init_ws(arena.bytes);
    mlp_call(x, probs, arena.bytes);
    fwrite(probs, sizeof probs, 1, out);
    encoder_init_ws(arena.bytes);
    encoder_call(tokens, encoded, arena.bytes);
    fwrite(encoded, sizeof encoded, 1, out);
  }
  return fclose(out) == 0 ? 0 : 1;
}
"""


def _project(folder: Path, arena_args: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SConstruct").write_text(SCONSTRUCT.format(
        tool=str(TOOL), arena_args=arena_args, mlp=str(GRAPHS / "mlp.yaml"), encoder=str(GRAPHS / "encoder.yaml")))
    (folder / "main.cpp").write_text(MAIN_CPP)
    (folder / "main_c.c").write_text(MAIN_C)
    return folder


def _arena_file(folder: Path) -> Path:
    path = folder / "pair.yaml"
    path.write_text("# mlp and encoder never run at the same time\narena: pair\n"
                    f"graphs: [{GRAPHS / 'mlp.yaml'}, {GRAPHS / 'encoder.yaml'}]\n")
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    project = _project(tmp_path_factory.mktemp("arena"), "'pair', ['{}', '{}']".format(
        GRAPHS / "mlp.yaml", GRAPHS / "encoder.yaml"))
    proc = scons("-Q", cwd=project)
    (project / "scons.out").write_text(proc.stdout)
    return project


@pytest.mark.parametrize("program", ["both_cpp", "both_c"])
def test_two_models_run_in_turn_on_one_arena(built, program, tmp_path):
    inputs = {**oracle.seeded_inputs("mlp", 1), **oracle.seeded_inputs("encoder", 2)}
    (tmp_path / "in.bin").write_bytes(inputs["x"].astype("<f4").tobytes() + inputs["tokens"].astype("<f4").tobytes())
    proc = subprocess.run([str(built / program), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    data = np.frombuffer((tmp_path / "out.bin").read_bytes(), dtype="<f4")
    probs_size, encoded_size = 10, 8 * 16
    assert data.size == 2 * (probs_size + encoded_size)
    want_probs = oracle.evaluate("mlp", {"x": inputs["x"]})["probs"].reshape(-1)
    want_encoded = oracle.evaluate("encoder", {"tokens": inputs["tokens"]})["encoded"].reshape(-1)
    runs = np.split(data, np.cumsum([probs_size, encoded_size, probs_size]))
    for probs, encoded in (runs[0:2], runs[2:4]):
        np.testing.assert_allclose(probs, want_probs, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(encoded, want_encoded, rtol=1e-4, atol=1e-5)
    # the second round, after the other model overwrote the arena, is bit for bit the first
    assert runs[0].tobytes() == runs[2].tobytes() and runs[1].tobytes() == runs[3].tobytes()


@pytest.fixture(scope="module")
def runners(tmp_path_factory) -> Path:
    """mlp's and encoder's own runners, as `tinsmith build` makes them for the default target
    (the arena's): only these two graphs, not every graph of graphs/."""
    folder = tmp_path_factory.mktemp("alone")
    for name in ("mlp", "encoder"):
        proc = tinsmith("build", str(GRAPHS / f"{name}.yaml"), "--build-dir", str(folder))
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return folder


def test_each_model_alone_gives_the_same_outputs(built, tmp_path, runners):
    """The models' own runners (each with its own workspace, as `scons` builds them by default)
    agree with the shared-arena runs."""
    from conftest import run_runner
    x = oracle.seeded_inputs("mlp", 1)["x"]
    tokens = oracle.seeded_inputs("encoder", 2)["tokens"]
    (tmp_path / "in.bin").write_bytes(x.astype("<f4").tobytes() + tokens.astype("<f4").tobytes())
    subprocess.run([str(built / "both_cpp"), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")], check=True)
    shared = np.frombuffer((tmp_path / "out.bin").read_bytes(), dtype="<f4")
    alone = []
    for name, value, shape in (("mlp", x, (1, 10)), ("encoder", tokens, (8, 16))):
        alone += run_runner(runners / name / f"{name}_runner", [value], [(shape, np.float32)], tmp_path)
    assert shared[:10].tobytes() == alone[0].reshape(-1).tobytes()
    assert shared[10:138].tobytes() == alone[1].reshape(-1).tobytes()


@pytest.mark.parametrize("std", ["c89", "c99", "c11", "c++17"])
def test_arena_header_compiles_as_c_and_cpp(built, std):
    include = [f"-I{built / 'build' / d}" for d in ("pair", "mlp", "encoder")] + [f"-I{ROOT / 'runtime_cpp' / 'include'}"]
    compiler, lang = ("g++", "c++") if "+" in std else ("gcc", "c")
    proc = subprocess.run([compiler, f"-std={std}", "-x", lang, "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                           "-pedantic", *include, "-"], input='#include "pair.h"\n', capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_reported_saving_is_what_the_models_reports_imply(built):
    report = json.loads((built / "build" / "pair" / "pair.arena.json").read_text())
    workspaces = {name: json.loads((built / "build" / name / f"{name}.json").read_text())["ram"]["workspace_bytes"]
                  for name in ("mlp", "encoder")}
    shared = -(-max(workspaces.values()) // 16) * 16
    assert report["arena_bytes"] == shared
    assert report["separate_workspace_bytes"] == sum(workspaces.values())
    assert report["saved_bytes"] == sum(workspaces.values()) - shared > 0
    assert [m["graph"] for m in report["models"]] == ["mlp", "encoder"]
    header = (built / "build" / "pair" / "pair.h").read_text()
    assert f"#define PAIR_ARENA_BYTES {shared}u" in header
    assert f"pair [host-dispatch]: arena {shared:,} B shared by mlp {workspaces['mlp']:,} B, encoder " in \
        (built / "scons.out").read_text()


def test_arena_file_as_the_builder_source_and_on_the_command_line(built, tmp_path):
    """The same arena from an arena file: the SCons builder and `tinsmith arena` write the same
    header and report as the builder given the graphs."""
    project = _project(tmp_path / "from_file", "'pair.yaml'")
    _arena_file(project)
    scons("-Q", "build/pair/pair.h", cwd=project)
    for name in ("pair.h", "pair.arena.json"):
        want = (built / "build" / "pair" / name).read_text()
        got = (project / "build" / "pair" / name).read_text()
        # the source comment differs: the reports there, the arena file here
        assert json.loads(got)["saved_bytes"] == json.loads(want)["saved_bytes"] if name.endswith("json") \
            else got.split("\n", 1)[1] == want.split("\n", 1)[1]
    proc = tinsmith("arena", str(project / "pair.yaml"), "-o", str(tmp_path / "cli"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("pair [host-dispatch]: arena ")  # planned for the default target, as the tool does
    cli = json.loads((tmp_path / "cli" / "pair.arena.json").read_text())
    assert {k: v for k, v in cli.items() if k != "source"} == \
        {k: v for k, v in json.loads((built / "build" / "pair" / "pair.arena.json").read_text()).items()
         if k != "source"}


@pytest.mark.parametrize("text, message", [
    ("arena: float\ngraphs: [{mlp}]\n", "1:8: error: arena name: 'float' is a C or C++ keyword"),
    ("arena: pair\ngraphs: [{mlp}, {mlp}]\n", "2:{col}: error: '{mlp}' is listed twice"),
    ("arena: pair\ngraphs: [missing.yaml]\n", "2:10: error: graph file 'missing.yaml' does not exist"),
    ("arena: pair\ngraph: [{mlp}]\n", "2:1: error: unknown key 'graph' in an arena file"),
    ("arena: mlp\ngraphs: [{mlp}]\n", "error: arena 'mlp' has a model named 'mlp'"),
    ('arena: "x\\n#define y"\ngraphs: [{mlp}]\n', "1:8: error: arena name: 'x\\n#define y' is not a valid identifier"),
])
def test_bad_arena_files_are_located_errors(tmp_path, text, message):
    mlp = str(GRAPHS / "mlp.yaml")
    path = tmp_path / "bad.yaml"
    path.write_text(text.format(mlp=mlp))
    proc = tinsmith("arena", str(path), "-o", str(tmp_path / "out"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert message.format(mlp=mlp, col=len(mlp) + 12) in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()  # nothing half-written


@pytest.mark.parametrize("target", ["host", "cortex-m4"])
def test_example_arena_file_plans_for_the_target(target, tmp_path, built_workspace):
    """examples/arena: kws_dscnn and ad_autoencoder share kws_dscnn's workspace, as large as
    `tinsmith build --target` makes it for the same core (host 64,000 B, Cortex-M4 33,120 B)."""
    args = ["--target", target]  # (the default target: test_arena_file_as_the_builder_source_and_on_the_command_line)
    proc = tinsmith("arena", str(ROOT / "examples" / "arena" / "kws_and_ad.yaml"), "-o", str(tmp_path), *args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"kws_and_ad [{target}]: arena ")
    report = json.loads((tmp_path / "kws_and_ad.arena.json").read_text())
    sizes = [built_workspace(GRAPHS / f"{g}.yaml", target) for g in ("kws_dscnn", "ad_autoencoder")]
    assert [m["workspace_bytes"] for m in report["models"]] == sizes
    assert report["target"] == target
    assert report["saved_bytes"] == sum(sizes) - report["arena_bytes"] == min(sizes)


def test_arena_planned_for_another_target_names_the_model_and_the_bytes_missing(tmp_path, built_workspace):
    """Models generated for the host with an arena planned for the Cortex-M4: the C header stops
    with a message naming the model, the C++ one with the bytes missing in a type name."""
    arena = tinsmith("arena", str(ROOT / "examples" / "arena" / "kws_and_ad.yaml"), "-o", str(tmp_path),
                     "--target", "cortex-m4")
    assert arena.returncode == 0, arena.stderr
    for graph in ("kws_dscnn", "ad_autoencoder"):
        proc = tinsmith("generate", str(GRAPHS / f"{graph}.yaml"), "-o", str(tmp_path), "--library-only",
                        "--target", "host")  # one level: the check is the arena's, not the levels'
        assert proc.returncode == 0, proc.stderr
    include = tinsmith("include-dir").stdout.strip()
    missing = built_workspace(GRAPHS / "kws_dscnn.yaml", "host") - built_workspace(GRAPHS / "kws_dscnn.yaml", "cortex-m4")
    for compiler, suffix, message in (
            ("gcc", "c", "arena kws_and_ad (33120 bytes, planned for cortex-m4) is too small for model kws_dscnn"),
            ("g++", "cpp", f"arena_lacks_bytes_for_kws_dscnn<{missing}>")):
        (tmp_path / f"main.{suffix}").write_text('#include "kws_and_ad.h"\nint main(void) { return 0; }\n')
        proc = subprocess.run([compiler, "-c", f"main.{suffix}", "-I.", f"-I{include}", "-o", "main.o"]
                              + (["-std=c++17"] if suffix == "cpp" else []),
                              cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr
        assert "ad_autoencoder" not in proc.stderr  # it fits


def test_arena_from_reports_of_different_targets_is_an_error(tmp_path):
    reports = []
    for name, target in (("kws_dscnn", "host"), ("ad_autoencoder", "cortex-m4")):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"graph": name, "target": target, "ram": {"workspace_bytes": 1024}}))
        reports.append(str(path))
    proc = tinsmith("arena", *reports, "--name", "both", "-o", str(tmp_path / "out"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "error: the models' reports were made for different targets (kws_dscnn for host, " \
           "ad_autoencoder for cortex-m4)" in proc.stderr, proc.stderr
    proc = tinsmith("arena", reports[0], "--name", "one", "-o", str(tmp_path / "out"), "--target", "cortex-m4")
    assert proc.returncode == 1
    assert "error: the report of 'kws_dscnn' was made for target 'host', the arena is for 'cortex-m4'" in proc.stderr
    assert not (tmp_path / "out").exists()
