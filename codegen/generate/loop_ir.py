"""The loop-level IR functors emit: a small, typed, C-like language.

Loops have static bounds; a block may run under a condition on loop indices (`If`). Tensors are
flat buffers addressed by integer expressions. Every expression has an element type (`dtype`: a
tensor dtype such as "float32" or "int8", or INDEX for loop indices and offsets; never a C++
spelling) and a vector width (`width`: lanes; 1 is a scalar). Leaves (Const, Var, Load, Cast,
Broadcast, Call) carry both; composite expressions derive them from their operands. A `Var` may
leave its type to its declaration (`For`: INDEX, `Local`: the local's); `annotate` fills them in,
as it fills a `Load`'s from the kernel's parameters.

A vector `Load` reads `width` consecutive elements from `index`; a `Store` of a vector value writes
as many. `Call` calls a target intrinsic by name (the renderer's table spells it). A kernel may
declare `Scratch` buffers: small per-kernel arrays that the memory plan places in the workspace
(they are live only while the kernel runs).

A `Store` may say where it writes in the tensor's logical coordinates (`at`, one index per axis).
Functors that give `at` on every store of an output let the generator fuse elementwise consumers
into them: see codegen/generate/fuse.py and docs/KERNELS.md.

One renderer per backend (render.py) turns the IR into C++; one rewrite engine (simplify.py)
simplifies it the same way for every op.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

# --- element types --------------------------------------------------------------------------
INDEX = "index"  # loop indices, offsets and counters; C++ `int`
# float16, bfloat16 and the narrower types are storage types, computed in float or int: a Load converts,
# a Store rounds (codegen/generate/storage_types.py).
FLOAT_DTYPES = frozenset({"float32", "float64", "float16", "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz",
                          "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn"})
INT_DTYPES = frozenset({"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", INDEX,
                        "int4", "uint4", "int2", "uint2"})
DTYPES = FLOAT_DTYPES | INT_DTYPES | {"bool"}
# Spellings older functors used; accepted where a dtype is expected and normalised to the dtype.
_SPELLINGS = {"float": "float32", "int": INDEX, "bool": "bool", "std::int64_t": "int64",
              "std::int32_t": "int32", "std::int16_t": "int16", "std::int8_t": "int8",
              "std::uint8_t": "uint8", "std::uint16_t": "uint16", "std::uint32_t": "uint32",
              "std::uint64_t": "uint64", "double": "float64"}


def as_dtype(t: str | bool) -> str:
    """A dtype from a dtype, an older C++ spelling, or a bool (True: float32, False: INDEX)."""
    if isinstance(t, bool):
        return "float32" if t else INDEX
    t = _SPELLINGS.get(t, t)
    if t not in DTYPES:
        raise ValueError(f"not an element type of the loop IR: {t!r}")
    return t


def _normalise(obj, field: str = "dtype") -> None:
    """Frozen dataclasses: replace a spelled type by its dtype in __post_init__."""
    value = getattr(obj, field)
    if value is not None:
        object.__setattr__(obj, field, as_dtype(value))


# --- expressions ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Const:
    """A literal of `dtype` (True/False are accepted for float32/INDEX), splatted to `width` lanes."""

    value: float | int
    dtype: str = "float32"
    width: int = 1

    def __post_init__(self):
        _normalise(self)

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES


@dataclass(frozen=True)
class Var:
    """A loop index or a local; `dtype` None until `annotate` copies it from the declaration."""

    name: str
    dtype: str | None = None
    width: int = 1

    def __post_init__(self):
        _normalise(self)


@dataclass(frozen=True)
class Load:
    """Element `index` of tensor `buffer` (a value or scratch name); `width` consecutive elements
    from there when width > 1. `dtype` None until `annotate` copies it from the parameter."""

    buffer: str
    index: "Expr"
    width: int = 1
    dtype: str | None = None
    stride: int = 1  # elements between consecutive lanes (1: contiguous; 2 is supported)

    def __post_init__(self):
        _normalise(self)


@dataclass(frozen=True)
class Binary:
    """Arithmetic or comparison, lane by lane; op is one of BINARY_OPS."""

    op: str
    a: "Expr"
    b: "Expr"

    @property
    def dtype(self) -> str | None:
        if self.op in COMPARISONS or self.op in ("&&", "||"):
            return "bool"
        da, db = dtype_of(self.a), dtype_of(self.b)
        return db if da in (None, INDEX) and db is not None else da

    @property
    def width(self) -> int:
        return max(width_of(self.a), width_of(self.b))


@dataclass(frozen=True)
class Unary:
    """A math function of one argument, lane by lane; op is one of UNARY_OPS."""

    op: str
    a: "Expr"

    @property
    def dtype(self) -> str | None:
        return "bool" if self.op in ("not", "isnan", "isinf") else dtype_of(self.a)

    @property
    def width(self) -> int:
        return width_of(self.a)


@dataclass(frozen=True)
class Select:
    """cond ? a : b"""

    cond: "Expr"
    a: "Expr"
    b: "Expr"

    @property
    def dtype(self) -> str | None:
        return dtype_of(self.a) or dtype_of(self.b)

    @property
    def width(self) -> int:
        return max(width_of(self.cond), width_of(self.a), width_of(self.b))


@dataclass(frozen=True)
class Cast:
    """`a` converted to `dtype` (as static_cast does: float to integer truncates)."""

    dtype: str
    a: "Expr"

    def __post_init__(self):
        _normalise(self)

    @property
    def width(self) -> int:
        return width_of(self.a)


@dataclass(frozen=True)
class Broadcast:
    """A scalar repeated across `width` lanes."""

    a: "Expr"
    width: int

    @property
    def dtype(self) -> str | None:
        return dtype_of(self.a)


@dataclass(frozen=True)
class ReduceLanes:
    """The lanes of a vector added into one scalar, first lane first (op is "+")."""

    op: str
    a: "Expr"
    width = 1

    @property
    def dtype(self) -> str | None:
        return dtype_of(self.a)


@dataclass(frozen=True)
class Call:
    """A target intrinsic (a key of the backend renderer's `intrinsics`) applied to `args`; its result
    has `dtype` and `width`. Backends without the intrinsic never emit it."""

    fn: str
    args: tuple["Expr", ...]
    dtype: str
    width: int = 1

    def __post_init__(self):
        _normalise(self)


@dataclass(frozen=True)
class Lane:
    """One lane (`lane`, an index expression) of a vector."""

    a: "Expr"
    lane: "Expr"
    width = 1

    @property
    def dtype(self) -> str | None:
        return dtype_of(self.a)


Expr = Union[Const, Var, Load, Binary, Unary, Select, Cast, Broadcast, ReduceLanes, Call, Lane]

# max and min are the float functions (fmax, fmin); integer kernels compare with Select.
BINARY_OPS = frozenset({"+", "-", "*", "/", "%", "<", "<=", ">", ">=", "==", "!=", "&&", "||",
                        "max", "min", "pow", "fmod",
                        "<<", ">>", "&", "|", "^"})  # shifts and bitwise ops: integers only
COMPARISONS = frozenset({"<", "<=", ">", ">=", "==", "!="})
# round is to nearest, ties to even (the default floating-point rounding mode); not is logical.
UNARY_OPS = frozenset({"neg", "exp", "log", "tanh", "erf", "sqrt", "abs", "floor", "ceil", "round",
                       "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
                       "atanh", "log1p", "not", "isnan", "isinf", "bitnot"})


def dtype_of(e: Expr) -> str | None:
    """The element type of an expression (None: a Var not yet annotated)."""
    return e.dtype


def width_of(e: Expr) -> int:
    """The vector width of an expression (1: a scalar)."""
    return e.width


# --- statements -----------------------------------------------------------------------------
@dataclass(frozen=True)
class For:
    """for (int var = 0; var < extent; var += step) body. With step > 1 the body handles `step`
    iterations at once (a vector or an unrolled block); extent is a multiple of step."""

    var: str
    extent: int
    body: tuple["Stmt", ...]
    step: int = 1


@dataclass(frozen=True)
class If:
    """if (cond) { body }: `cond` an INDEX-valued condition on loop indices (a block that runs at
    some iterations of the loops around it, such as a row pipeline's first and last rows). The body
    is a scope of its own."""

    cond: "Expr"
    body: tuple["Stmt", ...]


@dataclass(frozen=True)
class Store:
    """buffer[index] = value (`value.width` consecutive elements for a vector). `at`, when given, is
    the same position as one index per axis of the stored tensor (first lane for a vector): what
    fusion needs to compute an elementwise consumer at this element."""

    buffer: str
    index: Expr
    value: Expr
    at: tuple[Expr, ...] | None = None


@dataclass(frozen=True)
class Local:
    """Declare a local of `dtype` (older C++ spellings accepted) and `width` lanes, initialised."""

    name: str
    init: Expr
    dtype: str = "float32"
    width: int = 1

    def __post_init__(self):
        _normalise(self)


@dataclass(frozen=True)
class Assign:
    """Assign a new value to a local."""

    name: str
    value: Expr


@dataclass(frozen=True)
class Comment:
    text: str


Stmt = Union[For, If, Store, Local, Assign, Comment]


@dataclass(frozen=True)
class Param:
    """A tensor a kernel reads or writes: value name, element dtype, element count."""

    buffer: str
    dtype: str
    size: int
    writes: bool

    def __post_init__(self):
        _normalise(self)


@dataclass(frozen=True)
class Scratch:
    """A per-kernel buffer of `size` elements of `dtype`; the kernel receives it as a parameter named
    like a tensor. The memory plan gives it workspace bytes alive only during the kernel; a `kept`
    buffer is the kernel's state instead (a stateful operator's memory, such as a running noise
    estimate): it lives in the model's static state storage, next to the graph's states (ir.State),
    keeps its bytes from one call to the next and is zeroed by reset_state()."""

    name: str
    dtype: str
    size: int
    kept: bool = False

    def __post_init__(self):
        _normalise(self)


@dataclass(frozen=True)
class Kernel:
    """One function of generated code, named after its node."""

    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]
    doc: str = ""
    scratch: tuple[Scratch, ...] = ()


# --- construction helpers -------------------------------------------------------------------
def const(v: float) -> Const:
    return Const(float(v), True)


def index(v: int) -> Const:
    return Const(int(v), False)


def add(a: Expr, b: Expr) -> Expr:
    return Binary("+", a, b)


def mul(a: Expr, b: Expr) -> Expr:
    return Binary("*", a, b)


def flat_index(idx: Sequence[Expr], shape: Sequence[int]) -> Expr:
    """Row-major offset of index `idx` in a tensor of `shape`."""
    result: Expr = index(0)
    stride = 1
    for i, d in reversed(list(zip(idx, shape))):
        result = add(mul(i, index(stride)), result)
        stride *= d
    return result


def broadcast_index(idx: Sequence[Expr], out_shape: Sequence[int], in_shape: Sequence[int]) -> Expr:
    """Offset in an input of `in_shape` read at output index `idx` under NumPy broadcasting."""
    lead = len(out_shape) - len(in_shape)
    sub = [index(0) if d == 1 else idx[lead + k] for k, d in enumerate(in_shape)]
    return flat_index(sub, in_shape)


def nest(shape: Sequence[int], prefix: str, body) -> tuple[tuple[Stmt, ...], list[Var]]:
    """Loops over `shape` with index variables prefix0, prefix1, ...; `body(vars)` gives the inner
    statements. Returns (statements, vars)."""
    vars_ = [Var(f"{prefix}{k}") for k in range(len(shape))]
    stmts: tuple[Stmt, ...] = tuple(body(vars_))
    for var, extent in reversed(list(zip(vars_, shape))):
        stmts = (For(var.name, extent, stmts),)
    return stmts, vars_


# --- walking the IR -------------------------------------------------------------------------


def map_expr(e: Expr, fn) -> Expr:
    """Rebuild `e` bottom-up: children first, then `fn` on the node with its new children. A node
    whose children all come back unchanged is passed on as it is (the nodes are frozen values, so
    it equals the copy), which spares most of the copying: most walks change a few nodes."""
    if isinstance(e, (Const, Var)):
        return fn(e)
    if isinstance(e, Load):
        index = map_expr(e.index, fn)
        return fn(e if index is e.index else Load(e.buffer, index, e.width, e.dtype, e.stride))
    if isinstance(e, Binary):
        a, b = map_expr(e.a, fn), map_expr(e.b, fn)
        return fn(e if a is e.a and b is e.b else Binary(e.op, a, b))
    if isinstance(e, Unary):
        a = map_expr(e.a, fn)
        return fn(e if a is e.a else Unary(e.op, a))
    if isinstance(e, Select):
        cond, a, b = map_expr(e.cond, fn), map_expr(e.a, fn), map_expr(e.b, fn)
        return fn(e if cond is e.cond and a is e.a and b is e.b else Select(cond, a, b))
    if isinstance(e, Cast):
        a = map_expr(e.a, fn)
        return fn(e if a is e.a else Cast(e.dtype, a))
    if isinstance(e, Broadcast):
        a = map_expr(e.a, fn)
        return fn(e if a is e.a else Broadcast(a, e.width))
    if isinstance(e, ReduceLanes):
        a = map_expr(e.a, fn)
        return fn(e if a is e.a else ReduceLanes(e.op, a))
    if isinstance(e, Call):
        args = tuple(map_expr(a, fn) for a in e.args)
        same = type(e.args) is tuple and all(new is old for new, old in zip(args, e.args))
        return fn(e if same else Call(e.fn, args, e.dtype, e.width))
    if isinstance(e, Lane):
        a, lane = map_expr(e.a, fn), map_expr(e.lane, fn)
        return fn(e if a is e.a and lane is e.lane else Lane(a, lane))
    raise TypeError(f"not a loop IR expression: {e!r}")


def map_stmts(stmts: Sequence[Stmt], fn) -> tuple[Stmt, ...]:
    """Every statement with `map_expr(., fn)` applied to each expression it holds (a statement
    whose expressions all come back unchanged is kept as it is)."""
    out: list[Stmt] = []
    for s in stmts:
        if isinstance(s, For):
            body = map_stmts(s.body, fn)
            same = type(s.body) is tuple and len(body) == len(s.body) and all(n is o for n, o in zip(body, s.body))
            out.append(s if same else For(s.var, s.extent, body, s.step))
        elif isinstance(s, If):
            cond, body = map_expr(s.cond, fn), map_stmts(s.body, fn)
            same = cond is s.cond and type(s.body) is tuple and len(body) == len(s.body) and \
                all(n is o for n, o in zip(body, s.body))
            out.append(s if same else If(cond, body))
        elif isinstance(s, Store):
            index, value = map_expr(s.index, fn), map_expr(s.value, fn)
            at = None if s.at is None else tuple(map_expr(a, fn) for a in s.at)
            same = index is s.index and value is s.value and (
                at is None or (type(s.at) is tuple and all(n is o for n, o in zip(at, s.at))))
            out.append(s if same else Store(s.buffer, index, value, at))
        elif isinstance(s, Local):
            init = map_expr(s.init, fn)
            out.append(s if init is s.init else Local(s.name, init, s.dtype, s.width))
        elif isinstance(s, Assign):
            value = map_expr(s.value, fn)
            out.append(s if value is s.value else Assign(s.name, value))
        else:
            out.append(s)
    return tuple(out)


def in_double(stmts: Sequence[Stmt]) -> tuple[Stmt, ...]:
    """The statements with their float32 literals and locals in float64: a float kernel written in
    float32 terms (const(), Local's default) computing a float64 tensor at its own precision."""
    def wide(e: Expr) -> Expr:
        return Const(e.value, "float64", e.width) if isinstance(e, Const) and e.dtype == "float32" else e
    out: list[Stmt] = []
    for s in map_stmts(stmts, wide):
        if isinstance(s, For):
            s = For(s.var, s.extent, in_double(s.body), s.step)
        elif isinstance(s, If):
            s = If(s.cond, in_double(s.body))
        elif isinstance(s, Local) and s.dtype == "float32":
            s = Local(s.name, s.init, "float64", s.width)
        out.append(s)
    return tuple(out)


def walk_stmts(stmts: Sequence[Stmt]):
    """Every statement, loops' and conditions' bodies included, in order."""
    for s in stmts:
        yield s
        if isinstance(s, (For, If)):
            yield from walk_stmts(s.body)


def _children(e: Expr) -> tuple:
    if isinstance(e, (Const, Var)):
        return ()
    if isinstance(e, Load):
        return (e.index,)
    if isinstance(e, (Binary, Select, Lane)):
        return (e.a, e.b) if isinstance(e, Binary) else (e.cond, e.a, e.b) if isinstance(e, Select) else (e.a, e.lane)
    if isinstance(e, Call):
        return tuple(e.args)
    return (e.a,)  # Unary, Cast, Broadcast, ReduceLanes


def walk_expr(e: Expr):
    """Every node of expression `e`, each before its operands."""
    pending = [e]
    while pending:
        node = pending.pop()
        yield node
        pending += _children(node)


def stmt_exprs(s: Stmt) -> tuple[Expr, ...]:
    """The expressions statement `s` holds itself (a loop's or a condition's body is statements,
    not its own)."""
    if isinstance(s, If):
        return (s.cond,)
    if isinstance(s, Store):
        return (s.index, s.value, *(s.at or ()))
    if isinstance(s, Local):
        return (s.init,)
    if isinstance(s, Assign):
        return (s.value,)
    return ()


def walk_exprs(stmts: Sequence[Stmt]):
    """Every expression node in `stmts` (loops' bodies included), each node before its operands:
    for questions about what a body holds, without rebuilding it as map_stmts does."""
    for s in walk_stmts(stmts):
        for root in stmt_exprs(s):
            yield from walk_expr(root)


def annotate(kernel: Kernel) -> Kernel:
    """The kernel with every Var and Load typed from its declaration (For, Local, Param, Scratch)."""
    from dataclasses import replace
    buffers = {p.buffer: p.dtype for p in kernel.params} | {s.name: s.dtype for s in kernel.scratch}

    def body(stmts: Sequence[Stmt], scope: dict[str, tuple[str, int]]) -> tuple[Stmt, ...]:
        scope = dict(scope)

        def typed(e: Expr) -> Expr:
            if isinstance(e, Var) and e.dtype is None and e.name in scope:
                return Var(e.name, *scope[e.name])
            if isinstance(e, Load) and e.dtype is None and e.buffer in buffers:
                return Load(e.buffer, e.index, e.width, buffers[e.buffer], e.stride)
            return e
        out: list[Stmt] = []
        for s in stmts:
            if isinstance(s, For):
                out.append(For(s.var, s.extent, body(s.body, {**scope, s.var: (INDEX, 1)}), s.step))
                continue
            if isinstance(s, If):
                out.append(If(map_expr(s.cond, typed), body(s.body, scope)))
                continue
            out.append(map_stmts((s,), typed)[0])
            if isinstance(s, Local):
                scope[s.name] = (s.dtype, s.width)
        return tuple(out)
    return replace(kernel, body=body(kernel.body, {}))
