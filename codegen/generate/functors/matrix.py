"""The float matrix-product family: one loop nest for Gemm, MatMul (batched, NumPy's broadcasting)
and the float fully connected layers (a Gemm), parameterised by a schedule and a micro-kernel.

The nest (`matrix_product`): loops over the output's leading axes (batch, rows), then its last axis
(columns) in blocks of `columns` x `lanes` consecutive outputs; the columns left over run as a loop
of single columns or as one smaller block. Each block is one call of the micro-kernel:

- `scalar_dot` (portable): one output, acc += a[k] * b[k] over k, in the accumulator type of the
  output (float64 sums in double; float16 and bfloat16 in float32, rounded once on the store);
- `lane_dot` (B as [N, K], transB): each output a dot product with V lanes along k, the partial
  sums reduced, then the rest of k one at a time; the block's outputs share each load of a;
- `row_accumulate` (B as [K, N]): the block's consecutive outputs accumulate a[k] times row k of
  B, V lanes per accumulator (one on a scalar FPU); each weight is used once, so the loop is its
  load and its multiply-add plus the load of a[k] and the loop's own instructions, shared by more
  outputs the more accumulators the registers hold.

Addresses are the operands' own (flat row-major offsets, broadcast where an operand has size-1
axes); the rewrite rules fold what a one-row product makes constant. Every store says where it
writes, so elementwise consumers fuse into the epilogue (alpha * acc + beta * C).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from tinsmith.generate.backend import CPP, FLOATS, KernelArgs, TensorArg, same
from tinsmith.generate.kernel_sets import FPU_REGISTERS, VECTORS
from tinsmith.generate.loop_ir import (INDEX, Assign, Binary, Broadcast, Const, Expr, For, Load, Local, ReduceLanes,
                                      Stmt, Store, Var, broadcast_index, const, flat_index, index, nest)
from tinsmith.ops.common import broadcast_shapes

FLOAT = "float32"


# --- the operands ---------------------------------------------------------------------------
@dataclass(frozen=True)
class MatrixOperands:
    """y[..., m, n] = alpha * sum_k a[..., m, k] b[..., k, n] + beta * c: the tensors, the output
    shape the loops run over, the reduction's extent and where an output index and k read a and b."""

    a: str
    b: str
    y: str
    c: TensorArg | None
    shape: tuple[int, ...]
    k: int
    a_at: Callable[[Sequence[Expr], Expr], Expr]  # (output index, k) -> offset in a
    b_at: Callable[[Sequence[Expr], Expr], Expr]  # (output index, k) -> offset in b
    alpha: float = 1.0
    beta: float = 1.0
    acc: str = FLOAT

    @staticmethod
    def gemm(args: KernelArgs, attrs: Mapping) -> MatrixOperands:
        """Gemm's operands: A and B, each optionally transposed, and C broadcast to the output."""
        a, b, y = args.inputs[0], args.inputs[1], args.outputs[0]
        trans_a, trans_b = attrs["transA"], attrs["transB"]
        return MatrixOperands(
            a.name, b.name, y.name, args.inputs[2] if len(args.inputs) > 2 else None, y.type.shape,
            a.type.shape[0] if trans_a else a.type.shape[1],
            lambda idx, k: flat_index([k, idx[0]] if trans_a else [idx[0], k], a.type.shape),
            lambda idx, k: flat_index([idx[1], k] if trans_b else [k, idx[1]], b.type.shape),
            attrs["alpha"], attrs["beta"])

    @staticmethod
    def matmul(args: KernelArgs) -> MatrixOperands:
        """MatMul's operands: 1-D ones promoted as NumPy does (size-1 axes keep offsets), batch axes
        broadcast."""
        a, b = args.inputs
        return MatrixOperands.product(a, b, args.outputs[0])

    @staticmethod
    def product(a: TensorArg, b: TensorArg, y: TensorArg) -> MatrixOperands:
        """The operands of y = a @ b (MatMul's, and the integer products' of any element types)."""
        a_shape = (1,) + a.type.shape if a.type.rank == 1 else a.type.shape
        b_shape = b.type.shape + (1,) if b.type.rank == 1 else b.type.shape
        batch = broadcast_shapes([a_shape[:-2], b_shape[:-2]])
        return MatrixOperands(
            a.name, b.name, y.name, None, batch + (a_shape[-2], b_shape[-1]), a_shape[-1],
            lambda idx, k: broadcast_index([*idx[:-2], idx[-2], k], batch + a_shape[-2:], a_shape),
            lambda idx, k: broadcast_index([*idx[:-2], k, idx[-1]], batch + b_shape[-2:], b_shape),
            acc="float64" if y.type.dtype == "float64" else FLOAT)

    def store(self, idx: Sequence[Expr], acc: Expr, width: int = 1) -> Store:
        """y[idx] = the epilogue of the accumulator (`width` consecutive outputs)."""
        return Store(self.y, flat_index(idx, self.shape), self.epilogue(acc, idx, width), tuple(idx))

    def epilogue(self, acc: Expr, idx: Sequence[Expr], width: int) -> Expr:
        """alpha * acc + beta * c[idx] (c's one column broadcast along the row where it has one)."""
        value = acc
        if self.alpha != 1.0:
            value = Binary("*", Const(self.alpha, FLOAT, width), value)
        if self.c is not None:
            shape = self.c.type.shape
            per_column = bool(shape) and shape[-1] != 1
            bias: Expr = Load(self.c.name, broadcast_index(idx, self.shape, shape), width if per_column else 1)
            if width > 1 and not per_column:
                bias = Broadcast(bias, width)
            if self.beta != 1.0:
                bias = Binary("*", Const(self.beta, FLOAT, width), bias)
            value = Binary("+", value, bias)
        return value


# --- micro-kernels: one block of outputs along a row --------------------------------------
Block = Callable[[MatrixOperands, Sequence[Expr], Expr, int, int, str], list]


def _at(row: Sequence[Expr], col: Expr) -> list[Expr]:
    return [*row, col]


def scalar_dot(ops: MatrixOperands, row: Sequence[Expr], first: Expr, count: int, width: int, p: str) -> list[Stmt]:
    """One output: acc += a[k] * b[k] over k (the portable micro-kernel; count and width are 1)."""
    idx = _at(row, first)
    k = Var("k")
    return [Local("acc", const(0), ops.acc),
            For("k", ops.k, (Assign("acc", Binary("+", Var("acc"), Binary("*", Load(ops.a, ops.a_at(idx, k)),
                                                                             Load(ops.b, ops.b_at(idx, k))))),)),
            ops.store(idx, Var("acc"))]


def lane_dot(lanes: int) -> Block:
    """`count` outputs as dot products with `lanes` lanes along k (B as [N, K]), then the rest of k
    one at a time; `p` prefixes local names (no shadowing in nested scopes)."""
    def block(ops: MatrixOperands, row: Sequence[Expr], first: Expr, count: int, width: int, p: str) -> list[Stmt]:
        kv = ops.k - ops.k % lanes if lanes > 1 else 0
        cols = [_at(row, Binary("+", first, index(j))) for j in range(count)]
        body: list[Stmt] = []
        if kv:
            k = Var("k", INDEX)
            body += [Local(f"{p}s{j}", Const(0, FLOAT, lanes), FLOAT, lanes) for j in range(count)]
            inner: list[Stmt] = [Local(p + "av", Load(ops.a, ops.a_at(cols[0], k), lanes), FLOAT, lanes)]
            inner += [Assign(f"{p}s{j}", Binary("+", Var(f"{p}s{j}"), Binary(
                "*", Var(p + "av"), Load(ops.b, ops.b_at(idx, k), lanes)))) for j, idx in enumerate(cols)]
            body.append(For("k", kv, tuple(inner), lanes))
            body += [Local(f"{p}acc{j}", ReduceLanes("+", Var(f"{p}s{j}", FLOAT, lanes)), FLOAT) for j in range(count)]
        else:
            body += [Local(f"{p}acc{j}", const(0), FLOAT) for j in range(count)]
        if ops.k - kv:
            kr = Binary("+", Var("kr"), index(kv))
            body.append(For("kr", ops.k - kv, tuple(
                Assign(f"{p}acc{j}", Binary("+", Var(f"{p}acc{j}"), Binary(
                    "*", Load(ops.a, ops.a_at(cols[0], kr)), Load(ops.b, ops.b_at(idx, kr)))))
                for j, idx in enumerate(cols))))
        return body + [ops.store(idx, Var(f"{p}acc{j}")) for j, idx in enumerate(cols)]
    return block


def row_accumulate(ops: MatrixOperands, row: Sequence[Expr], first: Expr, count: int, width: int, p: str) -> list[Stmt]:
    """`count` accumulators of `width` consecutive outputs from `first` (B as [K, N]), each adding
    a[k] times its part of row k of B."""
    k = Var("k", INDEX)
    cols = [_at(row, Binary("+", first, index(j * width))) for j in range(count)]
    zero = Const(0, FLOAT, width) if width > 1 else const(0)
    body: list[Stmt] = [Local(f"{p}acc{j}", zero, FLOAT, width) for j in range(count)]
    ak: Expr = Load(ops.a, ops.a_at(cols[0], k))
    inner: list[Stmt] = [Local(f"{p}ak", Broadcast(ak, width) if width > 1 else ak, FLOAT, width)]
    inner += [Assign(f"{p}acc{j}", Binary("+", Var(f"{p}acc{j}"), Binary(
        "*", Var(f"{p}ak"), Load(ops.b, ops.b_at(idx, k), width)))) for j, idx in enumerate(cols)]
    body.append(For("k", ops.k, tuple(inner)))
    return body + [ops.store(idx, Var(f"{p}acc{j}", FLOAT, width), width) for j, idx in enumerate(cols)]


# --- the loop nest --------------------------------------------------------------------------
@dataclass(frozen=True)
class MatrixSchedule:
    """How the nest walks a row of outputs: blocks of `columns` accumulators of `lanes` outputs
    each, in a loop over `column_var`; the leftover columns in a loop of single columns
    (`leftover_loop`) or as one smaller block of scalars."""

    columns: int = 1
    lanes: int = 1
    column_var: str = "j"
    leftover_loop: bool = True


def matrix_product(ops: MatrixOperands, schedule: MatrixSchedule, micro: Block) -> list[Stmt]:
    """The family's loop nest (see the module doc)."""
    n = ops.shape[-1]
    step = schedule.columns * schedule.lanes
    main = n - n % step

    def row(idx: Sequence[Expr]) -> list[Stmt]:
        var = schedule.column_var
        stmts: list[Stmt] = []
        if main:
            stmts.append(For(var, main, tuple(micro(ops, idx, Var(var, INDEX), schedule.columns, schedule.lanes, "")),
                             step))
        if n - main and schedule.leftover_loop:
            first = Binary("+", Var(var + "r", INDEX), index(main))
            stmts.append(For(var + "r", n - main, tuple(micro(ops, idx, first, 1, 1, "r"))))
        elif n - main:
            stmts += micro(ops, idx, index(main), n - main, 1, "r")
        return stmts
    return list(nest(ops.shape[:-1], "i", row)[0])


# --- registrations --------------------------------------------------------------------------
@CPP.register("MatMul", family="matrix", types=same(FLOATS, 2, acc="float32"), epilogue=True)
def matmul(graph, node_id, cluster_id, args, attrs):
    """Batched NumPy matmul: the portable schedule, one output per block."""
    ops = MatrixOperands.matmul(args)
    return matrix_product(ops, MatrixSchedule(column_var=f"i{len(ops.shape) - 1}"), scalar_dot)


@CPP.register("Gemm", family="matrix", types=same("float32", 3, acc="float32"), epilogue=True)
def gemm(graph, node_id, cluster_id, args, attrs):
    """Y = alpha * A' B' + beta * C, with A' and B' optionally transposed: one output per block."""
    return matrix_product(MatrixOperands.gemm(args, attrs), MatrixSchedule(column_var="i1"), scalar_dot)


def _is_gemv(args: KernelArgs, attrs: Mapping) -> bool:
    """A float Gemm with one row (a fully connected layer), on a target with an FPU (without one
    every float operation is a library call: blocking saves nothing)."""
    return (args.caps.fpu != "none" and args.inputs[0].type.dtype == FLOAT and args.outputs[0].type.shape[0] == 1
            and not attrs["transA"])


def gemv_schedule(args: KernelArgs, attrs: Mapping) -> tuple[MatrixSchedule, Block]:
    """A one-row Gemm on vectors: with transB 4 dot products share each load of a (lanes along
    k); without, 2 vectors of consecutive outputs (8 or 4 scalar accumulators without vectors)."""
    v = args.caps.lanes(4)
    if attrs["transB"]:
        return MatrixSchedule(columns=4), lane_dot(v)
    return MatrixSchedule(columns=2 if v > 1 else 8 if args.caps.float_registers >= 32 else 4, lanes=v), row_accumulate


# 12 scalar accumulators of consecutive outputs per pass over a on a 32-register FPU (measured on
# the emulated Cortex-M4: the floor is 2 instructions per MAC, a weight's load and multiply-add)
GEMV_COLUMNS = 12


def gemv_fpu_schedule(args: KernelArgs, attrs: Mapping) -> tuple[MatrixSchedule, Block]:
    """A one-row Gemm on a 32-register scalar FPU: GEMV_COLUMNS outputs per block, the columns
    left over one smaller block; with transB the vector schedule (one lane)."""
    if attrs["transB"]:
        return gemv_schedule(args, attrs)
    return MatrixSchedule(columns=GEMV_COLUMNS, leftover_loop=False), row_accumulate


@VECTORS.register("Gemm", family="matrix", types=same("float32", 3, acc="float32"), epilogue=True, when=_is_gemv)
def gemv(graph, node_id, cluster_id, args, attrs):
    """y = alpha * a B' + beta * c for a single row a, in vector blocks."""
    return matrix_product(MatrixOperands.gemm(args, attrs), *gemv_schedule(args, attrs))


@FPU_REGISTERS.register("Gemm", family="matrix", types=same("float32", 3, acc="float32"), epilogue=True,
                        when=lambda args, attrs: _is_gemv(args, attrs) and args.caps.float_registers >= 32)
def gemv_fpu(graph, node_id, cluster_id, args, attrs):
    """y = alpha * a B' + beta * c for a single row a, in scalar register blocks."""
    return matrix_product(MatrixOperands.gemm(args, attrs), *gemv_fpu_schedule(args, attrs))
