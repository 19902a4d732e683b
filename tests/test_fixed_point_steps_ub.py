"""The fixed-point steps the integer kernels are built from (functors/fixed_point_steps.py and
quantized_math.py), rendered to C++17 as the kernels render them, compiled by g++ with
-fsanitize=undefined -fno-sanitize-recover=all and run over edge values (INT32_MIN, INT32_MAX,
powers of two and their neighbours, every exponent a caller may pass): the program must run to the
end (no undefined behaviour: no signed overflow, no shift of a negative value or by the width or
more) and print, bit for bit, what a Python big-integer definition written here (or, for the
composite functions, the NumPy definition in codegen/quant) gives."""
from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pytest

from tinsmith.generate.functors.fixed_point_steps import Steps
from tinsmith.generate.functors.quantized_math import multiply_by_quantized_multiplier
from tinsmith.generate.loop_ir import Var
from tinsmith.generate.render import render_stmts
from tinsmith.quant import fixed_point as fp
from tinsmith.quant import fixed_point_functions as ff

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

INT32_MIN, INT32_MAX = fp.INT32_MIN, fp.INT32_MAX


def edge_values() -> list[int]:
    """int32 values where fixed-point arithmetic changes behaviour: both ends, 0 and +-1, every
    power of two and its neighbours, each negated, and a few seeded random ones."""
    values = {INT32_MIN, INT32_MIN + 1, INT32_MAX, INT32_MAX - 1, 0, 1, -1}
    for k in range(31):
        for v in ((1 << k) - 1, 1 << k, (1 << k) + 1):
            values.update((v, -v))
    values.update(int(v) for v in np.random.default_rng(7).integers(INT32_MIN, INT32_MAX, 40, endpoint=True))
    return sorted(v for v in values if INT32_MIN <= v <= INT32_MAX)


EDGES = edge_values()


# --- the independent definitions (Python integers, no NumPy) ---------------------------------------
def saturate32(v: int) -> int:
    return max(INT32_MIN, min(INT32_MAX, v))


def divide_by_pot_half_away(x: int, exponent: int) -> int:
    """x / 2^exponent rounded to nearest, ties away from zero (gemmlowp's RoundingDivideByPOT)."""
    q, r = divmod(abs(x), 1 << exponent)
    q += 2 * r >= 1 << exponent
    return q if x >= 0 else -q


def doubling_high_mul(a: int, b: int) -> int:
    """gemmlowp's SaturatingRoundingDoublingHighMul: 2ab / 2^32 rounded to nearest, ties up (its
    nudge 2^30, or 1 - 2^30 below zero, and a division that truncates)."""
    if a == b == INT32_MIN:
        return INT32_MAX
    return (a * b + (1 << 30)) >> 31


# --- rendering and running ---------------------------------------------------------------------
Build = Callable[[Steps, Sequence[Var]], Sequence[Var]]


def run_steps(tmp_path: Path, build: Build, rows: Sequence[Sequence[int]], outputs: int = 1) -> np.ndarray:
    """Each row of int32 arguments through the steps `build` adds (given a fresh Steps and the
    arguments as Vars, it returns the result Vars), compiled with the undefined-behaviour
    sanitizer that stops at the first finding; the results as an int64 array [rows, outputs]."""
    steps = Steps("t")
    args = [Var(f"a{i}") for i in range(len(rows[0]))]
    results = build(steps, args)
    body = "\n".join(render_stmts(tuple(steps.stmts), 1))
    params = ", ".join(f"std::int32_t {a.name}" for a in args)
    stores = "\n".join(f"  out[{i}] = static_cast<long long>({r.name});" for i, r in enumerate(results))
    reads = " && ".join(f"std::scanf(\"%lld\", &in[{i}]) == 1" for i in range(len(args)))
    passed = ", ".join(f"static_cast<std::int32_t>(in[{i}])" for i in range(len(args)))
    source = f"""#include <cstdint>
#include <cstdio>
static void steps({params}, long long* out) {{
{body}
{stores}
}}
int main() {{
  long long in[{len(args)}], out[{outputs}];
  while ({reads}) {{
    steps({passed}, out);
    for (int i = 0; i < {outputs}; ++i) std::printf("%lld ", out[i]);
    std::printf("\\n");
  }}
  return 0;
}}
"""
    (tmp_path / "steps.cpp").write_text(source)
    exe = tmp_path / "steps"
    build_cmd = ["g++", "-std=c++17", "-O1", "-Wall", "-Wextra", "-fsanitize=undefined",
                 "-fno-sanitize-recover=all", "steps.cpp", "-o", str(exe)]
    compiled = subprocess.run(build_cmd, cwd=tmp_path, capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr
    feed = "\n".join(" ".join(str(int(v)) for v in row) for row in rows) + "\n"
    ran = subprocess.run([str(exe)], input=feed, capture_output=True, text=True)
    assert ran.returncode == 0 and "runtime error" not in ran.stderr, \
        f"undefined behaviour:\n{ran.stderr}\nin\n{source}"
    got = np.array([[int(v) for v in line.split()] for line in ran.stdout.splitlines()], np.int64)
    assert got.shape == (len(rows), outputs)
    return got


def assert_rows_equal(rows, got, want, what: str) -> None:
    want = np.asarray(want, np.int64).reshape(got.shape)
    bad = np.flatnonzero((got != want).any(axis=1))
    first = [(rows[i], got[i].tolist(), want[i].tolist()) for i in bad[:5]]
    assert bad.size == 0, f"{what}: {bad.size} rows differ, first (arguments, got, want): {first}"


# --- the primitive steps ------------------------------------------------------------------------
def test_rounding_divide_by_a_run_time_power_of_two(tmp_path):
    """rdbpot with the exponent known at run time, as the softmax's last rounding passes it (up to
    35: 12 - leading zeros of the sum + 23), and far beyond."""
    rows = [(x, e) for x in EDGES for e in range(0, 64)]
    got = run_steps(tmp_path, lambda s, a: [s.rdbpot(a[0], a[1])], rows)
    assert_rows_equal(rows, got, [divide_by_pot_half_away(x, e) for x, e in rows], "rdbpot")


@pytest.mark.parametrize("exponent", [0, 1, 2, 12, 22, 30, 31])
def test_rounding_divide_by_a_build_time_power_of_two(tmp_path, exponent):
    rows = [(x,) for x in EDGES]
    got = run_steps(tmp_path, lambda s, a: [s.rdbpot(a[0], exponent)], rows)
    assert_rows_equal(rows, got, [divide_by_pot_half_away(x, exponent) for (x,) in rows], f"rdbpot {exponent}")


def test_build_time_exponents_out_of_range_are_refused():
    for exponent in (-1, 32):
        with pytest.raises(ValueError, match=r"exponent .* 0 to 31"):
            Steps("t").rdbpot(Var("x"), exponent)
        with pytest.raises(ValueError, match=r"exponent .* 0 to 31"):
            Steps("t").shl_saturating(Var("x"), exponent)


def test_saturating_left_shift_by_a_run_time_exponent(tmp_path):
    """shl_saturating_by over every exponent its callers (log_x) can pass, 0 to 31, negative values
    included: C++17 leaves a negative value's left shift undefined."""
    rows = [(x, e) for x in EDGES for e in range(32)]
    got = run_steps(tmp_path, lambda s, a: [s.shl_saturating_by(a[0], a[1])], rows)
    assert_rows_equal(rows, got, [saturate32(x << e) for x, e in rows], "shl_saturating_by")


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, 5, 6, 30, 31])
def test_saturating_left_shift_by_a_build_time_exponent(tmp_path, exponent):
    rows = [(x,) for x in EDGES]
    got = run_steps(tmp_path, lambda s, a: [s.shl_saturating(a[0], exponent)], rows)
    assert_rows_equal(rows, got, [saturate32(x << exponent) for (x,) in rows], f"shl_saturating {exponent}")


def test_saturating_rounding_doubling_high_multiply(tmp_path):
    """Every pair of edge values but INT32_MIN times itself, the one saturating case, which the
    steps' callers never pass (Steps.srdhm leaves out its test)."""
    rows = [(a, b) for a, b in itertools.product(EDGES, EDGES[::3]) if a != INT32_MIN or b != INT32_MIN]
    got = run_steps(tmp_path, lambda s, a: [s.srdhm(a[0], a[1])], rows)
    assert_rows_equal(rows, got, [doubling_high_mul(a, b) for a, b in rows], "srdhm")


def test_saturating_and_wrapping_sums(tmp_path):
    rows = list(itertools.product(EDGES[::2], EDGES[::5]))
    got = run_steps(tmp_path, lambda s, a: [s.saturating("+", a[0], a[1]), s.saturating("-", a[0], a[1]),
                                            s.wrapping("+", a[0], a[1]), s.wrapping("-", a[0], a[1])], rows, 4)
    wrap = lambda v: (v + (1 << 31)) % (1 << 32) - (1 << 31)  # noqa: E731
    want = [(saturate32(a + b), saturate32(a - b), wrap(a + b), wrap(a - b)) for a, b in rows]
    assert_rows_equal(rows, got, want, "sums")


def test_leading_zeros(tmp_path):
    rows = [(x,) for x in EDGES]
    got = run_steps(tmp_path, lambda s, a: [s.leading_zeros(a[0])], rows)
    assert_rows_equal(rows, got, [32 - (x & 0xFFFFFFFF).bit_length() for (x,) in rows], "leading_zeros")


def test_rounding_divide_as_built(tmp_path):
    """QDiv's shift: below 32 exact; from 32 on the host interpreter's value (the NumPy definition)."""
    rows = [(x, e) for x in EDGES for e in range(0, 70)]
    got = run_steps(tmp_path, lambda s, a: [s.rdbpot_as_built(a[0], a[1])], rows)
    want = ff.rounding_divide_by_pot_as_built(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]))
    assert_rows_equal(rows, got, want, "rdbpot_as_built")
    below = [(x, e) for x, e in rows if e < 32]
    assert_rows_equal(below, got[[i for i, (x, e) in enumerate(rows) if e < 32]],
                      [divide_by_pot_half_away(x, e) for x, e in below], "rdbpot_as_built below 32")


# (sign of every loaded shift as the caller knows it, the shifts, the largest right shift it states)
MULTIPLY_FORMS = [(0, range(-31, 31), 31), (0, range(-30, 31), 30), (-1, range(-31, 1), 31), (-1, range(-30, 1), 30),
                  (1, range(0, 31), 0)]


@pytest.mark.parametrize("sign,shifts,right_at_most", MULTIPLY_FORMS)
def test_multiply_by_a_run_time_quantized_multiplier(tmp_path, sign, shifts, right_at_most):
    """MultiplyByQuantizedMultiplier with a per-channel multiplier and shift (loaded at run time),
    in each form the caller may ask for, against the big-integer definition (left shift wrapping as
    TFLite's int32 shift, then the doubling high multiply, then the rounding right shift)."""
    multipliers = (0, 1 << 30, (1 << 30) + 12345, INT32_MAX)
    rows = [(x, m, sh) for x in EDGES[::2] for m in multipliers for sh in shifts]

    def build(s, a):
        stmts, result = multiply_by_quantized_multiplier("m", a[0], a[1], a[2], sign, right_at_most)
        s.stmts += stmts
        return [result]
    got = run_steps(tmp_path, build, rows)
    wrap = lambda v: (v + (1 << 31)) % (1 << 32) - (1 << 31)  # noqa: E731
    want = [divide_by_pot_half_away(doubling_high_mul(wrap(x << max(sh, 0)), m), max(-sh, 0)) for x, m, sh in rows]
    assert_rows_equal(rows, got, want, "multiply_by_quantized_multiplier")


@pytest.mark.parametrize("shift", [-31, -12, 0, 5, 30])
def test_multiply_by_a_build_time_quantized_multiplier(tmp_path, shift):
    rows = [(x,) for x in EDGES]

    def build(s, a):
        stmts, result = multiply_by_quantized_multiplier("m", a[0], (1 << 30) + 777, shift)
        s.stmts += stmts
        return [result]
    got = run_steps(tmp_path, build, rows)
    wrap = lambda v: (v + (1 << 31)) % (1 << 32) - (1 << 31)  # noqa: E731
    want = [divide_by_pot_half_away(doubling_high_mul(wrap(x << max(shift, 0)), (1 << 30) + 777), max(-shift, 0))
            for (x,) in rows]
    assert_rows_equal(rows, got, want, f"multiply_by_quantized_multiplier shift {shift}")


# --- the composite functions, against their NumPy definitions -----------------------------------
POSITIVE = [x for x in EDGES if x > 0]


def test_exp_on_negative_values(tmp_path):
    rows = [(x,) for x in EDGES if x <= 0]
    got = run_steps(tmp_path, lambda s, a: [s.exp_on_negative_values(a[0])], rows)
    assert_rows_equal(rows, got, fp.exp_on_negative_values(np.array(rows)[:, 0]), "exp_on_negative_values")


def test_one_over_one_plus_x_and_reciprocal(tmp_path):
    rows = [(x,) for x in POSITIVE]
    got = run_steps(tmp_path, lambda s, a: [s.one_over_one_plus_x(a[0]), *s.reciprocal(a[0])], rows, 3)
    x = np.array(rows)[:, 0]
    raw, bits = ff.reciprocal(x)
    assert_rows_equal(rows, got, np.stack([fp.one_over_one_plus_x_for_x_in_0_1(x), raw, bits], 1), "reciprocal")


def test_inverse_square_root(tmp_path):
    """inv_sqrt of every edge value: QRsqrt passes values >= 0; QL2Normalization a row's int32 sum of
    squares, which wraps negative for rows past 33,025 elements at the far end (the NumPy
    definition and TFLite give (INT32_MAX, 0) for every value <= 1)."""
    rows = [(x,) for x in EDGES]
    got = run_steps(tmp_path, lambda s, a: list(s.inv_sqrt(a[0])), rows, 2)
    multiplier, shift = ff.inv_sqrt_multiplier(np.array(rows)[:, 0])
    assert_rows_equal(rows, got, np.stack([multiplier, shift], 1), "inv_sqrt")


def test_log(tmp_path):
    """log_x as QLogSoftmax calls it (Q12.19 in, Q5.26 out) on every edge value: the positive ones,
    and those a wrapped sum can take (0 and negative, which TFLite leaves undefined and the NumPy
    definition shifts by 0 where it would shift by -1)."""
    rows = [(x,) for x in EDGES]
    got = run_steps(tmp_path, lambda s, a: [s.log_x(a[0], fp.SOFTMAX_ACCUM_INTEGER_BITS,
                                                    fp.SOFTMAX_DIFF_INTEGER_BITS)], rows)
    want = ff.log_x(np.array(rows)[:, 0], fp.SOFTMAX_ACCUM_INTEGER_BITS, fp.SOFTMAX_DIFF_INTEGER_BITS)
    assert_rows_equal(rows, got, want, "log_x")


# --- whole kernels, compiled with the sanitizer, against their primitives' NumPy references ------
def run_sanitized(tmp_path: Path, graph: str | Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The graph (a file, or a graph YAML's text) generated for the host target, compiled with the
    host target's flags and the undefined-behaviour sanitizer (stopping at the first finding), run
    on `inputs`."""
    return run_sanitized_sets(tmp_path, graph, [inputs])[0]


def run_sanitized_sets(tmp_path: Path, graph: str | Path, input_sets: list[dict[str, np.ndarray]]
                       ) -> list[dict[str, np.ndarray]]:
    """run_sanitized on several input sets: one build, and one run of its host runner, which calls
    the model once per set in a row."""
    from conformance.batch import _host_command
    from tinsmith.cli import _input_bytes, _output_arrays
    from tinsmith.paths import RUNTIME_DIR, RUNTIME_INCLUDE
    from tinsmith.pipeline import compile_graph, lower, write_files
    tmp_path.mkdir(parents=True, exist_ok=True)
    if isinstance(graph, str):
        (tmp_path / "g.yaml").write_text(graph)
        graph = tmp_path / "g.yaml"
    lowered = lower(graph)
    compiled = compile_graph(graph, target="host")
    name = compiled.graph.name
    out_dir = tmp_path / "gen"
    write_files(compiled.files, out_dir)
    cxx, flags = _host_command()
    cmd = [cxx, *flags, "-fsanitize=undefined", "-fno-sanitize-recover=all", f"-I{RUNTIME_INCLUDE}", f"-I{out_dir}",
           str(out_dir / f"{name}.cpp"), str(out_dir / f"{name}_runner.cpp"), str(RUNTIME_DIR / "src" / "host_io.cpp"),
           "-o", str(tmp_path / "run")]
    built = subprocess.run(cmd, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (tmp_path / "in.bin").write_bytes(b"".join(_input_bytes(lowered, inputs) for inputs in input_sets))
    ran = subprocess.run([str(tmp_path / "run"), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                         capture_output=True, text=True)
    assert ran.returncode == 0 and "runtime error" not in ran.stderr, f"undefined behaviour:\n{ran.stderr}"
    out = (tmp_path / "out.bin").read_bytes()
    size = len(out) // len(input_sets)
    assert size * len(input_sets) == len(out)
    return [_output_arrays(lowered, out[i * size:(i + 1) * size]) for i in range(len(input_sets))]


def rows_of(length: int, seed: int) -> np.ndarray:
    """Four rows: every element equal (the largest sum), random, one high element, the two ends."""
    rng = np.random.default_rng(seed)
    rows = np.stack([np.full(length, 5), rng.integers(-128, 128, length), np.full(length, -128),
                     np.where(np.arange(length) % 2 == 0, 127, -128)]).astype(np.int8)
    rows[2, length // 2] = 127
    return rows


def one_node(op: str, shape, attrs: str, dtype: str = "int8", out: str = "") -> str:
    return (f"graph: g\ninputs:\n  x: {{dtype: {dtype}, shape: {list(shape)}}}\noutputs: [y]\nnodes:\n"
            f"  - {{op: {op}, inputs: [x], outputs: [y], attrs: {{{attrs}}}}}\n")


# rows of 300 equal elements take the softmax's last rounding shift to 31 (a sum in [2^27, 2^28)),
# 700 to 32, 5000 wrap the int32 sum (as TFLite's does) to a negative value: a shift of 35
@pytest.mark.parametrize("length", [37, 300, 700, 5000])
def test_softmax_rows_up_to_and_past_an_int32_sum(tmp_path, length):
    x = rows_of(length, length)
    got = run_sanitized(tmp_path, one_node("QSoftmax", x.shape, "x_scale: 0.1, beta: 1.0"), {"x": x})
    np.testing.assert_array_equal(got["y"], fp.softmax_int8(x, 1.0, 0.1))


@pytest.mark.parametrize("length", [300, 5000])
def test_log_softmax_rows_up_to_and_past_an_int32_sum(tmp_path, length):
    """Past 4,095 equal elements the sum wraps and log_x sees a negative value: defined C++, and
    the NumPy definition's outputs."""
    x = rows_of(length, length)
    got = run_sanitized(tmp_path, one_node("QLogSoftmax", x.shape, "x_scale: 0.05"), {"x": x})
    np.testing.assert_array_equal(got["y"], ff.log_softmax_int8(x, 0.05))


def test_l2_normalization_of_a_row_whose_sum_of_squares_wraps(tmp_path):
    """40,000 elements 255 from the zero point: 2.6e9 wraps as TFLite's int32 sum does."""
    x = np.stack([np.full(40000, 127), rows_of(40000, 1)[1]]).astype(np.int8)
    got = run_sanitized(tmp_path, one_node("QL2Normalization", x.shape, "x_zero_point: -128"), {"x": x})
    np.testing.assert_array_equal(got["y"], ff.l2_normalization_int8(x, -128))


def test_rsqrt_of_every_int8_and_int16_value(tmp_path):
    x8 = np.arange(-128, 128, dtype=np.int8).reshape(1, -1)
    attrs = {"x_scale": 0.05, "x_zero_point": -100, "y_scale": 0.02, "y_zero_point": -5}
    text = ", ".join(f"{k}: {v}" for k, v in attrs.items())
    got = run_sanitized(tmp_path, one_node("QRsqrt", x8.shape, text), {"x": x8})
    np.testing.assert_array_equal(got["y"], ff.rsqrt(x8, -100, *ff.rsqrt_multiplier(0.05, 0.02), -5, "int8"))
    x16 = np.arange(-32768, 32768, dtype=np.int16).reshape(16, -1)
    got = run_sanitized(tmp_path / "16", one_node("QRsqrt", x16.shape, "x_scale: 0.001, y_scale: 0.0003", "int16"),
                        {"x": x16})
    np.testing.assert_array_equal(got["y"], ff.rsqrt(x16, 0, *ff.rsqrt_multiplier(0.001, 0.0003), 0, "int16"))


@pytest.mark.parametrize("scales,zero_points", [((0.1, 0.02, 0.05), (2, -3, 0)), ((1.0, 1.0, 1e-5), (-128, 127, -128)),
                                                ((0.003, 2.0, 0.4), (0, 0, 127))])
def test_div_of_every_int8_pair(tmp_path, scales, zero_points):
    from tinsmith.ops.quantized_fixed_point import div_values
    attrs = dict(zip(("a_scale", "b_scale", "y_scale", "a_zero_point", "b_zero_point", "y_zero_point"),
                     (*scales, *zero_points)))
    a = np.arange(-128, 128, dtype=np.int8).reshape(256, 1)
    b = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    text = (f"graph: g\ninputs:\n  a: {{dtype: int8, shape: [256, 1]}}\n  b: {{dtype: int8, shape: [1, 256]}}\n"
            f"outputs: [y]\nnodes:\n  - {{op: QDiv, inputs: [a, b], outputs: [y], attrs: {attrs}}}\n")
    got = run_sanitized(tmp_path, text, {"a": a, "b": b})
    np.testing.assert_array_equal(got["y"], div_values(a, b, attrs))


def test_a_softmax_whose_input_differences_need_a_right_shift_is_refused(tmp_path):
    """The softmax scales its input differences up (TFLite asks beta * x_scale above 2^-26); below
    2^-27 the shift would be negative: refused at the node, with the file's line."""
    from tinsmith.errors import GraphError
    from tinsmith.pipeline import lower
    (tmp_path / "g.yaml").write_text(one_node("QSoftmax", (2, 8), "x_scale: 1.0e-9, beta: 1.0"))
    with pytest.raises(GraphError, match=r"g.yaml:6:\d+: error: QSoftmax node '\w+': beta \* x_scale must be at least "
                                         r"2\^-27"):
        lower(tmp_path / "g.yaml")


# --- the linear form of the AVX-512 ADD ----------------------------------------------------------
@pytest.mark.parametrize("add", [(0.06722422689199448, -27, 0.02639394998550415, -128, 0.040482666343450546, -128),
                                 (0.5, -128, 0.004, 127, 0.3, -7), (0.9, 127, 0.8, -128, 0.01, 0),
                                 (0.01, -128, 0.01, -128, 0.5, 127), (0.02, -128, 0.03, 5, 2.0, 0)])
def test_linear_add_forms_stay_inside_int32(add):
    """The int32 lanes of avx512_qadd_linear compute a * ma, then + b * mb, then + offset, then an
    arithmetic shift: every partial sum of every int8 pair stays inside int32 (a lane overflow is
    undefined), and the clamped result is the QAdd reference's on every pair."""
    from tinsmith.ops.registry import PRIMITIVES
    from tinsmith.quant.linear_add import find_linear_add
    attrs = dict(zip(("a_scale", "a_zero_point", "b_scale", "b_zero_point", "y_scale", "y_zero_point"), add),
                 act_min=-128, act_max=127)
    form = find_linear_add(attrs, lambda a, b, at: PRIMITIVES["QAdd"].reference([a, b], at)[0])
    assert form is not None  # (ratios from 1/100 to 90: each of these has one)
    a, b = (v.reshape(-1) for v in np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij"))
    partial = [a * form.a_mult, a * form.a_mult + b * form.b_mult, a * form.a_mult + b * form.b_mult + form.offset]
    for value in partial:
        assert INT32_MIN <= value.min() and value.max() <= INT32_MAX
    got = np.clip(partial[-1] >> form.shift, -128, 127)
    want = PRIMITIVES["QAdd"].reference([a.astype(np.int8), b.astype(np.int8)], attrs)[0]
    np.testing.assert_array_equal(got, want)


# --- the shipped int8 models ---------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ["models/kws_dscnn_int8.tflite", "models/ic_resnet8_int8.tflite", "models/ad_autoencoder_int8.tflite",
           "tests/data/tflite/add_relu.tflite", "tests/data/tflite/softmax_beta.tflite", "tests/data/tflite/relu.tflite"]


@pytest.mark.parametrize("model", SHIPPED, ids=lambda m: Path(m).stem)
def test_shipped_int8_models_run_without_undefined_behaviour(tmp_path, model):
    """Each model's host build under the sanitizer, on inputs at the type's bottom and two random
    ones, against the TensorFlow Lite Micro interpreter: bit-exact."""
    tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    from tinsmith.pipeline import lower
    path = ROOT / model
    graph = lower(path)
    rng = np.random.default_rng(11)
    trials = []
    for trial in range(3):
        feeds = []
        for name in graph.api_inputs:
            t = graph.types[name]
            info = np.iinfo(t.numpy_dtype)
            values = rng.integers(info.min, info.max, t.shape, endpoint=True) if trial else np.full(t.shape, info.min)
            feeds.append(values.astype(t.numpy_dtype))
        trials.append(feeds)
    # one sanitized build, its runner calling the model on the three input sets in a row
    outputs = run_sanitized_sets(tmp_path, path, [dict(zip(graph.api_inputs, feeds)) for feeds in trials])
    for trial, (feeds, got) in enumerate(zip(trials, outputs)):
        interp = tflm.Interpreter.from_file(str(path), arena_size=1 << 22)
        for i, x in enumerate(feeds):
            interp.set_input(x, i)
        interp.invoke()
        for i, name in enumerate(graph.api_outputs):
            np.testing.assert_array_equal(got[name], interp.get_output(i), err_msg=f"{model} output {name}, trial {trial}")


# --- quantizations the steps cannot take, refused at the node ------------------------------------
TWO_INPUTS = "graph: g\ninputs:\n  a: {dtype: int8, shape: [2, 4]}\n  b: {dtype: int8, shape: [2, 4]}\noutputs: [y]\nnodes:\n"
ONE_INPUT = "graph: g\ninputs:\n  a: {dtype: int8, shape: [2, 4]}\noutputs: [y]\nnodes:\n"


@pytest.mark.parametrize("graph,message", [
    (TWO_INPUTS + "  - {op: QDiv, inputs: [a, b], outputs: [y], attrs: {a_scale: 1.0, b_scale: 0.0, y_scale: 0.1}}\n",
     r"QDiv node 'qdiv_y': b_scale must be positive and finite, got 0.0"),
    (TWO_INPUTS + "  - {op: QDiv, inputs: [a, b], outputs: [y], attrs: {a_scale: .nan, b_scale: 0.1, y_scale: 0.1}}\n",
     r"QDiv node 'qdiv_y': a_scale must be positive and finite, got nan"),
    (TWO_INPUTS + "  - {op: QDiv, inputs: [a, b], outputs: [y], attrs: {a_scale: .inf, b_scale: 0.1, y_scale: 0.1}}\n",
     r"QDiv node 'qdiv_y': a_scale must be positive and finite, got inf"),
    (TWO_INPUTS + "  - {op: QDiv, inputs: [a, b], outputs: [y], attrs: {a_scale: 1.0, b_scale: 0.1, y_scale: 0.1, "
                  "b_zero_point: 300}}\n",
     r"QDiv node 'qdiv_y': b_zero_point must lie in -128..127 \(int8 data\), got 300"),
    (ONE_INPUT + "  - {op: QRsqrt, inputs: [a], outputs: [y], attrs: {x_scale: 0.1, y_scale: 0.1, x_zero_point: -129}}\n",
     r"QRsqrt node 'qrsqrt_y': x_zero_point must lie in -128..127 \(int8 data\), got -129"),
    (ONE_INPUT + "  - {op: QL2Normalization, inputs: [a], outputs: [y], attrs: {x_zero_point: 1000}}\n",
     r"QL2Normalization node 'ql2normalization_y': x_zero_point must lie in -128..127 \(int8 data\), got 1000"),
    (ONE_INPUT + "  - {op: QSoftmax, inputs: [a], outputs: [y], attrs: {x_scale: 0.1, beta: .nan}}\n",
     r"QSoftmax node 'qsoftmax_y': beta \* x_scale must be at least 2\^-27"),
], ids=["div_scale_0", "div_scale_nan", "div_scale_inf", "div_zero_point", "rsqrt_zero_point", "l2_zero_point",
        "softmax_beta_nan"])
def test_quantizations_outside_the_steps_ranges_are_refused_by_name(tmp_path, graph, message):
    from tinsmith.errors import GraphError
    from tinsmith.pipeline import lower
    (tmp_path / "g.yaml").write_text(graph)
    with pytest.raises(GraphError, match=r"g.yaml:\d+:\d+: error: " + message):
        lower(tmp_path / "g.yaml")
