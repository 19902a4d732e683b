"""Tests for tinsmith.verify and the runtime headers it checks generated code against."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from clang import cindex

from tinsmith.verify import (RUNTIME_INCLUDE, VerifyError, builtin_include_args,
                            verify_outputs)

DATA = Path(__file__).parent / "data" / "verify"
RUNTIME = RUNTIME_INCLUDE.parent

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
GXX = ["g++", "-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Werror",
       "-fno-exceptions", "-fno-rtti", f"-I{RUNTIME_INCLUDE}"]


def _copy_good(tmp_path: Path) -> Path:
    for name in ("tiny.hpp", "tiny.h", "tiny.json"):
        shutil.copy(DATA / name, tmp_path / name)
    return tmp_path / "tiny.json"


def _tamper(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _problems(report: Path) -> list[str]:
    with pytest.raises(VerifyError) as info:
        verify_outputs(report, [])
    return str(info.value).splitlines()


def test_good_outputs_verify():
    verify_outputs(DATA / "tiny.json", [])


# (file, old text, new text, the message lines expected; {hpp} and {h} name the files)
TAMPERED = {
    "wrong parameter order": (
        "tiny.hpp",
        "const Input_x& x, const Input_ids& ids", "const Input_ids& ids, const Input_x& x",
        ["{hpp}:13:28: error: parameter 1 is 'ids', expected 'x'",
         "{hpp}:13:48: error: parameter 2 is 'x', expected 'ids'"]),
    "double instead of float": (
        "tiny.hpp", "Output_y = tinsmith::Buffer<float", "Output_y = tinsmith::Buffer<double",
        ["{hpp}:13:61: error: 'y' has type 'tinsmith::Buffer<double, 2, 3>' of 48 bytes, "
         "the report says 24",
         "{hpp}:13:61: error: 'y' has element type 'double', the report says float32"]),
    "wrong buffer size": (
        "tiny.hpp",
        "Input_x = tinsmith::Buffer<float, 2, 3>", "Input_x = tinsmith::Buffer<float, 2, 4>",
        ["{hpp}:13:26: error: 'x' has type 'const tinsmith::Buffer<float, 2, 4>' of 32 bytes, "
         "the report says 24"]),
    "workspace size mismatch": (
        "tiny.hpp", "kWorkspaceBytes = 32;", "kWorkspaceBytes = 48;",
        ["{hpp}:13:75: error: 'ws' has type 'tinsmith::Workspace<48>' of 48 bytes, "
         "the report says 32",
         "{hpp}:10:23: error: kWorkspaceBytes is 48, the report says 32"]),
    "warning": (
        "tiny.hpp",
        "namespace tiny {", "namespace tiny {\ninline bool lt(unsigned a, int b) { return a < b; }",
        ["{hpp}:7:46: error: comparison of integers of different signs: 'unsigned int' and 'int' "
         "[-Wsign-compare]"]),
    "init_ws missing noexcept": (
        "tiny.hpp", "init_ws(Workspace& ws) noexcept", "init_ws(Workspace& ws)",
        ["{hpp}:12:6: error: 'init_ws' must be noexcept"]),
    "C header missing NAME_call": (
        "tiny.h", "void tiny_call(const float* x, const int64_t* ids, float* y, void* ws);\n", "",
        ["{h}: error: expected one declaration of 'tiny_call', found 0"]),
    "C output declared const": (
        "tiny.h", "float* y", "const float* y",
        ["{h}:14:65: error: 'y' must be 'float*', is 'const float *'"]),
    "C element type": (
        "tiny.h", "const int64_t* ids", "const int32_t* ids",
        ["{h}:14:47: error: 'ids' has element type 'int', the report says int64"]),
    "C size macro": (
        "tiny.h", "TINY_SIZE_y 6u", "TINY_SIZE_y 7u",
        ["{h}:9:9: error: TINY_SIZE_y is '7u', the report says 6"]),
    "C header broken for C++ only": (
        "tiny.h", 'extern "C" {', "",
        ["{h}:16:1: error: extraneous closing brace ('}}') (parsed as C++)"]),
}


@pytest.mark.parametrize("case", TAMPERED, ids=list(TAMPERED))
def test_tampered_outputs_fail(tmp_path, case):
    file, old, new, expected = TAMPERED[case]
    report = _copy_good(tmp_path)
    _tamper(tmp_path / file, old, new)
    names = {"hpp": tmp_path / "tiny.hpp", "h": tmp_path / "tiny.h"}
    assert _problems(report) == [line.format(**names) for line in expected]


def test_empty_workspace_verifies(tmp_path):
    report = _copy_good(tmp_path)
    _tamper(report, '"workspace_bytes": 32', '"workspace_bytes": 0')
    _tamper(tmp_path / "tiny.hpp", "kWorkspaceBytes = 32;", "kWorkspaceBytes = 0;")
    _tamper(tmp_path / "tiny.h", "TINY_WORKSPACE_BYTES 32u", "TINY_WORKSPACE_BYTES 0u")
    verify_outputs(report, [])


def test_syntax_error_is_reported_with_its_location(tmp_path):
    report = _copy_good(tmp_path)
    _tamper(tmp_path / "tiny.hpp", "kWorkspaceBytes = 32;", "kWorkspaceBytes = 32 +;")
    problems = _problems(report)
    # Later lines are clang's own follow-on errors, which depend on its version.
    assert problems[0] == f"{tmp_path / 'tiny.hpp'}:10:45: error: expected expression"
    assert all(line.startswith(f"{tmp_path / 'tiny.hpp'}:") for line in problems)


def test_all_problems_are_reported_at_once(tmp_path):
    report = _copy_good(tmp_path)
    _tamper(tmp_path / "tiny.hpp", "kWorkspaceBytes = 32;", "kWorkspaceBytes = 48;")
    _tamper(tmp_path / "tiny.h", "TINY_SIZE_x 6u", "TINY_SIZE_x 5u")
    problems = _problems(report)
    assert len(problems) == 3
    h = tmp_path / "tiny.h"
    assert problems[2] == f"{h}:7:9: error: TINY_SIZE_x is '5u', the report says 6"


def test_cxx_linkage_is_checked(tmp_path):
    report = _copy_good(tmp_path)
    _tamper(tmp_path / "tiny.h", '#ifdef __cplusplus\nextern "C" {\n#endif\n', "")
    _tamper(tmp_path / "tiny.h", "#ifdef __cplusplus\n}\n#endif\n", "")
    assert _problems(report) == [
        f"{tmp_path / 'tiny.h'}:{line}:6: error: '{name}' is not extern \"C\" when parsed as C++"
        for line, name in ((10, "tiny_init_ws"), (11, "tiny_call"))]


def test_missing_header_is_named(tmp_path):
    report = _copy_good(tmp_path)
    (tmp_path / "tiny.hpp").unlink()
    assert _problems(report) == [f"{tmp_path / 'tiny.hpp'}: error: generated header not found"]


BUFFER_PROGRAM = """\
#include "tinsmith/buffer.hpp"
using B = tinsmith::Buffer<float, 1, 10>;
static_assert(sizeof(B) == 40, "no padding beyond the elements");
static_assert(B::kSize == 10 && B::kRank == 2 && B::kShape[1] == 10, "");
using S = tinsmith::Buffer<float>;
static_assert(S::kSize == 1 && S::kRank == 0 && sizeof(S) == 4, "a scalar");
static_assert(alignof(tinsmith::Workspace<40>) == 16, "planned offsets are 16-aligned");
static_assert(sizeof(tinsmith::Workspace<40>) == 48, "");
static_assert(sizeof(tinsmith::Workspace<0>) == 16, "");
int main() {
  B b{};
  b.data[9] = 1.0f;
  return static_cast<int>(b.data[0]);
}
"""


@needs_gxx
def test_buffer_layout_with_gxx(tmp_path):
    source = tmp_path / "buffer_test.cpp"
    source.write_text(BUFFER_PROGRAM)
    subprocess.run([*GXX, "-c", str(source), "-o", str(tmp_path / "buffer_test.o")], check=True)


def test_buffer_layout_with_libclang(tmp_path):
    source = tmp_path / "buffer_test.cpp"
    source.write_text(BUFFER_PROGRAM)
    args = ["-x", "c++", "-std=c++17", "-Wall", "-Wextra", "-Wpedantic", f"-I{RUNTIME_INCLUDE}",
            *builtin_include_args()]
    tu = cindex.Index.create().parse(str(source), args=args)
    assert [d.spelling for d in tu.diagnostics] == []


HOST_IO_PROGRAM = """\
#include "tinsmith/host_io.hpp"
#include <cstdio>
int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const float out[4] = {1.0f, -2.5f, 3.0f, 1e-3f};
  if (!tinsmith::host::write_all(argv[1], out, sizeof out)) return 3;
  float in[4] = {};
  if (!tinsmith::host::read_exact(argv[1], in, sizeof in)) return 4;
  for (int i = 0; i < 4; ++i) if (in[i] != out[i]) return 5;
  float more[5] = {7.0f, 7.0f, 7.0f, 7.0f, 7.0f};
  if (tinsmith::host::read_exact(argv[1], more, sizeof more)) return 6;
  if (more[0] != 7.0f) return 7;  // a failed read leaves the destination alone
  std::puts("ok");
  return 0;
}
"""


@needs_gxx
def test_host_io_round_trip(tmp_path):
    source = tmp_path / "host_io_test.cpp"
    source.write_text(HOST_IO_PROGRAM)
    exe = tmp_path / "host_io_test"
    subprocess.run([*GXX, str(source), str(RUNTIME / "src" / "host_io.cpp"), "-o", str(exe)],
                   check=True)
    data = tmp_path / "x.bin"
    run = subprocess.run([str(exe), str(data)], capture_output=True, text=True)
    assert (run.returncode, run.stdout) == (0, "ok\n")
    assert run.stderr == f"tinsmith: {data}: expected 20 bytes, file holds 16 bytes\n"
    assert data.stat().st_size == 16
