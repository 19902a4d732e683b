"""Cortex-M DSP-extension kernels for the int8 dot products of QConv2D and QFullyConnected.

Four int8 values are read as one 32-bit word; SXTB16 sign-extends bytes 0 and 2 (and, after a
rotate by 8, bytes 1 and 3) into two int16 lanes, SXTAB16 does the same while adding the
negated input zero point to each lane, and SMLAD multiplies two lane pairs and adds both
products to the int32 accumulator: four multiply-accumulates in two SMLADs. Input and weight
words are split the same way, so lanes pair up element by element; the sums are exactly the
scalar kernel's (integer arithmetic, no reassociation effects). Channels past a multiple of
four run through the scalar loop. The intrinsics are ACLE's, from GCC's arm_acle.h.
"""
from __future__ import annotations

from codegen.generate.backends import CORTEX_M
from codegen.generate.functors import quantized as scalar
from codegen.generate.functors.quantized_windows import conv_nests
from codegen.generate.functors.quantized_math import i32, widen
from codegen.generate.loop_ir import Assign, Binary, Call, Expr, For, Load, Local, Select, Stmt, Var, index


def pair(v: int) -> int:
    return _pair(v)

def _pair(v: int) -> int:
    """v in both int16 lanes of an int32."""
    h = v & 0xFFFF
    word = h | (h << 16)
    return word - (1 << 32) if word >= 1 << 31 else word


def _splat_byte(v: int) -> int:
    """The int8 value v in all four bytes of an int32 (what four padding elements read as)."""
    word = (v & 0xFF) * 0x01010101
    return word - (1 << 32) if word >= 1 << 31 else word


def dot_dsp(x: str, x_at: Expr, w: str, w_at: Expr, count: int, x_zero_point: int,
            inside: Expr | None, var: str) -> list[Stmt]:
    """acc += sum over i < count of (x[x_at + i] - zero point) * w[w_at + i]; padding reads as
    the zero point (contributing 0) where `inside` is false."""
    stmts: list[Stmt] = []
    quads = count // 4
    if quads:
        q = Binary("*", Var(var), index(4))
        xw: Expr = Call("read_i8x4", (Load(x, Binary("+", x_at, q)),), "int32")
        if inside is not None:
            xw = Select(inside, xw, i32(_splat_byte(x_zero_point)))
        ww = Call("read_i8x4", (Load(w, Binary("+", w_at, q)),), "int32")
        offset = i32(_pair(-x_zero_point))
        xv, wv = Var(f"{var}_x"), Var(f"{var}_w")
        lo = Call("smlad", (Call("sxtab16", (offset, xv), "int32"), Call("sxtb16", (wv,), "int32"), Var("acc")),
                  "int32")
        hi = Call("smlad", (Call("sxtab16", (offset, Call("ror8", (xv,), "int32")), "int32"),
                            Call("sxtb16", (Call("ror8", (wv,), "int32"),), "int32"), Var("acc")), "int32")
        stmts.append(For(var, quads, (Local(xv.name, xw, "int32"), Local(wv.name, ww, "int32"),
                                      Assign("acc", lo), Assign("acc", hi))))
    tail = count - 4 * quads
    if tail:
        t = Binary("+", index(4 * quads), Var(f"{var}_t"))
        xs: Expr = Binary("-", widen(Load(x, Binary("+", x_at, t))), i32(x_zero_point))
        if inside is not None:
            xs = Select(inside, xs, i32(0))
        ws = widen(Load(w, Binary("+", w_at, t)))
        stmts.append(For(f"{var}_t", tail, (Assign("acc", Binary("+", Var("acc"), Binary("*", xs, ws))),)))
    return stmts


def pair_dot_dsp(x: str, x_at: Expr, w: str, w_at0: Expr, w_at1: Expr, count: int, x_zero_point: int,
                 var: str) -> list[Stmt]:
    """acc0 and acc1 += the dot products of one input run with two weight rows: each input word is
    read and split once for both (as CMSIS-NN's kernels block output channels)."""
    stmts: list[Stmt] = []
    quads = count // 4
    if quads:
        q = Binary("*", Var(var), index(4))
        offset = i32(_pair(-x_zero_point))
        xv = Var(f"{var}_x")
        lanes = [Local(xv.name, Call("read_i8x4", (Load(x, Binary("+", x_at, q)),), "int32"), "int32"),
                 Local(f"{var}_lo", Call("sxtab16", (offset, xv), "int32"), "int32"),
                 Local(f"{var}_hi", Call("sxtab16", (offset, Call("ror8", (xv,), "int32")), "int32"), "int32")]
        for k, w_at in enumerate((w_at0, w_at1)):
            wv = Var(f"{var}_w{k}")
            lanes.append(Local(wv.name, Call("read_i8x4", (Load(w, Binary("+", w_at, q)),), "int32"), "int32"))
            lanes.append(Assign(f"acc{k}", Call("smlad", (Var(f"{var}_lo"), Call("sxtb16", (wv,), "int32"),
                                                          Var(f"acc{k}")), "int32")))
            lanes.append(Assign(f"acc{k}", Call("smlad", (Var(f"{var}_hi"), Call("sxtb16", (Call("ror8", (wv,), "int32"),),
                                                                                  "int32"), Var(f"acc{k}")), "int32")))
        stmts.append(For(var, quads, tuple(lanes)))
    tail = count - 4 * quads
    if tail:
        t = Binary("+", index(4 * quads), Var(f"{var}_t"))
        xs = Binary("-", widen(Load(x, Binary("+", x_at, t))), i32(x_zero_point))
        body = tuple(Assign(f"acc{k}", Binary("+", Var(f"acc{k}"), Binary("*", xs, widen(Load(w, Binary("+", w_at, t))))))
                     for k, w_at in enumerate((w_at0, w_at1)))
        stmts.append(For(f"{var}_t", tail, body))
    return stmts


def _dsp(args, attrs) -> bool:
    return args.caps.dsp
