"""Host builds that run call() on worker threads (`threads=N`): built by the real SConstruct and g++,
their outputs are bit-identical for 1, 2 and 3 threads and to the linear executor's, agree with the
NumPy reference, and call() allocates nothing; which kernels are split, and where threads may not go."""
from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tinsmith.generate.loop_ir import Binary, Const, For, If, Kernel, Load, Param, Store, Var
from tinsmith.generate import parallel
from tinsmith.generate.parallel import ALONE_WORK, SPLIT_WORK, split_chains, split_groups
from tinsmith.pipeline import compile_graph, lower, write_files
from tinsmith.reference import evaluate
from tinsmith.targets import TargetError, load_target, with_threads
from tinsmith.tolerance import summation_lengths, within_tolerance
from tinsmith.verify import RUNTIME_INCLUDE

ROOT = Path(__file__).resolve().parents[1]
# convolution chains (split by rows and channel blocks), a residual network (two kernels in one
# cluster, outputs over the shortcut they add), a network whose linear plan puts outputs over their
# inputs at offsets, independent branches, attention, and a graph too small to split
GRAPHS = ("kws_dscnn", "ic_resnet8", "vww_mobilenet", "branches", "transformer_block", "mlp")


@pytest.fixture(scope="module")
def builds(tmp_path_factory, scons_cmd) -> dict[int, Path]:
    """The graphs built for host-native by the repository's SConstruct: linear (threads=1) and with a
    pool of 3 threads."""
    graphs = ",".join(str(ROOT / "graphs" / f"{g}.yaml") for g in GRAPHS)
    folders = {}
    for threads in (1, 3):
        folders[threads] = tmp_path_factory.mktemp(f"threads{threads}")
        scons_cmd("-Q", "-j2", "target=host-native", f"threads={threads}", f"graphs={graphs}",
                  f"build_dir={folders[threads]}")
    return folders


def run(runner: Path, data: bytes, tmp: Path, *threads: str) -> bytes:
    (tmp / "in.bin").write_bytes(data)
    subprocess.run([str(runner), str(tmp / "in.bin"), str(tmp / "out.bin"), *threads], check=True)
    return (tmp / "out.bin").read_bytes()


@pytest.mark.parametrize("name", GRAPHS)
def test_outputs_are_bit_identical_for_every_thread_count(builds, name, tmp_path):
    graph = lower(ROOT / "graphs" / f"{name}.yaml")
    rng = np.random.default_rng(5)
    inputs = {n: rng.standard_normal(graph.types[n].shape).astype(np.float32) for n in graph.inputs}
    data = b"".join(inputs[n].astype("<f4").tobytes() for n in graph.inputs)
    linear = run(builds[1] / name / f"{name}_runner", data, tmp_path)
    pooled = builds[3] / name / f"{name}_runner"
    for threads in ("1", "2", "3"):
        assert run(pooled, data, tmp_path, threads) == linear, f"{threads} threads changed a result"
    # and the result is the model's: the NumPy reference within check's tolerance
    want, lengths, offset = evaluate(graph, inputs), summation_lengths(graph), 0
    for out in graph.outputs:
        got = np.frombuffer(linear, "<f4", graph.types[out].size, offset).reshape(graph.types[out].shape)
        offset += graph.types[out].nbytes
        assert within_tolerance(got, want[out], lengths[out], 1e-5, 1e-6)[0], out


def test_the_big_kernels_are_split_and_the_pool_only_where_threads_are_asked_for(builds):
    cpp = (builds[3] / "ic_resnet8" / "ic_resnet8.cpp").read_text()
    assert '#include "tinsmith/thread_pool.hpp"' in cpp
    # the seven 3x3 convolutions, the two 1x1 shortcuts (less than ALONE_WORK, between split kernels)
    # and the seven clusters' tasks; the classifier after the pool runs on the caller
    assert cpp.count("int tinsmith_part, int tinsmith_parts) noexcept {") == 9 + 7
    assert cpp.count("tinsmith::pool::run(") == 7
    header = (builds[3] / "ic_resnet8" / "ic_resnet8.h").read_text()
    assert "#define IC_RESNET8_MAX_THREADS 3" in header and "int ic_resnet8_set_threads(int threads);" in header
    linear = (builds[1] / "ic_resnet8" / "ic_resnet8.cpp").read_text()
    assert "thread" not in linear and "tinsmith_part" not in linear
    # kws's layers have under ALONE_WORK each, and its depthwise layers under SPLIT_WORK, so no layer
    # has split neighbours on both sides: everything runs on the caller's thread
    kws = (builds[3] / "kws_dscnn" / "kws_dscnn.cpp").read_text()
    assert "tinsmith_part" not in kws and "tinsmith::pool::run(" not in kws
    assert "int kws_dscnn_set_threads(int threads);" in (builds[3] / "kws_dscnn" / "kws_dscnn.h").read_text()


@pytest.mark.parametrize("name", ["kws_dscnn", "vww_mobilenet"])
def test_split_chains_of_small_kernels_are_bit_identical_too(builds, name, tmp_path, monkeypatch):
    """The layers the chain rule keeps whole, split as if they had work enough alone (depthwise and
    pointwise layers cut by channel blocks, vww's outputs over their inputs): still the linear
    build's bytes."""
    monkeypatch.setattr(parallel, "ALONE_WORK", 0)
    compiled = compile_graph(ROOT / "graphs" / f"{name}.yaml", target="host-native", threads=3)
    assert compiled.files[f"{name}.cpp"].count("tinsmith::pool::run(") >= 5
    write_files(compiled.files, tmp_path)
    runner = tmp_path / "runner"
    subprocess.run(["g++", "-march=native", "-O2", "-std=c++17", "-fno-exceptions", "-fno-rtti", f"-I{tmp_path}",
                    f"-I{RUNTIME_INCLUDE}", str(tmp_path / f"{name}.cpp"), str(tmp_path / f"{name}_runner.cpp"),
                    str(RUNTIME_INCLUDE.parent / "src" / "host_io.cpp"), "-o", str(runner), "-pthread"], check=True)
    graph = lower(ROOT / "graphs" / f"{name}.yaml")
    rng = np.random.default_rng(6)
    data = b"".join(rng.standard_normal(graph.types[n].shape).astype("<f4").tobytes() for n in graph.inputs)
    linear = run(builds[1] / name / f"{name}_runner", data, tmp_path)
    for threads in ("1", "2", "3"):
        assert run(runner, data, tmp_path, threads) == linear, f"{threads} threads changed a result"


def test_a_kernel_under_alone_work_is_split_only_between_split_neighbours():
    big, small = ALONE_WORK, SPLIT_WORK
    # image -> a -> b -> c -> d and c -> e -> f: a and c have work enough alone; b sits between split
    # kernels, d writes a graph output (read by no kernel); e's reader f cannot be split, so e runs whole
    kernels = [("a", big, True, {"image", "wa"}, {"t1"}),
               ("b", small, True, {"t1", "wb"}, {"t2"}),
               ("c", big, True, {"t2"}, {"t3"}),
               ("d", small, True, {"t3"}, {"out"}),
               ("e", small, True, {"t3"}, {"t4"}),
               ("f", 10, False, {"t4"}, {"t5"})]
    assert split_chains(kernels) == {"a", "b", "c", "d"}
    # kws's pattern: pointwise layers between depthwise layers that cannot be split, and the first
    # layer feeding one: none is split, and dropping one drops the next (g needs h, h needs g and i)
    kernels = [("conv", small, True, {"x"}, {"u1"}), ("dw", 10, False, {"u1"}, {"u2"}),
               ("g", small, True, {"u2"}, {"u3"}), ("h", small, True, {"u3"}, {"u4"}),
               ("i", 10, False, {"u4"}, {"y"})]
    assert split_chains(kernels) == set()
    # a kernel that cannot be split is never in the answer, however big
    assert split_chains([("k", big, False, {"x"}, {"y"})]) == set()


def test_microcontroller_targets_keep_the_linear_executor():
    with pytest.raises(TargetError, match="runs one thread"):
        with_threads(load_target("cortex-m4"), 2)
    with pytest.raises(TargetError, match="runs one thread"):
        compile_graph(ROOT / "graphs" / "mlp.yaml", target="cortex-m55", threads=4)
    with pytest.raises(TargetError, match="from 1 to 64"):
        with_threads(load_target("host"), 0)
    files = compile_graph(ROOT / "graphs" / "mlp.yaml", target="cortex-m4").files
    assert not any("thread" in text for name, text in files.items() if name.endswith((".cpp", ".hpp", ".h")))


def test_a_target_file_sets_the_thread_count(tmp_path):
    text = (ROOT / "codegen" / "targets" / "host.yaml").read_text().replace("  channels_last: true",
                                                                              "  channels_last: true\n  threads: 2")
    (tmp_path / "pooled.yaml").write_text(text)
    assert load_target(tmp_path / "pooled.yaml").capabilities.threads == 2
    (tmp_path / "bad.yaml").write_text(text.replace("threads: 2", "threads: two"))
    with pytest.raises(TargetError, match="'threads' must be an integer from 1 to 64; got 'two'") as e:
        load_target(tmp_path / "bad.yaml")
    assert "bad.yaml:" in str(e.value)


# --- which loops may be split -------------------------------------------------------------------
def _kernel(*body) -> Kernel:
    return Kernel("k", (Param("x", "float32", 64, False), Param("y", "float32", 64, True)), tuple(body))


def _copy(index) -> Store:
    return Store("y", index, Load("x", index))


def test_a_loop_whose_iterations_store_apart_is_split():
    rows = For("r", 8, (For("c", 8, (_copy(Binary("+", Binary("*", Var("r"), Const(8, "index")), Var("c"))),)),))
    assert [g.split for g in split_groups(_kernel(rows), frozenset())] == [True]
    # a block of 4 channels per iteration at each of 16 pixels: interleaved, still apart
    blocks = For("b", 4, (For("p", 16, (For("c", 4, (_copy(Binary("+", Binary("*", Var("p"), Const(16, "index")),
                                                                 Binary("+", Binary("*", Var("b"), Const(4, "index")),
                                                                        Var("c")))),)),)),))
    assert [g.split for g in split_groups(_kernel(blocks), frozenset())] == [True]


def test_loops_that_store_an_element_twice_or_read_their_output_run_whole():
    # iterations r and r+1 overlap: element r*4+c for c < 8
    overlapping = For("r", 8, (For("c", 8, (_copy(Binary("+", Binary("*", Var("r"), Const(4, "index")),
                                                         Var("c"))),)),))
    assert split_groups(_kernel(overlapping), frozenset()) is None
    # every iteration writes element 0: the last one wins, which a split would change
    assert split_groups(_kernel(For("r", 8, (_copy(Const(0, "index")),))), frozenset()) is None
    # a running sum reads what the previous iteration stored
    prefix = For("r", 63, (Store("y", Binary("+", Var("r"), Const(1, "index")),
                                 Load("y", Var("r"))),))
    assert split_groups(_kernel(prefix), frozenset()) is None
    rows = For("r", 8, (For("c", 8, (_copy(Binary("+", Binary("*", Var("r"), Const(8, "index")), Var("c"))),)),))
    assert split_groups(_kernel(rows), frozenset({"y"})) is None  # output over its input


def test_a_store_under_a_condition_counts_as_if_it_always_ran():
    row = lambda at: Binary("+", Binary("*", Var("r"), Const(8, "index")), at)
    rows = For("r", 8, (For("c", 8, (_copy(row(Var("c"))),)),))
    # the first row again, from the next iteration but under a condition that picks iteration 0
    again = For("r", 8, (If(Binary("==", Var("r"), Const(0, "index")), (_copy(row(Const(1, "index"))),)),))
    assert split_groups(_kernel(rows, again), frozenset()) is None  # element 1 stored by two groups
    # a condition's stores that split apart still split
    apart = For("r", 8, (If(Binary("<", Var("r"), Const(4, "index")), (For("c", 8, (_copy(row(Var("c"))),)),)),))
    assert [g.split for g in split_groups(_kernel(apart), frozenset())] == [True]


NO_ALLOCATION = r"""
#include "ic_resnet8.h"
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <new>

// Every allocation function, counted while `counting` is set.
static volatile int counting = 0, allocations = 0;
extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);
extern "C" void __libc_free(void*);
extern "C" void* malloc(size_t n) { if (counting) allocations = allocations + 1; return __libc_malloc(n); }
extern "C" void* calloc(size_t n, size_t m) { if (counting) allocations = allocations + 1; return __libc_calloc(n, m); }
extern "C" void* realloc(void* p, size_t n) { if (counting) allocations = allocations + 1; return __libc_realloc(p, n); }
extern "C" void free(void* p) { if (counting && p) allocations = allocations + 1; __libc_free(p); }
void* operator new(size_t n) { if (counting) allocations = allocations + 1; return __libc_malloc(n); }
void operator delete(void* p) noexcept { __libc_free(p); }
void operator delete(void* p, size_t) noexcept { __libc_free(p); }

alignas(16) static unsigned char ws[IC_RESNET8_WORKSPACE_BYTES];
static float in[IC_RESNET8_SIZE_image], out[IC_RESNET8_SIZE_probs];

int main() {
  for (unsigned i = 0; i < IC_RESNET8_SIZE_image; ++i) in[i] = static_cast<float>(i % 13) / 13.0f;
  void* probe = malloc(16);  // the counter works: this one is not counted, the next is
  counting = 1;
  free(probe);
  counting = 0;
  if (allocations != 1) return 3;
  allocations = 0;
  ic_resnet8_init_ws(ws);
  for (int threads = 3; threads >= 1; --threads) {
    ic_resnet8_set_threads(threads);
    counting = 1;
    for (int i = 0; i < 50; ++i) ic_resnet8_call(in, out, ws);
    counting = 0;
  }
  std::printf("%d\n", allocations);
  return 0;
}
"""


def test_call_allocates_nothing_on_the_pool(builds, tmp_path):
    folder = builds[3] / "ic_resnet8"  # whose clusters run on the pool (its library, as the build compiled it)
    (tmp_path / "main.cpp").write_text(textwrap.dedent(NO_ALLOCATION))
    exe = tmp_path / "count"
    subprocess.run(["g++", "-march=native", "-O2", "-std=c++17", "-fno-exceptions", "-fno-rtti", f"-I{folder}",
                    f"-I{RUNTIME_INCLUDE}", str(tmp_path / "main.cpp"), str(folder / "libic_resnet8.a"), "-o", str(exe)],
                   check=True)
    proc = subprocess.run([str(exe)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.returncode
    assert proc.stdout.strip() == "0", f"call() allocated {proc.stdout.strip()} times"
