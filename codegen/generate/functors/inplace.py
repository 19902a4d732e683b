"""In-place variants: kernels that read their input in an order letting the output take over its
bytes, at some cost in speed. The memory plan runs one only where it makes the workspace smaller
(codegen.planners.overlap traces each variant's access order; codegen.plan chooses), and the
generator then calls it instead of the backend's functor.

`pointwise_per_pixel`: a 1x1 convolution (stride 1, no padding, no groups) that copies one
position's input channels into a scratch buffer, then computes every output channel of that
position from the buffer. Output position p is written after input position p was read and
before any later position is, so in NCHW the output may start at the input's first byte
whatever the channel counts: the workspace holds the larger of the two plus one pixel.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from codegen.generate.backend import KernelArgs, Traits
from codegen.generate.functors.conv import Affine
from codegen.generate.loop_ir import Assign, Binary, For, Load, Local, Scratch, Store, Var, const


@dataclass(frozen=True)
class Variant:
    """An in-place kernel for `op`, where `applies(args, attrs)` holds; `traits` as a registration's."""

    name: str
    op: str
    applies: Callable[[KernelArgs, Mapping[str, Any]], bool]
    traits: Traits


VARIANTS: dict[str, Variant] = {}


def register_variant(name: str, op: str, applies, scratch, epilogue: bool = True):
    """Decorator: the functor is in-place variant `name` of `op`."""
    def add(fn):
        if name in VARIANTS:
            raise ValueError(f"in-place variant '{name}' is registered twice")
        VARIANTS[name] = Variant(name, op, applies, Traits(fn, epilogue, scratch))
        return fn
    return add


def _is_plain_pointwise(args: KernelArgs, attrs) -> bool:
    x, y = args.inputs[0], args.outputs[0]
    if args.prepared is None or x.type.rank != 4 or x.type.dtype != "float32" or args.inputs[1] is None:
        return False
    wins = args.prepared["windows"]
    return args.prepared["group"] == 1 and len(wins) == 2 and all(
        w.kernel == 1 and w.stride == 1 and w.pad_begin == 0 and w.in_size == w.out_size for w in wins) \
        and y.type.dtype == "float32"


@register_variant("pointwise_per_pixel", "Conv", _is_plain_pointwise,
                  scratch=lambda prepared, caps: [Scratch("pixel", "float32", prepared.inputs[0].shape[1])])
def pointwise_per_pixel(graph, node_id, cluster_id, args, attrs):
    """Per position: its input channels into `pixel`, then every output channel of the position."""
    x, w, y = args.inputs[0], args.inputs[1], args.outputs[0]
    b = args.inputs[2] if len(args.inputs) > 2 else None
    batch, channels, height, width = x.type.shape
    out_channels = y.type.shape[1]
    hw = height * width
    n, h, wv, c, m = (Affine.var(v) for v in ("n", "h", "w", "c", "m"))
    pos = h * width + wv
    gather = For("c", channels, (Store("pixel", c.expr(), Load(x.name, (n * (channels * hw) + c * hw + pos).expr())),))
    init = Load(b.name, m.expr()) if b is not None else const(0)
    dot = For("c", channels, (Assign("acc", Binary("+", Var("acc"), Binary(
        "*", Load("pixel", c.expr()), Load(w.name, (m * channels + c).expr())))),))
    store = Store(y.name, (n * (out_channels * hw) + m * hw + pos).expr(), Var("acc"),
                  (n.expr(), m.expr(), h.expr(), wv.expr()))
    per_output = For("m", out_channels, (Local("acc", init), dot, store))
    return [For("n", batch, (For("h", height, (For("w", width, (gather, per_output)),)),))]


def applicable_variants(graph, sched, backend, caps) -> dict[str, str]:
    """Kernel head -> the first registered variant that applies to it."""
    from codegen.fuse import kernel_args  # the generator's own view of a node
    found = {}
    for node, _ in sched.kernel_heads():
        for v in VARIANTS.values():
            if v.op == node.op and v.applies(kernel_args(graph, node, caps), node.attrs):
                found[node.name] = v.name
                break
    return found


def variant_functor(name: str) -> tuple[Callable, Traits]:
    v = VARIANTS[name]
    return v.traits.fn, v.traits


__all__ = ["VARIANTS", "Variant", "register_variant", "applicable_variants", "variant_functor"]
