"""Time the four MLPerf Tiny graphs compiled by Tinsmith against ONNX Runtime on this machine.

    python benchmarks/host.py                      # targets host and host-native, 1 and 2 threads, 15 rounds
    python benchmarks/host.py --rounds 30 --targets host --threads 1 --write docs/BENCHMARKS.md
    python benchmarks/host.py --targets host host-dispatch host-native --threads 1 \
        --write docs/BENCHMARKS.md --section "## Host: one portable library, the ISA level chosen at run time"

Both sides get the same thread count and run one inference after another on the same seeded input,
interleaved in one process tree: each round times a batch of inferences of every compiled build (a
resident harness process driven over a pipe, so process start-up is not counted) and then the same
batch in ONNX Runtime (intra-op threads N, inter-op threads 1, sequential execution, all graph
optimizations), for every thread count N. A 1-thread build is the default one (the linear
executor); an N-thread build is made with `threads=N` and runs on its worker pool. The figure per
model is the minimum (or, with --statistic median, the median) over rounds of the per-inference
time: on a machine shared with other jobs the fastest round is the one they disturbed least. The
ratio is Tinsmith's figure over ONNX Runtime's with as many threads; *× host-native* is a build's figure
over host-native's with as many threads in the same run (when host-native is one of the targets).
Outputs are checked against ONNX Runtime's first. A dispatching target (host-dispatch) runs the
widest ISA level this machine has, as it would on any other.

ONNX models come from models/make_models.py (the same weights graphs/*.yaml were imported from);
the Tinsmith builds are the pipeline's own output for each target, compiled with the target
file's compiler, optimisation and CPU flags.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tinsmith.pipeline import compile_graph, write_files  # noqa: E402
from tinsmith.targets import load_target  # noqa: E402
from tinsmith.verify import RUNTIME_INCLUDE  # noqa: E402

GRAPHS = ("kws_dscnn", "vww_mobilenet", "ic_resnet8", "ad_autoencoder")

HARNESS = r"""
#include "{name}.h"
#include <chrono>
#include <cstdio>
#include <cstring>
alignas(16) static unsigned char ws[{NAME}_WORKSPACE_BYTES > 0 ? {NAME}_WORKSPACE_BYTES : 1];
static float in[{in_size}];
static float out[{out_size}];
int main() {{
  if (std::fread(in, sizeof in, 1, stdin) != 1) return 1;
  {set_threads}
  {name}_init_ws(ws);
  {name}_call(in, out, ws);
  std::fwrite(out, sizeof out, 1, stdout);
  std::fflush(stdout);
  long n;
  while (std::scanf("%ld", &n) == 1) {{  // run n inferences, print the nanoseconds they took
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < n; ++i) {name}_call(in, out, ws);
    auto t1 = std::chrono::steady_clock::now();
    std::printf("%lld\n", static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
    std::fflush(stdout);
  }}
  return 0;
}}
"""


def build_harness(graph: str, target_name: str, folder: Path, source: Path | None = None,
                  harness: str = HARNESS, backend=None, threads: int = 1) -> tuple[subprocess.Popen, np.ndarray, dict]:
    """Generate and compile `graph` (graphs/GRAPH.yaml, or `source`) for the target, with the
    target's backend or `backend`, built for `threads` threads; start its timing harness (`harness`).
    Returns the process, the graph and the compiled model."""
    compiled = compile_graph(source or ROOT / "graphs" / f"{graph}.yaml", target=target_name, backend=backend,
                             threads=threads if threads > 1 else None)
    g = compiled.graph
    (x,), (y,) = g.inputs, g.outputs
    write_files(compiled.files, folder)
    set_threads = f"{g.name}_set_threads({threads});" if threads > 1 else ""
    (folder / "bench.cpp").write_text(harness.format(name=g.name, NAME=g.name.upper(), set_threads=set_threads,
                                                     in_size=g.types[x].size, out_size=g.types[y].size))
    target = load_target(target_name)
    exe = folder / "bench"
    objects = []
    for source in ("bench.cpp", f"{g.name}.cpp"):  # (a dispatching target's every level is in NAME.cpp)
        objects.append(folder / (Path(source).stem + ".o"))
        subprocess.run([target.toolchain.command("cxx"), *target.cpu_flags, target.optimize, *target.ccflags,
                        *target.cxxflags, f"-I{folder}", f"-I{RUNTIME_INCLUDE}", "-c", str(folder / source),
                        "-o", str(objects[-1])], check=True)
    subprocess.run([target.toolchain.command("cxx"), *target.cpu_flags, target.optimize, *map(str, objects),
                    "-o", str(exe)], check=True)
    proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    return proc, g, compiled


def first_output(proc: subprocess.Popen, x: np.ndarray, out_size: int) -> np.ndarray:
    proc.stdin.write(x.astype("<f4").tobytes())
    proc.stdin.flush()
    return np.frombuffer(proc.stdout.read(4 * out_size), "<f4").copy()


def timed(proc: subprocess.Popen, n: int) -> float:
    proc.stdin.write(f"{n}\n".encode())
    proc.stdin.flush()
    return int(proc.stdout.readline()) / n * 1e-9


def main() -> int:
    import onnxruntime as ort
    import onnx
    from models.make_models import build as build_model, sample_input, to_onnx

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--seconds", type=float, default=0.2, help="rough time per batch and runner [0.2]")
    p.add_argument("--targets", nargs="+", default=["host", "host-native"])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2], help="thread counts, both sides [1 2]")
    p.add_argument("--graphs", nargs="+", default=list(GRAPHS))
    p.add_argument("--statistic", choices=("min", "median"), default="min", help="over rounds [min]")
    p.add_argument("--write", type=Path, help="replace the host table of this file (docs/BENCHMARKS.md)")
    p.add_argument("--section", default=SECTION, help=f"the heading whose table --write replaces [{SECTION}]")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for graph in args.graphs:
            net = build_model(graph)
            onnx_path = Path(tmp) / f"{graph}.onnx"
            onnx.save(to_onnx(net), str(onnx_path))
            x = sample_input(net, 0).astype(np.float32)
            sessions = {}
            for n in args.threads:
                options = ort.SessionOptions()
                options.intra_op_num_threads = n
                options.inter_op_num_threads = 1
                options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                sessions[n] = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
            feed = {sessions[args.threads[0]].get_inputs()[0].name: x}
            want = sessions[args.threads[0]].run(None, feed)[0].reshape(-1)
            procs = {}
            for t in args.targets:
                for n in args.threads:
                    folder = Path(tmp) / Path(t).name / str(n) / graph  # (a target may be a file)
                    proc, g, compiled = build_harness(graph, t, folder, threads=n)
                    got = first_output(proc, x, want.size)
                    err = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-3)))
                    procs[(t, n)] = (proc, err, compiled.workspace_bytes)
            # batch sizes near --seconds each
            t0 = time.perf_counter()
            sessions[args.threads[0]].run(None, feed)
            n_ort = max(1, int(args.seconds / max(time.perf_counter() - t0, 1e-6)))
            times = {key: [] for key in procs} | {("ort", n): [] for n in args.threads}
            for _ in range(args.rounds):
                for key, (proc, _, _) in procs.items():
                    times[key].append(timed(proc, n_ort))
                for n, session in sessions.items():
                    t0 = time.perf_counter()
                    for _ in range(n_ort):
                        session.run(None, feed)
                    times[("ort", n)].append((time.perf_counter() - t0) / n_ort)
            pick = min if args.statistic == "min" else statistics.median
            for (t, n), (proc, err, ws) in procs.items():
                proc.stdin.close()
                proc.wait()
                med, ort_median = pick(times[(t, n)]), pick(times[("ort", n)])
                # against host-native with as many threads, in the same rounds (the portable builds' goal)
                native = pick(times[("host-native", n)]) if ("host-native", n) in times else None
                rows.append((graph, t, n, med * 1e6, ort_median * 1e6, med / ort_median,
                             med / native if native else None, err, ws))
                print(f"{graph:15s} {t:12s} {n} thr  tinsmith {med * 1e6:9.1f} us  onnxruntime {ort_median * 1e6:9.1f} us  "
                      f"ratio {med / ort_median:5.2f}  max rel err {err:.1e}  workspace {ws}", flush=True)
    table = [TABLE_HEAD, "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    table += [f"| {graph} | {t} | {n} | {ms:,.1f} | {om:,.1f} | {ratio:.2f} | "
              f"{'—' if to_native is None else f'{to_native:.2f}'} | {err:.1e} | {ws:,} |"
              for graph, t, n, ms, om, ratio, to_native, err, ws in rows]
    print()
    print("\n".join(table))
    if args.write:
        write_table(args.write, table, args.section)
    return 0


TABLE_HEAD = ("| graph | target | threads | Tinsmith µs | ONNX Runtime µs | ratio | × host-native | max rel. difference "
              "| workspace |")
SECTION = "## Host: against ONNX Runtime"


def write_table(path: Path, table: list[str], section: str = SECTION) -> None:
    """Replace the first table after the heading `section` in `path` (the rest of the file stays)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    heading = lines.index(section)
    start = next(i for i, line in enumerate(lines) if i > heading and line.startswith("| graph | target |"))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    path.write_text("\n".join(lines[:start] + table + lines[end:]), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
