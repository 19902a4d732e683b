"""Declaring primitives: one registration each, with attributes, type inference and a NumPy reference.

Primitives carry ONNX names and ONNX semantics, so the ONNX operator specification is
their documentation. Backends generate code for them (see `tinsmith.generate`).
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tinsmith.ir import TensorType

REQUIRED = object()  # sentinel: an attribute without a default must be given


class OpError(Exception):
    """A node that breaks its op's rules; `attr` or `input` narrows where, for the error location."""

    def __init__(self, message: str, *, attr: str | None = None, input: int | None = None):
        super().__init__(message)
        self.attr = attr
        self.input = input


# Attribute kinds and how a YAML/ONNX value is checked and normalised for each.
def _as_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError("an integer")
    return int(v)


FLOAT32_MAX = float(np.finfo(np.float32).max)


def _as_float(v: Any) -> float:
    """A float attribute: ONNX's are float32, so a finite value past float32's range has no meaning
    (it would turn into an infinity where a kernel or builder stores it); an infinity may be meant."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError("a number")
    if math.isfinite(float(v)) and abs(float(v)) > FLOAT32_MAX:
        raise TypeError(f"a number within float32's range (at most {FLOAT32_MAX:.7g} in magnitude) or an infinity")
    return float(v)


def _as_ints(v: Any) -> tuple[int, ...]:
    if not isinstance(v, (list, tuple)):
        raise TypeError("a list of integers")
    try:
        return tuple(_as_int(x) for x in v)
    except TypeError:
        raise TypeError("a list of integers") from None


def _as_floats(v: Any) -> tuple[float, ...]:
    if not isinstance(v, (list, tuple)):
        raise TypeError("a list of numbers")
    try:
        return tuple(_as_float(x) for x in v)
    except TypeError:
        raise TypeError("a list of numbers") from None


def _as_string(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError("a string")
    return v


def _as_strings(v: Any) -> tuple[str, ...]:
    if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
        raise TypeError("a list of strings")
    return tuple(v)


ATTR_KINDS: Mapping[str, Callable[[Any], Any]] = {
    "int": _as_int,
    "float": _as_float,
    "ints": _as_ints,
    "floats": _as_floats,
    "string": _as_string,
    "strings": _as_strings,
}


@dataclass(frozen=True)
class Attr:
    """A declared attribute: name, kind (a key of ATTR_KINDS), default, and allowed values if finite."""

    name: str
    kind: str
    default: Any = REQUIRED
    choices: tuple[Any, ...] | None = None


def check_attrs(declared: Sequence[Attr], given: Mapping[str, Any], what: str) -> dict[str, Any]:
    """Validate given attributes against declarations; return them with defaults filled in."""
    by_name = {a.name: a for a in declared}
    for name in given:
        if name not in by_name:
            known = ", ".join(sorted(by_name)) or "none"
            raise OpError(f"{what} has no attribute '{name}' (it takes: {known})", attr=name)
    result: dict[str, Any] = {}
    for attr in declared:
        if attr.name not in given:
            if attr.default is REQUIRED:
                raise OpError(f"{what} needs attribute '{attr.name}'")
            result[attr.name] = attr.default
            continue
        try:
            value = ATTR_KINDS[attr.kind](given[attr.name])
        except TypeError as e:
            raise OpError(f"attribute '{attr.name}' of {what} must be {e}, not {given[attr.name]!r}",
                          attr=attr.name) from None
        if attr.choices is not None and value not in attr.choices:
            allowed = ", ".join(repr(c) for c in attr.choices)
            raise OpError(f"attribute '{attr.name}' of {what} must be one of {allowed}, not {value!r}",
                          attr=attr.name)
        result[attr.name] = value
    return result


@dataclass(frozen=True)
class InferArgs:
    """What shape inference sees: input types, attributes, and the data of constant inputs."""

    types: tuple[TensorType | None, ...]  # None for an omitted optional input
    attrs: Mapping[str, Any]
    values: tuple[np.ndarray | None, ...]  # constant data where the input is a constant


class Pattern:
    """How a primitive's outputs depend on its inputs; what fusion and the kernel layer go by.

    ELEMENTWISE: output element i reads element i of every input (same shapes).
    BROADCAST: output element i reads element i of each input under NumPy broadcasting.
    INJECTIVE: each output element is one input element moved (layout, slicing, gathers).
    REDUCTION: output elements combine many input elements along axes.
    OPAQUE: anything else (convolution, matrix products, sorting)."""

    ELEMENTWISE = "elementwise"
    BROADCAST = "broadcast"
    INJECTIVE = "injective"
    REDUCTION = "reduction"
    OPAQUE = "opaque"
    ALL = (ELEMENTWISE, BROADCAST, INJECTIVE, REDUCTION, OPAQUE)


@dataclass(frozen=True)
class Prepared:
    """What a primitive's kernels need, computed once per node before code generation (as
    tflite-micro's Prepare): input and output types, row-major strides, and op-specific `facts`
    (a conv's windows, a reduction's axes, a quantized op's multipliers)."""

    inputs: tuple[TensorType | None, ...]
    outputs: tuple[TensorType, ...]
    facts: Mapping[str, Any] = field(default_factory=dict)
    constant: tuple[bool, ...] = ()  # which inputs are constants (known at build time)

    @staticmethod
    def strides(shape: Sequence[int]) -> tuple[int, ...]:
        """Element strides of a C-order tensor of `shape`."""
        out, step = [], 1
        for d in reversed(shape):
            out.append(step)
            step *= d
        return tuple(reversed(out))

    def __getitem__(self, key: str) -> Any:
        return self.facts[key]


def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> tuple[int, ...] | None:
    """Where an input of `shape` is read along each axis of `out_shape` under NumPy broadcasting:
    its element stride, 0 where it is broadcast; None when it does not broadcast to the output."""
    lead = len(out_shape) - len(shape)
    if lead < 0 or any(d not in (1, o) for d, o in zip(shape, out_shape[lead:])):
        return None
    own = Prepared.strides(shape)
    return (0,) * lead + tuple(0 if d == 1 else s for d, s in zip(shape, own))


def elementwise_facts(inputs: Sequence[int] | None = None) -> Prepare:
    """The facts of an elementwise (or broadcast) primitive: the output's shape, the index space its
    kernel runs over, and `strides`, per input, its element stride along each output axis (0 where
    broadcast; None for an input that is not an operand: a table, CastLike's type donor, an
    omitted input). `inputs`: the operands' positions (default every input)."""
    def facts(args: InferArgs, outputs: Sequence[TensorType]) -> Mapping[str, Any]:
        shape = tuple(outputs[0].shape)
        strides = tuple(broadcast_strides(t.shape, shape) if t is not None and (inputs is None or i in inputs)
                        else None for i, t in enumerate(args.types))
        return {"shape": shape, "strides": strides}
    return facts


Infer = Callable[[InferArgs], Sequence[TensorType]]
Prepare = Callable[[InferArgs, Sequence[TensorType]], Mapping[str, Any]]
Reference = Callable[[Sequence[np.ndarray | None], Mapping[str, Any]], Sequence[np.ndarray]]
Macs = Callable[[InferArgs, Sequence[TensorType]], int]


@dataclass(frozen=True)
class Primitive:
    """An op the backends implement directly."""

    name: str
    min_inputs: int
    max_inputs: int  # -1 for variadic
    outputs: int
    attrs: tuple[Attr, ...]
    infer: Infer
    reference: Reference
    macs: Macs = field(default=lambda args, outs: 0)
    # Inputs whose data is needed at build time (e.g. Reshape's shape); they must be constants.
    constant_inputs: tuple[int, ...] = ()
    pattern: str = Pattern.OPAQUE
    # The op-specific facts of `Prepared`, from the same arguments shape inference sees.
    prepare_facts: Prepare | None = None

    def prepare(self, args: InferArgs, outputs: Sequence[TensorType]) -> Prepared:
        """Everything its kernels need, computed once for one node."""
        facts = self.prepare_facts(args, outputs) if self.prepare_facts else {}
        return Prepared(tuple(args.types), tuple(outputs), dict(facts), tuple(v is not None for v in args.values))


PRIMITIVES: dict[str, Primitive] = {}


def register(prim: Primitive) -> Primitive:
    """Add a primitive to the registry; each name is registered once."""
    if prim.name in PRIMITIVES:
        raise ValueError(f"primitive {prim.name} registered twice")
    PRIMITIVES[prim.name] = prim
    return prim


def define(name: str, *, inputs: int | tuple[int, int], infer: Infer, reference: Reference,
           outputs: int = 1, attrs: Sequence[Attr] = (), macs: Macs | None = None,
           constant_inputs: Sequence[int] = (), pattern: str = Pattern.OPAQUE,
           prepare: Prepare | None = None) -> Primitive:
    """Declare and register one primitive: its pattern (a Pattern value) and the facts its
    kernels need (`prepare`) are declared here, once."""
    lo, hi = (inputs, inputs) if isinstance(inputs, int) else inputs
    if pattern not in Pattern.ALL:
        raise ValueError(f"primitive {name}: unknown pattern {pattern!r}")
    if prepare is None and pattern in (Pattern.ELEMENTWISE, Pattern.BROADCAST):
        prepare = elementwise_facts()
    return register(Primitive(name, lo, hi, outputs, tuple(attrs), infer, reference,
                              macs or (lambda args, outs: 0), tuple(constant_inputs), pattern, prepare))
