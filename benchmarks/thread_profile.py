"""Where a threaded host build spends its time: each kernel's time on 1 and on N threads, and the cost of
one pool run (the barrier between clusters).

    python benchmarks/thread_profile.py                          # the four graphs, host-native, 2 threads
    python benchmarks/thread_profile.py --graphs ic_resnet8 --rounds 21

One `threads=N` build per graph, compiled with TINSMITH_KERNEL_HOOK: the hook (model.cpp.j2) runs
after each kernel, or after each pooled cluster for all of its kernels, and this harness's hook adds
the time since the previous one to that kernel's total. Each round runs a batch of inferences with
set_threads(1) and then with set_threads(N), so both see the same load; the figure is the median
over rounds of the per-inference time. On one thread a split kernel runs as its single part (the
same code the linear build runs, with its loops' bounds as arguments). A kernel of a pooled
cluster is listed with the cluster's time on its first kernel and 0 on the others. The last
lines time `tinsmith::pool::run` with parts that do nothing: the fixed cost of each pooled
cluster, per call. Then each pooled cluster's parts, each timed alone on the calling thread: how
evenly its work is cut (the slowest part over the mean), the best a pool can do with them.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tinsmith.pipeline import compile_graph, write_files  # noqa: E402
from tinsmith.targets import load_target  # noqa: E402
from tinsmith.verify import RUNTIME_INCLUDE  # noqa: E402

HARNESS = r"""
#include "{name}.h"
#include "tinsmith/thread_pool.hpp"
#include <chrono>
#include <cstdio>
alignas(16) static unsigned char ws[{NAME}_WORKSPACE_BYTES > 0 ? {NAME}_WORKSPACE_BYTES : 1];
static float in[{in_size}];
static float out[{out_size}];
static long long totals[{kernels}];
static std::chrono::steady_clock::time_point last;
extern "C" void tinsmith_kernel_done(int kernel) {{
  auto now = std::chrono::steady_clock::now();
  totals[kernel] += std::chrono::duration_cast<std::chrono::nanoseconds>(now - last).count();
  last = std::chrono::steady_clock::now();
}}
static void nothing(void*, int, int) noexcept {{}}
int main() {{
  {name}_init_ws(ws);
  int threads, n;
  // "T N": N inferences on T threads, then each kernel's nanoseconds per inference;
  // "0 N": N empty pool runs of parts_for(threads) parts, then the nanoseconds per run
  while (std::scanf("%d %d", &threads, &n) == 2) {{
    if (threads == 0) {{
      {name}_set_threads({max_threads});
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < n; ++i) tinsmith::pool::run(nothing, nullptr, tinsmith::pool::parts_for({max_threads}));
      auto t1 = std::chrono::steady_clock::now();
      std::printf("%lld\n", static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count() / n));
      std::fflush(stdout);
      continue;
    }}
    {name}_set_threads(threads);
    for (auto& t : totals) t = 0;
    for (int i = 0; i < n; ++i) {{
      last = std::chrono::steady_clock::now();
      {name}_call(in, out, ws);
    }}
    for (auto t : totals) std::printf("%lld ", t / n);
    std::printf("\n");
    std::fflush(stdout);
  }}
  return 0;
}}
"""


PARTS_HARNESS = r"""
#include "{name}.cpp"
#include <chrono>
#include <cstdio>
alignas(16) static unsigned char ws[{NAME}_WORKSPACE_BYTES > 0 ? {NAME}_WORKSPACE_BYTES : 1];
static float in[{in_size}];
static float out[{out_size}];
using Cluster = void (*)(void*, int, int) noexcept;
int main() {{
  {name}_init_ws(ws);
  {name}::tinsmith_arguments context = {{in, out, ws}};
  const Cluster clusters[] = {{{clusters}}};
  const int parts = tinsmith::pool::parts_for({threads});
  int n;
  // "N": each cluster's parts N times each; then per cluster a line of each part's nanoseconds
  while (std::scanf("%d", &n) == 1) {{
    {name}_call(in, out, ws);
    for (Cluster cluster : clusters) {{
      for (int part = 0; part < parts; ++part) {{
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; ++i) cluster(&context, part, parts);
        auto t1 = std::chrono::steady_clock::now();
        std::printf("%lld ", static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count() / n));
      }}
      std::printf("\n");
    }}
    std::fflush(stdout);
  }}
  return 0;
}}
"""


def build(graph: str, target_name: str, threads: int, folder: Path) -> tuple[subprocess.Popen, list[dict]]:
    """Compile `graph` for `threads` threads with the timing hook; start the harness. Returns it and
    the report's kernels."""
    compiled = compile_graph(ROOT / "graphs" / f"{graph}.yaml", target=target_name, threads=threads)
    g = compiled.graph
    (x,), (y,) = g.inputs, g.outputs
    write_files(compiled.files, folder)
    nodes = json.loads((folder / f"{g.name}.plan.json").read_text())["nodes"]
    (folder / "profile.cpp").write_text(HARNESS.format(
        name=g.name, NAME=g.name.upper(), in_size=g.types[x].size, out_size=g.types[y].size,
        kernels=len(nodes), max_threads=threads))
    target = load_target(target_name)
    flags = [*target.cpu_flags, target.optimize, *target.cxxflags, "-DTINSMITH_KERNEL_HOOK",
             f"-I{folder}", f"-I{RUNTIME_INCLUDE}"]
    exe = folder / "profile"
    subprocess.run([target.toolchain.command("cxx"), *flags, str(folder / "profile.cpp"),
                    str(folder / f"{g.name}.cpp"), "-o", str(exe), "-pthread"], check=True)
    clusters = re.findall(r"^void (tinsmith_cluster_\d+)\(", (folder / f"{g.name}.cpp").read_text(), re.M)
    (folder / "parts.cpp").write_text(PARTS_HARNESS.format(
        name=g.name, NAME=g.name.upper(), in_size=g.types[x].size, out_size=g.types[y].size, threads=threads,
        clusters=", ".join(f"{g.name}::{c}" for c in clusters)))
    subprocess.run([target.toolchain.command("cxx"), *(f for f in flags if f != "-DTINSMITH_KERNEL_HOOK"),
                    str(folder / "parts.cpp"), "-o", str(folder / "parts"),
                    "-pthread"], check=True)
    parts = subprocess.Popen([str(folder / "parts")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True), nodes, parts, clusters


def ask(proc: subprocess.Popen, threads: int, n: int) -> list[int]:
    proc.stdin.write(f"{threads} {n}\n")
    proc.stdin.flush()
    return [int(v) for v in proc.stdout.readline().split()]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graphs", nargs="+", default=["kws_dscnn", "vww_mobilenet", "ic_resnet8", "ad_autoencoder"])
    p.add_argument("--target", default="host-native")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--batch", type=int, default=200, help="inferences per round and thread count [200]")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for graph in args.graphs:
            proc, nodes, parts, clusters = build(graph, args.target, args.threads, Path(tmp) / graph)
            ask(proc, 1, 20)
            ask(proc, args.threads, 20)
            one, many, empty = [], [], []
            for _ in range(args.rounds):
                one.append(ask(proc, 1, args.batch))
                many.append(ask(proc, args.threads, args.batch))
                empty.append(ask(proc, 0, 2000)[0])
            proc.stdin.close()
            proc.wait()
            med1 = [statistics.median(r[i] for r in one) for i in range(len(nodes))]
            medn = [statistics.median(r[i] for r in many) for i in range(len(nodes))]
            total1 = statistics.median(sum(r) for r in one)
            totaln = statistics.median(sum(r) for r in many)
            print(f"\n{graph} ({args.target}; median of {args.rounds} rounds of {args.batch}; ns per inference)")
            print(f"{'kernel':28} {'op':16} {'MACs':>10} {'1 thread':>9} {f'{args.threads} threads':>10} {'speed-up':>8}")
            for node, a, b in zip(nodes, med1, medn):
                print(f"{node['name'][:28]:28} {node['op'][:16]:16} {node['macs']:>10,} {a:>9,.0f} {b:>10,.0f} "
                      f"{a / b if b else float('nan'):>8.2f}")
            print(f"{'total':28} {'':16} {sum(n['macs'] for n in nodes):>10,} {total1:>9,.0f} {totaln:>10,.0f} "
                  f"{total1 / totaln:>8.2f}")
            print(f"empty pool run of parts_for({args.threads}) parts: {statistics.median(empty):,.0f} ns "
                  f"(min {min(empty):,} ns)")
            runs = []
            for _ in range(args.rounds):
                parts.stdin.write("20\n")
                parts.stdin.flush()
                runs.append([[int(v) for v in parts.stdout.readline().split()] for _ in clusters])
            parts.stdin.close()
            parts.wait()
            print(f"parts of each pooled cluster alone, ns (median of {args.rounds} rounds of 20):")
            for c, name in enumerate(clusters):
                times = [statistics.median(r[c][i] for r in runs) for i in range(len(runs[0][c]))]
                index = int(name.rsplit("_", 1)[1])
                members = "+".join(n["name"] for n in nodes if n["cluster"] == index)
                print(f"  {members[:40]:40} sum {sum(times):>8,.0f}  max/mean {max(times) / (sum(times) / len(times)):.2f}  "
                      + " ".join(f"{t:,.0f}" for t in times))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
