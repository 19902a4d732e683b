"""Primitives (tinsmith.ops): shape/dtype inference on hand-picked cases, the NumPy reference
against values computed here independently (explicit loops, math module), and inference errors."""
from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest

from tinsmith.ir import TensorType
from tinsmith.ops import PRIMITIVES, InferArgs, OpError, check_attrs

F = "float32"
I64 = "int64"


def t(*shape: int, dtype: str = F) -> TensorType:
    return TensorType(dtype, tuple(shape))


def infer(op: str, types, attrs=None, values=None) -> list[TensorType]:
    """Run op's inference as the expander does: attributes checked, constant data alongside."""
    prim = PRIMITIVES[op]
    checked = check_attrs(prim.attrs, attrs or {}, f"{op} node 'n'")
    values = tuple(values) if values is not None else (None,) * len(types)
    return list(prim.infer(InferArgs(tuple(types), checked, values)))


def reference(op: str, xs, attrs=None) -> list[np.ndarray]:
    prim = PRIMITIVES[op]
    return list(prim.reference(list(xs), check_attrs(prim.attrs, attrs or {}, f"{op} node 'n'")))


def infer_error(op: str, types, attrs=None, values=None) -> OpError:
    with pytest.raises(OpError) as info:
        infer(op, types, attrs, values)
    return info.value


def rand(rng, *shape, low=-2.0, high=2.0) -> np.ndarray:
    return rng.uniform(low, high, shape).astype(np.float32)


def assert_close(actual, expected, rtol=1e-5, atol=1e-6):
    assert actual.dtype == np.float32
    assert actual.shape == np.shape(expected)
    np.testing.assert_allclose(actual, np.asarray(expected, dtype=np.float64), rtol=rtol, atol=atol)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# --- MatMul ---------------------------------------------------------------------------------
@pytest.mark.parametrize("a, b, out", [
    ((2, 3), (3, 4), (2, 4)),
    ((5, 2, 3), (3, 4), (5, 2, 4)),
    ((3,), (5, 3, 4), (5, 4)),
    ((2, 1, 2, 3), (3, 3, 4), (2, 3, 2, 4)),
    ((3,), (3, 4), (4,)),
    ((2, 3), (3,), (2,)),
    ((3,), (3,), ()),
    ((4, 2, 3), (4, 3, 1), (4, 2, 1)),
])
def test_matmul_shapes(a, b, out):
    assert infer("MatMul", [t(*a), t(*b)]) == [t(*out)]


def _matmul_loops(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """NumPy matmul semantics written out: promote 1-D, broadcast batches, sum over k."""
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    batch_rank = max(a2.ndim, b2.ndim) - 2
    a2 = a2.reshape((1,) * (batch_rank + 2 - a2.ndim) + a2.shape)
    b2 = b2.reshape((1,) * (batch_rank + 2 - b2.ndim) + b2.shape)
    batch = tuple(max(x, y) for x, y in zip(a2.shape[:-2], b2.shape[:-2]))
    m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    out = np.zeros(batch + (m, n))
    for bi in itertools.product(*map(range, batch)):
        ai = tuple(i if d > 1 else 0 for i, d in zip(bi, a2.shape[:-2]))
        bj = tuple(i if d > 1 else 0 for i, d in zip(bi, b2.shape[:-2]))
        for i in range(m):
            for j in range(n):
                out[bi + (i, j)] = sum(float(a2[ai + (i, kk)]) * float(b2[bj + (kk, j)]) for kk in range(k))
    if a.ndim == 1:
        out = out.reshape(out.shape[:-2] + out.shape[-1:])
    if b.ndim == 1:
        out = out.reshape(out.shape[:-1])
    return out


@pytest.mark.parametrize("a, b", [((2, 3), (3, 4)), ((2, 1, 2, 3), (3, 3, 4)), ((3,), (5, 3, 4)),
                                  ((2, 3), (3,)), ((3,), (3,)), ((2, 2, 3), (1, 3, 2))])
def test_matmul_reference(rng, a, b):
    x, y = rand(rng, *a), rand(rng, *b)
    (out,) = reference("MatMul", [x, y])
    assert_close(out, _matmul_loops(x, y))
    assert out.shape == infer("MatMul", [t(*a), t(*b)])[0].shape


def test_matmul_errors():
    assert str(infer_error("MatMul", [t(2, 3), t(4, 5)])) == \
        "MatMul inner dimensions differ: [2, 3] x [4, 5] (3 != 4)"
    assert str(infer_error("MatMul", [t(2, 2, 3), t(3, 3, 4)])) == \
        "shapes [2] and [3] cannot be broadcast together"
    assert str(infer_error("MatMul", [t(), t(3)])) == "MatMul inputs must have rank 1 or more"
    e = infer_error("MatMul", [t(2, 3), t(3, 4, dtype=I64)])
    assert (str(e), e.input) == ("input 1 has element type int64, expected float32", 1)


def test_matmul_macs():
    args = InferArgs((t(5, 2, 3), t(3, 4)), {}, (None, None))
    assert PRIMITIVES["MatMul"].macs(args, [t(5, 2, 4)]) == 5 * 2 * 4 * 3


# --- Gemm -----------------------------------------------------------------------------------
@pytest.mark.parametrize("a, b, c, attrs, out", [
    ((2, 3), (3, 4), None, {}, (2, 4)),
    ((3, 2), (3, 4), None, {"transA": 1}, (2, 4)),
    ((2, 3), (4, 3), (4,), {"transB": 1}, (2, 4)),
    ((3, 2), (4, 3), (2, 4), {"transA": 1, "transB": 1}, (2, 4)),
    ((2, 3), (3, 4), (1, 4), {}, (2, 4)),
    ((2, 3), (3, 4), (2, 1), {}, (2, 4)),
    ((2, 3), (3, 4), (), {}, (2, 4)),
])
def test_gemm_shapes(a, b, c, attrs, out):
    types = [t(*a), t(*b)] + ([] if c is None else [t(*c)])
    assert infer("Gemm", types, attrs) == [t(*out)]


def _gemm_loops(a, b, c, alpha, beta, trans_a, trans_b):
    m = a.shape[1] if trans_a else a.shape[0]
    k = a.shape[0] if trans_a else a.shape[1]
    n = b.shape[0] if trans_b else b.shape[1]
    out = np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            acc = 0.0
            for kk in range(k):
                av = a[kk, i] if trans_a else a[i, kk]
                bv = b[j, kk] if trans_b else b[kk, j]
                acc += float(av) * float(bv)
            bias = 0.0
            if c is not None:
                # unidirectional broadcast of C to [m, n], written out
                ci = [i, j][2 - c.ndim:] if c.ndim else []
                ci = [0 if c.shape[d] == 1 else ci[d] for d in range(c.ndim)]
                bias = float(c[tuple(ci)])
            out[i, j] = alpha * acc + beta * bias
    return out


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("c_shape", [None, (4,), (1, 4), (3, 1), (3, 4), ()])
def test_gemm_reference(rng, trans_a, trans_b, c_shape):
    a = rand(rng, *((2, 3) if trans_a else (3, 2)))
    b = rand(rng, *((4, 2) if trans_b else (2, 4)))
    c = None if c_shape is None else rand(rng, *c_shape)
    attrs = {"alpha": 0.5, "beta": -1.5, "transA": trans_a, "transB": trans_b}
    (out,) = reference("Gemm", [a, b] + ([] if c is None else [c]), attrs)
    assert_close(out, _gemm_loops(a, b, c, 0.5, -1.5, trans_a, trans_b))


def test_gemm_omitted_bias(rng):
    a, b = rand(rng, 2, 3), rand(rng, 3, 4)
    assert infer("Gemm", [t(2, 3), t(3, 4), None]) == [t(2, 4)]
    (out,) = reference("Gemm", [a, b, None], {"beta": 7.0})
    assert_close(out, _gemm_loops(a, b, None, 1.0, 0.0, 0, 0))


def test_gemm_defaults(rng):
    a, b, c = rand(rng, 2, 3), rand(rng, 3, 4), rand(rng, 4)
    (out,) = reference("Gemm", [a, b, c])
    assert_close(out, _gemm_loops(a, b, c, 1.0, 1.0, 0, 0))


def test_gemm_errors():
    e = infer_error("Gemm", [t(2, 3), t(4, 3)])
    assert str(e) == "Gemm inner dimensions differ: A is [2, 3] (transA=0), B is [4, 3] (transB=0)"
    e = infer_error("Gemm", [t(2, 3), t(3, 4), t(5)])
    assert (str(e), e.input) == ("Gemm bias C of shape [5] does not broadcast to [2, 4]", 2)
    e = infer_error("Gemm", [t(2, 3), t(3, 4), t(2, 2, 4)])
    assert (str(e), e.input) == ("Gemm bias C of shape [2, 2, 4] does not broadcast to [2, 4]", 2)
    e = infer_error("Gemm", [t(2, 2, 3), t(3, 4)])
    assert (str(e), e.input) == ("Gemm input 0 must have rank 2, got [2, 2, 3]", 0)
    e = infer_error("Gemm", [t(2, 3), t(3, 4)], {"transA": 2})
    assert (str(e), e.attr) == ("attribute 'transA' of Gemm node 'n' must be one of 0, 1, not 2", "transA")
    e = infer_error("Gemm", [t(2, 3), t(3, 4)], {"alpha": "big"})
    assert str(e) == "attribute 'alpha' of Gemm node 'n' must be a number, not 'big'"
    e = infer_error("Gemm", [t(2, 3), t(3, 4)], {"gamma": 1.0})
    assert (str(e), e.attr) == ("Gemm node 'n' has no attribute 'gamma' (it takes: alpha, beta, transA, "
                                "transB)", "gamma")


def test_gemm_macs():
    args = InferArgs((t(3, 2), t(4, 3)), check_attrs(PRIMITIVES["Gemm"].attrs, {"transA": 1, "transB": 1}, "g"),
                     (None, None))
    assert PRIMITIVES["Gemm"].macs(args, [t(2, 4)]) == 2 * 3 * 4


# --- elementwise ----------------------------------------------------------------------------
BINARY_MATH = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "Div": lambda a, b: a / b,
    "Pow": math.pow,
}

UNARY_MATH = {
    "Relu": lambda x: x if x > 0 else 0.0,
    "Sigmoid": lambda x: 1.0 / (1.0 + math.exp(-x)),
    "Tanh": math.tanh,
    "Exp": math.exp,
    "Erf": math.erf,
    "Sqrt": math.sqrt,
    "Identity": lambda x: x,
}


@pytest.mark.parametrize("a, b, out", [
    ((2, 3, 4), (2, 3, 4), (2, 3, 4)),
    ((2, 3, 4), (4,), (2, 3, 4)),
    ((4,), (2, 3, 4), (2, 3, 4)),
    ((2, 1, 4), (3, 1), (2, 3, 4)),
    ((1,), (2, 3), (2, 3)),
    ((), (2, 3), (2, 3)),
    ((), (), ()),
])
@pytest.mark.parametrize("op", sorted(BINARY_MATH))
def test_binary_shapes(op, a, b, out):
    assert infer(op, [t(*a), t(*b)]) == [t(*out)]


def _broadcast_loops(fn, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Apply fn element by element, reading a and b at NumPy-broadcast positions."""
    rank = max(a.ndim, b.ndim)
    sa, sb = (1,) * (rank - a.ndim) + a.shape, (1,) * (rank - b.ndim) + b.shape
    shape = tuple(max(x, y) for x, y in zip(sa, sb))
    ar, br = a.reshape(sa), b.reshape(sb)
    out = np.zeros(shape)
    for idx in itertools.product(*map(range, shape)):
        ia = tuple(i if d > 1 else 0 for i, d in zip(idx, sa))
        ib = tuple(i if d > 1 else 0 for i, d in zip(idx, sb))
        out[idx] = fn(float(ar[ia]), float(br[ib]))
    return out


@pytest.mark.parametrize("a, b", [((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((2, 3), (2, 3))])
@pytest.mark.parametrize("op", sorted(BINARY_MATH))
def test_binary_reference(rng, op, a, b):
    x = rand(rng, *a, low=0.5, high=2.0)  # positive: Pow with fractional exponents stays real
    y = rand(rng, *b, low=0.5, high=2.0)
    if op == "Sub":
        y = -y  # and some negative numbers where they are harmless
    (out,) = reference(op, [x, y])
    assert_close(out, _broadcast_loops(BINARY_MATH[op], x, y))


def test_pow_negative_base_integer_exponent():
    (out,) = reference("Pow", [np.array([-2.0, -3.0, 2.0], np.float32), np.array([3.0], np.float32)])
    assert_close(out, [-8.0, -27.0, 8.0])


def test_binary_errors():
    e = infer_error("Add", [t(2, 3), t(4)])
    assert str(e) == "shapes [2, 3] and [4] cannot be broadcast together"
    e = infer_error("Mul", [t(2, 3, 4), t(3, 3, 4)])
    assert str(e) == "shapes [2, 3, 4] and [3, 3, 4] cannot be broadcast together"
    e = infer_error("Div", [t(2, 3), t(2, 3, dtype=I64)])
    assert (str(e), e.input) == ("input 1 has element type int64, expected float32", 1)


@pytest.mark.parametrize("op", sorted(UNARY_MATH))
def test_unary_shape(op):
    assert infer(op, [t(2, 3)]) == [t(2, 3)]
    assert infer(op, [t()]) == [t()]


@pytest.mark.parametrize("op", sorted(UNARY_MATH))
def test_unary_reference(rng, op):
    x = rand(rng, 3, 4, low=-3.0, high=3.0)
    if op == "Sqrt":
        x = np.abs(x)
    x[0, 0] = 0.0
    (out,) = reference(op, [x])
    expected = np.array([[UNARY_MATH[op](float(v)) for v in row] for row in x])
    assert_close(out, expected)


@pytest.mark.parametrize("op", sorted(set(UNARY_MATH) - {"Identity"}))
def test_unary_rejects_int64(op):
    e = infer_error(op, [t(3, dtype=I64)])
    assert str(e) == "input 0 has element type int64, expected float32 or float64 or float16 or bfloat16"


def test_identity_keeps_any_element_type():
    assert infer("Identity", [t(2, 3, dtype=I64)]) == [t(2, 3, dtype=I64)]
    x = np.array([[1, -2, 3]], dtype=np.int64)
    (out,) = reference("Identity", [x])
    assert out.dtype == np.int64 and out.tolist() == [[1, -2, 3]]


# --- Softmax --------------------------------------------------------------------------------
def _softmax_loops(x: np.ndarray, axis: int) -> np.ndarray:
    axis %= x.ndim
    out = np.zeros(x.shape)
    others = [range(d) if i != axis else [None] for i, d in enumerate(x.shape)]
    for idx in itertools.product(*others):
        positions = [idx[:axis] + (j,) + idx[axis + 1:] for j in range(x.shape[axis])]
        vals = [math.exp(float(x[p])) for p in positions]
        total = sum(vals)
        for p, v in zip(positions, vals):
            out[p] = v / total
    return out


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
def test_softmax(rng, axis):
    x = rand(rng, 2, 3, 4, low=-4, high=4)
    assert infer("Softmax", [t(2, 3, 4)], {"axis": axis}) == [t(2, 3, 4)]
    (out,) = reference("Softmax", [x], {"axis": axis})
    assert_close(out, _softmax_loops(x, axis))


def test_softmax_default_axis_is_last(rng):
    x = rand(rng, 2, 5)
    (out,) = reference("Softmax", [x])
    assert_close(out, _softmax_loops(x, -1))


def test_softmax_large_inputs_do_not_overflow():
    x = np.array([[1000.0, 1000.0, 990.0]], np.float32)
    (out,) = reference("Softmax", [x])
    e = math.exp(-10.0)
    assert_close(out, [[1 / (2 + e), 1 / (2 + e), e / (2 + e)]])


def test_softmax_errors():
    e = infer_error("Softmax", [t(2, 3, 4)], {"axis": 3})
    assert (str(e), e.attr) == ("axis 3 is out of range for a tensor of rank 3 (expected -3..2)", "axis")
    e = infer_error("Softmax", [t(2, 3)], {"axis": -3})
    assert str(e) == "axis -3 is out of range for a tensor of rank 2 (expected -2..1)"
    e = infer_error("Softmax", [t(2, 3)], {"axis": 1.5})
    assert str(e) == "attribute 'axis' of Softmax node 'n' must be an integer, not 1.5"


# --- ReduceMean -----------------------------------------------------------------------------
def _mean_loops(x: np.ndarray, axes, keepdims: bool) -> np.ndarray:
    axes = sorted(a % x.ndim for a in axes)
    kept = [i for i in range(x.ndim) if i not in axes]
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    sums = np.zeros(out_shape)
    for idx in itertools.product(*map(range, x.shape)):
        sums[tuple(0 if i in axes else v for i, v in enumerate(idx))] += float(x[idx])
    count = math.prod(x.shape[a] for a in axes)
    mean = sums / count
    return mean if keepdims else mean.reshape(tuple(x.shape[i] for i in kept))


@pytest.mark.parametrize("axes, keepdims, out", [
    ([1], 1, (2, 1, 4)),
    ([1], 0, (2, 4)),
    ([-1], 0, (2, 3)),
    ([0, 2], 1, (1, 3, 1)),
    ([2, -3], 0, (3,)),
    (None, 1, (1, 1, 1)),
    (None, 0, ()),
])
def test_reduce_mean_axes_attribute(rng, axes, keepdims, out):
    attrs = {"keepdims": keepdims} if axes is None else {"axes": axes, "keepdims": keepdims}
    assert infer("ReduceMean", [t(2, 3, 4)], attrs) == [t(*out)]
    x = rand(rng, 2, 3, 4)
    (y,) = reference("ReduceMean", [x], attrs)
    assert_close(y, _mean_loops(x, range(3) if axes is None else axes, keepdims))


@pytest.mark.parametrize("axes, keepdims, out", [([1], 1, (2, 1, 4)), ([0, -1], 0, (3,))])
def test_reduce_mean_axes_input(rng, axes, keepdims, out):
    axes_data = np.array(axes, dtype=np.int64)
    types = [t(2, 3, 4), t(len(axes), dtype=I64)]
    assert infer("ReduceMean", types, {"keepdims": keepdims}, [None, axes_data]) == [t(*out)]
    x = rand(rng, 2, 3, 4)
    (y,) = reference("ReduceMean", [x, axes_data], {"keepdims": keepdims})
    assert_close(y, _mean_loops(x, axes, keepdims))


def test_reduce_mean_keepdims_default_is_1(rng):
    assert infer("ReduceMean", [t(2, 3)], {"axes": [0]}) == [t(1, 3)]


def test_reduce_mean_empty_axes(rng):
    x = rand(rng, 2, 3)
    empty = np.zeros((0,), np.int64)
    types = [t(2, 3), t(0, dtype=I64)]
    # empty axes reduce everything, unless noop_with_empty_axes says to leave the data alone
    assert infer("ReduceMean", types, {"keepdims": 0}, [None, empty]) == [t()]
    (y,) = reference("ReduceMean", [x, empty], {"keepdims": 0})
    assert_close(y, np.float64(sum(float(v) for v in x.flat) / 6))
    assert infer("ReduceMean", types, {"noop_with_empty_axes": 1}, [None, empty]) == [t(2, 3)]
    (y,) = reference("ReduceMean", [x, empty], {"noop_with_empty_axes": 1})
    assert_close(y, x)


def test_reduce_mean_errors():
    e = infer_error("ReduceMean", [t(2, 3)], {"axes": [2]})
    assert (str(e), e.attr) == ("axes 2 is out of range for a tensor of rank 2 (expected -2..1)", "axes")
    e = infer_error("ReduceMean", [t(2, 3)], {"axes": [1, -1]})
    assert (str(e), e.attr) == ("axes [1, -1] name an axis twice", "axes")
    e = infer_error("ReduceMean", [t(2, 3), t(1, dtype=I64)], {"axes": [0]},
                    [None, np.array([1], np.int64)])
    assert str(e) == "give the axes either as attribute or as input, not both"
    e = infer_error("ReduceMean", [t(2, 3), t(1)], {}, [None, np.array([1.0], np.float32)])
    assert (str(e), e.input) == ("ReduceMean's axes must be a 1-D int64 constant, got float32[1]", 1)
    e = infer_error("ReduceMean", [t(2, 3, dtype=I64)], {"axes": [0]})
    assert str(e) == "input 0 has element type int64, expected float32 or float64 or float16 or bfloat16"
    e = infer_error("ReduceMean", [t(2, 3)], {"keepdims": 2})
    assert str(e) == "attribute 'keepdims' of ReduceMean node 'n' must be one of 0, 1, not 2"


# --- Reshape --------------------------------------------------------------------------------
def _reshape(shape, spec, attrs=None):
    spec = np.array(spec, dtype=np.int64)
    return infer("Reshape", [t(*shape), t(len(spec), dtype=I64)], attrs, [None, spec])


@pytest.mark.parametrize("shape, spec, out", [
    ((2, 3, 4), [6, 4], (6, 4)),
    ((2, 3, 4), [-1], (24,)),
    ((2, 3, 4), [0, -1], (2, 12)),
    ((2, 3, 4), [-1, 0, 2], (4, 3, 2)),
    ((2, 3, 4), [0, 0, 0], (2, 3, 4)),
    ((2, 3, 4), [2, 1, -1, 1], (2, 1, 12, 1)),
])
def test_reshape_shapes(shape, spec, out):
    assert _reshape(shape, spec) == [t(*out)]


def test_reshape_to_scalar_and_back():
    assert _reshape((1, 1), []) == [t()]
    assert _reshape((), [1, 1]) == [t(1, 1)]


def test_reshape_allowzero():
    assert _reshape((0, 3), [0, 3], {"allowzero": 1}) == [t(0, 3)]
    e = infer_error("Reshape", [t(2, 3), t(2, dtype=I64)], {"allowzero": 1},
                    [None, np.array([0, 6], np.int64)])
    assert str(e) == "cannot reshape [2, 3] (6 elements) to [0, 6] (0 elements)"


def test_reshape_reference(rng):
    x = rand(rng, 2, 3, 4)
    (y,) = reference("Reshape", [x, np.array([0, -1], np.int64)])
    flat = [float(v) for v in x.flat]
    expected = [[flat[r * 12 + c] for c in range(12)] for r in range(2)]
    assert_close(y, expected)


def test_reshape_errors():
    def err(shape, spec):
        spec = np.array(spec, dtype=np.int64)
        return infer_error("Reshape", [t(*shape), t(len(spec), dtype=I64)], None, [None, spec])

    assert str(err((2, 3), [-1, -1])) == "Reshape target [-1, -1] has more than one -1"
    assert str(err((2, 3), [4, -1])) == "cannot reshape [2, 3] to [4, -1]"
    assert str(err((2, 3), [5])) == "cannot reshape [2, 3] (6 elements) to [5] (5 elements)"
    assert str(err((2, 3), [3, -2])) == "Reshape target [3, -2] has a negative dimension -2"
    assert str(err((6,), [2, 0])) == \
        "Reshape target [2, 0] copies dimension 1, which the input [6] does not have"
    assert err((6,), [2, 0]).input == 1
    e = infer_error("Reshape", [t(6), t(2)], None, [None, np.array([2.0, 3.0], np.float32)])
    assert str(e) == "Reshape's shape must be a 1-D int64 constant, got float32[2]"
    e = infer_error("Reshape", [t(6), t(1, 2, dtype=I64)], None, [None, np.array([[2, 3]], np.int64)])
    assert str(e) == "Reshape's shape must be a 1-D int64 constant, got int64[1, 2]"


# --- Transpose ------------------------------------------------------------------------------
@pytest.mark.parametrize("perm, out", [((1, 0, 2), (3, 2, 4)), ((2, 0, 1), (4, 2, 3)), (None, (4, 3, 2)),
                                       ((0, 1, 2), (2, 3, 4))])
def test_transpose(rng, perm, out):
    attrs = {} if perm is None else {"perm": list(perm)}
    assert infer("Transpose", [t(2, 3, 4)], attrs) == [t(*out)]
    x = rand(rng, 2, 3, 4)
    (y,) = reference("Transpose", [x], attrs)
    p = perm or (2, 1, 0)
    expected = np.zeros(out)
    for idx in itertools.product(*map(range, out)):
        src = [0, 0, 0]
        for k, axis in enumerate(p):
            src[axis] = idx[k]
        expected[idx] = x[tuple(src)]
    assert_close(y, expected)


def test_transpose_errors():
    e = infer_error("Transpose", [t(2, 3)], {"perm": [0, 0]})
    assert (str(e), e.attr) == ("perm [0, 0] is not a permutation of 0..1", "perm")
    e = infer_error("Transpose", [t(2, 3)], {"perm": [1, 0, 2]})
    assert str(e) == "perm [1, 0, 2] is not a permutation of 0..1"
    e = infer_error("Transpose", [t(2, 3)], {"perm": 1})
    assert str(e) == "attribute 'perm' of Transpose node 'n' must be a list of integers, not 1"


# --- Concat ---------------------------------------------------------------------------------
@pytest.mark.parametrize("axis, shapes, out", [
    (0, [(2, 3), (4, 3)], (6, 3)),
    (1, [(2, 3), (2, 1), (2, 2)], (2, 6)),
    (-1, [(2, 3, 1), (2, 3, 2)], (2, 3, 3)),
    (-3, [(1, 3, 2), (2, 3, 2)], (3, 3, 2)),
    (0, [(5,)], (5,)),
])
def test_concat(rng, axis, shapes, out):
    assert infer("Concat", [t(*s) for s in shapes], {"axis": axis}) == [t(*out)]
    xs = [rand(rng, *s) for s in shapes]
    (y,) = reference("Concat", xs, {"axis": axis})
    ax = axis % len(out)
    expected = np.zeros(out)
    offset = 0
    for x in xs:
        for idx in itertools.product(*map(range, x.shape)):
            dst = list(idx)
            dst[ax] += offset
            expected[tuple(dst)] = x[idx]
        offset += x.shape[ax]
    assert_close(y, expected)


def test_concat_int64():
    assert infer("Concat", [t(2, dtype=I64), t(1, dtype=I64)], {"axis": 0}) == [t(3, dtype=I64)]


def test_concat_errors():
    e = infer_error("Concat", [t(2, 3), t(3, 3)], {"axis": 1})
    assert (str(e), e.input) == \
        ("Concat input 1 has shape [3, 3], which does not match input 0 [2, 3] outside axis 1", 1)
    e = infer_error("Concat", [t(2, 3), t(2, 3, 1)], {"axis": 0})
    assert str(e) == "Concat input 1 has shape [2, 3, 1], which does not match input 0 [2, 3] outside axis 0"
    e = infer_error("Concat", [t(2, 3), t(2, 3, dtype=I64)], {"axis": 0})
    assert str(e) == "input 1 has element type int64 but input 0 has float32"
    e = infer_error("Concat", [t(2, 3), t(2, 3)], {"axis": 2})
    assert str(e) == "axis 2 is out of range for a tensor of rank 2 (expected -2..1)"
    e = infer_error("Concat", [t(2, 3)], {})
    assert str(e) == "Concat node 'n' needs attribute 'axis'"


# --- the registry ---------------------------------------------------------------------------
def test_every_primitive_is_tested():
    """The core primitives are tested here; every other one is named in some test module."""
    covered = set(BINARY_MATH) | set(UNARY_MATH) | {"MatMul", "Gemm", "Softmax", "ReduceMean", "Reshape",
                                                   "Transpose", "Concat"}
    assert covered <= set(PRIMITIVES)
    tests = "\n".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    untested = [op for op in PRIMITIVES if not re.search(rf"\b{op}\b", tests)]
    assert not untested


def test_registering_twice_is_an_error():
    from tinsmith.ops.registry import register
    with pytest.raises(ValueError, match=re.escape("primitive Relu registered twice")):
        register(PRIMITIVES["Relu"])
