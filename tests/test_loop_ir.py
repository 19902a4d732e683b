"""Loop IR (tinsmith.generate.loop_ir), its simplification and its one renderer, with exact expected
IR and text."""
from __future__ import annotations

import math
import shutil
import subprocess
import textwrap

import numpy as np
import pytest

from tinsmith.generate.loop_ir import (Assign, Binary, Comment, Const, For, If, Kernel, Load, Local, Param, Select,
                                      Store, Unary, Var, broadcast_index, const, flat_index, index, nest)
from tinsmith.generate.render import float_literal, render_expr, render_kernel, render_stmts
from tinsmith.generate.simplify import simplify, simplify_expr
from tinsmith.paths import RUNTIME_INCLUDE

a, b, c, d = Var("a"), Var("b"), Var("c"), Var("d")
i, j, k = Var("i"), Var("j"), Var("k")
x = Load("x", i)


def sub(p, q):
    return Binary("-", p, q)


def add(p, q):
    return Binary("+", p, q)


def mul(p, q):
    return Binary("*", p, q)


def div(p, q):
    return Binary("/", p, q)


def s(e, env=None):
    return simplify_expr(e, env or {})


def kernel(*body) -> Kernel:
    return Kernel("k", (Param("x", "float", 4, False), Param("y", "float", 4, True)), tuple(body))


# --- construction helpers -------------------------------------------------------------------
def test_flat_and_broadcast_index():
    assert render_expr(s(flat_index([i, j, k], (2, 3, 4)))) == "i * 12 + (j * 4 + k)"
    assert render_expr(s(broadcast_index([i, j, k], (2, 3, 4), (3, 1)))) == "j"
    assert render_expr(s(broadcast_index([i, j, k], (2, 3, 4), (2, 1, 4)))) == "i * 4 + k"
    assert s(broadcast_index([i, j], (2, 3), ())) == index(0)


def test_nest():
    stmts, vars_ = nest((2, 3), "i", lambda idx: [Store("y", flat_index(idx, (2, 3)), Load("x", idx[1]))])
    assert vars_ == [Var("i0"), Var("i1")]
    assert stmts == (For("i0", 2, (For("i1", 3, (Store("y", flat_index(vars_, (2, 3)), Load("x", Var("i1"))),)),)),)


# --- simplify -------------------------------------------------------------------------------
def test_integer_constants_fold():
    assert s(add(mul(index(2), index(3)), i)) == add(index(6), i)
    assert s(sub(index(2), index(5))) == index(-3)
    assert s(mul(add(index(1), index(2)), add(i, index(0)))) == mul(index(3), i)


def test_division_and_modulo_are_not_folded():
    # C truncates toward zero where Python floors: leave them to the compiler
    assert s(div(index(7), index(2))) == div(index(7), index(2))
    assert s(Binary("%", index(-7), index(2))) == Binary("%", index(-7), index(2))


def test_float_constants_do_not_fold():
    """Folding floats in Python (float64) could differ from the float32 arithmetic of the kernel."""
    assert s(add(const(0.1), const(0.2))) == add(const(0.1), const(0.2))


@pytest.mark.parametrize("expr, expected", [
    (mul(i, index(1)), i),
    (mul(index(1), i), i),
    (add(i, index(0)), i),
    (add(index(0), i), i),
    (sub(i, index(0)), i),
    (mul(i, index(0)), index(0)),
    (mul(index(0), i), index(0)),
    (div(i, index(1)), i),
    (mul(x, const(1.0)), x),        # exact in floating point as well
    (mul(const(1.0), x), x),
    (div(x, const(1.0)), x),
    (add(x, const(0.0)), add(x, const(0.0))),  # not exact: -0.0 + 0.0 is +0.0
    (sub(index(0), i), sub(index(0), i)),
    (mul(add(mul(i, index(1)), index(0)), index(4)), mul(i, index(4))),
])
def test_identities(expr, expected):
    assert s(expr) == expected


def test_substitution_reaches_every_expression_kind():
    env = {"i": index(0)}
    e = Select(Binary("<", i, index(3)), Unary("exp", Load("x", add(i, j))), mul(i, a))
    assert s(e, env) == Select(Binary("<", index(0), index(3)), Unary("exp", Load("x", j)), index(0))


def test_loops_of_one_iteration_disappear():
    body = For("i0", 1, (For("i1", 3, (Store("y", flat_index([Var("i0"), Var("i1")], (1, 3)),
                                             Load("x", flat_index([Var("i0"), Var("i1")], (1, 3)))),)),))
    assert simplify(kernel(body)).body == (For("i1", 3, (Store("y", Var("i1"), Load("x", Var("i1"))),)),)


def test_loops_of_no_iteration_disappear():
    assert simplify(kernel(For("i", 0, (Store("y", i, const(1)),)), Comment("kept"))).body == (Comment("kept"),)


def test_loop_of_one_iteration_around_locals():
    body = For("m", 1, (Local("acc", const(0)),
                        For("k", 4, (Assign("acc", add(Var("acc"), Load("x", add(mul(Var("m"), index(4)), k)))),)),
                        Store("y", Var("m"), Var("acc"))))
    assert simplify(kernel(body)).body == (
        Local("acc", const(0)),
        For("k", 4, (Assign("acc", add(Var("acc"), Load("x", k))),)),
        Store("y", index(0), Var("acc")),
    )


def test_loops_of_one_iteration_stay_where_unwrapping_would_declare_a_local_twice():
    def reduction(var):
        return For(var, 1, (Local("acc", const(0)), Assign("acc", add(Var("acc"), Load("x", Var(var)))),
                            Store("y", Var(var), Var("acc"))))
    unwrapped = (Local("acc", const(0)), Assign("acc", add(Var("acc"), Load("x", index(0)))),
                 Store("y", index(0), Var("acc")))
    kept = For("r", 1, unwrapped[:1] + (Assign("acc", add(Var("acc"), Load("x", Var("r")))),
                                        Store("y", Var("r"), Var("acc"))))
    # two such loops side by side: unwrapped, 'float acc' would be declared twice in one scope
    assert simplify(kernel(reduction("r"), reduction("r"))).body == (kept, kept)
    assert simplify(kernel(reduction("r"), Local("acc", const(1)))).body == (kept, Local("acc", const(1)))
    # nested one-iteration loops count as the same scope: the outer one stays, the inner one goes
    assert simplify(kernel(For("o", 1, (reduction("r"),)), reduction("r"))).body == \
        (For("o", 1, unwrapped), kept)
    # alone, it goes
    assert simplify(kernel(reduction("r"))).body == unwrapped
    assert "float acc = 0.0f;\n  float acc" not in render_kernel(simplify(kernel(reduction("r"), reduction("r"))))


def test_an_inner_loop_index_shadows_an_outer_substitution():
    body = For("i", 1, (Store("y", i, const(0)), For("i", 3, (Store("y", i, Load("x", i)),))))
    assert simplify(kernel(body)).body == (
        Store("y", index(0), const(0)),
        For("i", 3, (Store("y", i, Load("x", i)),)),
    )


def test_a_condition_and_its_block_simplify():
    body = For("i", 4, (If(Binary("<", i, add(index(1), index(1))), (Store("y", add(i, index(0)), const(1)),)),))
    assert simplify(kernel(body)).body == (For("i", 4, (If(Binary("<", i, index(2)), (Store("y", i, const(1)),)),)),)


def test_simplify_keeps_name_params_and_doc():
    k0 = Kernel("relu", (Param("x", "float", 4, False),), (Comment("c"),), "doc")
    assert simplify(k0) == k0


# --- render: expressions --------------------------------------------------------------------
EXPRESSIONS = [
    (sub(a, sub(b, c)), "a - (b - c)"),
    (sub(sub(a, b), c), "a - b - c"),
    (add(a, add(b, c)), "a + (b + c)"),   # float addition is not associative: keep the IR's order
    (add(add(a, b), c), "a + b + c"),
    (mul(a, add(b, c)), "a * (b + c)"),
    (mul(add(a, b), c), "(a + b) * c"),
    (div(a, mul(b, c)), "a / (b * c)"),
    (div(mul(a, b), c), "a * b / c"),
    (add(mul(a, b), mul(c, d)), "a * b + c * d"),
    (Binary("%", add(i, j), index(3)), "(i + j) % 3"),
    (Binary("&&", Binary("<", a, b), Binary(">=", c, d)), "a < b && c >= d"),
    # -Wparentheses (in -Wall) wants these even where C++ precedence would not need them
    (Binary("||", Binary("&&", a, b), c), "(a && b) || c"),
    (Binary("||", c, Binary("&&", a, b)), "c || (a && b)"),
    (Binary("&&", Binary("||", a, b), c), "(a || b) && c"),
    (Binary("&&", Binary("&&", a, b), c), "a && b && c"),
    (Binary("==", Binary("<", a, b), c), "(a < b) == c"),
    (Binary("<", Binary("<", a, b), c), "(a < b) < c"),
    (Binary("!=", a, Binary("==", b, c)), "a != (b == c)"),
    (Binary("<", add(a, b), mul(c, d)), "a + b < c * d"),
    (Select(Binary("<", a, b), c, d), "a < b ? c : d"),
    (add(Select(a, b, c), d), "(a ? b : c) + d"),
    (Select(Binary("||", a, b), c, Select(d, a, b)), "a || b ? c : d ? a : b"),
    (Binary("max", sub(a, b), const(0)), "tinsmith::math::fmax(a - b, 0.0f)"),
    (Binary("min", a, b), "tinsmith::math::fmin(a, b)"),
    (Binary("pow", add(a, b), const(2)), "tinsmith::math::pow(a + b, 2.0f)"),
    (mul(Binary("max", a, b), c), "tinsmith::math::fmax(a, b) * c"),
    (Unary("exp", sub(a, b)), "tinsmith::math::exp(a - b)"),
    (Unary("tanh", a), "tinsmith::math::tanh(a)"),
    (Unary("erf", a), "tinsmith::math::erf(a)"),
    (Unary("sqrt", a), "tinsmith::math::sqrt(a)"),
    (Unary("abs", a), "tinsmith::math::fabs(a)"),
    (Unary("log", a), "tinsmith::math::log(a)"),
    (Unary("floor", a), "tinsmith::math::floor(a)"),
    (Unary("ceil", a), "tinsmith::math::ceil(a)"),
    (Unary("neg", a), "-a"),
    (Unary("neg", add(a, b)), "-(a + b)"),
    (Unary("neg", mul(a, b)), "-(a * b)"),
    (mul(Unary("neg", a), b), "-a * b"),
    (sub(a, Unary("neg", b)), "a - -b"),
    (Unary("neg", Unary("neg", a)), "-(-a)"),      # not the decrement operator
    (Unary("neg", const(-2.0)), "-(-2.0f)"),
    (Unary("neg", Load("x", i)), "-t_x[i]"),
    (Load("x", add(mul(i, index(4)), j)), "t_x[i * 4 + j]"),
    (Load("x", index(0)), "t_x[0]"),
]


@pytest.mark.parametrize("expr, text", EXPRESSIONS)
def test_render_expressions(expr, text):
    assert render_expr(expr) == text


CONSTANTS = [
    (Const(-3, False), "-3"),
    (add(i, Const(-3, False)), "i + (-3)"),
    (sub(i, Const(-3, False)), "i - (-3)"),
    (Const(-1.5), "-1.5f"),
    (mul(a, Const(-1.5)), "a * (-1.5f)"),
    (mul(Const(-1.5), a), "(-1.5f) * a"),
    (Const(-0.0), "-0.0f"),
    (sub(a, Const(-0.0)), "a - (-0.0f)"),
    (Const(-math.inf), "-tinsmith::math::kInfinity"),
    (Const(math.inf), "tinsmith::math::kInfinity"),
    (Binary("max", a, Const(-math.inf)), "tinsmith::math::fmax(a, -tinsmith::math::kInfinity)"),
    (mul(a, Const(-math.inf)), "a * (-tinsmith::math::kInfinity)"),
    (Const(math.nan), "tinsmith::math::kNaN"),
    (Const(7, False), "7"),
]


@pytest.mark.parametrize("expr, text", CONSTANTS)
def test_render_constants(expr, text):
    assert render_expr(expr) == text


@pytest.mark.parametrize("value, text", [
    (0.0, "0.0f"), (1.0, "1.0f"), (2.0, "2.0f"), (0.5, "0.5f"), (-0.25, "-0.25f"), (0.1, "0.1f"),
    (1e-5, "1e-05f"), (1e-4, "0.0001f"), (12345678.0, "12345678.0f"), (123456789.0, "1.2345679e+08f"),
    (1e20, "1e+20f"), (math.sqrt(2.0), "1.4142135f"), (3.4028234663852886e38, "3.4028235e+38f"),
    (1e39, "tinsmith::math::kInfinity"), (-1e39, "-tinsmith::math::kInfinity"), (1e-46, "0.0f"),
])
def test_float_literals(value, text):
    assert float_literal(value) == text


def test_float_literals_round_trip_through_numpy():
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32)
    values = values[np.isfinite(values)]
    for v in values:
        text = float_literal(float(v))
        assert text.endswith("f")
        assert np.float32(text[:-1]) == v or (v == 0 and np.float32(text[:-1]) == 0), (v, text)
        assert np.signbit(np.float32(text[:-1])) == np.signbit(v)
    # float64 values: the literal is the float32 nearest to the value, as np.float32() rounds it
    for v in rng.standard_normal(20000) * np.exp(rng.uniform(-40, 40, 20000)):
        assert np.float32(float_literal(float(v))[:-1]) == np.float32(v), v


# --- render: statements and kernels ---------------------------------------------------------
def test_render_statements():
    stmts = (
        Comment("sum a row"),
        Local("acc", const(0)),
        For("k", 4, (
            Assign("acc", add(Var("acc"), mul(Load("x", k), Load("x", k)))),
            Assign("acc", sub(Var("acc"), sub(a, b))),
            Assign("acc", mul(Var("acc"), const(0.5))),
            Assign("acc", div(Var("acc"), const(2))),
            Assign("acc", Binary("max", Var("acc"), a)),
            Assign("acc", sub(a, Var("acc"))),
            Assign("acc", Binary("%", Var("acc"), a)),
        )),
        Store("y", index(0), Var("acc")),
    )
    assert render_stmts(stmts, 2) == [
        "  // sum a row",
        "  float acc = 0.0f;",
        "  for (int k = 0; k < 4; ++k) {",
        "    acc += t_x[k] * t_x[k];",
        "    acc -= a - b;",
        "    acc *= 0.5f;",
        "    acc /= 2.0f;",
        "    acc = tinsmith::math::fmax(acc, a);",
        "    acc = a - acc;",
        "    acc = acc % a;",
        "  }",
        "  t_y[0] = acc;",
    ]


def test_render_a_condition():
    stmts = (For("u", 3, (If(Binary("&&", Binary(">=", Var("u"), index(1)), Binary("<", Var("u"), index(3))),
                             (Local("v", Load("x", Var("u"))), Store("y", Var("u"), Var("v")))),)),)
    assert render_stmts(stmts, 2) == [
        "  for (int u = 0; u < 3; ++u) {",
        "    if (u >= 1 && u < 3) {",
        "      float v = t_x[u];",
        "      t_y[u] = v;",
        "    }",
        "  }",
    ]


def test_a_condition_masks_the_trace_and_its_block_takes_its_ticks():
    from tinsmith.planners.access import NEVER, UNREAD, Untraceable, trace
    # y[i] = x[i + 1] for i >= 2 only, then y[i] = 0 for every i
    body = For("i", 3, (If(Binary(">=", i, index(2)), (Store("y", i, Load("x", add(i, index(1)))),)),
                        Store("y", i, const(0))))
    t = trace(kernel(body))
    assert t.ticks == 3 * 4  # the condition's block counted in every iteration, run or not
    assert t.buffers["x"].last_read.tolist() == [UNREAD, UNREAD, UNREAD, 8]
    assert t.buffers["y"].first_write.tolist() == [3, 7, 9, NEVER]
    # an index local assigned under a condition has no single value per iteration
    varying = (Local("n", index(0), "index"), For("i", 3, (If(Binary("==", i, index(1)), (Assign("n", i),)),
                                                         Store("y", Var("n"), const(0)))))
    with pytest.raises(Untraceable, match="condition"):
        trace(kernel(*varying))


def test_an_epilogue_fuses_into_stores_under_a_condition():
    """A consumer fused into a producer whose stores run under a condition (a row pipeline's
    edge rows) rewrites those stores too: nothing is left writing the fused-away value."""
    from tinsmith.generate.epilogue import elementwise_template, fuse_epilogue
    producer = (For("i", 4, (If(Binary("<", i, index(2)), (Store("v", i, Load("x", i), at=(i,)),)),
                             Store("v", add(i, index(4)), Load("x", i), at=(add(i, index(4)),)))),)
    relu = For("j", 8, (Store("y", Var("j"), Binary("max", Load("v", Var("j")), const(0))),))
    fused = fuse_epilogue(producer, "v", "y", (8,), "float32", elementwise_template((relu,), "y", (8,)),
                          lambda _: True, [0])
    (loop,) = fused
    guarded = next(s for s in loop.body if isinstance(s, If))
    assert [s.buffer for s in guarded.body if isinstance(s, Store)] == ["y"]
    assert [s.buffer for s in loop.body if isinstance(s, Store)] == ["y"]
    assert render_stmts(guarded.body, 0)[-1] == "t_y[i] = tinsmith::math::fmax(e0, 0.0f);"


def test_an_output_may_take_over_its_input_where_conditional_stores_read_only_their_element():
    from tinsmith.generate import _reads_only_where_it_writes as safe
    under = lambda *body: (For("i", 4, (If(Binary("<", i, index(2)), tuple(body)),)),)
    assert safe(under(Store("y", i, add(Load("x", i), const(1)))), "x", "y")
    assert not safe(under(Store("y", i, Load("x", add(i, index(1))))), "x", "y")  # reads a neighbour
    assert not safe(under(Local("t", Load("x", index(0))), Store("y", i, Var("t"))), "x", "y")
    reads = (For("i", 4, (If(Binary("<", Load("x", i), const(0)), (Store("y", i, const(0)),)),)),)
    assert not safe(reads, "x", "y")  # a condition reading the input is not a store at its element


def test_render_kernel():
    body, _ = nest((2, 3), "i", lambda idx: [
        Store("y", flat_index(idx, (2, 3)),
              Binary("max", Load("x", broadcast_index(idx, (2, 3), (3,))), const(0)))])
    k0 = simplify(Kernel("relu_node", (Param("x", "float", 3, False), Param("y", "float", 6, True)), body))
    assert render_kernel(k0) == textwrap.dedent("""\
        void relu_node(const float* __restrict t_x, float* __restrict t_y) noexcept {
          for (int i0 = 0; i0 < 2; ++i0) {
            for (int i1 = 0; i1 < 3; ++i1) {
              t_y[i0 * 3 + i1] = tinsmith::math::fmax(t_x[i1], 0.0f);
            }
          }
        }""")


def test_render_kernel_with_int64_and_no_params():
    k0 = Kernel("copy", (Param("s", "std::int64_t", 2, False), Param("t", "std::int64_t", 2, True)),
                (For("i", 2, (Store("t", i, Load("s", i)),)),))
    assert render_kernel(k0).splitlines()[0] == \
        "void copy(const std::int64_t* __restrict t_s, std::int64_t* __restrict t_t) noexcept {"
    assert render_kernel(Kernel("nothing", (), ())) == "void nothing() noexcept {\n}"


def test_render_rejects_non_ir():
    with pytest.raises(TypeError, match="not a loop IR expression"):
        render_expr("a")
    with pytest.raises(TypeError, match="not a loop IR statement"):
        render_stmts(("a",), 0)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_rendered_expressions_compile_without_warnings(tmp_path):
    """Everything rendered above is C++ that -Wall -Wextra -Werror accepts."""
    stores = [f"  t_y[{n}] = static_cast<float>({render_expr(e)});"
              for n, (e, _) in enumerate(EXPRESSIONS + CONSTANTS) if "%" not in render_expr(e)]
    source = "\n".join([
        "#include \"tinsmith/math.hpp\"",
        "void f(float a, float b, float c, float d, int i, int j, const float* __restrict t_x,",
        "       float* __restrict t_y) noexcept {",
        *stores,
        "}",
    ])
    (tmp_path / "e.cpp").write_text(source + "\n")
    proc = subprocess.run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", f"-I{RUNTIME_INCLUDE}",
                           str(tmp_path / "e.cpp")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_a_kernel_set_may_spell_vector_arithmetic_itself():
    """Helium's kernel set names VFMA and VMAXNM for float32x4 (GCC 12 neither contracts MVE vector
    multiply-adds nor selects lanes without leaving the vector registers); other widths, and
    renderers without those names, keep GCC's vector operators."""
    from tinsmith.generate.kernel_sets import HELIUM_INTRINSICS
    from tinsmith.generate.render import Renderer
    from tinsmith.generate.loop_ir import Var
    helium, plain = Renderer("m55", intrinsics=HELIUM_INTRINSICS), Renderer("host")
    acc, x, w = (Var(n, "float32", 4) for n in ("acc", "x", "w"))
    step = Assign("acc", Binary("+", acc, Binary("*", x, w)))
    assert helium.stmts((step,), 0) == ["acc = vfmaq_f32(acc, x, w);"]
    assert plain.stmts((step,), 0) == ["acc += x * w;"]
    assert helium.expr(Binary("max", acc, x)) == "vmaxnmq_f32(acc, x)"
    assert helium.expr(Binary("+", Binary("*", x, w), acc)) == "vfmaq_f32(acc, x, w)"
    wide = Binary("+", Var("a", "float32", 8), Binary("*", Var("b", "float32", 8), Var("c", "float32", 8)))
    assert helium.expr(wide) == "a + b * c"
