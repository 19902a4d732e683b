"""Integer vectors in the loop IR: int8, int16 and int32 lanes loaded, widened lane by lane (a vector
Cast), multiplied and added, rendered by the host backend as GCC vectors, compiled by g++ for the
portable host (SSE2) and for this machine, and checked against NumPy."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from tinsmith.generate.backends import HOST
from tinsmith.paths import RUNTIME_INCLUDE
from tinsmith.generate.loop_ir import (Assign, Binary, Broadcast, Cast, Const, For, Kernel, Load, Local, Param, Store,
                                       Var, annotate)

K, O = 20, 32

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def _kernel(lanes: int) -> Kernel:
    """y[o] = sum over k of x[k] * w[k, o], `lanes` output channels per vector: the input broadcast,
    both sides widened to int16 lanes, the products to int32 lanes."""
    ob, k = Var("ob"), Var("k")
    x16 = Cast("int16", Broadcast(Load("x", k), lanes))
    w16 = Cast("int16", Load("w", Binary("+", Binary("*", k, Const(O, "index")), ob), lanes))
    step = Assign("acc", Binary("+", Var("acc"), Cast("int32", Binary("*", x16, w16))))
    body = (Local("acc", Const(0, "int32", lanes), "int32", lanes), For("k", K, (step,)), Store("y", ob, Var("acc")))
    params = (Param("x", "int8", K, False), Param("w", "int8", K * O, False), Param("y", "int32", O, True))
    return annotate(Kernel("dot_rows", params, (For("ob", O, body, step=lanes),)))


PROGRAM = """
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "tinsmith/math.hpp"
{prelude}
{kernel}
int main() {{
  static std::int8_t x[{K}], w[{KO}];
  static std::int32_t y[{O}];
  if (std::fread(x, 1, sizeof x, stdin) != sizeof x || std::fread(w, 1, sizeof w, stdin) != sizeof w) return 1;
  dot_rows(x, w, y);
  std::fwrite(y, 1, sizeof y, stdout);
  return 0;
}}
"""


# int32 lanes as wide as the vector unit: SSE2's 128 bits on any x86-64, AVX-512's 512 with -march=native
@pytest.mark.parametrize("flags, lanes", [([], 4), (["-march=native"], 16)], ids=["sse2", "native"])
def test_widened_int8_products_add_up_exactly(tmp_path, flags, lanes):
    if flags and "avx512f" not in open("/proc/cpuinfo").read().split():
        pytest.skip("this machine has no AVX-512")
    kernel = _kernel(lanes)
    source = PROGRAM.format(prelude=HOST.renderer.prelude([kernel]), kernel=HOST.renderer.kernel(kernel),
                            K=K, KO=K * O, O=O)
    assert "__builtin_convertvector" in source and f"i32x{lanes}" in source
    (tmp_path / "k.cpp").write_text(source)
    exe = tmp_path / "k"
    subprocess.run(["g++", "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-fno-exceptions", "-fno-rtti", *flags,
                    f"-I{RUNTIME_INCLUDE}", str(tmp_path / "k.cpp"), "-o", str(exe)], check=True, capture_output=True,
                   text=True)
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, K).astype(np.int8)
    w = rng.integers(-128, 128, (K, O)).astype(np.int8)
    w[0, :] = -128  # the extremes: products of +-16384 still fit the int16 lanes
    x[0] = -128
    out = subprocess.run([str(exe)], input=x.tobytes() + w.tobytes(), capture_output=True, check=True).stdout
    got = np.frombuffer(out, "<i4")
    np.testing.assert_array_equal(got, x.astype(np.int64) @ w.astype(np.int64))
