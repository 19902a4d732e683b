"""Every element type through compiled kernels, checked against NumPy (and ml_dtypes for bfloat16)
at the type's limits: integer wraparound and truncating division, float16/bfloat16 rounding ties,
overflow to infinity, subnormals, NaN and infinities, float64 precision float32 lacks.

Each test builds a small YAML graph with the host compiler (g++ -Wall -Wextra -Werror), runs it on
the given inputs (embedded as bytes) and compares the raw output bytes with the oracle: exactly
for integers, bool and the rounding of storage types; NaN equals NaN.
"""
from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tinsmith.errors import TinsmithError
from tinsmith.pipeline import compile_graph, write_files
from tinsmith.verify import RUNTIME_INCLUDE

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

BF16 = np.dtype(ml_dtypes.bfloat16)
INTEGERS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


def run(graph_text: str, inputs: dict[str, np.ndarray], tmp_path: Path, target: str | None = None
        ) -> dict[str, np.ndarray]:
    """Compile the graph, run it once on `inputs`, return its outputs as NumPy arrays of their types."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "g.yaml"
    path.write_text(textwrap.dedent(graph_text))
    compiled = compile_graph(path, target=target)
    g = compiled.graph
    out = tmp_path / "out"
    write_files(compiled.files, out)
    name, NAME = g.name, g.name.upper()
    lines = [f'#include "{name}.h"', "#include <cstdio>", "#include <cstring>",
             f"alignas(16) static unsigned char ws[{NAME}_WORKSPACE_BYTES > 0 ? {NAME}_WORKSPACE_BYTES : 1];"]
    for n in g.inputs:
        t = g.types[n]
        data = np.ascontiguousarray(inputs[n], dtype=t.numpy_dtype).tobytes()
        lines.append(f"static const unsigned char bytes_{n}[{len(data)}] = {{{', '.join(map(str, data))}}};")
        lines.append(f"static {t.c_type} in_{n}[{t.size}];")
    for n in g.outputs:
        lines.append(f"static {g.types[n].c_type} out_{n}[{g.types[n].size}];")
    args = [f"in_{n}" for n in g.inputs] + [f"out_{n}" for n in g.outputs] + ["ws"]
    lines += ["int main() {", *[f"  std::memcpy(in_{n}, bytes_{n}, sizeof in_{n});" for n in g.inputs],
              f"  {name}_init_ws(ws);", f"  {name}_call({', '.join(args)});",
              *[f"  std::fwrite(out_{n}, 1, sizeof out_{n}, stdout);" for n in g.outputs],
              "  return 0;", "}"]
    (out / "main.cpp").write_text("\n".join(lines) + "\n")
    exe = out / "prog"
    cmd = ["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-O2", f"-I{out}", f"-I{RUNTIME_INCLUDE}",
           str(out / f"{name}.cpp"), str(out / "main.cpp"), "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    raw = subprocess.run([str(exe)], capture_output=True, check=True).stdout
    got, offset = {}, 0
    for n in g.outputs:
        t = g.types[n]
        got[n] = np.frombuffer(raw, t.numpy_dtype, t.size, offset).reshape(t.shape)
        offset += t.nbytes
    return got


def same(got: np.ndarray, want: np.ndarray) -> None:
    """Same type, same values bit for bit (any NaN equals any NaN; -0.0 differs from 0.0)."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if want.dtype.kind == "f" or want.dtype == BF16:
        g, w = got.astype(np.float64), want.astype(np.float64)
        both_nan = np.isnan(g) & np.isnan(w)
        equal = (g == w) & (np.signbit(g) == np.signbit(w))
        assert np.all(both_nan | equal), f"got {got}, want {want}"
    else:
        np.testing.assert_array_equal(got, want)


def unary_graph(op: str, dtype: str, n: int, out: str = "y", attrs: str = "") -> str:
    return f"""\
        graph: g
        inputs:
          x: {{dtype: {dtype}, shape: [{n}]}}
        outputs: [{out}]
        nodes:
          - {{op: {op}, inputs: [x], outputs: [{out}]{attrs}}}
        """


def binary_graph(op: str, dtype: str, n: int, attrs: str = "") -> str:
    return f"""\
        graph: g
        inputs:
          a: {{dtype: {dtype}, shape: [{n}]}}
          b: {{dtype: {dtype}, shape: [{n}]}}
        outputs: [y]
        nodes:
          - {{op: {op}, inputs: [a, b], outputs: [y]{attrs}}}
        """


# --- float16 and bfloat16: storage types rounded to nearest even ---------------------------------
F16_EDGES = np.array([
    1 + 2 ** -11,            # halfway between 1 and the next float16: ties to even (1)
    1 + 3 * 2 ** -11,        # halfway, rounds up to the even neighbour
    -(1 + 2 ** -11),
    65504.0, 65519.0,        # the largest float16, and the last value rounding down to it
    65520.0, -65520.0,       # halfway to the next power of two: infinity
    2 ** -24, 2 ** -25,      # the smallest subnormal, and half of it: ties to even (0)
    3 * 2 ** -25,            # 1.5 subnormal units: to 2 units
    2 ** -14 - 2 ** -25,     # just below the smallest normal: rounds up into it
    6.1e-5, 1e-8, -0.0, 0.0, 1e30,
    np.inf, -np.inf, np.nan, 0.1, -2.7182817, 3.1415927,
], np.float32)


def test_cast_float32_to_float16_rounds_to_nearest_even(tmp_path):
    got = run(unary_graph("Cast", "float32", F16_EDGES.size, attrs=", attrs: {to: float16}"),
              {"x": F16_EDGES}, tmp_path)["y"]
    with np.errstate(over="ignore"):
        same(got, F16_EDGES.astype(np.float16))


def test_cast_float32_to_bfloat16_rounds_to_nearest_even(tmp_path):
    x = np.concatenate([F16_EDGES, np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 3.3961e38, 3.4e38, -3.4e38,
                                             1e-40, 2 ** -133], np.float32)])
    got = run(unary_graph("Cast", "float32", x.size, attrs=", attrs: {to: bfloat16}"), {"x": x}, tmp_path)["y"]
    same(got, x.astype(BF16))


def test_float16_and_bfloat16_read_back_exactly(tmp_path):
    """Every float16 bit pattern (subnormals, infinities, NaNs) converts to float32 exactly."""
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    got = run(unary_graph("Cast", "float16", every.size, attrs=", attrs: {to: float32}"),
              {"x": every.view(np.float16)}, tmp_path)["y"]
    same(got, every.view(np.float16).astype(np.float32))
    got = run(unary_graph("Cast", "bfloat16", every.size, attrs=", attrs: {to: float32}"),
              {"x": every.view(BF16)}, tmp_path / "bf")["y"]
    same(got, every.view(BF16).astype(np.float32))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_arithmetic_rounds_each_result(dtype, tmp_path):
    """Add and Mul compute in float32 and round once on the store, as NumPy/ml_dtypes do."""
    npt = np.float16 if dtype == "float16" else BF16
    rng = np.random.default_rng(1)
    a = np.concatenate([rng.standard_normal(40) * 100, [60000, np.inf, np.nan, 1, -0.0]]).astype(npt)
    b = np.concatenate([rng.standard_normal(40), [60000, -np.inf, 1, 2 ** -11, 0.0]]).astype(npt)
    for op, fn in (("Add", np.add), ("Mul", np.multiply)):
        got = run(binary_graph(op, dtype, a.size), {"a": a, "b": b}, tmp_path / op)["y"]
        with np.errstate(all="ignore"):
            want = fn(a.astype(np.float32), b.astype(np.float32)).astype(npt)
        same(got, want)


def test_float16_math_functions_and_nan_tests(tmp_path):
    x = np.array([0.5, -1.25, 10.0, np.inf, -np.inf, np.nan, 0.0, 65504], np.float16)
    got = run(unary_graph("Exp", "float16", x.size), {"x": x}, tmp_path / "exp")["y"]
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float16)
    same(got, want)
    got = run(unary_graph("IsNaN", "float16", x.size), {"x": x}, tmp_path / "isnan")["y"]
    same(got, np.isnan(x))


# --- float64: computed in double --------------------------------------------------------------
def test_float64_keeps_double_precision(tmp_path):
    a = np.array([1.0, 1e16, 0.1, -np.inf, np.nan, 1e308, 5e-324], np.float64)
    b = np.array([1e-15, 1.0, 0.2, 1.0, 1.0, 1e308, 5e-324], np.float64)
    for op, fn in (("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply), ("Div", np.divide)):
        got = run(binary_graph(op, "float64", a.size), {"a": a, "b": b}, tmp_path / op)["y"]
        with np.errstate(all="ignore"):
            same(got, fn(a, b))
    x = np.array([1e-10, 0.5, 700.0, -745.0, 1000.0], np.float64)
    got = run(unary_graph("Exp", "float64", x.size), {"x": x}, tmp_path / "exp")["y"]
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(got, np.exp(x), rtol=1e-15)


def test_cast_float64_to_float32_and_float16(tmp_path):
    x = np.array([1 + 2 ** -30, 3.4028235677973366e38, 3.5e38, 1e-46, np.nan, -np.inf, 0.1], np.float64)
    got = run(unary_graph("Cast", "float64", x.size, attrs=", attrs: {to: float32}"), {"x": x}, tmp_path)["y"]
    with np.errstate(over="ignore"):
        same(got, x.astype(np.float32))
    x16 = np.array([1 + 2 ** -11, 65520.0, 1e-9, np.nan, np.inf, 0.1, -2.5], np.float64)
    got = run(unary_graph("Cast", "float64", x16.size, attrs=", attrs: {to: float16}"), {"x": x16},
              tmp_path / "h")["y"]
    with np.errstate(over="ignore"):
        same(got, x16.astype(np.float16))


# --- integers: wraparound, truncating division, exact comparisons --------------------------------
def _limits(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    a = np.array([hi, lo, hi, lo, -1 if lo else 1, 7, hi // 2 + 1, 3], dtype)
    b = np.array([1, 1 if lo == 0 else -1, hi, lo, 1, 2, 2, hi], dtype)
    return a, b


@pytest.mark.parametrize("dtype", INTEGERS)
def test_integer_arithmetic_wraps_around(dtype, tmp_path):
    a, b = _limits(dtype)
    for op, fn in (("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply)):
        got = run(binary_graph(op, dtype, a.size), {"a": a, "b": b}, tmp_path / op)["y"]
        with np.errstate(over="ignore"):
            same(got, fn(a, b))  # NumPy wraps modulo 2^bits, as ONNX says


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_integer_division_truncates_and_mod_follows_the_divisor(dtype, tmp_path):
    a = np.array([7, -7, 7, -7, 0, np.iinfo(dtype).max, np.iinfo(dtype).min + 1], dtype)
    b = np.array([2, 2, -2, -2, 3, 10, 10], dtype)
    got = run(binary_graph("Div", dtype, a.size), {"a": a, "b": b}, tmp_path / "div")["y"]
    same(got, (np.abs(a) // np.abs(b) * np.sign(a) * np.sign(b)).astype(dtype))  # toward zero
    got = run(binary_graph("Mod", dtype, a.size), {"a": a, "b": b}, tmp_path / "mod")["y"]
    same(got, np.mod(a, b))  # the sign of the divisor, as Python's %
    got = run(binary_graph("Mod", dtype, a.size, ", attrs: {fmod: 1}"), {"a": a, "b": b}, tmp_path / "fmod")["y"]
    same(got, np.fmod(a, b))  # the sign of the dividend, as C's %


def test_int64_comparisons_are_exact_beyond_double_precision(tmp_path):
    a = np.array([2 ** 53 + 1, 2 ** 62, -(2 ** 63), 2 ** 63 - 1], np.int64)
    b = np.array([2 ** 53, 2 ** 62 + 1, -(2 ** 63) + 1, 2 ** 63 - 2], np.int64)
    for op, fn in (("Equal", np.equal), ("Greater", np.greater), ("Less", np.less)):
        got = run(binary_graph(op, "int64", a.size), {"a": a, "b": b}, tmp_path / op)["y"]
        same(got, fn(a, b))
    got = run(binary_graph("Max", "int64", a.size), {"a": a, "b": b}, tmp_path / "max")["y"]
    same(got, np.maximum(a, b))


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_abs_neg_sign_at_the_minimum(dtype, tmp_path):
    info = np.iinfo(dtype)
    x = np.array([info.min, info.min + 1, -1, 0, 1, info.max], dtype)
    for op, fn in (("Abs", np.abs), ("Neg", np.negative), ("Sign", np.sign)):
        got = run(unary_graph(op, dtype, x.size), {"x": x}, tmp_path / op)["y"]
        with np.errstate(over="ignore"):
            same(got, fn(x))  # abs and neg of the minimum wrap to the minimum


@pytest.mark.parametrize("dtype", INTEGERS)
def test_bitwise_ops_and_shifts(dtype, tmp_path):
    info = np.iinfo(dtype)
    bits = info.bits
    a = np.array([info.max, info.min, 0x55 % (info.max + 1), 1, info.max // 3, 0, info.max, 5], dtype)
    b = np.array([1, bits - 1, 3, bits, 2, bits - 1, 0, 200 % (info.max + 1)], dtype)
    for op, fn in (("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or), ("BitwiseXor", np.bitwise_xor)):
        got = run(binary_graph(op, dtype, a.size), {"a": a, "b": b}, tmp_path / op)["y"]
        same(got, fn(a, b))
    got = run(unary_graph("BitwiseNot", dtype, a.size), {"x": a}, tmp_path / "not")["y"]
    same(got, np.invert(a))
    for direction in ("LEFT", "RIGHT"):
        got = run(binary_graph("BitShift", dtype, a.size, f", attrs: {{direction: {direction}}}"),
                  {"a": a, "b": b}, tmp_path / direction)["y"]
        # the oracle: shifts on Python integers, bits beyond the width dropped; counts past the width
        # give 0, or -1 for a negative value shifted right
        want = []
        for x, s in zip(a.tolist(), b.tolist()):
            if not 0 <= s < bits:
                want.append(-1 if direction == "RIGHT" and x < 0 else 0)
            elif direction == "LEFT":
                v = (x << s) % 2 ** bits
                want.append(v - 2 ** bits if info.min < 0 and v > info.max else v)
            else:
                want.append(x >> s)
        same(got, np.array(want, dtype))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "uint64"])
def test_integer_reductions_wrap(dtype, tmp_path):
    info = np.iinfo(dtype)
    x = np.array([[info.max, 1, 2], [info.min, info.max, 0]], dtype)
    graph = f"""\
        graph: g
        inputs:
          x: {{dtype: {dtype}, shape: [2, 3]}}
        outputs: [s, m, p]
        constants:
          axes: {{value: [1], dtype: int64}}
        nodes:
          - {{op: ReduceSum, inputs: [x, axes], outputs: [s], attrs: {{keepdims: 0}}}}
          - {{op: ReduceMin, inputs: [x, axes], outputs: [m], attrs: {{keepdims: 0}}}}
          - {{op: ReduceProd, inputs: [x, axes], outputs: [p], attrs: {{keepdims: 0}}}}
        """
    got = run(graph, {"x": x}, tmp_path)
    with np.errstate(over="ignore"):
        same(got["s"], np.sum(x, axis=1, dtype=dtype))
        same(got["m"], np.min(x, axis=1))
        same(got["p"], np.prod(x, axis=1, dtype=dtype))


# --- Cast between every pair ---------------------------------------------------------------------
CAST_VALUES = np.array([0.0, 1.0, -1.0, 2.75, -2.75, 100.5, 127.0, -128.0, 255.0, 0.3], np.float64)


@pytest.mark.parametrize("src", ["float32", "float64", "float16", "bfloat16", *INTEGERS, "bool"])
def test_cast_to_every_type(src, tmp_path):
    """In-range values (what ONNX defines) between every pair: float to integer truncates toward
    zero, integer to float rounds to nearest, anything to bool is `!= 0`."""
    npsrc = BF16 if src == "bfloat16" else np.dtype(src)
    if npsrc.kind == "u":
        values = np.abs(CAST_VALUES)
    else:
        values = CAST_VALUES
    x = values.astype(npsrc) if npsrc.kind in "fV" else np.trunc(values).astype(npsrc)
    targets = ["float32", "float64", "float16", "bfloat16", *INTEGERS, "bool"]
    graph = "\n".join([
        "graph: g",
        "inputs:",
        f"  x: {{dtype: {src}, shape: [{x.size}]}}",
        f"outputs: [{', '.join(f'y_{t}' for t in targets)}]",
        "nodes:",
        *[f"  - {{op: Cast, inputs: [x], outputs: [y_{t}], attrs: {{to: {t}}}}}" for t in targets]]) + "\n"
    got = run(graph, {"x": x}, tmp_path)
    wide = x.astype(np.float64)
    for t in targets:
        npt = BF16 if t == "bfloat16" else np.dtype(t)
        if npt.kind in "iu":
            want = np.trunc(wide).astype(npt)  # values stay in every target's range
        elif npt == np.bool_:
            want = wide != 0
        elif npt == BF16:
            want = x.astype(np.float32).astype(BF16) if src != "float64" else wide.astype(BF16)
        else:
            want = wide.astype(npt)
        same(got[f"y_{t}"], want)


# --- strings stay unsupported -------------------------------------------------------------------
def test_string_inputs_are_declined_with_a_clear_error(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(unary_graph("Identity", "string", 2))
    with pytest.raises(TinsmithError, match="unsupported dtype 'string'"):
        compile_graph(path)


def test_string_onnx_inputs_are_declined_with_a_clear_error(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.STRING, [2])
    y = helper.make_tensor_value_info("y", TensorProto.STRING, [2])
    model = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "s", [x], [y]))
    onnx.save(model, tmp_path / "s.onnx")
    from tinsmith.load.onnx_model import read_onnx
    with pytest.raises(TinsmithError, match="has element type string"):
        read_onnx(tmp_path / "s.onnx")


# --- float8, float4 and the 4- and 2-bit integers: Cast only, one element per byte ---------------
NARROW_FLOATS = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn")
NARROW_INTS = ("int4", "uint4", "int2", "uint2")


@pytest.mark.parametrize("dtype", NARROW_FLOATS + NARROW_INTS + ("float8_e8m0fnu",))
def test_every_code_of_a_narrow_type_reads_back_exactly(dtype, tmp_path):
    npt = np.dtype(getattr(ml_dtypes, dtype))
    bits = 2 if dtype.endswith("int2") else 4 if "4" in dtype.split("_")[0] or dtype.startswith("float4") else 8
    codes = np.arange(2 ** bits, dtype=np.uint8).view(npt)
    got = run(unary_graph("Cast", dtype, codes.size, attrs=", attrs: {to: float32}"), {"x": codes}, tmp_path)["y"]
    same(got, codes.astype(np.float32))


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("dtype", NARROW_FLOATS)
def test_cast_to_small_floats_rounds_ties_to_even_and_saturates(dtype, saturate, tmp_path):
    """Every midpoint between neighbouring codes (a tie), values just off them, the largest value and
    past it, subnormals, NaN and infinities; with saturate (ONNX's default) values past the largest
    finite clamp to it, without they become infinity or NaN as ml_dtypes says (float4_e2m1fn, which
    has neither, always saturates)."""
    npt = np.dtype(getattr(ml_dtypes, dtype))
    bits = 4 if dtype.startswith("float4") else 8
    values = np.sort(np.unique(np.arange(2 ** bits, dtype=np.uint8).view(npt).astype(np.float32)))
    values = values[np.isfinite(values)]
    mids = (values[:-1] + values[1:]) / 2
    x = np.concatenate([mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)),
                        values[-1:] * 1.03, values[-1:] * 1.2, -values[-1:] * 2, [1e30, -1e30],
                        [np.nan, np.inf, -np.inf, -0.0, 1e-30, -1e-30]]).astype(np.float32)
    graph = unary_graph("Cast", "float32", x.size, attrs=f", attrs: {{to: {dtype}, saturate: {saturate}}}")
    got = run(graph, {"x": x}, tmp_path)["y"]
    with np.errstate(over="ignore", invalid="ignore"):
        if saturate and dtype.startswith("float8"):
            limit = float(ml_dtypes.finfo(npt).max)
            want = np.clip(x, -limit, limit).astype(npt)  # NaN stays NaN
        else:
            want = x.astype(npt)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))  # the same codes


@pytest.mark.parametrize("dtype", NARROW_INTS)
def test_cast_to_narrow_integers_wraps_around(dtype, tmp_path):
    x = np.arange(-20, 21, dtype=np.float32) + np.float32(0.5)
    got = run(unary_graph("Cast", "float32", x.size, attrs=f", attrs: {{to: {dtype}}}"), {"x": x}, tmp_path)["y"]
    npt = np.dtype(getattr(ml_dtypes, dtype))
    np.testing.assert_array_equal(got.view(np.uint8), x.astype(npt).view(np.uint8))
    i = np.arange(-20, 21, dtype=np.int32)
    got = run(unary_graph("Cast", "int32", i.size, attrs=f", attrs: {{to: {dtype}}}"), {"x": i}, tmp_path / "i")["y"]
    np.testing.assert_array_equal(got.view(np.uint8), i.astype(npt).view(np.uint8))


@pytest.mark.parametrize("dtype", ("float16", "bfloat16") + NARROW_FLOATS + NARROW_INTS)
def test_constants_of_a_storage_type_are_spelt_as_their_codes(dtype):
    """The generated code stores these types as their bits (uint16_t, or one uint8_t per element as
    NumPy holds them): a constant or a state's starting value is written as its codes."""
    from tinsmith.generate.render import element_literals
    npt = np.dtype(getattr(ml_dtypes, dtype, dtype))
    values = np.arange(-3, 4).astype(np.float32).astype(npt)
    codes = values.view(np.uint16 if npt.itemsize == 2 else np.uint8)
    assert [int(t.rstrip("u"), 16) for t in element_literals(values)] == [int(c) for c in codes]


def test_cast_like_takes_the_type_of_its_second_input(tmp_path):
    graph = """\
        graph: g
        inputs:
          x: {dtype: float32, shape: [4]}
          like: {dtype: float8_e5m2, shape: [1]}
        outputs: [y]
        nodes:
          - {op: CastLike, inputs: [x, like], outputs: [y]}
        """
    x = np.array([1.1, 60000, -np.inf, np.nan], np.float32)
    got = run(graph, {"x": x, "like": np.zeros(1, ml_dtypes.float8_e5m2)}, tmp_path)["y"]
    limit = float(ml_dtypes.finfo(ml_dtypes.float8_e5m2).max)
    same(got, np.clip(x, -limit, limit).astype(ml_dtypes.float8_e5m2))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_max_pool_of_8_bit_integers(dtype, tmp_path):
    """Padding never wins: a window of the type's lowest values stays at the lowest value."""
    info = np.iinfo(dtype)
    x = np.array([info.min, info.max, 3, info.min, 0, 7, 1, info.min, 5, 2, 9, info.min], dtype).reshape(1, 1, 3, 4)
    graph = f"""\
        graph: g
        inputs:
          x: {{dtype: {dtype}, shape: [1, 1, 3, 4]}}
        outputs: [y]
        nodes:
          - {{op: MaxPool, inputs: [x], outputs: [y], attrs: {{kernel_shape: [2, 2], pads: [1, 1, 1, 1], strides: [2, 2]}}}}
        """
    got = run(graph, {"x": x}, tmp_path)["y"]
    padded = np.pad(x[0, 0], 1, constant_values=info.min)
    want = np.array([[padded[i:i + 2, j:j + 2].max() for j in range(0, 5, 2)] for i in range(0, 4, 2)], dtype)
    same(got, want.reshape(1, 1, 2, 3))


def test_cast_to_float8_e8m0_rounds_up_as_onnx_does(tmp_path):
    """The oracle is onnx's own to_float8e8m0 (round_mode "up", saturate): exponent bits, plus one
    for any fraction, not past 0xfe; NaN and infinities give 0xff; the sign is dropped."""
    from onnx.numpy_helper import to_float8e8m0
    x = np.array([0.0, 0.124, 0.25, 0.5, 1.1, 2.0, 4.0, 8.0, -3.0, 1e-40, 3e38, 1.7e38, np.inf, -np.inf, np.nan,
                  2.0 ** 127, 2.0 ** 127 * 1.5, 2.0 ** -126], np.float32)
    got = run(unary_graph("Cast", "float32", x.size, attrs=", attrs: {to: float8_e8m0fnu}"), {"x": x}, tmp_path)["y"]
    np.testing.assert_array_equal(got.view(np.uint8), to_float8e8m0(x).view(np.uint8))
