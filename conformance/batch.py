"""Building many cases into one host program: a batch.

The compiler already ran in-process for every case (run.py's first stage) and left each case's
generated files (NAME.hpp, NAME.h, NAME.cpp, NAME_runner.cpp). A batch is one translation
unit that includes the generated sources of several cases and their host runners, each runner
inside a namespace of its own with its `main` renamed, and a `main` that dispatches on the
case's index:

    BATCH/run INDEX IN.bin OUT.bin      = what NAME_runner IN.bin OUT.bin does for case INDEX

One compiler process per batch instead of a generate, verify, report, two compiles, an archive
and a link per case: the per-process costs (the interpreter, parsing the runtime headers, the
linker) are paid once per batch. The generated code is compiled with the host target's flags
and -Werror, as the SCons tool compiles it. Everything a generated file defines lies in the
model's namespace (or is extern "C" and prefixed with the model's name), so the cases of a
batch cannot clash; if a batch does not compile, each of its cases is compiled alone, so a
case's failure is reported with its own first error and never costs its neighbours.

A batch whose source and flags are unchanged since the last run in the same build folder is
not compiled again.
"""
from __future__ import annotations

import hashlib
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

RUNNER_MAIN = "tinsmith_case_main"
_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)


@dataclass(frozen=True)
class Program:
    """Where a case runs: the batch program and the case's index in it."""

    path: Path
    index: int

    def command(self, *args: str) -> list[str]:
        return [str(self.path), str(self.index), *args]


def _host_command() -> tuple[str, list[str]]:
    """The host target's C++ compiler and its flags (as the SCons tool uses them), with -Werror."""
    from tinsmith.targets import load_target
    target = load_target("host")
    flags = [*target.cpu_flags, target.optimize, *target.ccflags, "-Werror", *target.cxxflags]
    return target.toolchain.command("cxx"), flags


def write_case(cases_dir: Path, name: str, files: Mapping[str, str]) -> Path:
    """The case's generated files in cases_dir/NAME/ (unchanged files are left untouched)."""
    from tinsmith.files import write_if_changed
    folder = cases_dir / name
    for file, text in sorted(files.items()):
        if file.endswith((".cpp", ".hpp", ".h")):
            write_if_changed(folder / file, text.encode("utf-8"))
    return folder


def batch_source(names: Sequence[str], cases_dir: Path) -> str:
    """The translation unit of a batch of cases (each written by write_case)."""
    hoisted: dict[str, None] = {}
    bodies = []
    for name in names:
        runner = (cases_dir / name / f"{name}_runner.cpp").read_text(encoding="utf-8")
        for kind, header in _INCLUDE.findall(runner):
            local = cases_dir / name / header
            hoisted[f'#include "{name}/{header}"' if kind == '"' and local.exists() else
                    f"#include {kind}{header}{'>' if kind == '<' else chr(34)}"] = None
        bodies.append(name)
    lines = ["// Conformance batch: the cases' generated code and host runners in one program.",
             "// Every header a runner includes comes first, at file scope, so that the runners'",
             "// own #include lines inside the namespaces below include nothing again.",
             "#include <cstdlib>", *hoisted]
    lines += [f'#include "{name}/{name}.cpp"' for name in names]
    lines.append(f"#define main {RUNNER_MAIN}")
    for index, name in enumerate(bodies):
        lines += [f"namespace tinsmith_case_{index} {{", f'#include "{name}/{name}_runner.cpp"', "}"]
    lines += ["#undef main", "", "int main(int argc, char** argv) {",
              "  if (argc != 4) return 2;",
              "  char* args[] = {argv[0], argv[2], argv[3], nullptr};",
              "  switch (std::atoi(argv[1])) {"]
    lines += [f"    case {i}: return tinsmith_case_{i}::{RUNNER_MAIN}(3, args);" for i in range(len(bodies))]
    lines += ["    default: return 2;", "  }", "}", ""]
    return "\n".join(lines)


def _first_error(output: str, roots: Sequence[Path]) -> str:
    lines = output.splitlines()
    line = next((x for x in lines if "error:" in x), None) or next((x for x in lines if x.strip()), "no output")
    for root in roots:
        line = line.replace(f"{root}/", "")
    return line.strip()


def _culprits(output: str, members: Sequence[str], cases_dir: Path) -> set[str]:
    """The cases of a batch whose generated files the compiler's output names: with -Werror and
    no warnings, it prints errors and their context only ("In instantiation of ...", "required
    from here"), so an error in a runtime header still names the case that instantiated it."""
    return {name for name in members if f"{cases_dir}/{name}/" in output}


def _compile(source: str, folder: Path, cases_dir: Path, host_io: Path) -> str | None:
    """Compile `source` into folder/run unless an identical build is there; None, or the
    compiler's output if it fails."""
    from tinsmith.files import write_if_changed
    from tinsmith.paths import RUNTIME_INCLUDE
    cxx, flags = _host_command()
    cmd = [cxx, *flags, f"-I{RUNTIME_INCLUDE}", f"-I{cases_dir}", "batch.cpp", str(host_io), "-o", "run"]
    # the generated files a batch includes are part of what it depends on
    inputs = [source, *cmd]
    for name in re.findall(r'^#include "([^"]+\.(?:cpp|hpp|h))"', source, re.MULTILINE):
        path = cases_dir / name
        if path.exists():
            inputs.append(path.read_text(encoding="utf-8"))
    digest = hashlib.sha256("\0".join(inputs).encode("utf-8")).hexdigest()
    stamp, program = folder / "run.sha256", folder / "run"
    if program.exists() and stamp.exists() and stamp.read_text() == digest:
        return None
    write_if_changed(folder / "batch.cpp", source.encode("utf-8"))
    stamp.unlink(missing_ok=True)
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        program.unlink(missing_ok=True)
        return (proc.stdout + proc.stderr) or f"{cxx} exited {proc.returncode}"
    stamp.write_text(digest)
    return None


def _host_io(build_dir: Path) -> Path:
    """The runtime's host I/O, compiled once per build folder."""
    from tinsmith.paths import RUNTIME_DIR, RUNTIME_INCLUDE
    source = RUNTIME_DIR / "src" / "host_io.cpp"
    obj = build_dir / "host_io.o"
    if not obj.exists() or obj.stat().st_mtime < source.stat().st_mtime:
        cxx, flags = _host_command()
        subprocess.run([cxx, *flags, f"-I{RUNTIME_INCLUDE}", "-c", str(source), "-o", str(obj)], check=True)
    return obj


def build_batches(cases: Sequence[tuple[str, Mapping[str, str]]], build_dir: Path, jobs: int, batch_size: int,
                  log: Callable[[str], None] = print) -> tuple[dict[str, Program], dict[str, str]]:
    """Build every case (name, generated files) into batch programs under build_dir; returns
    {name: Program} for the cases that built and {name: 'compile: first error'} for the rest."""
    from tinsmith.paths import RUNTIME_INCLUDE
    build_dir.mkdir(parents=True, exist_ok=True)
    cases_dir = build_dir / "cases"
    for name, files in cases:
        write_case(cases_dir, name, files)
    host_io = _host_io(build_dir)
    names = [name for name, _ in cases]
    batches = [names[i:i + batch_size] for i in range(0, len(names), batch_size)]
    programs: dict[str, Program] = {}
    failures: dict[str, str] = {}

    def build(key: str, members: list[str]) -> str | None:
        folder = build_dir / "batches" / key
        folder.mkdir(parents=True, exist_ok=True)
        return _compile(batch_source(members, cases_dir), folder, cases_dir, host_io)

    def record(key: str, members: list[str]) -> None:
        programs.update({n: Program(build_dir / "batches" / key / "run", i) for i, n in enumerate(members)})

    log(f"  {len(batches)} batches of up to {batch_size} cases")
    roots = [cases_dir, build_dir, RUNTIME_INCLUDE.parent]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        keys = [f"b{k:04d}" for k in range(len(batches))]
        retry: list[tuple[str, list[str]]] = []  # a failed batch's other cases, built again together
        alone: list[str] = []  # cases built one by one, for their own error
        for key, members, output in zip(keys, batches, pool.map(build, keys, batches)):
            if output is None:
                record(key, members)
                continue
            named = _culprits(output, members, cases_dir)
            alone += [n for n in members if n in named] if named else members
            if named and len(named) < len(members):
                retry.append((key + "_rest", [n for n in members if n not in named]))
        if alone:
            log(f"  {len(alone)} cases of batches that did not compile, compiled one by one")
        for (key, members), output in zip(retry, pool.map(lambda kb: build(*kb), retry)):
            if output is None:
                record(key, members)
            else:
                alone += members
        keys = [f"single_{n}" for n in alone]
        for key, name, output in zip(keys, alone, pool.map(build, keys, [[n] for n in alone])):
            if output is None:
                record(key, [name])
            else:
                failures[name] = f"compile: {_first_error(output, roots)}"
    return programs, failures
