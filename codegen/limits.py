"""Limits on what a model file may ask for: sizes, window attributes, node counts, YAML aliases.

Model files are untrusted: without bounds a few lines could ask for a tensor of 2**40
elements, a convolution window the generator tiles for hours, or a YAML alias chain that
expands to gigabytes. Each limit is checked once, where the fact becomes known (the loaders
for constants, input shapes and YAML aliases, shape inference in `expand` for every value and
window attribute), and a value over a limit is a located GraphError naming the limit.

Limits are chosen by whoever runs the build, never by the model file: `--limits NAME=N,...`
on the command line, `limits=NAME=N,...` for this repository's SConstruct, or the
TINSMITH_LIMITS construction variable of the SCons tool. Defaults fit the largest models
that run on small cores (MLPerf Tiny: at most 82 K elements per tensor) with room to spare,
and the host builds of much larger ones.

Why `tensor_elements` is 2**26: generated kernels index with C `int` (32 bits, at most
2**31 - 1). Every index a kernel computes is a flat offset into one tensor, or such an
offset moved by at most one padded window extent per axis (a tap that falls in the padding,
before its bounds test). `expand` also bounds the padded extent of every windowed input by
`tensor_elements`, so no partial sum of an index expression exceeds 2 * 2**26 + the window
limits, which is 2**4 times below INT_MAX: every index fits in an `int` with margin to spare.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
from dataclasses import dataclass, fields, replace
from typing import Any, Iterator, Mapping, NamedTuple, Sequence


INDEX_SAFE_ELEMENTS = 1 << 26  # the largest tensor whose every index fits in an int (see above)


@dataclass(frozen=True)
class Limits:
    """Maxima a graph may use; each field can be changed with NAME=N."""

    tensor_elements: int = INDEX_SAFE_ELEMENTS  # elements of any value, constant or padded window input
    rank: int = 8  # dimensions of any value
    constant_elements: int = 1 << 24  # elements of one constant (64 MiB of float32)
    pad: int = 1 << 12  # any entry of `pads` (Conv, ConvTranspose, pools)
    stride: int = 1 << 12  # any entry of `strides` or `dilations`
    kernel: int = 1 << 12  # any entry of `kernel_shape` (and the weights' spatial sizes)
    window_nests: int = 1 << 14  # loop nests of one AveragePool (one per distinct edge window)
    graph_nodes: int = 100_000  # nodes in a graph file or model, and primitives after expansion
    alias_expansion: int = 100_000  # YAML values an alias may add (`*a` copies what `&a` names)

    @staticmethod
    def names() -> tuple[str, ...]:
        return tuple(f.name for f in fields(Limits))


DEFAULT = Limits()

# Window attributes and the limit that bounds each of their entries (the ONNX names, shared by
# Conv, ConvTranspose, MaxPool, AveragePool and LpPool).
WINDOW_ATTRS = {"pads": "pad", "strides": "stride", "dilations": "stride", "kernel_shape": "kernel",
                "output_padding": "stride"}


class LimitsError(ValueError):
    """A `--limits` setting that cannot be read."""


def parse(text: str, base: Limits = DEFAULT) -> Limits:
    """`NAME=N,NAME=N` applied to `base`; N is a positive integer (2**20 and 1e6 style also read)."""
    changes: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in Limits.names():
            raise LimitsError(f"unknown limit {item!r}; the limits are: {', '.join(Limits.names())}")
        try:
            number = _number(value.strip())
        except ValueError:
            raise LimitsError(f"limit {name} must be a positive integer, not {value.strip()!r}") from None
        if name in ("tensor_elements", "constant_elements") and number > INDEX_SAFE_ELEMENTS:
            raise LimitsError(f"limit {name} cannot exceed {INDEX_SAFE_ELEMENTS} (2**26): generated "
                              f"kernels index with int")
        changes[name] = number
    return replace(base, **changes)


def _number(text: str) -> int:
    if "**" in text:
        a, b = text.split("**", 1)
        n = int(a) ** int(b)
    else:
        n = int(float(text)) if "e" in text.lower() and "." not in text else int(text)
    if n <= 0:
        raise ValueError(text)
    return n


_ACTIVE: contextvars.ContextVar[Limits] = contextvars.ContextVar("tinsmith_limits", default=DEFAULT)


def current() -> Limits:
    """The limits in force (DEFAULT unless a caller chose others with `using`)."""
    return _ACTIVE.get()


@contextlib.contextmanager
def using(limits: Limits) -> Iterator[Limits]:
    """Apply `limits` to everything loaded and expanded inside the `with` block."""
    token = _ACTIVE.set(limits)
    try:
        yield limits
    finally:
        _ACTIVE.reset(token)


def hint(name: str) -> str:
    """The note that says how to raise limit `name`."""
    return f"if the model is trusted and really needs it, raise the limit with --limits {name}=N"


def shape_problem(shape: Sequence[int], limits: Limits | None = None,
                  elements_limit: str = "tensor_elements") -> str | None:
    """Why a shape is over the limits (rank, elements), or None."""
    limits = limits or current()
    if len(shape) > limits.rank:
        return f"has {len(shape)} dimensions, more than the limit of {limits.rank} (limit 'rank')"
    count = math.prod(int(d) for d in shape)
    bound = getattr(limits, elements_limit)
    if count > bound:
        return (f"has {count:,} elements, more than the limit of {bound:,} (limit '{elements_limit}')")
    return None


def settings(limits: Limits | None = None) -> str:
    """`limits` as NAME=N,... (only those that differ from the defaults), for a command line."""
    limits = limits or current()
    return ",".join(f"{name}={getattr(limits, name)}" for name in Limits.names()
                    if getattr(limits, name) != getattr(DEFAULT, name))


class Problem(NamedTuple):
    """A node over a limit: what is wrong, the attribute at fault (if one is), the limit's name."""

    message: str
    attr: str | None
    limit: str


def node_problem(op: str, attrs: Mapping[str, Any], in_types: Sequence[Any], out_types: Sequence[Any],
                 nodes_so_far: int, limits: Limits | None = None) -> Problem | None:
    """Why a primitive node (attributes checked, output types inferred) is over the limits, or None.
    Types are TensorTypes (None for an omitted input)."""
    bound = limits or current()
    for key, name in WINDOW_ATTRS.items():
        values = attrs.get(key)
        big = [v for v in values if isinstance(v, int) and abs(v) > getattr(bound, name)] \
            if isinstance(values, (list, tuple)) else []
        if big:
            return Problem(f"{key} entry {big[0]:,} is over the limit of {getattr(bound, name):,} "
                           f"(limit '{name}')", key, name)
    first = in_types[0] if in_types else None
    if op in ("Conv", "ConvTranspose") and len(in_types) > 1 and in_types[1] is not None:
        kernel = in_types[1].shape[2:]
        if any(k > bound.kernel for k in kernel):
            return Problem(f"the weights' window {list(kernel)} is over the limit of {bound.kernel:,} "
                           f"per axis (limit 'kernel')", None, "kernel")
    pads = attrs.get("pads")
    if first is not None and isinstance(pads, (list, tuple)) and len(pads) == 2 * len(first.shape[2:]):
        spatial = first.shape[2:]
        padded = math.prod(first.shape[:2]) * math.prod(
            d + max(pads[i], 0) + max(pads[i + len(spatial)], 0) for i, d in enumerate(spatial))
        if padded > bound.tensor_elements:  # (the index argument in the module doc needs this)
            return Problem(f"the padded input has {padded:,} elements, more than the limit of "
                           f"{bound.tensor_elements:,} (limit 'tensor_elements')", "pads", "tensor_elements")
    if op == "AveragePool" and out_types:
        # Its divisor differs at every edge position, so each distinct edge window gets a loop nest
        # of its own (tinsmith.generate.functors.conv.tiles): bound their number, and the code's size.
        kernel = list(attrs.get("kernel_shape") or [])
        strides = list(attrs.get("strides") or [1] * len(kernel))
        dilations = list(attrs.get("dilations") or [1] * len(kernel))
        nests = math.prod(min(out, 2 * -(-(d * (k - 1) + 1) // max(s, 1)) + 2)
                          for out, k, s, d in zip(out_types[0].shape[2:], kernel, strides, dilations))
        if nests > bound.window_nests:
            return Problem(f"its windows need about {nests:,} loop nests, more than the limit of "
                           f"{bound.window_nests:,} (limit 'window_nests')", "kernel_shape", "window_nests")
    for i, t in enumerate(out_types):
        problem = shape_problem(t.shape, bound)
        if problem:
            return Problem(f"output {i} {problem}", None, "rank" if "'rank'" in problem else "tensor_elements")
    if nodes_so_far >= bound.graph_nodes:
        return Problem(f"the graph expands to more than {bound.graph_nodes:,} primitives (limit 'graph_nodes')",
                       None, "graph_nodes")
    return None
