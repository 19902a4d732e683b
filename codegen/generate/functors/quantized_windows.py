"""The window helpers the int8 kernels share: the windows of a QConv2D or QDepthwise (NHWC), the
tiles' nests in raster order, and the scalar dot product of a run of taps. The portable QConv2D,
QDepthwise and QFullyConnected are the int8 driver's nests with a scalar micro-kernel
(quantized_scalar.py)."""
from __future__ import annotations

from typing import Callable

from tinsmith.generate.functors.quantized_math import i32, widen
from tinsmith.generate.loop_ir import Assign, Binary, Comment, Expr, For, Load, Stmt, Var
from tinsmith.ops.conv import windows

# dot(x, x_at, w, w_at, count, x_zero_point, var) -> statements adding to local `acc`
Dot = Callable[[str, Expr, str, Expr, int, int, str], list[Stmt]]


def scalar_dot(x: str, x_at: Expr, w: str, w_at: Expr, count: int, x_zero_point: int, var: str) -> list[Stmt]:
    """acc += sum over i < count of (x[x_at + i] - x_zero_point) * w[w_at + i]."""
    i = Var(var)
    xv = Binary("-", widen(Load(x, Binary("+", x_at, i))), i32(x_zero_point))
    wv = widen(Load(w, Binary("+", w_at, i)))
    return [For(var, count, (Assign("acc", Binary("+", Var("acc"), Binary("*", xv, wv))),))]


def _windows(args, attrs, kh: int, kw: int):
    a = {"strides": attrs["strides"], "dilations": attrs.get("dilations", (1, 1)), "pads": attrs["pads"]}
    return windows(args.inputs[0].type.shape[1:3], (kh, kw), a)


def row_major(tile_nests: list[Stmt]) -> list[Stmt]:
    """The tiles' nests in raster order: tiles that share their output rows (the left edge, the
    interior and the right edge of a band of rows) run inside one loop over those rows instead of
    one after the other. The outputs and their arithmetic are the same; but every output row is
    now finished before the next begins, so an input row is dead a fixed distance behind the
    output being written and the memory plan can put the output over the input it consumes
    (codegen/planners/overlap.py finds the offset, the plan checker proves it). Each tile's body
    gets a loop of one around it, which scopes its locals apart from its neighbours'."""
    out: list[Stmt] = []
    i = 0
    while i < len(tile_nests):
        band: list[tuple[Stmt, For]] = []
        while (i + 1 < len(tile_nests) and isinstance(tile_nests[i], Comment)
               and isinstance(tile_nests[i + 1], For) and tile_nests[i + 1].var == "o0"
               and (not band or tile_nests[i + 1].extent == band[0][1].extent)):
            band.append((tile_nests[i], tile_nests[i + 1]))
            i += 2
        if len(band) > 1:
            body: list[Stmt] = []
            for t, (comment, nest) in enumerate(band):
                scoped = len(nest.body) == 1 and isinstance(nest.body[0], For)
                body += [comment, *(nest.body if scoped else (For(f"t{t}", 1, nest.body),))]
            out.append(For("o0", band[0][1].extent, tuple(body)))
        else:
            out += [s for pair in band for s in pair]
            if i < len(tile_nests) and not band:
                out.append(tile_nests[i])
                i += 1
    return out
