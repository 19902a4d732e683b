"""Rendering loop IR as C++: one renderer, configured by data (a `Renderer`) per backend.

A Renderer holds what differs between targets: the C++ name of each element type, the alignment
of vector types, how vector types are spelled (GCC vector extensions), the target intrinsics a
`Call` may name, and a prelude of helpers its rendered kernels rely on. Everything else (operator
precedence, literals, statements) is the same for every backend.

A kernel set may also spell vector arithmetic itself, where the compiler's own lowering of GCC
vectors is poor: an intrinsic named after the operation and the vector type (`fma_f32x4` for
`a + b * c`, `max_f32x4`, `min_f32x4`) replaces the generic spelling wherever that type occurs.
GCC 12 neither contracts a vector multiply and add into one instruction nor selects lanes without
a detour through the general registers on Helium; the Helium set names VFMA and VMAXNM instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from tinsmith.escape import c_comment
from tinsmith.generate.loop_ir import (FLOAT_DTYPES, INDEX, Assign, Binary, Broadcast, Call, Cast, Comment, Const,
                                      Expr, For, If, Kernel, Lane, Load, Local, ReduceLanes, Select, Stmt, Store, Unary,
                                      Var, dtype_of)
from tinsmith.generate.storage_types import STORAGE_TYPES

# C++ spelling of each math function: the runtime's float and double overloads with <cmath>'s names
# (runtime_cpp/include/tinsmith/math.hpp, which spares every compile C++17's <cmath>). nearbyint
# rounds ties to even in the default rounding mode, and unlike rint never raises the inexact flag.
MATH = "tinsmith::math::"
_UNARY_CPP = {op: MATH + {"abs": "fabs", "round": "nearbyint"}.get(op, op) for op in (
    "exp", "log", "log1p", "tanh", "erf", "sqrt", "abs", "floor", "ceil", "round", "sin", "cos", "tan", "asin",
    "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "isnan", "isinf")}
_CALL_CPP = {op: MATH + {"max": "fmax", "min": "fmin"}.get(op, op) for op in ("max", "min", "pow", "fmod")}

BUFFER_PREFIX = "t_"  # kernel parameters are t_<value>: never clashes with loop indices or locals

# C++ names of the element types every renderer knows, as kernels compute with them. Storage types
# (storage_types.py) compute in float or int, while their buffers hold other bits (STORAGE_NAMES):
# a Load converts, a Store converts back (rounding), a Cast rounds as the store will.
TYPE_NAMES: Mapping[str, str] = {
    "float32": "float", INDEX: "int", "bool": "bool", "int64": "std::int64_t", "int32": "std::int32_t",
    "int16": "std::int16_t", "int8": "std::int8_t", "uint8": "std::uint8_t", "uint16": "std::uint16_t",
    "uint32": "std::uint32_t", "uint64": "std::uint64_t", "float64": "double",
    **{t: st.compute for t, st in STORAGE_TYPES.items()}}
STORAGE_NAMES: Mapping[str, str] = {t: st.storage for t, st in STORAGE_TYPES.items()}
# Short names for vector types: f32x8 is 8 float32 lanes.
_LANE_NAMES = {"float32": "f32", "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", INDEX: "i32"}


def float_literal(v: float) -> str:
    """The shortest float literal that reads back (in C++ or NumPy) as the float32 nearest to `v`.

    `v` is rounded to float32 first: printing a float64 with 9 digits and letting the compiler round
    that again can land on the neighbouring float32 (double rounding)."""
    with np.errstate(over="ignore"):
        f = np.float32(v)
    if np.isnan(f):
        return f"{MATH}kNaN"
    if np.isinf(f):
        return f"-{MATH}kInfinity" if f < 0 else f"{MATH}kInfinity"
    if f == 0 or 1e-4 <= abs(f) < 1e8:
        text = np.format_float_positional(f, unique=True, trim="0")  # 0.5, 2.0, -0.0, 12345678.0
    else:
        text = np.format_float_scientific(f, unique=True, trim="-")  # 1e-05, 1.2345679e+08
    return text + "f"


def float_literals(values: np.ndarray) -> list[str]:
    """float_literal of every element of a float32 array. NumPy's own conversion to text prints
    the same shortest digits in positional notation for the values most weights hold, at a
    fraction of a call per element; the others (scientific notation, NaN, infinities) take
    float_literal's path."""
    texts = values.astype(np.float32).astype(str)
    return [t + "f" if "e" not in t and "n" not in t else float_literal(float(v))
            for v, t in zip(values, texts)]


def double_literal(v: float) -> str:
    """The shortest literal that reads back as the double `v`."""
    v = float(v)
    if v != v:
        return f"static_cast<double>({MATH}kNaN)"
    if v in (float("inf"), float("-inf")):
        return f"{'-' if v < 0 else ''}static_cast<double>({MATH}kInfinity)"
    text = repr(v)
    return text if any(c in text for c in ".en") else text + ".0"


def element_literals(flat: np.ndarray) -> list[str]:
    """Each element of a one-dimensional array as a C++ literal of the type generated code stores
    it in: its exact value, or, for a storage type (float16, bfloat16, the float8 formats, float4,
    the 4- and 2-bit integers: tinsmith.ir.graph.DTYPES), its bits as NumPy holds them."""
    if flat.dtype == np.float32:
        items = float_literals(flat)
    elif flat.dtype == np.float64:
        items = [double_literal(float(v)) for v in flat]
    elif flat.dtype.kind not in "iub":  # a storage type: 2 bytes (uint16_t) or 1 (uint8_t)
        digits = 2 * flat.dtype.itemsize
        items = [f"0x{int(v):0{digits}x}u" for v in flat.view(np.uint16 if digits == 4 else np.uint8)]
    elif flat.dtype == np.int64:
        items = ["INT64_MIN" if int(v) == -2 ** 63 else f"INT64_C({int(v)})" for v in flat]
    elif flat.dtype == np.uint64:
        items = [f"UINT64_C({int(v)})" for v in flat]
    elif flat.dtype == np.uint32:
        items = [f"{int(v)}u" for v in flat]
    elif flat.dtype == np.int32:  # -2^31 is no literal: 2^31 does not fit an int
        items = ["INT32_MIN" if int(v) == -2 ** 31 else str(int(v)) for v in flat]
    else:  # quantized data and int32 biases: every value fits an int literal
        items = [str(int(v)) for v in flat]
    return items


# Binding strength of infix operators; higher binds tighter (C++ precedence).
_PRECEDENCE = {"*": 6, "/": 6, "%": 6, "+": 5, "-": 5, "<": 4, "<=": 4, ">": 4, ">=": 4,
               "==": 3, "!=": 3, "&&": 2, "||": 1,
               # C++ binds shifts between + and <, and & between == and &&
               "<<": 4.5, ">>": 4.5, "&": 2.5, "^": 2.4, "|": 2.3}
_COMPARISONS = frozenset({"<", "<=", ">", ">=", "==", "!="})
_BITWISE = frozenset({"<<", ">>", "&", "^", "|"})  # -Wparentheses wants their operands parenthesised
_COMPOUND = frozenset({"+", "-", "*", "/"})  # x = x op e  ->  x op= e


@dataclass(frozen=True)
class Renderer:
    """How one backend spells the loop IR in C++ (see the module doc).

    `intrinsics` maps an intrinsic name (what `Call.fn` says) to a C++ format string over the
    rendered arguments ({0}, {1}, ...). `headers` are included before the kernels."""

    name: str = "portable"
    type_names: Mapping[str, str] = field(default_factory=lambda: dict(TYPE_NAMES))
    vector_alignment: int = 4  # vectors are loaded and stored at element alignment (memcpy)
    intrinsics: Mapping[str, str] = field(default_factory=dict)
    headers: tuple[str, ...] = ()
    # lines (includes, inline functions) the intrinsics' spellings need, emitted after the headers
    # only where some kernel calls an intrinsic
    helpers: tuple[str, ...] = ()
    # Scalar float max/min as inline compare-and-select with fmax's NaN rule, instead of a libm
    # call the compiler cannot inline without -ffinite-math-only.
    inline_minmax: bool = False
    # Kernels of at least this many MACs are kept out of run() (noinline): inlined, their register
    # blocks' spill slots add up in run()'s frame, while a call costs nothing next to their work.
    # Small kernels stay inlinable: a call frame would cost more stack than it saves.
    noinline_macs: int | None = None

    # --- types ---
    def storage_name(self, dtype: str) -> str:
        """The C++ type of a buffer's elements (uint16_t for float16 and bfloat16)."""
        return STORAGE_NAMES.get(dtype) or self.type_names[dtype]

    def type_name(self, dtype: str, width: int = 1) -> str:
        if width == 1:
            return self.type_names[dtype]
        return f"{_LANE_NAMES[dtype]}x{width}"

    def prelude(self, kernels) -> str:
        """C++ the kernels need before them: headers, vector typedefs and their load/store helpers."""
        uses = _Uses.of(kernels)
        lines = [f"#include <{h}>" for h in self.headers]
        for dtype in uses.storage_types():
            lines += STORAGE_TYPES[dtype].helpers
        if self.helpers and (uses.calls or self._spells_vectors(uses.vectors)):
            lines += self.helpers
        if self.inline_minmax:
            lines += [f"inline float {op}_f32(float a, float b) noexcept {{ "
                      f"return (a {cmp} b || {MATH}isnan(b)) ? a : b; }}" for op, cmp in (("max", ">="), ("min", "<="))]
        for dtype, width in uses.vectors:
            t, e = self.type_name(dtype, width), self.type_names[dtype]
            nan = " || b != b" if dtype == "float32" else ""
            size = width * {"float32": 4, "int32": 4, INDEX: 4, "int16": 2, "int8": 1, "uint8": 1}[dtype]
            lines += [
                f"typedef {e} {t} __attribute__((vector_size({size})));",
                f"inline {t} load_{t}(const {e}* p) noexcept {{ {t} v; std::memcpy(&v, p, sizeof v); return v; }}",
                f"inline void store_{t}({e}* p, {t} v) noexcept {{ std::memcpy(p, &v, sizeof v); }}",
                # every lane s (not {} + s: 0.0 + -0.0 is +0.0, so that add could not be dropped)
                f"inline {t} splat_{t}({e} s) noexcept {{ return {t}{{{', '.join(['s'] * width)}}}; }}",
                # fmax's rule lane by lane: a NaN operand loses to a number (integers have none)
                f"inline {t} max_{t}({t} a, {t} b) noexcept {{ return (a >= b{nan}) ? a : b; }}",
                f"inline {t} min_{t}({t} a, {t} b) noexcept {{ return (a <= b{nan}) ? a : b; }}",
                f"inline {e} sum_{t}({t} v) noexcept {{ {e} s = v[0]; for (int i = 1; i < {width}; ++i) "
                f"s += v[i]; return s; }}",
                # every second element from p: a row read by a window of stride 2
                f"inline {t} load2_{t}(const {e}* p) noexcept {{ {t} v; for (int i = 0; i < {width}; ++i) "
                f"v[i] = p[2 * i]; return v; }}",
            ]
        return "\n".join(lines)

    def _spells_vectors(self, vectors) -> bool:
        """True when one of the vector types (dtype, width) has arithmetic of its own (see the
        module doc)."""
        return any(f"{op}_{self.type_name(d, w)}" in self.intrinsics
                   for d, w in vectors for op in ("fma", "max", "min"))

    def _vector_op(self, e: Binary) -> str | None:
        """A vector Binary through the kernel sets' own spelling of it, if they have one: a multiply
        added to an accumulator as one fused multiply-add, a max or min."""
        if e.width == 1 or e.op not in ("+", "max", "min"):  # (a comparison's bool lanes have no spelling)
            return None
        t = self.type_name(e.dtype or "float32", e.width)
        if e.op == "+" and f"fma_{t}" in self.intrinsics:
            for acc, product in ((e.a, e.b), (e.b, e.a)):
                if isinstance(product, Binary) and product.op == "*" and product.width == e.width:
                    return self.intrinsics[f"fma_{t}"].format(self.expr(acc), self.expr(product.a),
                                                              self.expr(product.b))
        if e.op in ("max", "min") and f"{e.op}_{t}" in self.intrinsics:
            return self.intrinsics[f"{e.op}_{t}"].format(self.expr(e.a), self.expr(e.b))
        return None

    # --- expressions ---
    def _const(self, e: Const, context: int) -> str:
        if e.dtype == "float64":
            text = double_literal(e.value)
        else:
            text = float_literal(e.value) if e.is_float else str(int(e.value))
        if e.width > 1:
            return f"splat_{self.type_name(e.dtype, e.width)}({text})"
        return f"({text})" if text.startswith("-") and context > 0 else text

    def _cast(self, e: Cast) -> str:
        if e.width > 1:  # lane by lane, as static_cast converts a scalar (int8 lanes widened to int32, ...)
            return f"__builtin_convertvector({self.expr(e.a)}, {self.type_name(e.dtype, e.width)})"
        cast = f"static_cast<{self.type_names[e.dtype]}>({self.expr(e.a)})"
        if e.dtype in STORAGE_TYPES and STORAGE_TYPES[e.dtype].round and e.a.dtype != e.dtype:
            return f"{STORAGE_TYPES[e.dtype].round}({cast})"
        return cast

    def _operand(self, e: Expr, parent: str, context: int) -> str:
        """An operand of infix `parent`. Where C++ needs no parentheses but -Wall asks for them
        (-Wparentheses: && inside ||, a comparison inside a comparison), they are added too."""
        if isinstance(e, Binary) and ((parent == "||" and e.op == "&&") or
                                      (parent in _COMPARISONS and e.op in _COMPARISONS) or
                                      (parent in _BITWISE and e.op in _PRECEDENCE) or
                                      (e.op in _BITWISE and parent in _PRECEDENCE)):
            return f"({self.expr(e)})"
        return self.expr(e, context)

    def expr(self, e: Expr, context: int = 0) -> str:
        """C++ text of an expression; parentheses only where C++ precedence would regroup it, so the
        evaluation order of float arithmetic is exactly the IR's."""
        if isinstance(e, Const):
            return self._const(e, context)
        if isinstance(e, Var):
            return e.name
        if isinstance(e, Load):
            if e.width > 1:
                load = "load" if e.stride == 1 else f"load{e.stride}"
                return f"{load}_{self.type_name(e.dtype or 'float32', e.width)}(&{BUFFER_PREFIX}{e.buffer}" \
                       f"[{self.expr(e.index)}])"
            if e.dtype in STORAGE_TYPES:
                return f"{STORAGE_TYPES[e.dtype].load}({BUFFER_PREFIX}{e.buffer}[{self.expr(e.index)}])"
            return f"{BUFFER_PREFIX}{e.buffer}[{self.expr(e.index)}]"
        if isinstance(e, Broadcast):
            return f"splat_{self.type_name(e.dtype or 'float32', e.width)}({self.expr(e.a)})"
        if isinstance(e, ReduceLanes):
            op = {"+": "sum"}[e.op]  # the prelude defines sum_<vector type> alone
            return f"{op}_{self.type_name(e.dtype or 'float32', e.a.width)}({self.expr(e.a)})"
        if isinstance(e, Lane):
            return f"{self.expr(e.a, 8)}[{self.expr(e.lane)}]"
        if isinstance(e, Call):
            if e.fn not in self.intrinsics:
                raise KeyError(f"the {self.name} renderer has no intrinsic '{e.fn}'")
            return self.intrinsics[e.fn].format(*[self.expr(a) for a in e.args])
        if isinstance(e, Unary):
            if e.op in ("neg", "not", "bitnot"):
                sign = {"neg": "-", "not": "!", "bitnot": "~"}[e.op]
                inner = self.expr(e.a, 7)
                # "--x" would be C++'s decrement operator
                return f"{sign}({inner})" if inner.startswith("-") else f"{sign}{inner}"
            return f"{_UNARY_CPP[e.op]}({self.expr(e.a)})"
        if isinstance(e, Cast):
            return self._cast(e)
        if isinstance(e, Select):
            text = f"{self.expr(e.cond, 1)} ? {self.expr(e.a)} : {self.expr(e.b)}"
            return f"({text})" if context > 0 else text
        if isinstance(e, Binary):
            if (spelled := self._vector_op(e)) is not None:
                return spelled
            if e.op in _CALL_CPP:
                if e.op in ("max", "min") and (e.width > 1 or (self.inline_minmax and e.dtype == "float32")):
                    t = self.type_name(e.dtype or "float32", e.width) if e.width > 1 else "f32"
                    return f"{e.op}_{t}({self.expr(e.a)}, {self.expr(e.b)})"
                return f"{_CALL_CPP[e.op]}({self._call_args(e)})"
            prec = _PRECEDENCE[e.op]
            # Left-associative: the right operand needs parentheses at equal precedence.
            text = f"{self._operand(e.a, e.op, prec)} {e.op} {self._operand(e.b, e.op, prec + 1)}"
            return f"({text})" if prec < context else text
        raise TypeError(f"not a loop IR expression: {e!r}")

    def _call_args(self, e: Binary) -> str:
        """The two arguments of a math call, each as its own type where that picks the float or the
        double overload; else both as double: integers to pow, and a float next to a double (which
        fmax(double, float) and friends promote anyway), so each call says its precision."""
        da, db = dtype_of(e.a), dtype_of(e.b)
        integer = e.op == "pow" and da not in FLOAT_DTYPES and db not in FLOAT_DTYPES
        mixed = {da, db} == {"float32", "float64"}
        if not (integer or mixed):
            return f"{self.expr(e.a)}, {self.expr(e.b)}"
        return ", ".join(self.expr(x) if d == "float64" else f"static_cast<double>({self.expr(x)})"
                         for x, d in ((e.a, da), (e.b, db)))

    # --- statements ---
    def stmts(self, stmts: tuple[Stmt, ...], indent: int, storage: Mapping[str, str] | None = None) -> list[str]:
        """C++ lines of a statement list at the given indent (in spaces). `storage` maps the buffers
        of a storage type (float16, bfloat16) to it: stores to them round."""
        storage = storage or {}
        pad = " " * indent
        lines: list[str] = []
        for s in stmts:
            if isinstance(s, For):
                step = f"++{s.var}" if s.step == 1 else f"{s.var} += {s.step}"
                lines.append(f"{pad}for (int {s.var} = 0; {s.var} < {s.extent}; {step}) {{")
                lines += self.stmts(s.body, indent + 2, storage)
                lines.append(f"{pad}}}")
            elif isinstance(s, If):
                lines.append(f"{pad}if ({self.expr(s.cond)}) {{")
                lines += self.stmts(s.body, indent + 2, storage)
                lines.append(f"{pad}}}")
            elif isinstance(s, Store):
                if s.value.width > 1:
                    t = self.type_name(s.value.dtype or "float32", s.value.width)
                    lines.append(f"{pad}store_{t}(&{BUFFER_PREFIX}{s.buffer}[{self.expr(s.index)}], "
                                 f"{self.expr(s.value)});")
                elif s.buffer in storage:
                    lines.append(f"{pad}{BUFFER_PREFIX}{s.buffer}[{self.expr(s.index)}] = "
                                 f"{STORAGE_TYPES[storage[s.buffer]].store}({self.expr(s.value)});")
                else:
                    lines.append(f"{pad}{BUFFER_PREFIX}{s.buffer}[{self.expr(s.index)}] = "
                                 f"{self.expr(s.value)};")
            elif isinstance(s, Local):
                init = self.expr(s.init)
                if s.dtype in STORAGE_TYPES and STORAGE_TYPES[s.dtype].round and s.width == 1 and \
                        not isinstance(s.init, (Load, Var, Const)):
                    init = f"{STORAGE_TYPES[s.dtype].round}({init})"  # a value of a storage type, as stored
                lines.append(f"{pad}{self.type_name(s.dtype, s.width)} {s.name} = {init};")
            elif isinstance(s, Assign):
                v = s.value
                if isinstance(v, Binary) and v.op in _COMPOUND and isinstance(v.a, Var) and v.a.name == s.name \
                        and self._vector_op(v) is None:
                    lines.append(f"{pad}{s.name} {v.op}= {self.expr(v.b)};")
                else:
                    lines.append(f"{pad}{s.name} = {self.expr(v)};")
            elif isinstance(s, Comment):
                lines.append(f"{pad}// {c_comment(s.text)}")
            else:
                raise TypeError(f"not a loop IR statement: {s!r}")
        return lines

    def signature(self, kernel: Kernel, aliased: frozenset[str] = frozenset(), macs: int = 0) -> str:
        """The kernel's C++ parameter list; the `aliased` tensors share bytes, so they are not __restrict.
        Scratch buffers come last."""
        params = [f"{'' if p.writes else 'const '}{self.storage_name(p.dtype)}* "
                  f"{'' if p.buffer in aliased else '__restrict '}{BUFFER_PREFIX}{p.buffer}" for p in kernel.params]
        params += [f"{self.storage_name(s.dtype)}* __restrict {BUFFER_PREFIX}{s.name}" for s in kernel.scratch]
        standalone = self.noinline_macs is not None and macs >= self.noinline_macs
        return f"{'__attribute__((noinline)) ' if standalone else ''}void {kernel.name}({', '.join(params)}) noexcept"

    def kernel(self, kernel: Kernel, aliased: frozenset[str] = frozenset(), macs: int = 0) -> str:
        """C++ definition of one kernel (`aliased`: parameters pointing at the same bytes; `macs`: its
        work, see noinline_macs)."""
        storage = {b.buffer: b.dtype for b in kernel.params if b.dtype in STORAGE_NAMES}
        storage |= {b.name: b.dtype for b in kernel.scratch if b.dtype in STORAGE_NAMES}
        lines = [f"{self.signature(kernel, aliased, macs)} {{"] + self.stmts(kernel.body, 2, storage) + ["}"]
        return "\n".join(lines)


@dataclass(frozen=True)
class _Uses:
    """What the kernels hold that the prelude declares for them, found in one walk of their
    bodies (the walk costs more than anything else the prelude does on a large model)."""

    vectors: tuple[tuple[str, int], ...]  # (dtype, width) of every vector type, sorted
    storage: frozenset[str]  # element types of buffers and casts
    calls: bool  # some body holds an intrinsic Call

    @staticmethod
    def of(kernels) -> _Uses:
        from tinsmith.generate.loop_ir import walk_exprs, walk_stmts
        vectors, casts, calls = set(), set(), False
        for k in kernels:
            for e in walk_exprs(k.body):
                width = getattr(e, "width", 1)
                # (a comparison's lanes need no type of their own: GCC's vector compare gives the
                # integer mask that a vector ?: takes)
                if width > 1 and getattr(e, "dtype", None) not in (None, "bool"):
                    vectors.add((e.dtype, width))
                if isinstance(e, Cast):
                    casts.add(e.dtype)
                elif isinstance(e, Call):
                    calls = True
            vectors |= {(s.dtype, s.width) for s in walk_stmts(k.body) if isinstance(s, Local) and s.width > 1}
        buffers = {p.dtype for k in kernels for p in (*k.params, *k.scratch)}
        return _Uses(tuple(sorted(vectors)), frozenset(buffers | casts), calls)

    def storage_types(self) -> list[str]:
        """The storage types some kernel reads, writes or casts to, in STORAGE_TYPES' order."""
        return [t for t in STORAGE_TYPES if t in self.storage]


PORTABLE = Renderer()


# Module-level spellings of the portable renderer, for callers that need no target.
def render_expr(e: Expr, context: int = 0) -> str:
    return PORTABLE.expr(e, context)


def render_stmts(stmts: tuple[Stmt, ...], indent: int) -> list[str]:
    return PORTABLE.stmts(stmts, indent)


def render_kernel(kernel: Kernel, aliased: frozenset[str] = frozenset()) -> str:
    return PORTABLE.kernel(kernel, aliased)
