"""Time the int8 TFLite models (models/*_int8.tflite) compiled by Tinsmith for the host against
TensorFlow Lite's interpreter on this machine.

    python benchmarks/int8_host.py                    # targets host and host-native, 15 rounds
    python benchmarks/int8_host.py --rounds 5 --models ic_resnet8
    python benchmarks/int8_host.py --clock cpu --write docs/BENCHMARKS.md

The interpreter is LiteRT (`ai_edge_litert`, TensorFlow Lite's runtime with its XNNPACK CPU
kernels, one thread) where it is installed, else the TensorFlow Lite Micro interpreter (the test
oracle, reference kernels); the table says which. Both run one inference after another on the
same seeded input, interleaved: each round times a batch of inferences of every compiled build (a
resident harness process driven over a pipe: the C API's call() alone, no start-up, no Python)
and then the same batch in the interpreter: its `invoke()` alone, the input set beforehand and
the output not read, less the time `invoke()` takes on a model of one tiny operator (Python's
call into the runtime, measured in the same round), so that runtimes are timed rather than their
Python wrappers. The figure per model is the minimum (or, with --statistic median, the median)
over rounds of the time per inference; the ratio is Tinsmith's over the interpreter's. Each build is also timed with the portable kernels
(the cpp backend, same compiler flags), which is what the host ran before its int8 vector
kernels. Outputs are compared with the interpreter's first (LSB: the largest difference).

`--clock wall` (the default) times batches by the wall clock; `--clock cpu` by the CPU time of each
process (the harness's and the interpreter's, both on one thread), which leaves out the time a
loaded machine's other jobs hold the cores.
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

from tinsmith.generate.backend import CPP  # noqa: E402
from host import HARNESS as FLOAT_HARNESS, build_harness as host_harness, timed  # noqa: E402  (benchmarks/host.py)

MODELS = ("kws_dscnn", "vww_mobilenet", "ic_resnet8", "ad_autoencoder")

# benchmarks/host.py's resident timing harness, reading and writing int8 tensors
HARNESS = FLOAT_HARNESS.replace("static float in[", "static std::int8_t in[").replace(
    "static float out[", "static std::int8_t out[")
# the same, timing by the process's CPU time (a format string: braces doubled)
CPU_HARNESS = HARNESS.replace("#include <chrono>\n", "#include <chrono>\n#include <time.h>\n"
                              "static long long cpu_ns() {{ timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); "
                              "return t.tv_sec * 1000000000LL + t.tv_nsec; }}\n").replace(
    "auto t0 = std::chrono::steady_clock::now();", "long long t0 = cpu_ns();").replace(
    "auto t1 = std::chrono::steady_clock::now();", "long long t1 = cpu_ns();").replace(
    "std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()", "t1 - t0")
assert "cpu_ns()" in CPU_HARNESS and "steady_clock" not in CPU_HARNESS
TABLE_HEAD = "| model | target | Tinsmith µs | portable kernels µs | interpreter µs | ratio | max difference |"


class Interpreter:
    """One inference at a time in LiteRT (XNNPACK, one thread) or, without it, TFLite Micro."""

    def __init__(self, path: Path | bytes):
        try:
            from ai_edge_litert.interpreter import Interpreter as LiteRT
        except ImportError:
            from tflite_micro.python.tflite_micro import runtime
            self.name = "TFLite Micro (reference kernels)"
            self.tflm = runtime.Interpreter.from_bytes(path) if isinstance(path, bytes) else \
                runtime.Interpreter.from_file(str(path))
            self.litert = None
        else:
            self.name = "LiteRT (XNNPACK, 1 thread)"
            self.litert = LiteRT(model_content=path, num_threads=1) if isinstance(path, bytes) else \
                LiteRT(model_path=str(path), num_threads=1)
            self.litert.allocate_tensors()

    def set_input(self, x: np.ndarray) -> None:
        if self.litert is None:
            self.tflm.set_input(x, 0)
        else:
            self.litert.set_tensor(self.litert.get_input_details()[0]["index"], x)

    def output(self) -> np.ndarray:
        if self.litert is None:
            return self.tflm.get_output(0)
        return self.litert.get_tensor(self.litert.get_output_details()[0]["index"])

    def run(self, x: np.ndarray) -> np.ndarray:
        self.set_input(x)
        self.invoke()
        return self.output()

    def invoke(self) -> None:
        (self.tflm if self.litert is None else self.litert).invoke()

    def timed(self, n: int, clock=time.perf_counter) -> float:
        """Seconds per invoke() over n calls, the input set beforehand."""
        invoke = self.invoke
        t0 = clock()
        for _ in range(n):
            invoke()
        return (clock() - t0) / n


def one_operator_model() -> bytes:
    """An int8 RELU of one element: what invoke() costs besides the model's work."""
    sys.path.insert(0, str(ROOT / "tests"))
    from tflite_writer import single_operator
    return single_operator(19, "int8", [1, 1], (0.1, 0), (0.1, 0))  # 19: RELU


def build_harness(model: Path, target_name: str, folder: Path, portable: bool, harness: str = HARNESS):
    """Compile the model for the target (with the portable kernels if `portable`) into a resident
    timing harness; returns the process and the graph."""
    proc, g, _ = host_harness(model.stem, target_name, folder, model, harness, CPP if portable else None)
    return proc, g


def write_table(path: Path, table: list[str], clock: str) -> None:
    """Replace the table that starts with TABLE_HEAD in `path`, or add it in a section of its own."""
    lines = path.read_text(encoding="utf-8").rstrip("\n").split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith(TABLE_HEAD)), None)
    if start is None:
        lines += ["", "## Host int8: against LiteRT (XNNPACK)", "",
                  f"Written by `python benchmarks/int8_host.py --clock {clock} --write docs/BENCHMARKS.md`.", ""]
        start = end = len(lines)
    else:
        end = start
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
    path.write_text("\n".join(lines[:start] + table + lines[end:]) + "\n", encoding="utf-8")


def first_output(proc: subprocess.Popen, x: np.ndarray, out_size: int) -> np.ndarray:
    proc.stdin.write(x.astype(np.int8).tobytes())
    proc.stdin.flush()
    return np.frombuffer(proc.stdout.read(out_size), np.int8).copy()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--seconds", type=float, default=0.2, help="rough time per batch and runner [0.2]")
    p.add_argument("--targets", nargs="+", default=["host", "host-native"])
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--statistic", choices=("min", "median"), default="min", help="over rounds [min]")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="what a batch is timed by [wall]")
    p.add_argument("--write", type=Path, help="replace the host int8 table of this file (docs/BENCHMARKS.md)")
    args = p.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    harness = CPU_HARNESS if args.clock == "cpu" else HARNESS
    pick = min if args.statistic == "min" else statistics.median
    empty = Interpreter(one_operator_model())
    empty.set_input(np.zeros((1, 1), np.int8))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            path = ROOT / "models" / f"{model}_int8.tflite"
            interp = Interpreter(path)
            runners = {}
            for t in args.targets:
                for portable in (False, True):
                    proc, g = build_harness(path, t, Path(tmp) / t / model / ("portable" if portable else "vector"),
                                            portable, harness)
                    runners[(t, portable)] = proc
            x = np.random.default_rng(0).integers(-128, 128, g.types[g.inputs[0]].shape).astype(np.int8)
            want = interp.run(x).reshape(-1)
            lsb = {k: int(np.max(np.abs(first_output(proc, x, want.size).astype(int) - want.astype(int))))
                   for k, proc in runners.items()}
            interp.set_input(x)
            n = max(1, int(args.seconds / max(interp.timed(1), 1e-6)))
            times = {k: [] for k in runners}
            ref, overhead = [], []
            for _ in range(args.rounds):
                for k, proc in runners.items():
                    times[k].append(timed(proc, n))
                ref.append(interp.timed(n, clock))
                overhead.append(empty.timed(n, clock))
            ref_median = pick(ref) - pick(overhead)
            print(f"{model:15s} invoke() overhead {pick(overhead) * 1e6:.1f} us subtracted", flush=True)
            for t in args.targets:
                vec, port = pick(times[(t, False)]), pick(times[(t, True)])
                rows.append((model, t, vec * 1e6, port * 1e6, ref_median * 1e6, vec / ref_median, lsb[(t, False)]))
                print(f"{model:15s} {t:12s} tinsmith {vec * 1e6:9.1f} us  portable {port * 1e6:9.1f} us  "
                      f"{interp.name} {ref_median * 1e6:9.1f} us  ratio {vec / ref_median:5.2f}  "
                      f"max diff {lsb[(t, False)]} LSB", flush=True)
            for proc in runners.values():
                proc.stdin.close()
                proc.wait()
    print()
    print(f"Interpreter: {interp.name}, {args.clock} clock")
    table = [TABLE_HEAD, "|---|---|---:|---:|---:|---:|---:|"]
    table += [f"| {model} | {t} | {vec:,.1f} | {port:,.1f} | {ref:,.1f} | {ratio:.2f} | {lsb} LSB |"
              for model, t, vec, port, ref, ratio, lsb in rows]
    print("\n".join(table))
    if args.write:
        write_table(args.write, table, args.clock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
