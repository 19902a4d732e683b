"""Running the sweep: each accepted combination through the pipeline for every target, the generated
C++ through the target's compiler with -Werror, and on the host through the compiled code against the
primitive's NumPy reference.

Stage 1 (per combination, in a process pool): write the graph file; load and infer it (a refusal
there means the definition does not accept these element types: skipped and counted); generate C++
for every target (a TinsmithError is a refusal, recorded with its message; any other exception is a
finding); compute the reference outputs on seeded inputs.
Stage 2 (per target and batch of combinations, in the pool): compile the batch as one translation
unit that includes every generated .cpp (one compiler start and one parse of the headers for many
graphs); a batch that fails is compiled again file by file to find which files fail and their first
error (when every file compiles alone, the graphs only clash side by side in one unit, which is not
a finding: on the host each then runs in a program of its own). On the host the unit also holds a driver whose main() runs graph k (argv[1]) on the bytes of
its inputs (stdin) and writes its outputs (stdout); each graph runs once and is compared with NumPy.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

import ml_dtypes
import numpy as np

from tinsmith.errors import TinsmithError
from tinsmith.ir.graph import DTYPES
from tinsmith.ops import PRIMITIVES, check_attrs
from tinsmith.paths import RUNTIME_INCLUDE
from tinsmith.pipeline import compile_graph, library_files, lower, write_files
from tinsmith.targets import TARGETS, load_target
from tests.sweep.combos import Combo, graph_yaml, output_names, reference_inputs, runtime_data

REPO = Path(__file__).resolve().parents[2]
HOST = "host"
# The shipped targets the sweep compiles for. A dispatching target (host-dispatch) is left out: its
# kernels are its levels' targets' (host, host-x86-64-v3, host-x86-64-v4), swept themselves
# (tests/test_host_levels.py checks that its pragmas compile them to the same instructions).
SWEPT_TARGETS = tuple(t for t in TARGETS if not load_target(TARGETS[t]).levels)
BATCH = 32  # graphs per translation unit

# Finding classes, in the order the table lists them.
OK, FOLDED = "ok", "folded"
REFUSED, EXCEPTION, CXX_ERROR, WARNING = "refused", "python-exception", "cxx-error", "warning"
MISMATCH, RUN_FAILED, REF_FAILED = "mismatch", "run-failed", "reference-failed"
# A combination inference refuses with a message that names none of its element types.
NOT_ACCEPTED_UNCLEAR, ANY_TARGET = "not-accepted-unclear", "*"
FINDINGS = (CXX_ERROR, WARNING, EXCEPTION, MISMATCH, RUN_FAILED, REF_FAILED, REFUSED)


@dataclass(frozen=True)
class Result:
    """What one (combination, target) came to: a class and its first line of explanation."""

    op: str
    probe: str
    types: str
    target: str
    outcome: str
    message: str = ""
    clear: bool = True  # for a refusal: does the message name the op or node and an element type?

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.probe, self.types, self.target)


def first_line(text: str) -> str:
    return next((l.strip() for l in text.splitlines() if l.strip()), "")


def refusal_names_a_type(message: str, combo: Combo) -> bool:
    dtypes = {d for _, d in combo.types} | {combo.dtype(i.slot) for i in combo.probe.inputs if i is not None}
    return any(re.search(rf"\b{re.escape(d)}\b", message) for d in dtypes)


def refusal_is_clear(message: str, combo: Combo) -> bool:
    """A refusal names the op or its node ('probe') and at least one of the element types involved."""
    return any(n in message for n in (combo.probe.op, "probe")) and refusal_names_a_type(message, combo)


# --- stage 1: the pipeline ----------------------------------------------------------------------
def generate(combo: Combo, work: Path, targets: Sequence[str], run_host: bool) -> tuple[bool, list[Result], dict]:
    """Accepted?, results of the targets that stopped before C++ (refusals, exceptions, folded graphs),
    and what the host driver needs (input/output types, reference outputs) for those that did not."""
    gdir = work / "graphs"
    gdir.mkdir(parents=True, exist_ok=True)
    path = gdir / f"{combo.name}.yaml"
    path.write_text(graph_yaml(combo))
    base = dict(op=combo.probe.op, probe=combo.probe.key, types=combo.label)
    try:
        lower(path)
    except TinsmithError as e:  # not accepted: skipped, but its message must still say why
        unclear = not refusal_names_a_type(str(e), combo)
        return False, [Result(**base, target=ANY_TARGET, outcome=NOT_ACCEPTED_UNCLEAR,
                              message=first_line(e.message), clear=False)] if unclear else [], {}
    except Exception as e:  # noqa: BLE001 - any other exception is what the sweep looks for
        return True, [Result(**base, target=t, outcome=EXCEPTION, message=_exception(e)) for t in targets], {}
    results, meta = [], {}
    for target in targets:
        try:
            compiled = compile_graph(path, target=target)
        except TinsmithError as e:
            msg = first_line(e.message)
            results.append(Result(**base, target=target, outcome=REFUSED, message=msg,
                                  clear=refusal_is_clear(str(e), combo)))
            continue
        except Exception as e:  # noqa: BLE001
            results.append(Result(**base, target=target, outcome=EXCEPTION, message=_exception(e)))
            continue
        if not compiled.graph.nodes:
            results.append(Result(**base, target=target, outcome=FOLDED, message="folded at build time"))
        out = work / target / combo.name
        out.mkdir(parents=True, exist_ok=True)
        write_files(library_files(compiled.files, combo.name), out)
        if target == HOST and run_host:
            meta = _host_meta(combo, compiled.graph, work)
    return True, results, meta


def _exception(e: BaseException) -> str:
    frame = traceback.extract_tb(e.__traceback__)[-1]
    where = Path(frame.filename)
    where = where.relative_to(REPO) if where.is_relative_to(REPO) else where.name
    return f"{type(e).__name__}: {first_line(str(e))} ({where}:{frame.lineno} in {frame.name})"


def _host_meta(combo: Combo, graph, work: Path) -> dict:
    """Inputs' bytes and the reference outputs, saved for the host run; the graph's API types."""
    data = runtime_data(combo)
    meta = {"name": combo.name, "inputs": [(n, graph.types[n].c_type, graph.types[n].nbytes) for n in graph.inputs],
            "outputs": [(n, graph.types[n].c_type, graph.types[n].nbytes, graph.types[n].dtype,
                         list(graph.types[n].shape)) for n in graph.outputs]}
    (work / HOST / combo.name / "inputs.bin").write_bytes(
        b"".join(np.ascontiguousarray(data[n], graph.types[n].numpy_dtype).tobytes() for n in graph.inputs))
    prim = PRIMITIVES[combo.probe.op]
    try:
        attrs = check_attrs(prim.attrs, combo.attrs, combo.probe.op)
        with np.errstate(all="ignore"):
            want = prim.reference(reference_inputs(combo, data), attrs)
            want = [np.asarray(w).astype(graph.types[n].numpy_dtype).reshape(graph.types[n].shape)
                    for w, n in zip(want, output_names(combo.probe))]
    except Exception as e:  # noqa: BLE001
        meta["reference_error"] = _exception(e)
        return meta
    # raw bytes: NumPy cannot store ml_dtypes' types (bfloat16) in an archive as they are
    np.savez(work / HOST / combo.name / "want.npz", *[np.ascontiguousarray(w).reshape(-1).view(np.uint8) for w in want])
    meta["reduction"] = max(1, max((x.size for x in data.values()), default=1) // max(1, min(w.size for w in want)))
    return meta


# --- stage 2: the compiler ----------------------------------------------------------------------
def compiler_command(target: str) -> list[str]:
    t = load_target(TARGETS[target])
    return [t.toolchain.command("cxx"), *t.cpu_flags, t.optimize, *t.ccflags,
            *(f"-isystem{folder}" for folder in t.toolchain.system_includes), *t.cxxflags,
            "-Wall", "-Wextra", "-Werror", f"-I{RUNTIME_INCLUDE}"]


DRIVER_HEAD = """\
#include <cstdio>
#include <cstdlib>
namespace {
template <unsigned N> struct Bytes { alignas(16) unsigned char b[N > 0 ? N : 1]; };
bool read_all(unsigned char* p, unsigned long n) { return std::fread(p, 1, n, stdin) == n; }
void write_all(const unsigned char* p, unsigned long n) { std::fwrite(p, 1, n, stdout); }
"""


def _driver(metas: Sequence[dict]) -> str:
    """main(k): read graph k's inputs from stdin, run it, write its outputs to stdout."""
    lines = [DRIVER_HEAD]
    for k, m in enumerate(metas):
        name, NAME = m["name"], m["name"].upper()
        lines.append(f"int run_{k}() {{")
        lines.append(f"  static Bytes<{NAME}_WORKSPACE_BYTES> ws;")
        for n, _, size in m["inputs"]:
            lines.append(f"  static Bytes<{size}> in_{n};")
            lines.append(f"  if (!read_all(in_{n}.b, {size})) return 3;")
        for n, _, size, _, _ in m["outputs"]:
            lines.append(f"  static Bytes<{size}> out_{n};")
        args = [f"reinterpret_cast<const {c}*>(in_{n}.b)" for n, c, _ in m["inputs"]] + \
               [f"reinterpret_cast<{c}*>(out_{n}.b)" for n, c, _, _, _ in m["outputs"]] + ["ws.b"]
        lines += [f"  {name}_init_ws(ws.b);", f"  {name}_call({', '.join(args)});"]
        lines += [f"  write_all(out_{n}.b, {size});" for n, _, size, _, _ in m["outputs"]]
        lines += ["  return 0;", "}"]
    lines.append("}  // namespace")
    lines.append("int main(int argc, char** argv) {")
    lines.append("  int k = argc > 1 ? std::atoi(argv[1]) : -1;")
    lines += [f"  if (k == {k}) return run_{k}();" for k in range(len(metas))]
    lines += ["  return 2;", "}"]
    return "\n".join(lines) + "\n"


def _unity(names: Sequence[str], tdir: Path) -> str:
    return "".join(f'#include "{tdir / n / n}.cpp"\n' for n in names)


def _compile(cmd: list[str], source: Path, out: Path, link: bool) -> subprocess.CompletedProcess:
    args = cmd + ([str(source), "-o", str(out)] if link else ["-c", str(source), "-o", str(out)])
    # LC_ALL=C: the same quotes in messages whatever the locale, so findings compare across machines
    return subprocess.run(["nice", "-n", "10", *args], capture_output=True, text=True,
                          env={**os.environ, "LC_ALL": "C"})


def _first_error(stderr: str) -> tuple[str, str]:
    """The class (warning made an error, or error) and the first diagnostic line."""
    for line in stderr.splitlines():
        m = re.search(r":\d+:\d+: (fatal )?error: (.*)$", line)
        if m:
            # paths and graph numbers vary between runs and samples: keep the file's op and the runtime's header
            text = re.sub(r"^\S*/sw\d{4}_(\w+\.(cpp|hpp|h)):", r"\1:", line.strip())
            text = re.sub(r"^\S*/include/", "include/", text)
            return (WARNING if "[-Werror" in line else CXX_ERROR), text
    return CXX_ERROR, first_line(stderr)


def compile_batch(target: str, names: Sequence[str], work: Path, metas: Sequence[dict] | None,
                  combos: dict[str, Combo]) -> list[Result]:
    """Compile a batch for `target` (and run it, if `metas` is given: the host); results per graph."""
    tdir = work / target
    bdir = tdir / "_batches"
    bdir.mkdir(parents=True, exist_ok=True)
    cmd = compiler_command(target)
    tag = names[0]
    unit = bdir / f"{tag}.cpp"
    runnable = metas is not None
    unit.write_text(_unity(names, tdir) + (_driver(metas) if runnable else ""))
    proc = _compile(cmd, unit, bdir / (tag + (".exe" if runnable else ".o")), link=runnable)
    failed: dict[str, tuple[str, str]] = {}
    if proc.returncode != 0:
        for n in names:  # which files fail, each on its own
            p = _compile(cmd, tdir / n / f"{n}.cpp", tdir / n / f"{n}.o", link=False)
            if p.returncode != 0:
                failed[n] = _first_error(p.stderr)
        if not failed and runnable:  # only together: graphs clash in one unit (their runtime
            return [_run_alone(cmd, m, tdir, bdir, combos[m["name"]]) for m in metas]  # helpers); one by one
    results = []
    for n in names:
        c = combos[n]
        base = dict(op=c.probe.op, probe=c.probe.key, types=c.label, target=target)
        if n in failed:
            results.append(Result(**base, outcome=failed[n][0], message=failed[n][1]))
        elif not runnable:
            results.append(Result(**base, outcome=OK))
    if runnable:
        kept = [m for m in metas if m["name"] not in failed]
        if failed and kept:
            unit.write_text(_unity([m["name"] for m in kept], tdir) + _driver(kept))
            proc = _compile(cmd, unit, bdir / f"{tag}.exe", link=True)
            if proc.returncode != 0:
                kind, msg = _first_error(proc.stderr)
                return results + [Result(op=combos[m["name"]].probe.op, probe=combos[m["name"]].probe.key,
                                         types=combos[m["name"]].label, target=target, outcome=kind,
                                         message="batch: " + msg) for m in kept]
        for k, m in enumerate(kept):
            results.append(run_and_compare(bdir / f"{tag}.exe", k, m, tdir, combos[m["name"]]))
    return results


def _run_alone(cmd: list[str], meta: dict, tdir: Path, bdir: Path, combo: Combo) -> Result:
    """Build and run one graph in a program of its own (for graphs that only fail side by side)."""
    unit = bdir / f"{meta['name']}.alone.cpp"
    unit.write_text(_unity([meta["name"]], tdir) + _driver([meta]))
    proc = _compile(cmd, unit, bdir / f"{meta['name']}.exe", link=True)
    if proc.returncode != 0:
        kind, msg = _first_error(proc.stderr)
        return Result(op=combo.probe.op, probe=combo.probe.key, types=combo.label, target=HOST, outcome=kind,
                      message=msg)
    return run_and_compare(bdir / f"{meta['name']}.exe", 0, meta, tdir, combo)


# --- stage 3: numbers -----------------------------------------------------------------------------
ULPS = 16  # float tolerance: ULPS * eps(dtype) * (1 + reduction length), relative to the values' scale


def tolerance(dtype: str, reduction: int) -> float | None:
    """None: exact (integers, bool); else the relative tolerance for this float type."""
    if not dtype.startswith(("float", "bfloat")):  # integers of any width, bool
        return None
    return ULPS * float(ml_dtypes.finfo(DTYPES[dtype][0]).eps) * (1 + reduction)


def run_and_compare(exe: Path, k: int, meta: dict, tdir: Path, combo: Combo) -> Result:
    base = dict(op=combo.probe.op, probe=combo.probe.key, types=combo.label, target=HOST)
    if "reference_error" in meta:
        return Result(**base, outcome=REF_FAILED, message=meta["reference_error"])
    gdir = tdir / meta["name"]
    proc = subprocess.run([str(exe), str(k)], input=(gdir / "inputs.bin").read_bytes(), capture_output=True,
                          timeout=60)
    if proc.returncode != 0:
        return Result(**base, outcome=RUN_FAILED, message=f"exit status {proc.returncode}")
    raw, offset = proc.stdout, 0
    with np.load(gdir / "want.npz") as archive:
        wants = [archive[f"arr_{i}"] for i in range(len(meta["outputs"]))]
    for (name, _, size, dtype, shape), want in zip(meta["outputs"], wants):
        np_dtype = DTYPES[dtype][0]
        got = np.frombuffer(raw[offset:offset + size], np_dtype).reshape(shape)
        offset += size
        want = want.view(np_dtype).reshape(shape)
        problem = compare(got, want, dtype, meta.get("reduction", 1))
        if problem:
            return Result(**base, outcome=MISMATCH, message=f"{name}: {problem}")
    return Result(**base, outcome=OK)


def compare(got: np.ndarray, want: np.ndarray, dtype: str, reduction: int) -> str:
    """'' if `got` matches `want` (exactly, or within the float tolerance; NaN matches NaN)."""
    rtol = tolerance(dtype, reduction)
    if rtol is None:
        bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
        return "" if not bad.size else (f"{bad.size} of {got.size} differ, first at {bad[0]}: got "
                                        f"{got.reshape(-1)[bad[0]]}, want {want.reshape(-1)[bad[0]]} (exact)")
    g, w = got.astype(np.float64).reshape(-1), want.astype(np.float64).reshape(-1)
    finite = np.isfinite(w)
    scale = np.abs(w[finite]).mean() if finite.any() else 0.0
    with np.errstate(invalid="ignore"):
        close = np.abs(g - w) <= rtol * (np.abs(w) + scale) + 1e-300
    same = (np.isnan(g) & np.isnan(w)) | (g == w) | (finite & close)
    bad = np.flatnonzero(~same)
    return "" if not bad.size else (f"{bad.size} of {g.size} differ, first at {bad[0]}: got {g[bad[0]]!r}, "
                                    f"want {w[bad[0]]!r} (rtol {rtol:.2g})")


def save(results: Iterable[Result], path: Path) -> None:
    path.write_text("".join(json.dumps(asdict(r), sort_keys=True) + "\n" for r in results))


def clean(work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work, exist_ok=True)
