"""Functors that pick elements by position: Slice, Split, Gather, GatherElements, GatherND,
ScatterElements, ScatterND, OneHot, Pad, Trilu, EyeLike, Resize. Positions fixed at build time become
index arithmetic; indices read at run time are clamped, so a bad one never reads or writes outside
its tensor."""
from __future__ import annotations

import itertools
from typing import Callable

from tinsmith.generate.backend import CPP, INDICES, NUMBERS, takes
from tinsmith.generate.loop_ir import (FLOAT_DTYPES, Assign, Binary, Cast, Const, Expr, For, Load, Local, Select,
                                      Stmt, Store, Unary, Var, const, flat_index, index, nest)
from tinsmith.ops.common import normalize_axis
from tinsmith.ops.indexing import (ResizeAxis, cubic_weights, pad_amounts, resize_axes, resize_inputs,
                                  slice_args, source_coordinate, split_sizes, trilu_k)
from tinsmith.ops.registry import InferArgs


def _infer_args(graph, node_id, args, attrs) -> InferArgs:
    """What the op's shape rules saw, to resolve constant inputs the same way."""
    node = graph.nodes[node_id]
    values = tuple(graph.constants[n].data if n in graph.constants else None for n in node.inputs)
    return InferArgs(tuple(a.type if a else None for a in args.inputs), attrs, values)


def _copy(x, y, source: Callable[[list[Expr]], list[Expr]], prefix: str = "i") -> tuple[Stmt, ...]:
    """y[idx] = x[source(idx)] over all of y."""
    shape = y.type.shape
    return nest(shape, prefix, lambda idx: [Store(y.name, flat_index(idx, shape),
                                                  Load(x.name, flat_index(source(idx), x.type.shape)))])[0]


def _affine(i: Expr, start: int, step: int) -> Expr:
    return Binary("+", index(start), Binary("*", i, index(step)))


@CPP.register("Slice", family="movement", types=takes(None, INDICES))
def slice_(graph, node_id, cluster_id, args, attrs):
    """Element i along each axis reads start + i * step."""
    ranges = slice_args(_infer_args(graph, node_id, args, attrs))
    x, y = args.inputs[0], args.outputs[0]
    return _copy(x, y, lambda idx: [_affine(i, start, step) for i, (start, step, _) in zip(idx, ranges)])


@CPP.register("Split", family="movement", types=takes(None, INDICES))
def split(graph, node_id, cluster_id, args, attrs):
    """Each output copies its slab of the input along the axis."""
    x = args.inputs[0]
    axis = normalize_axis(attrs["axis"], x.type.rank)
    stmts, offset = [], 0
    for n, (y, size) in enumerate(zip(args.outputs, split_sizes(_infer_args(graph, node_id, args, attrs)))):
        def source(idx, offset=offset):
            return idx[:axis] + [Binary("+", idx[axis], index(offset))] + idx[axis + 1:]
        stmts.extend(_copy(x, y, source, f"i{n}_"))
        offset += size
    return stmts


def _clamp(e: Expr, lo: int, hi: int) -> Expr:
    return Select(Binary("<", e, index(lo)), index(lo), Select(Binary(">", e, index(hi)), index(hi), e))


def _index_at(indices, at: Expr, n: int, graph) -> Expr:
    """The index stored at `at`, wrapped if negative; clamped into 0..n-1 unless it is a constant
    (checked when the graph was built)."""
    i = Load(indices.name, at)
    wrapped = Select(Binary("<", i, index(0)), Binary("+", i, index(n)), i)
    if indices.name in graph.constants:
        data = graph.constants[indices.name].data
        if data.ndim == 0:
            v = int(data)
            return index(v + n if v < 0 else v)
        return wrapped if (data < 0).any() else i
    return _clamp(wrapped, 0, n - 1)


@CPP.register("Gather", family="movement", types=takes(None, INDICES))
def gather(graph, node_id, cluster_id, args, attrs):
    """y[outer, j..., inner] = x[outer, indices[j...], inner]."""
    x, indices = args.inputs
    y = args.outputs[0]
    axis = normalize_axis(attrs["axis"], x.type.rank)
    k = indices.type.rank
    n = x.type.shape[axis]

    def source(idx):
        picked = _index_at(indices, flat_index(idx[axis:axis + k], indices.type.shape), n, graph)
        return idx[:axis] + [picked] + idx[axis + k:]
    return _copy(x, y, source)


@CPP.register("GatherElements", family="movement", types=takes(None, INDICES))
def gather_elements(graph, node_id, cluster_id, args, attrs):
    """y[i] = x[i with its axis coordinate replaced by indices[i]]."""
    x, indices = args.inputs
    y = args.outputs[0]
    axis = normalize_axis(attrs["axis"], x.type.rank)
    n = x.type.shape[axis]

    def source(idx):
        picked = _index_at(indices, flat_index(idx, indices.type.shape), n, graph)
        return idx[:axis] + [picked] + idx[axis + 1:]
    return _copy(x, y, source)


@CPP.register("GatherND", family="movement", types=takes(None, INDICES))
def gather_nd(graph, node_id, cluster_id, args, attrs):
    """y[batch, position, rest] = x[batch, indices[batch, position, 0..q-1], rest]."""
    x, indices = args.inputs
    y = args.outputs[0]
    b, q = attrs["batch_dims"], indices.type.shape[-1]
    lead = indices.type.rank - 1  # batch and position axes of the output

    def source(idx):
        at = [_index_at(indices, flat_index(idx[:lead] + [index(k)], indices.type.shape), x.type.shape[b + k],
                        graph) for k in range(q)]
        return idx[:b] + at + idx[lead:]
    return _copy(x, y, source)


SCATTER_IR: dict[str, Callable[[Expr, Expr, bool], Expr]] = {  # reduction -> (old, update, is_float) -> new
    "none": lambda old, new, f: new,
    "add": lambda old, new, f: Binary("+", old, new),
    "mul": lambda old, new, f: Binary("*", old, new),
    "max": lambda old, new, f: Binary("max", old, new) if f else Select(Binary(">", new, old), new, old),
    "min": lambda old, new, f: Binary("min", old, new) if f else Select(Binary("<", new, old), new, old),
}


def _scatter(x, y, updates, target: Callable[[list[Expr]], list[Expr]], reduction: str) -> tuple[Stmt, ...]:
    """Copy x to y, then combine each update into y at target(update position), in order."""
    copy = nest((y.type.size,), "c", lambda idx: [Store(y.name, idx[0], Load(x.name, idx[0]))])[0]
    is_float = y.type.dtype in FLOAT_DTYPES

    def body(idx):
        at = flat_index(target(idx), y.type.shape)
        new = Load(updates.name, flat_index(idx, updates.type.shape))
        return [Store(y.name, at, SCATTER_IR[reduction](Load(y.name, at), new, is_float))]
    return copy + nest(updates.type.shape, "u", body)[0]


@CPP.register("ScatterElements", family="movement", types=takes(None, INDICES, None))
def scatter_elements(graph, node_id, cluster_id, args, attrs):
    """Update i goes to position i with its axis coordinate replaced by indices[i]."""
    x, indices, updates = args.inputs
    axis = normalize_axis(attrs["axis"], x.type.rank)
    n = x.type.shape[axis]

    def target(idx):
        return idx[:axis] + [_index_at(indices, flat_index(idx, indices.type.shape), n, graph)] + idx[axis + 1:]
    return _scatter(x, args.outputs[0], updates, target, attrs["reduction"])


@CPP.register("ScatterND", family="movement", types=takes(None, INDICES, None))
def scatter_nd(graph, node_id, cluster_id, args, attrs):
    """Update [position, rest] goes to [indices[position, 0..q-1], rest]."""
    x, indices, updates = args.inputs
    q = indices.type.shape[-1]
    lead = indices.type.rank - 1

    def target(idx):
        at = [_index_at(indices, flat_index(idx[:lead] + [index(k)], indices.type.shape), x.type.shape[k],
                        graph) for k in range(q)]
        return at + idx[lead:]
    return _scatter(x, args.outputs[0], updates, target, attrs["reduction"])


@CPP.register("OneHot", family="movement", types=takes(NUMBERS, NUMBERS, None))
def onehot(graph, node_id, cluster_id, args, attrs):
    """values[1] where the output's position along the axis equals the index (wrapped), else values[0]."""
    indices, _, values = args.inputs
    y = args.outputs[0]
    axis = attrs["axis"] % y.type.rank
    depth = y.type.shape[axis]

    def body(idx):
        i: Expr = Load(indices.name, flat_index(idx[:axis] + idx[axis + 1:], indices.type.shape))
        if indices.type.dtype != "int64":
            i = Cast("std::int64_t", i)
        hot = Binary("||", Binary("==", i, idx[axis]), Binary("==", i, Binary("-", idx[axis], index(depth))))
        return [Store(y.name, flat_index(idx, y.type.shape),
                      Select(hot, Load(values.name, index(1)), Load(values.name, index(0))))]
    return nest(y.type.shape, "i", body)[0]


# --- Pad ---------------------------------------------------------------------------------------
PAD_SOURCE: dict[str, Callable[[Expr, int], Expr]] = {  # mode -> position in an axis of n read at s
    "reflect": lambda s, n: Select(Binary("<", s, index(0)), Unary("neg", s),
                                   Select(Binary(">", s, index(n - 1)), Binary("-", index(2 * n - 2), s), s)),
    "edge": lambda s, n: _clamp(s, 0, n - 1),
    "wrap": lambda s, n: Binary("%", Binary("+", Binary("%", s, index(n)), index(n)), index(n)),
}


@CPP.register("Pad", family="movement", types=takes(None, INDICES, None, INDICES))
def pad(graph, node_id, cluster_id, args, attrs):
    """Output position o reads input position o - before, mapped into the axis by the mode, or, in
    constant mode, the fill value where it falls outside."""
    x, y = args.inputs[0], args.outputs[0]
    amounts = pad_amounts(_infer_args(graph, node_id, args, attrs))
    mode = attrs["mode"]
    shape = y.type.shape
    is_float = x.type.dtype in FLOAT_DTYPES
    value = args.inputs[2] if len(args.inputs) > 2 else None
    fill: Expr = Load(value.name, index(0)) if value is not None else Const(0, is_float)

    def body(idx):
        src, inside = [], []
        for o, n, (before, after) in zip(idx, x.type.shape, amounts):
            # a negative pad crops: positions count from the first element that is kept
            lo, kept = max(-before, 0), n - max(-before, 0) - max(-after, 0)
            s = Binary("-", o, index(max(before, 0)))
            if before == 0 and after == 0:
                src.append(o)
            elif mode == "constant":
                src.append(Binary("+", s, index(lo)))
                if before > 0:
                    inside.append(Binary(">=", s, index(0)))
                if after > 0:
                    inside.append(Binary("<", s, index(kept)))
            else:
                src.append(Binary("+", PAD_SOURCE[mode](s, kept), index(lo)))
        value_at: Expr = Load(x.name, flat_index(src, x.type.shape))
        if inside:
            cond = inside[0]
            for c in inside[1:]:
                cond = Binary("&&", cond, c)
            value_at = Select(cond, value_at, fill)  # ?: reads x only where the position is inside
        return [Store(y.name, flat_index(idx, shape), value_at)]
    return nest(shape, "i", body)[0]


# --- Trilu, EyeLike ----------------------------------------------------------------------------
@CPP.register("Trilu", family="movement", types=takes(None, "int64"))
def trilu(graph, node_id, cluster_id, args, attrs):
    """Keep the elements on and above (upper) or below the k-th diagonal of the last two axes."""
    x, y = args.inputs[0], args.outputs[0]
    k = trilu_k(_infer_args(graph, node_id, args, attrs))
    shape = y.type.shape
    zero = Const(0, x.type.dtype in FLOAT_DTYPES)

    def body(idx):
        diagonal = Binary("-", idx[-1], idx[-2])
        keep = Binary(">=", diagonal, index(k)) if attrs["upper"] else Binary("<=", diagonal, index(k))
        at = flat_index(idx, shape)
        return [Store(y.name, at, Select(keep, Load(x.name, at), zero))]
    return nest(shape, "i", body)[0]


@CPP.register("EyeLike", family="movement", types=takes(None, out=None))
def eye_like(graph, node_id, cluster_id, args, attrs):
    """Ones on the k-th diagonal: the input's values are never read."""
    y = args.outputs[0]
    is_float = y.type.dtype in FLOAT_DTYPES

    def body(idx):
        on = Binary("==", Binary("-", idx[1], idx[0]), index(attrs["k"]))
        one, zero = Const(1, is_float), Const(0, is_float)
        return [Store(y.name, flat_index(idx, y.type.shape), Select(on, one, zero))]
    return nest(y.type.shape, "i", body)[0]


# --- Resize ------------------------------------------------------------------------------------
def _coordinate(mode: str, o: Var, n_in: int, ax: ResizeAxis) -> Expr:
    """source_coordinate (tinsmith.ops.indexing) as float32 loop IR of output position o."""
    x = _Float(Cast("float", o))
    return source_coordinate(mode, x, n_in, ax).e


class _Float:
    """Loop IR with Python arithmetic, so one coordinate formula serves the reference and the kernel."""

    def __init__(self, e):
        self.e = const(e) if isinstance(e, (int, float)) else e

    def _op(self, op: str, other, swap: bool = False) -> _Float:
        other = other if isinstance(other, _Float) else _Float(other)
        a, b = (other.e, self.e) if swap else (self.e, other.e)
        return _Float(Binary(op, a, b))

    def __add__(self, other):
        return self._op("+", other)

    def __radd__(self, other):
        return self._op("+", other, swap=True)

    def __sub__(self, other):
        return self._op("-", other)

    def __rsub__(self, other):
        return self._op("-", other, swap=True)

    def __mul__(self, other):
        return self._op("*", other)

    def __rmul__(self, other):
        return self._op("*", other, swap=True)

    def __truediv__(self, other):
        return self._op("/", other)


_NEAREST_IR: dict[str, Callable[[Expr], Expr]] = {
    "round_prefer_floor": lambda x: Unary("ceil", Binary("-", x, const(0.5))),
    "round_prefer_ceil": lambda x: Unary("floor", Binary("+", x, const(0.5))),
    "floor": lambda x: Unary("floor", x),
    "ceil": lambda x: Unary("ceil", x),
}


Taps = list[tuple[Expr, Expr | None]]  # (input index, weight; None for 1)


def _axis_taps(d: int, o: Var, n: int, ax: ResizeAxis, attrs) -> tuple[list[Stmt], Taps, Expr | None]:
    """Locals computed once per output position along axis d, the taps [(input index, weight or
    None for 1)], and, for tf_crop_and_resize, the condition that the position is outside the input."""
    mode = attrs["mode"]
    x = Var(f"x{d}")
    stmts: list[Stmt] = [Local(x.name, _coordinate(attrs["coordinate_transformation_mode"], o, n, ax))]
    outside = None
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        outside = Binary("||", Binary("<", x, const(0)), Binary(">", x, const(n - 1)))

    def int_local(name: str, e: Expr, clamp: bool) -> Var:
        stmts.append(Local(name, Cast("int", e), "int"))
        if clamp:
            stmts.append(Assign(name, _clamp(Var(name), 0, n - 1)))
        return Var(name)

    if mode == "nearest":
        return stmts, [(int_local(f"n{d}", _NEAREST_IR[attrs["nearest_mode"]](x), True), None)], outside
    if mode == "linear":
        c = Var(f"c{d}")
        stmts.append(Local(c.name, Binary("min", Binary("max", x, const(0)), const(n - 1))))
        lo = int_local(f"lo{d}", c, False)  # c >= 0: truncation is floor
        hi = int_local(f"hi{d}", Select(Binary("<", lo, index(n - 1)), Binary("+", lo, index(1)), lo), False)
        w = Var(f"w{d}")
        stmts.append(Local(w.name, Binary("-", c, Cast("float", lo))))
        return stmts, [(lo, Binary("-", const(1), w)), (hi, w)], outside
    # cubic: four taps around floor(x), clamped into the axis (edge padding)
    f = Var(f"f{d}")
    stmts.append(Local(f.name, Unary("floor", x)))
    base = int_local(f"b{d}", f, False)
    t = _Float(Binary("-", x, f))
    weights = [w.e for w in cubic_weights(t, attrs["cubic_coeff_a"])]
    taps = []
    for k, w in enumerate(weights):
        pos = Binary("+", base, index(k - 1))
        if attrs["exclude_outside"]:
            inside = Binary("&&", Binary(">=", pos, index(0)), Binary("<=", pos, index(n - 1)))
            w = Select(inside, w, const(0))
        stmts.append(Local(f"w{d}_{k}", w))
        taps.append((int_local(f"t{d}_{k}", _clamp(pos, 0, n - 1), False), Var(f"w{d}_{k}")))
    if attrs["exclude_outside"]:  # weights of taps outside the input are dropped and the rest rescaled
        total = Var(f"wsum{d}")
        stmts.append(Local(total.name, Binary("+", Binary("+", Var(f"w{d}_0"), Var(f"w{d}_1")),
                                              Binary("+", Var(f"w{d}_2"), Var(f"w{d}_3")))))
        taps = [(i, Binary("/", w, total)) for i, w in taps]
    return stmts, taps, outside


@CPP.register("Resize", family="sampling", types=takes("float32", None))
def resize(graph, node_id, cluster_id, args, attrs):
    """Per resized axis, its source taps and weights are locals of that axis's loop; the innermost
    loop sums the weighted taps over all resized axes."""
    x, y = args.inputs[0], args.outputs[0]
    plan = resize_axes(x.type.shape, attrs, *resize_inputs(_infer_args(graph, node_id, args, attrs)))
    shape = y.type.shape
    out = [Var(f"i{d}") for d in range(len(shape))]
    per_axis, outside = [], []
    for d, ax in enumerate(plan):
        if ax is None:
            per_axis.append(([], [(out[d], None)]))
            continue
        stmts, taps, off = _axis_taps(d, out[d], x.type.shape[d], ax, attrs)
        per_axis.append((stmts, taps))
        if off is not None:
            outside.append(off)
    terms = []
    for combo in itertools.product(*(taps for _, taps in per_axis)):
        term: Expr = Load(x.name, flat_index([i for i, _ in combo], x.type.shape))
        for _, w in combo:
            if w is not None:
                term = Binary("*", term, w)
        terms.append(term)
    value = terms[0]
    for term in terms[1:]:
        value = Binary("+", value, term)
    if outside:
        cond = outside[0]
        for c in outside[1:]:
            cond = Binary("||", cond, c)
        value = Select(cond, const(attrs["extrapolation_value"]), value)
    body: tuple[Stmt, ...] = (Store(y.name, flat_index(out, shape), value),)
    for d in reversed(range(len(shape))):
        body = (For(out[d].name, shape[d], tuple(per_axis[d][0]) + body),)
    return body

